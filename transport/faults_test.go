package transport

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func doFaults(t *testing.T, h http.Handler, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

func TestFaultsHandler(t *testing.T) {
	f := NewFaults(1)
	h := f.Handler()
	code, body := doFaults(t, h, "GET", "/", "")
	if code != 200 || strings.TrimSpace(body) != `{"rules":[],"clients_cut":[]}` {
		t.Fatalf("initial state: %d %s", code, body)
	}
	good := `{"rules":[{"from":1,"to":2,"partition":true},{"from":0,"to":3,"drop":0.25,"duplicate":0.5,"delay":"20ms"}],"clients_cut":[4]}`
	code, body = doFaults(t, h, "POST", "/rules", good)
	if code != 200 {
		t.Fatalf("POST rules: %d %s", code, body)
	}
	want := FaultState{
		Rules:      []Rule{{From: 1, To: 2, Partition: true}, {To: 3, Drop: 0.25, Duplicate: 0.5, Delay: 20 * time.Millisecond}},
		ClientsCut: []uint64{4},
	}
	if got := f.State(); !reflect.DeepEqual(got, want) {
		t.Fatalf("state %+v, want %+v", got, want)
	}
	var echoed FaultState
	if err := json.Unmarshal([]byte(body), &echoed); err != nil || !reflect.DeepEqual(echoed, want) {
		t.Fatalf("reply %s (%v)", body, err)
	}
	if !f.partitioned(1, 2) || f.partitioned(2, 1) || !f.clientsCut(4) {
		t.Fatal("rules not in force")
	}

	// Bad requests: 400, a clear error, and nothing changes.
	for _, bad := range []string{
		`{"rules":[{"from":1,"drop":1.5}]}`,
		`{"rules":[{"from":1,"drop":-0.1}]}`,
		`{"rules":[{"from":1,"delay":"2h"}]}`,
		`{"rules":[{"from":1,"delay":"-1s"}]}`,
		`{"rules":[{"from":1,"delay":"soon"}]}`,
		`{"rules":[{"from":1,"bogus":true}]}`,
		`{"rulez":[]}`,
		`{"rules":[{"from":-1}]}`,
		`{"rules":[]} {"rules":[]}`,
		`not json`,
		``,
	} {
		code, body := doFaults(t, h, "POST", "/rules", bad)
		if code != 400 || !strings.Contains(body, "bad fault rules") {
			t.Errorf("%s: %d %s", bad, code, body)
		}
		if got := f.State(); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s changed the state to %+v", bad, got)
		}
	}
	if code, _ := doFaults(t, h, "DELETE", "/rules", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE: %d", code)
	}
	code, body = doFaults(t, h, "POST", "/heal", "")
	if code != 200 || strings.TrimSpace(body) != `{"rules":[],"clients_cut":[]}` {
		t.Fatalf("heal: %d %s", code, body)
	}
	if f.partitioned(1, 2) || f.clientsCut(4) {
		t.Fatal("heal left rules in force")
	}
}

func TestFaultsValidate(t *testing.T) {
	f := NewFaults(1)
	for _, r := range []Rule{{Drop: 2}, {Duplicate: -1}, {Delay: -time.Second}, {Delay: MaxDelay + 1}} {
		if err := f.AddRule(r); !errors.Is(err, ErrBadFaults) {
			t.Errorf("%+v: %v", r, err)
		}
	}
	if n := len(f.State().Rules); n != 0 {
		t.Fatalf("bad rules were added: %d", n)
	}
	many := FaultState{Rules: make([]Rule, MaxRules+1)}
	if err := f.Set(many); !errors.Is(err, ErrBadFaults) {
		t.Fatalf("too many rules: %v", err)
	}
	f.Isolate(3)
	if !f.partitioned(3, 1) || !f.partitioned(2, 3) || f.partitioned(1, 2) {
		t.Fatal("Isolate(3) cuts the wrong pairs")
	}
	f.CutClients(1, true)
	f.CutClients(1, true)
	f.CutClients(2, true)
	f.CutClients(1, false)
	if got := f.State().ClientsCut; !reflect.DeepEqual(got, []uint64{2}) {
		t.Fatalf("ClientsCut %v", got)
	}
	var zero Faults // the zero value works
	_ = zero.AddRule(Rule{Drop: 1})
	if !zero.onSend(1, 2).drop {
		t.Fatal("zero Faults: Drop 1 did not drop")
	}
	var none *Faults // and nil injects nothing
	if v := none.onSend(1, 2); v.drop || none.partitioned(1, 2) || none.clientsCut(1) {
		t.Fatal("nil Faults injected a fault")
	}
}
