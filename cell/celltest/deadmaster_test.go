package celltest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// Dead-master targets, in simulated time.
const (
	// deadMasterReach bounds how long after the new master first serves
	// every client completes an operation there: the client must already
	// be waiting at the replicas when the election ends (a look-up parked
	// at each), not notice the change on a timer of its own.
	deadMasterReach = 20 * time.Millisecond
	// deadMasterOutage bounds each client's longest gap between completed
	// operations: the master lease (0.8 s), the election wait after the
	// last renewal (at most 0.92 s of it) and round trips.
	deadMasterOutage = time.Second
	// deadMasterRoundsFloor is how many fail-overs a run must judge.
	deadMasterRoundsFloor = 4
)

// TestDeadMasterClientsFollowAtElection: clients that each hold a lock
// and lock and unlock a second one in a loop lose their master to a
// freeze (Pause: its run loop stops and its address becomes a black hole,
// as a kill -9 or SIGSTOP looks from outside: nothing tells the clients).
// Every client must complete an operation at the new master within
// deadMasterReach of the instant it first serves (and so go no longer than
// deadMasterOutage without one), with no session leaving
// the safe state and no held lock lost. Four fail-overs in a row, the
// frozen master crashed and restarted after each.
func TestDeadMasterClientsFollowAtElection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startHandOverCell(t)
		const clients = 4
		w := newHandOverWorld(t, ctx, c, clients)
		defer w.stop()
		judged := 0
		for round := 0; round < deadMasterRoundsFloor; round++ {
			old, err := c.WaitMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Steady state, then a freeze at a different point of the
			// KeepAlive cycle (1 s) each round: right after the parked
			// KeepAlives were answered and sent again is the worst case for
			// a client that only watches its KeepAlive.
			time.Sleep(300*time.Millisecond + time.Duration(round)*350*time.Millisecond)
			t0 := time.Now()
			w.mark(t0)
			c.Pause(old.ID())
			var next *cell.Replica
			var serves time.Duration
			for deadline := t0.Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
				if next == nil {
					for _, m := range c.Masters() {
						if m.ID() != old.ID() && m.Serving() {
							next, serves = m, time.Since(t0)
						}
					}
				}
				if next != nil && w.allMoved(next.ID()) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
			if next == nil {
				t.Fatalf("round %d: no replica but %d served within 5 s of its freeze", round, old.ID())
			}
			firsts, gaps := w.outage(t0, old.ID())
			t.Logf("round %d: replica %d frozen; replica %d served after %v; first operation there after %v (per client); longest gap %v",
				round, old.ID(), next.ID(), serves, firsts, gaps)
			for i, f := range firsts {
				if f < 0 || f > serves+deadMasterReach {
					t.Errorf("round %d: client %d: first operation at the new master %v after the freeze, the master served after %v; want within %v of that",
						round, i, f, serves, deadMasterReach)
				}
				if gaps[i] > deadMasterOutage {
					t.Errorf("round %d: client %d: longest gap between operations %v; want within %v", round, i, gaps[i], deadMasterOutage)
				}
			}
			w.check(t)
			judged++
			c.Crash(old.ID())
			c.Restart(old.ID())
		}
		if judged < deadMasterRoundsFloor {
			t.Fatalf("judged %d fail-overs, want %d", judged, deadMasterRoundsFloor)
		}
	})
}
