package celltest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
)

// TestHandOverSuccessorOneFsync pins the length of a planned hand-over's
// critical path in fsyncs, on a disk whose fsync takes fsyncTime (much
// longer than the network's round trip, as on a real disk): from the
// instant the old master stops serving to the instant its successor
// serves, the cell makes one fsync in sequence, not two. The successor's
// Prepare leaves before its own promise is durable (paxos
// Message.DependsOnPersist), so its fsync overlaps the acceptors'
// fsyncs of their promises; it still wins only once its own promise is
// durable. Three hand-overs, each sampled every 50 µs.
func TestHandOverSuccessorOneFsync(t *testing.T) {
	const (
		fsyncTime = 5 * time.Millisecond
		// The bound: one fsync and round trips, well short of two fsyncs.
		bound  = fsyncTime + fsyncTime/2
		rounds = 3
	)
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{
			Latency: handOverLatency,
			Tune:    func(cfg *cell.Config) { cfg.SyncDelay = fsyncTime },
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		judged := 0
		for round := 0; round < rounds; round++ {
			old, err := c.WaitMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // steady state
			// Sample who serves while the step-down runs.
			stop := make(chan struct{})
			type times struct{ oldStopped, newServes time.Time }
			got := make(chan times, 1)
			go func() {
				var tm times
				defer func() { got <- tm }()
				for {
					select {
					case <-stop:
						return
					case <-time.After(overlapSampleEvery):
					}
					now := time.Now()
					if tm.oldStopped.IsZero() && !old.Serving() {
						tm.oldStopped = now
					}
					for _, r := range c.Running() {
						if r != old && r.Serving() && tm.newServes.IsZero() {
							tm.newServes = now
						}
					}
					if !tm.newServes.IsZero() {
						return
					}
				}
			}()
			if err := old.StepDown(ctx, 0); err != nil {
				t.Fatalf("round %d: StepDown at %d: %v", round, old.ID(), err)
			}
			for deadline := time.Now().Add(time.Second); c.Master() == nil || c.Master() == old; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					break
				}
			}
			time.Sleep(time.Millisecond)
			close(stop)
			tm := <-got
			if tm.oldStopped.IsZero() || tm.newServes.IsZero() {
				t.Fatalf("round %d: saw the old master stop at %v and a successor serve at %v", round, tm.oldStopped, tm.newServes)
			}
			gap := tm.newServes.Sub(tm.oldStopped)
			t.Logf("round %d: replica %d stopped serving; its successor served %v later (fsync %v)", round, old.ID(), gap, fsyncTime)
			if gap > bound {
				t.Errorf("round %d: the successor served %v after replica %d stopped; want within %v (one fsync and round trips)",
					round, gap, old.ID(), bound)
			}
			judged++
		}
		if judged < rounds {
			t.Fatalf("judged %d hand-overs, want %d", judged, rounds)
		}
	})
}
