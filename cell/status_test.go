package cell_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/paxos"
)

// TestStatusOneRepresentation: the status page and /status tell the same
// facts the same way — the epoch as "round.replica" (the form paxos logs),
// roles by the api.Role names, the checksum as a hex string — and /status
// reports every replica's progress as that replica last reported it, not
// zeros for all but the one answering.
func TestStatusOneRepresentation(t *testing.T) {
	lc := startCell(t, 3, func(c *cell.Config) { c.HTTPAddr = "127.0.0.1:0" })
	ctx := testCtx(t, 60*time.Second)
	if _, err := lc.WaitMaster(ctx); err != nil {
		t.Fatal(err)
	}
	get := func(r *cell.Replica, path string) []byte {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.HTTPAddr()+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	roles := map[api.Role]bool{api.RoleMaster: true, api.RoleLeader: true, api.RoleCandidate: true, api.RoleFollower: true, api.RoleLearner: true}
	judged := 0
	for _, r := range lc.Running() {
		// Every replica's progress arrives within a few reports.
		var st api.CellStatusResponse
		var raw []byte
		for {
			raw = get(r, "/status")
			st = api.CellStatusResponse{}
			if err := json.Unmarshal(raw, &st); err != nil {
				t.Fatalf("replica %d /status: %v: %s", r.ID(), err, raw)
			}
			all := len(st.Replicas) == 3
			for _, rs := range st.Replicas {
				all = all && rs.Applied > 0 && rs.HeardMillis >= 0 && roles[rs.Role]
			}
			// The same epoch as the replica's own status (a fail-over on a
			// loaded machine between the two looks asks again).
			if all && st.Master != 0 && st.Epoch.String() == paxos.Ballot(r.Status().Epoch).String() {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("replica %d /status never showed every replica's progress: %s", r.ID(), raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
		want := st.Epoch.String() // equal to paxos.Ballot.String, checked above
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(raw, &fields)
		if string(fields["Epoch"]) != `"`+want+`"` {
			t.Errorf("replica %d /status Epoch %s; want %q", r.ID(), fields["Epoch"], want)
		}
		if !regexp.MustCompile(`^"[0-9a-f]{16}"$`).Match(fields["Checksum"]) {
			t.Errorf("replica %d /status Checksum %s; want a string of 16 hex digits", r.ID(), fields["Checksum"])
		}
		// No JSON number anywhere above 2^53.
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		walkNumbers(v, func(n json.Number) {
			if f, err := n.Float64(); err != nil || f > 1<<53 {
				t.Errorf("replica %d /status has the number %s, beyond what JSON carries exactly", r.ID(), n)
			}
		})
		page := string(get(r, "/"))
		if !strings.Contains(page, "epoch "+want+".") {
			t.Errorf("replica %d status page does not show epoch %s", r.ID(), want)
		}
		// The line scripts that polled the page read (its form is kept).
		if !regexp.MustCompile(`Replica ` + strconv.FormatUint(r.ID(), 10) + ` \(` + regexp.QuoteMeta(string(st.Role)) + `\)\. Master: [^,]*, epoch ` + regexp.QuoteMeta(want) + `\.`).MatchString(page) {
			t.Errorf("replica %d status page lacks the line \"Replica %d (%s). Master: ..., epoch %s.\" that agrees with /status", r.ID(), r.ID(), st.Role, want)
		}
		for _, rs := range st.Replicas {
			row := "<td>" + rs.Addr + "</td>"
			if !strings.Contains(page, row) {
				t.Errorf("replica %d status page lacks a row for %s", r.ID(), rs.Addr)
			}
			judged++
		}
		if !strings.Contains(page, ">"+st.Checksum.String()+"<") {
			t.Errorf("replica %d status page does not show checksum %s", r.ID(), st.Checksum)
		}
	}
	if judged < 9 {
		t.Fatalf("judged %d replica rows; want 9", judged)
	}
}

func walkNumbers(v any, f func(json.Number)) {
	switch x := v.(type) {
	case json.Number:
		f(x)
	case []any:
		for _, e := range x {
			walkNumbers(e, f)
		}
	case map[string]any:
		for _, e := range x {
			walkNumbers(e, f)
		}
	}
}
