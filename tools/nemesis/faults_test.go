package nemesis

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/transport"
)

// TestSetFaultsWire drives a transport.Faults handler mounted the way
// /debug/faults must be mounted (prefix stripped) through the Cluster's
// client side: the rules the schedule sends arrive as sent.
func TestSetFaultsWire(t *testing.T) {
	f := transport.NewFaults(1)
	mux := http.NewServeMux()
	mux.Handle("/debug/faults/", http.StripPrefix("/debug/faults", f.Handler()))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	c := &Cluster{httpc: &http.Client{Timeout: 2 * time.Second},
		reps: []*replica{{id: 1, httpAddr: strings.TrimPrefix(srv.URL, "http://")}}}
	ctx := context.Background()
	if err := c.FaultsAvailable(ctx, 1); err != nil {
		t.Fatal(err)
	}
	want := partitionRules([]uint64{1, 2}, []uint64{3})
	want.Rules = append(want.Rules, transport.Rule{From: 4, Partition: true}, transport.Rule{To: 4, Partition: true})
	if err := c.SetFaults(ctx, 1, want); err != nil {
		t.Fatal(err)
	}
	if got := f.State(); !reflect.DeepEqual(got.Rules, want.Rules) {
		t.Fatalf("rules: got %+v, want %+v", got.Rules, want.Rules)
	}
	if err := c.SetFaults(ctx, 1, transport.FaultState{}); err != nil {
		t.Fatal(err)
	}
	if got := f.State(); len(got.Rules) != 0 {
		t.Fatalf("healed state still has rules: %+v", got.Rules)
	}
}

// TestMasterOfPage reads the role and epoch off a status page in the
// cell's format (cell/http.go).
func TestMasterOfPage(t *testing.T) {
	page := map[string]string{
		"/": `<h1>lockcell cell <code>n</code></h1>
<p>Replica 1 (master). Master: replica 1, epoch 7.1.</p>`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(page[r.URL.Path])) }))
	defer srv.Close()
	c := &Cluster{httpc: &http.Client{Timeout: 2 * time.Second},
		reps: []*replica{{id: 1, httpAddr: strings.TrimPrefix(srv.URL, "http://")}}}
	ms, err := c.MasterOf(context.Background(), 1)
	if err != nil || !ms.Master || ms.Epoch != "7.1" {
		t.Fatalf("master page: %+v %v", ms, err)
	}
	page["/"] = `<p>Replica 1 (replica). Master: none known, epoch 0.0.</p>`
	if ms, err := c.MasterOf(context.Background(), 1); err != nil || ms.Master || ms.Epoch != "0.0" {
		t.Fatalf("replica page: %+v %v", ms, err)
	}
	page["/"] = `<p>Replica 2 (master). Master: replica 2, epoch 7.2.</p>`
	if _, err := c.MasterOf(context.Background(), 1); err == nil {
		t.Fatal("another replica's page accepted")
	}
}
