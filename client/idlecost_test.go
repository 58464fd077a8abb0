package client_test

import (
	"context"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// idleCost is what n idle sessions on one Client cost the client.
type idleCost struct {
	n int
	// bytesPer is the live heap per session, goroutinesPer the goroutines
	// per session (heap and stacks): what closing the client freed, over n.
	bytesPer      float64
	goroutinesPer float64
	// openAllocs is the allocations per NewSession (client and master
	// together), idleAllocs the allocations per session-second of the idle
	// minute (client and master together).
	openAllocs float64
	idleAllocs float64
	// openBytes is the growth of heap and stacks per session opened
	// (client and master together).
	openBytes float64
}

// measureIdleSessions opens n sessions on one Client of an in-process cell
// (simulated network and time), holds them idle for a simulated minute and
// measures what they cost the client. The cell's share is kept out of the
// memory figures by measuring what closing the client frees (the master
// keeps its sessions until their leases run out, and no simulated time
// passes). The client's goroutines are labelled side=client, so a CPU
// profile of the test (-cpuprofile) shows their share (go tool pprof
// -tagfocus=side=client); the difference between runs with and without
// the idle minute is its cost. (A profile cannot be started inside the
// bubble: its writer would keep simulated time from advancing.)
func measureIdleSessions(t *testing.T, n int, idle time.Duration) idleCost {
	var out idleCost
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		var sessions []*client.Session
		var cl *client.Client
		var ms0, ms1, ms2, ms3, ms4 runtime.MemStats
		// Every goroutine the client starts inherits the label.
		pprof.Do(ctx, pprof.Labels("side", "client"), func(ctx context.Context) {
			cl = c.Dial(ctx, c.ClientConfig("", "alice"))
			runtime.GC()
			runtime.ReadMemStats(&ms0)
			sessions = openSessions(t, ctx, cl, n, 16)
		})
		synctest.Wait()
		runtime.GC()
		runtime.ReadMemStats(&ms1)
		time.Sleep(idle)
		runtime.ReadMemStats(&ms2)
		if safe := countSafe(sessions); safe != n {
			t.Fatalf("%d of %d sessions safe after the idle minute", safe, n)
		}
		if got := c.Master().Status().Sessions; got != n {
			t.Fatalf("the master holds %d sessions, want %d", got, n)
		}
		synctest.Wait()
		runtime.GC()
		runtime.ReadMemStats(&ms3)
		g1 := runtime.NumGoroutine()
		_ = cl.Close()
		synctest.Wait()
		sessions = nil
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms4)
		g2 := runtime.NumGoroutine()
		out = idleCost{
			n:             n,
			bytesPer:      (float64(ms3.HeapAlloc+ms3.StackInuse) - float64(ms4.HeapAlloc+ms4.StackInuse)) / float64(n),
			goroutinesPer: float64(g1-g2) / float64(n),
			openAllocs:    float64(ms1.Mallocs-ms0.Mallocs) / float64(n),
			openBytes:     (float64(ms1.HeapAlloc+ms1.StackInuse) - float64(ms0.HeapAlloc+ms0.StackInuse)) / float64(n),
			idleAllocs:    float64(ms2.Mallocs-ms1.Mallocs) / float64(n) / max(idle.Seconds(), 1),
		}
		if c.Master().Status().Sessions != n {
			t.Fatalf("closing the client ended sessions at the master: the figures would include the master's share")
		}
	})
	return out
}

// The most an idle session may cost its client.
const (
	maxGoroutinesPerIdle = 0.05
	maxBytesPerIdle      = 5 << 10
)

// TestIdleSessionCost measures what idle sessions cost their client: live
// heap and goroutines per session (LOCKCELL_IDLE_SESSIONS sets how many,
// LOCKCELL_IDLE_SECONDS how long they idle, 60 s unless set), and fails
// if they cost more than maxGoroutinesPerIdle and maxBytesPerIdle.
func TestIdleSessionCost(t *testing.T) {
	n := 1000
	if v := os.Getenv("LOCKCELL_IDLE_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("LOCKCELL_IDLE_SESSIONS=%q: want a positive count", v)
		}
	}
	idle := time.Minute
	if v := os.Getenv("LOCKCELL_IDLE_SECONDS"); v != "" {
		sec, err := strconv.Atoi(v)
		if err != nil || sec < 0 {
			t.Fatalf("LOCKCELL_IDLE_SECONDS=%q: want a count of seconds", v)
		}
		idle = time.Duration(sec) * time.Second
	}
	r := measureIdleSessions(t, n, idle)
	// Floor: closing the client freed the sessions (a Session, its
	// KeepAlive state and its context are over a kilobyte), so the figures
	// measured them.
	if r.bytesPer < 768 {
		t.Fatalf("closing the client freed %.0f bytes per session: the sessions were not measured", r.bytesPer)
	}
	// The client drives all its sessions from one loop: an idle session
	// costs its structs, no goroutine of its own.
	if r.goroutinesPer > maxGoroutinesPerIdle || r.bytesPer > maxBytesPerIdle {
		t.Errorf("an idle session costs its client %.2f goroutines and %.0f bytes; want at most %.2f and %d",
			r.goroutinesPer, r.bytesPer, maxGoroutinesPerIdle, maxBytesPerIdle)
	}
	t.Logf("%d idle sessions on one client: %.0f bytes and %.2f goroutines per session on the client; client and master together: %.0f bytes and %.0f allocations per open, %.2f allocations per session-second idle",
		r.n, r.bytesPer, r.goroutinesPer, r.openBytes, r.openAllocs, r.idleAllocs)
}

// maxIdleAllocsPerSession is the most allocations, client and master
// together, that one more idle session may add per second it idles. A
// session's KeepAlive is an entry in its connection's batch frame each
// round, which neither side allocates for on its own; what remains is the
// client's per-round bookkeeping (about two).
const maxIdleAllocsPerSession = 2.6

// TestIdleSessionAllocsPerSession: the allocations per second of a
// connection's idle sessions grow by at most maxIdleAllocsPerSession per
// session: measured at two sizes, so that the cell's own idle work (its
// ticks and lease renewals, the same at both) drops out, and what is left
// is what each session's KeepAlive costs, client and master together.
// Allocations do not depend on the machine's speed or load.
func TestIdleSessionAllocsPerSession(t *testing.T) {
	const idle = 20 * time.Second
	small := measureIdleSessions(t, 500, idle)
	large := measureIdleSessions(t, 2500, idle)
	perSecond := func(r idleCost) float64 { return r.idleAllocs * float64(r.n) }
	slope := (perSecond(large) - perSecond(small)) / float64(large.n-small.n)
	t.Logf("idle allocations per second: %.0f with %d sessions, %.0f with %d: %.2f per session-second",
		perSecond(small), small.n, perSecond(large), large.n, slope)
	// Floor: the sessions' KeepAlives were answered (every session was safe
	// after the idle time, which measureIdleSessions checks), and a round
	// costs the client something per session, so the slope measured them.
	if slope < 0.5 {
		t.Fatalf("%.2f allocations per session-second: the sessions' KeepAlives were not measured", slope)
	}
	if slope > maxIdleAllocsPerSession {
		t.Errorf("an idle session costs %.2f allocations per second it idles (client and master); want at most %.1f",
			slope, maxIdleAllocsPerSession)
	}
}
