package celltest_test

import (
	"context"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestKeepAliveBatchOneConnection: a few thousand sessions on ONE client
// connection, on simulated time, through several lease periods:
//
//   - every session stays safe at every one-second sample;
//   - once the batches have converged, the master receives exactly one
//     KeepAlive frame per cadence round from that connection (the
//     sessions were created apart, so this also shows batches joining);
//   - the end of one session leaves every other one safe and the count
//     at one frame a round;
//   - an event for one session answers the whole batch early: that round
//     has one extra frame (all sessions re-sent together, at once), the
//     event arrives, and the count is back at one a round after it.
func TestKeepAliveBatchOneConnection(t *testing.T) {
	const n = 2000
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		sessions := make([]*client.Session, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		const workers = 50
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					s, err := cl.NewSession(ctx)
					if err != nil {
						errs <- err
						return
					}
					sessions[i] = s
					// Spread the creations over time, so that the sessions'
					// first KeepAlives go out in many batches.
					time.Sleep(10 * time.Millisecond)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("creating sessions: %v", err)
		}
		master, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := c.Config(master.ID())
		if err != nil {
			t.Fatal(err)
		}
		lease := cfg.SessionLease
		if lease <= 0 {
			lease = 12 * time.Second
		}
		// Convergence: one round joins every batch into one; give it a
		// lease's worth, half a round off the round boundary.
		time.Sleep(lease + 500*time.Millisecond)

		// rounds waits d, checking every second that every session is
		// safe, and returns the KeepAlive frames the master received in
		// that time.
		rounds := func(d time.Duration, skip map[int]bool) uint64 {
			t.Helper()
			before := master.Status().KeepAliveFrames
			for range int(d / time.Second) {
				time.Sleep(time.Second)
				safe := 0
				for i, s := range sessions {
					if skip[i] {
						continue
					}
					if st := s.State(); st != client.StateSafe {
						t.Fatalf("session %d (%d of %d): %v", s.ID(), i, n, st)
					}
					safe++
				}
				if safe != n-len(skip) {
					t.Fatalf("judged %d sessions, want %d", safe, n-len(skip))
				}
			}
			return master.Status().KeepAliveFrames - before
		}
		// One frame per round: at most one a second, give or take the
		// round that straddles an end of the window, and at least 90% of
		// that (a round lasts the cadence plus the time the 2000-entry
		// frames take on the simulated network, a few milliseconds).
		expectOnePerRound := func(what string, d time.Duration, frames uint64) {
			t.Helper()
			r := uint64(d / time.Second)
			if frames < r-r/10 || frames > r+1 {
				t.Fatalf("%s: %d KeepAlive frames in %d one-second rounds from %d sessions on one connection, want one a round", what, frames, r, n)
			}
			t.Logf("%s: %d KeepAlive frames in %d rounds for %d sessions", what, frames, r, n)
		}
		window := 3 * lease
		expectOnePerRound("steady state", window, rounds(window, nil))

		// One session ends; the others are untouched.
		gone := 7
		if err := sessions[gone].Close(ctx); err != nil {
			t.Fatal(err)
		}
		skip := map[int]bool{gone: true}
		expectOnePerRound("after one session ended", lease, rounds(lease, skip))

		// An event for one session answers the whole batch early: the
		// event arrives at once, not at the end of the round.
		watcher, writer := sessions[0], sessions[1]
		if _, err := watcher.Open(ctx, "/t/dir", client.OpenOptions{Create: true, Dir: true, Events: api.WantChildAdded}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1300 * time.Millisecond)
		if _, err := writer.Open(ctx, "/t/dir/child", client.OpenOptions{Create: true}); err != nil {
			t.Fatal(err)
		}
		written := time.Now()
		select {
		case ev := <-watcher.Events():
			if ev.Kind != client.EventNode || ev.Node.Kind != api.EventChildAdded {
				t.Fatalf("watcher got %v, want a child-added event", ev)
			}
		case <-ctx.Done():
			t.Fatal("the event never reached the watching session")
		}
		if d := time.Since(written); d > 50*time.Millisecond {
			t.Fatalf("the event came %v after the write: the batch was not answered early", d)
		}
		expectOnePerRound("after the event", 2*lease, rounds(2*lease, skip))
	})
}

// BenchmarkKeepAliveBatchConnection: n idle sessions on one connection to
// an in-process cell on the memnet network (real time, cadence shortened
// to 100 ms so that a round is short); one op is one KeepAlive round. It
// reports KeepAlive frames per round at the master and the whole
// process's allocations and CPU per session-round (client, three
// replicas, network). Allocations do not depend on the machine's load;
// CPU time does somewhat, and ns/op is wall-clock: quote those only from a
// quiet machine.
func BenchmarkKeepAliveBatchConnection(b *testing.B) {
	const (
		n       = 200
		cadence = 100 * time.Millisecond
	)
	c := celltest.Start(b, celltest.Options{Replicas: 3, Tune: func(cfg *cell.Config) { cfg.KeepAliveCadence = cadence }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := c.Dial(ctx, c.ClientConfig("", "alice"))
	var wg sync.WaitGroup
	for w := range 20 {
		wg.Go(func() {
			for i := w; i < n; i += 20 {
				if _, err := cl.NewSession(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	master, err := c.WaitMaster(ctx)
	if err != nil {
		b.Fatal(err)
	}
	time.Sleep(20 * cadence) // the batches converge
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	frames0 := master.Status().KeepAliveFrames
	cpu0 := processCPU(b)
	rounds := 0
	for b.Loop() {
		time.Sleep(cadence)
		rounds++
	}
	cpu := processCPU(b) - cpu0
	frames := master.Status().KeepAliveFrames - frames0
	runtime.ReadMemStats(&after)
	if !master.Serving() {
		// On real time a starved machine can cost the master its lease;
		// the figures would then be of the fail-over, not of KeepAlives.
		b.Fatalf("replica %d lost mastership during the benchmark", master.ID())
	}
	per := float64(rounds * n)
	b.ReportMetric(float64(frames)/float64(rounds), "frames/round")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/session-round")
	b.ReportMetric(float64(cpu.Microseconds())/per, "cpu-µs/session-round")
}

// processCPU is the CPU time (user and system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
