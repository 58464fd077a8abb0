package paxos

import (
	"errors"
	"testing"
)

// TestPersistedRefusesBadInput: Persisted on a node without AsyncWrites,
// or for a write never handed out, is the caller's mistake: a typed error,
// and the node counts nothing it was not told about.
func TestPersistedRefusesBadInput(t *testing.T) {
	campaign := func(r *replica) Ready {
		t.Helper()
		for i := 0; i < 100 && r.node.role != Candidate; i++ {
			r.node.Tick()
		}
		if r.node.role != Candidate {
			t.Fatalf("a lone replica did not campaign: %s", r.node.role)
		}
		return r.node.Ready()
	}
	sync := newReplica(t, Config{ID: 1, Replicas: ids(1), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 22})
	srd := campaign(sync)
	if err := sync.node.Persisted(srd.WriteID); !errors.Is(err, ErrInvalidArgument) || sync.node.role != Candidate {
		t.Fatalf("Persisted without AsyncWrites: %v (role %s), want ErrInvalidArgument and nothing counted", err, sync.node.role)
	}
	r := newReplica(t, Config{ID: 1, Replicas: ids(1), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 22, AsyncWrites: true})
	rd := campaign(r)
	if rd.WriteID == 0 || rd.HardState.Promised != r.node.promised {
		t.Fatalf("the campaign's Ready carries write %d with %+v, want its promise", rd.WriteID, rd.HardState)
	}
	r.node.Advance(rd)
	if err := r.node.Persisted(rd.WriteID + 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Persisted(%d) with write %d the latest: %v, want ErrInvalidArgument", rd.WriteID+1, rd.WriteID, err)
	}
	if r.node.role != Candidate || r.node.Status().WritesInFlight != 1 {
		t.Fatalf("after a refused Persisted: role %s, %d writes in flight; want a candidate waiting for its promise", r.node.role, r.node.Status().WritesInFlight)
	}
	// Its own durable promise is a majority of one: it wins only now.
	if err := r.node.Persisted(rd.WriteID); err != nil {
		t.Fatal(err)
	}
	if r.node.role != Leader || r.node.Status().WritesInFlight != 0 {
		t.Fatalf("after Persisted(%d): role %s, %d writes in flight; want leader, none", rd.WriteID, r.node.role, r.node.Status().WritesInFlight)
	}
}
