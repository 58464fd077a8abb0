package celltest_test

import (
	"flag"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/lockcell/lockcell/cell/celltest"
)

var (
	simSeed  = flag.Uint64("sim.seed", 0, "run only this seed of TestCellSimulation")
	simSeeds = flag.Int("sim.seeds", 3, "number of seeds TestCellSimulation runs (from 1)")
	simSteps = flag.Int("sim.steps", 0, "fault steps per seed (0: the simulator's default)")
	simTrace = flag.Bool("sim.trace", false, "log every step of every seed")
)

// TestCellSimulation runs the whole-cell simulator (celltest.Simulate) for
// -sim.seeds seeds under synctest (make sim-cell runs many more), and fails
// with the replay command of every seed that broke an invariant. It also fails if the seeds together
// judged too little: too few reads, grants, sampled instants, fail-overs
// or faults at the master.
func TestCellSimulation(t *testing.T) {
	seeds := make([]uint64, 0, *simSeeds)
	if *simSeed != 0 {
		seeds = append(seeds, *simSeed)
	} else {
		for s := 1; s <= *simSeeds; s++ {
			seeds = append(seeds, uint64(s))
		}
	}
	var total celltest.SimResult
	total.Faults = map[string]int{}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := celltest.SimConfig{Seed: seed, Steps: *simSteps}
				if *simTrace || *simSeed != 0 {
					cfg.Logf = t.Logf
				}
				res := celltest.Simulate(t, cfg)
				t.Logf("seed %d: trace %016x schedule %016x; faults %v (%d at the master), %d fail-overs; %d samples, %d writes (%d acked), %d reads, %d grants",
					seed, res.TraceHash, res.ScheduleHash, res.Faults, res.MasterFaults, res.Failovers,
					res.Samples, res.Writes, res.AckedWrites, res.Reads, res.Grants)
				for _, v := range res.Violations {
					t.Errorf("violation: %s", v)
				}
				if len(res.Violations) > 0 {
					// The seed fixes the schedule, not the goroutine
					// interleaving (see celltest.Simulate): a replay may
					// need a few runs to break the same way.
					t.Errorf("replay: go test -tags invariants ./cell/celltest -run 'TestCellSimulation' -sim.seed=%d -count=5 -v", seed)
				}
				total.Reads += res.Reads
				total.Grants += res.Grants
				total.Samples += res.Samples
				total.Failovers += res.Failovers
				total.MasterFaults += res.MasterFaults
				total.AckedWrites += res.AckedWrites
			})
		})
	}
	if t.Failed() {
		return
	}
	// The floor: a run that judged nothing proves nothing.
	n := len(seeds)
	floors := []struct {
		name       string
		got, floor int
	}{
		{"reads checked", total.Reads, 20 * n},
		{"locks granted", total.Grants, 5 * n},
		{"acknowledged writes", total.AckedWrites, 20 * n},
		{"sampled instants", total.Samples, 1000 * n},
		{"faults at the master", total.MasterFaults, n},
		{"fail-overs", total.Failovers, 1},
	}
	for _, f := range floors {
		if f.got < f.floor {
			t.Errorf("the simulation judged too little: %d %s over %d seeds, want at least %d", f.got, f.name, n, f.floor)
		}
	}
}
