package paxos

import "testing"

func TestSmokeElectAndPropose(t *testing.T) {
	tn := newTestNet(t, 5, nil)
	l := tn.elect(200)
	var pids []ProposalID
	for i := 0; i < 10; i++ {
		pids = append(pids, tn.propose(l, "x"))
	}
	tn.deliver()
	tn.tick(10)
	for _, id := range pids {
		o, ok := l.outcome(id)
		if !ok || o.Err != nil {
			t.Fatalf("outcome %v: %v %v", id, o, ok)
		}
	}
	for _, r := range tn.reps {
		if r.app.applied != l.app.applied || r.app.hash != l.app.hash {
			t.Fatalf("replica %d applied %d hash %x; leader %d %x", r.id, r.app.applied, r.app.hash, l.app.applied, l.app.hash)
		}
	}
	t.Logf("leader %d applied %d", l.id, l.app.applied)
}
