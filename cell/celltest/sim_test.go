package celltest_test

import (
	"flag"
	"fmt"
	"strings"
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
				t.Logf("seed %d: trace %016x (outcomes %016x, not repeatable); faults %v (%d at the master), %d fail-overs; %d samples, %d writes (%d acked), %d reads, %d grants",
					seed, res.TraceHash, res.OutcomeHash, res.Faults, res.MasterFaults, res.Failovers,
					res.Samples, res.Writes, res.AckedWrites, res.Reads, res.Grants)
				for _, v := range res.Violations {
					t.Errorf("violation: %s", v)
				}
				if len(res.Violations) > 0 {
					// The seed fixes the trace (clock rates, faults,
					// the clients' choices), not the goroutine
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

// replaySteps is the number of fault steps of each run of
// TestCellSimulationReplays: enough for faults to be injected and undone,
// few enough that two runs cost little.
const replaySteps = 14

// TestCellSimulationReplays runs one seed (1, or -sim.seed) twice and
// checks that both runs give the same deterministic trace
// (SimResult.Trace and TraceHash: clock rates, every fault injected and
// undone, the recovery), naming the first line where they differ. It fails
// if the trace judged too little (too few faults injected and undone). It
// only logs whether the clients' outcomes (OutcomeHash) matched: they
// depend on the goroutine interleaving, which the seed does not fix (see
// celltest.Simulate).
func TestCellSimulationReplays(t *testing.T) {
	seed := uint64(1)
	if *simSeed != 0 {
		seed = *simSeed
	}
	var runs [2]celltest.SimResult
	for i := range runs {
		t.Run(fmt.Sprintf("run=%d", i+1), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := celltest.SimConfig{Seed: seed, Steps: replaySteps}
				if *simTrace {
					cfg.Logf = t.Logf
				}
				runs[i] = celltest.Simulate(t, cfg)
				for _, v := range runs[i].Violations {
					t.Errorf("violation: %s", v)
				}
			})
		})
	}
	if t.Failed() {
		return
	}
	a, b := runs[0], runs[1]
	for i := range max(len(a.Trace), len(b.Trace)) {
		var la, lb string
		if i < len(a.Trace) {
			la = a.Trace[i]
		}
		if i < len(b.Trace) {
			lb = b.Trace[i]
		}
		if la != lb {
			t.Fatalf("seed %d does not replay: trace line %d is %q in the first run, %q in the second", seed, i+1, la, lb)
		}
	}
	if a.TraceHash != b.TraceHash {
		t.Fatalf("seed %d: equal traces, but trace hashes %016x and %016x", seed, a.TraceHash, b.TraceHash)
	}
	// The floor: a trace with nothing in it replays trivially.
	injected, undone := 0, 0
	for _, line := range a.Trace {
		switch {
		case strings.Contains(line, " for "):
			injected++
		case strings.Contains(line, " (the "):
			undone++
		}
	}
	if injected < 3 || undone < 2 {
		t.Fatalf("seed %d: the trace judged too little: %d faults injected, %d undone; want at least 3 and 2:\n%s",
			seed, injected, undone, strings.Join(a.Trace, "\n"))
	}
	t.Logf("seed %d replays: %d trace lines (%d faults injected, %d undone), trace %016x; outcomes %016x and %016x (equal: %v; the seed does not promise it)",
		seed, len(a.Trace), injected, undone, a.TraceHash, a.OutcomeHash, b.OutcomeHash, a.OutcomeHash == b.OutcomeHash)
}
