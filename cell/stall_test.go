package cell_test

import (
	"context"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
)

// TestStalledMasterStopsServing: the master's run loop stalls (a long
// fsync, a GC pause) for three master leases. Its RPC handlers must stop
// serving when the lease runs out, although the loop cannot update the
// status, and after the stall it must not count the stalled time as lease
// time: at no sampled instant (every millisecond through the stall and a
// second after it, and as often as the scheduler allows the instant the
// loop resumes) do two replicas serve. Each round stalls the master of
// the moment; every other round also cuts it off from its peers through
// the stall and the second after it, so that no message from the new
// master ends its role at once: then only its own clock can. It runs on celltest in simulated time, so the samples fall
// at exact instants however loaded the machine.
func TestStalledMasterStopsServing(t *testing.T) {
	synctest.Test(t, testStalledMasterStopsServing)
}

func testStalledMasterStopsServing(t *testing.T) {
	const (
		rounds = 4
		stall  = 3 * time.Second // three leases of 100 ticks of 10 ms
	)
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	samples := 0
	serving := func() (n int, who *cell.Replica) {
		samples++
		for _, r := range tc.Running() {
			if r.Serving() {
				n, who = n+1, r
			}
		}
		return n, who
	}
	for round := range rounds {
		old, err := tc.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sawOther, cut := false, round%2 == 1
		var start time.Time
		sample := func(d time.Duration) {
			t.Helper()
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
				n, who := serving()
				if n > 1 {
					t.Fatalf("round %d (cut off %v): two replicas serve at once %v into the stall of replica %d (the stalled master kept serving)",
						round, cut, time.Since(start), old.ID())
				}
				sawOther = sawOther || n == 1 && who != old
			}
		}
		if cut {
			var others []uint64
			for _, id := range tc.IDs() {
				if id != old.ID() {
					others = append(others, id)
				}
			}
			tc.Partition(others, []uint64{old.ID()})
		}
		tc.Stall(old.ID())
		start = time.Now()
		sample(stall)
		tc.Resume(old.ID())
		// The instant the loop resumes is when a master that counted the
		// stalled time as lease time would serve beside the new one (until
		// its next tick or message): look as often as the scheduler lets
		// us before the clock moves on.
		for range 20000 {
			if n, _ := serving(); n > 1 {
				t.Fatalf("round %d (cut off %v): two replicas serve at once the instant stalled replica %d resumed (it counted the stall as lease time)",
					round, cut, old.ID())
			}
			runtime.Gosched()
		}
		sample(time.Second)
		tc.Heal()
		if !sawOther {
			t.Fatalf("round %d: no other replica took over during the stall of replica %d", round, old.ID())
		}
	}
	// The floor: one sample a millisecond, through every stall and after it.
	if want := rounds * int((stall+time.Second)/time.Millisecond); samples < want {
		t.Fatalf("%d samples, want at least %d", samples, want)
	}
}
