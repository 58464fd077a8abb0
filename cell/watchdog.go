package cell

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// The run loop watchdog. The run loop is the only goroutine that steps,
// ticks, persists and applies: if one of its steps never returns (a lock
// or a channel it waits for that nobody will release), the replica stops
// learning chosen slots for good while everything else about it (its
// endpoint, its status page, its RPC handlers) looks alive. The watchdog
// turns that silent state into an error log with every goroutine's stack,
// once per stuck step, and into LoopStuck on the Status.
//
// It counts its own checks, not wall time, so a process stopped as a whole
// (SIGSTOP, a VM freeze) does not count as a stuck loop: after SIGCONT the
// watchdog needs loopStuckChecks more checks of the same step.

const (
	// loopWatchInterval is how often the watchdog looks at the loop.
	loopWatchInterval = time.Second
	// loopStuckChecks is how many checks in a row must find the loop in
	// the same step before it counts as stuck. A step that waits for an
	// fsync (even with the test's fsync delay) takes far less.
	loopStuckChecks = 10
)

// loopWatch is what the run loop tells the watchdog: the number of the
// step it is in (odd while in a step, even while it waits for work) and
// whether the step is a deliberate stall (Stall), which is not stuck.
type loopWatch struct {
	step    atomic.Uint64
	stalled atomic.Bool
	// stuck is set while the watchdog finds the loop stuck.
	stuck atomic.Bool
}

// begin marks the start of a step.
func (w *loopWatch) begin() { w.step.Add(1) }

// end marks the end of a step.
func (w *loopWatch) end() { w.step.Add(1) }

// watch checks the loop every interval until ctx or stop ends, and calls
// stuck the first time it finds one step still running after limit checks
// in a row (once per stuck step). It reports how many checks it made.
func (w *loopWatch) watch(ctx context.Context, stop <-chan struct{}, interval time.Duration, limit int, stuck func(checks int)) (checks int) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last, reported uint64
	same := 0
	for {
		select {
		case <-ctx.Done():
			return checks
		case <-stop:
			return checks
		case <-t.C:
		}
		checks++
		step := w.step.Load()
		if step%2 == 0 || step != last || w.stalled.Load() {
			last, same = step, 0
			w.stuck.Store(false)
			continue
		}
		same++
		if same < limit {
			continue
		}
		w.stuck.Store(true)
		if reported != step {
			reported = step
			stuck(same)
		}
	}
}

// watchLoop runs the run loop's watchdog until ctx ends or the loop stops,
// logging every goroutine's stack when it finds the loop stuck.
func (r *Replica) watchLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	r.watch.watch(ctx, r.done, loopWatchInterval, loopStuckChecks, func(checks int) {
		r.metrics.loopStuck.Inc()
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		st := r.status.Load()
		r.log.Error("run loop stuck: one step has not returned; the replica learns and applies nothing until it does",
			"checks", checks, "interval", loopWatchInterval, "core_chosen", st.Chosen, "applied", r.ns.AppliedSlot(),
			"goroutines", string(buf))
	})
}
