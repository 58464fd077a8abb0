package cell

import (
	"math"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/paxos"
)

// TestPageStateFailovers: the status page records a master change each
// time the known (leader, epoch) changes, with the previous master, and
// keeps the last maxFailovers.
func TestPageStateFailovers(t *testing.T) {
	var p pageState
	p.noteStatus(&paxos.Status{})                                          // no leader known
	p.noteStatus(&paxos.Status{Leader: 1, Epoch: paxos.Ballot(1<<16 | 1)}) // first master
	p.noteStatus(&paxos.Status{Leader: 1, Epoch: paxos.Ballot(1<<16 | 1)}) // unchanged
	p.noteStatus(&paxos.Status{})                                          // leader lost for a moment
	p.noteStatus(&paxos.Status{Leader: 2, Epoch: paxos.Ballot(2<<16 | 2)}) // hand-over
	if got := p.mu.failovers; len(got) != 2 || got[0].master != 1 || got[0].previous != 0 || got[1].master != 2 || got[1].previous != 1 {
		t.Fatalf("failovers %+v; want 0→1, 1→2", got)
	}
	for i := range 3 * maxFailovers {
		id := paxos.ID(3 + i%3)
		p.noteStatus(&paxos.Status{Leader: id, Epoch: paxos.Ballot(uint64(3+i)<<16 | uint64(id))})
	}
	got := p.mu.failovers
	if len(got) != maxFailovers {
		t.Fatalf("%d failovers kept; want %d", len(got), maxFailovers)
	}
	if last := got[len(got)-1]; last.epoch.Round() != uint64(2+3*maxFailovers) {
		t.Fatalf("newest kept failover is round %d; want %d", last.epoch.Round(), 2+3*maxFailovers)
	}
}

// TestPageStateRates: per-tenant rates are measured since the replica
// started until a sample minRateWindow old exists, then since the newest
// such sample.
func TestPageStateRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pageState
		p.noteStatus(&paxos.Status{}) // the replica starts
		check := func(calls, wantRate float64, wantWindow time.Duration) {
			t.Helper()
			r, w := p.rates(map[string]tenantCounts{"a": {calls: calls, refused: calls / 2}})
			if math.Abs(r["a"].calls-wantRate) > 1e-9 || math.Abs(r["a"].refused-wantRate/2) > 1e-9 || w != wantWindow {
				t.Fatalf("after %v: rate %v over %v; want %v over %v", wantWindow, r["a"], w, wantRate, wantWindow)
			}
		}
		time.Sleep(5 * time.Second)
		check(50, 10, 5*time.Second) // since the start
		time.Sleep(time.Second)
		check(60, 10, 6*time.Second) // no sample 10 s old yet: since the start
		time.Sleep(14 * time.Second)
		check(200, 10, 14*time.Second) // since the sample at 6 s (60 calls)
		time.Sleep(2 * time.Minute)
		check(200, 0, 2*time.Minute) // old samples dropped: since the newest kept
	})
}
