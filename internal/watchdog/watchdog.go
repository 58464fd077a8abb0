// Package watchdog ends a test process whose testing/synctest bubble froze.
//
// A goroutine blocked non-durably inside a bubble (on a sync.Mutex, say)
// keeps the bubble's clock from advancing, and a test waiting on that clock
// then hangs until go test's own timeout, which names no culprit. A
// watchdog runs outside the bubble, in real time, and panics with the
// test's explanation and every goroutine's stack if the test has not ended
// within its patience.
package watchdog

import (
	"runtime/debug"
	"time"
)

// Start starts a watchdog for the test named name and returns the function
// that stops it (call it, deferred, when the test ends). If the test runs
// longer than patience of real time, the process panics with
// "name: the simulated clock stood still for patience of real time: why".
func Start(name string, patience time.Duration, why string) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTimer(patience)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			debug.SetTraceback("all")
			panic(name + ": the simulated clock stood still for " + patience.String() + " of real time: " + why)
		}
	}()
	return func() { close(done) }
}
