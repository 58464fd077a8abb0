package nemesis

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/proccell"
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
	c := &Cluster{Cell: proccell.Attach([]proccell.Attached{{HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}})}
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

// TestMasterOfStatus reads the role and epoch off a replica's /status, in
// the cell's own JSON form (api.CellStatusResponse, as cell/http.go
// encodes it).
func TestMasterOfStatus(t *testing.T) {
	var st api.CellStatusResponse
	var mu sync.Mutex
	set := func(v api.CellStatusResponse) { mu.Lock(); st = v; mu.Unlock() }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(&st)
	}))
	defer srv.Close()
	c := &Cluster{Cell: proccell.Attach([]proccell.Attached{{HTTPAddr: strings.TrimPrefix(srv.URL, "http://")}})}
	set(api.CellStatusResponse{Replica: 1, Role: api.RoleMaster, Master: 1, Epoch: api.Epoch(7<<16 | 1)})
	ms, err := c.MasterOf(context.Background(), 1)
	if err != nil || !ms.Master || ms.Epoch != "7.1" {
		t.Fatalf("master: %+v %v", ms, err)
	}
	set(api.CellStatusResponse{Replica: 1, Role: api.RoleFollower})
	if ms, err := c.MasterOf(context.Background(), 1); err != nil || ms.Master || ms.Epoch != "0.0" {
		t.Fatalf("follower: %+v %v", ms, err)
	}
	set(api.CellStatusResponse{Replica: 2, Role: api.RoleMaster, Master: 2, Epoch: api.Epoch(7<<16 | 2)})
	if _, err := c.MasterOf(context.Background(), 1); err == nil {
		t.Fatal("another replica's status accepted")
	}
}
