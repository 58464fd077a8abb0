package cell

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestLoopWatchdog drives the watchdog with a fake run loop on simulated
// time: a loop that keeps stepping, that waits for work, or that is
// deliberately stalled (Stall) is never stuck; one step that does not
// return is reported once, after limit checks, and counts as stuck until
// the loop moves again.
func TestLoopWatchdog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval, limit = time.Second, 5
		var w loopWatch
		ctx, cancel := context.WithCancel(context.Background())
		reports := make(chan int, 10)
		done := make(chan int)
		go func() { done <- w.watch(ctx, nil, interval, limit, func(checks int) { reports <- checks }) }()
		expectNone := func(what string) {
			t.Helper()
			synctest.Wait()
			select {
			case n := <-reports:
				t.Fatalf("%s: reported stuck after %d checks", what, n)
			default:
			}
			if w.stuck.Load() {
				t.Fatalf("%s: reads as stuck", what)
			}
		}

		// A busy loop: a step every half interval, for many intervals.
		for range 4 * limit {
			w.begin()
			time.Sleep(interval / 2)
			w.end()
			time.Sleep(interval / 2)
		}
		expectNone("a busy loop")
		// An idle loop waits for work between steps.
		time.Sleep(3 * limit * interval)
		expectNone("an idle loop")
		// A deliberate stall.
		w.begin()
		w.stalled.Store(true)
		time.Sleep(3 * limit * interval)
		expectNone("a stalled loop")
		w.stalled.Store(false)
		w.end()

		// A stuck step, begun between two checks: the first check sees it
		// begin, and it is reported at the limit-th check after that.
		time.Sleep(interval / 2)
		w.begin()
		time.Sleep(limit * interval)
		expectNone("a step shorter than the limit")
		time.Sleep(interval)
		synctest.Wait()
		select {
		case n := <-reports:
			if n != limit {
				t.Errorf("reported after %d checks, want %d", n, limit)
			}
		default:
			t.Fatalf("a step stuck for %d checks was not reported", limit)
		}
		if !w.stuck.Load() {
			t.Fatal("a stuck step does not read as stuck")
		}
		time.Sleep(3 * limit * interval)
		synctest.Wait()
		if len(reports) != 0 {
			t.Fatalf("one stuck step reported %d more times", len(reports))
		}
		// The loop moves again.
		w.end()
		time.Sleep(2 * interval)
		expectNone("a loop that moved again")
		cancel()
		if checks := <-done; checks < 10*limit {
			t.Fatalf("the watchdog judged only %d checks", checks)
		}
	})
}
