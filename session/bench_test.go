package session

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

func benchManager(b *testing.B, clock monotime.Clock, n int) *Manager {
	b.Helper()
	m, err := New(Config{Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	if err := m.Start(false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Stop)
	for i := range n {
		if _, err := m.Add(ID(i)); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

// BenchmarkPublishKeepAlive: an event published and delivered on a
// KeepAlive answered at once (no parking), among n sessions: the master's
// cost per event round.
func BenchmarkPublishKeepAlive(b *testing.B) {
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprint("sessions=", n), func(b *testing.B) {
			m := benchManager(b, monotime.Real(), n)
			ctx := context.Background()
			ev := api.Event{Kind: api.EventContentsModified, Path: "/ls/cell/x"}
			acks := make([]uint64, n)
			i := 0
			for b.Loop() {
				id := ID(i % n)
				if err := m.Publish(id, ev); err != nil {
					b.Fatal(err)
				}
				r, err := m.KeepAlive(ctx, id, acks[id])
				if err != nil {
					b.Fatal(err)
				}
				acks[id] = r.Events[len(r.Events)-1].Seq
				i++
			}
		})
	}
}

// BenchmarkParkedWake: a client goroutine keeps a KeepAlive parked; each
// iteration publishes an event and waits for the reply to reach the client
// (park, timer, wake, answer, re-park).
func BenchmarkParkedWake(b *testing.B) {
	m := benchManager(b, monotime.Real(), 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan struct{})
	go func() {
		ack := uint64(0)
		for {
			r, err := m.KeepAlive(ctx, 0, ack)
			if err != nil {
				close(got)
				return
			}
			if len(r.Events) > 0 {
				ack = r.Events[len(r.Events)-1].Seq
				got <- struct{}{}
			}
		}
	}()
	ev := api.Event{Kind: api.EventLockAcquired, Path: "/ls/cell/lock"}
	for b.Loop() {
		if err := m.Publish(0, ev); err != nil {
			b.Fatal(err)
		}
		<-got
	}
	cancel()
	m.Stop()
	<-got
}

// BenchmarkExpiryDecisions: 10,000 silent sessions run out at once; the
// expiry goroutine decides and hands out each. Reported per session.
func BenchmarkExpiryDecisions(b *testing.B) {
	const n = 10000
	for b.Loop() {
		b.StopTimer()
		clock := monotime.NewManual(0)
		m := benchManager(b, clock, n)
		b.StartTimer()
		clock.Advance(DefaultLease)
		for range n {
			<-m.Decisions()
		}
		b.StopTimer()
		m.Stop()
		b.StartTimer()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/session")
}

// BenchmarkKeepAliveRound: one KeepAlive round of n idle sessions at a 1 s
// cadence (arrival, park, answer at the cadence), on a manual clock: as one
// batch (what a connection's KeepAlive stream sends) or as one KeepAlive
// per session, each parked on its own goroutine and timer (the
// per-session stream). It reports allocations and bytes per session per
// round, which do not depend on the machine's load; its ns/op is
// wall-clock and means little on a shared machine.
func BenchmarkKeepAliveRound(b *testing.B) {
	const cadence = time.Second
	for _, tc := range []struct {
		n     int
		batch bool
	}{{1000, true}, {100000, true}, {1000, false}, {10000, false}} {
		mode := "per-session"
		if tc.batch {
			mode = "batch"
		}
		b.Run(fmt.Sprintf("%s/sessions=%d", mode, tc.n), func(b *testing.B) {
			clk := monotime.NewManual(0)
			m, err := New(Config{Clock: clk, KeepAliveCadence: cadence, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			if err := m.Start(false, nil); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(m.Stop)
			entries := make([]BatchEntry, tc.n)
			for i := range entries {
				entries[i].Session = ID(i + 1)
				if _, err := m.Add(ID(i + 1)); err != nil {
					b.Fatal(err)
				}
			}
			for clk.Armed() == 0 { // the expiry loop's timer
				runtime.Gosched()
			}
			base := clk.Armed()
			ctx := context.Background()
			round := func() {
				var wg sync.WaitGroup
				parked := 1
				if tc.batch {
					wg.Go(func() {
						out := make([]BatchResult, len(entries))
						if err := m.KeepAliveBatch(ctx, entries, out); err != nil {
							b.Error(err)
						}
					})
				} else {
					parked = len(entries)
					for _, e := range entries {
						wg.Go(func() {
							if _, err := m.KeepAlive(ctx, e.Session, 0); err != nil {
								b.Error(err)
							}
						})
					}
				}
				for clk.Armed() < base+parked {
					runtime.Gosched()
				}
				clk.Advance(cadence)
				wg.Wait()
			}
			round() // warm up
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			rounds := 0
			for b.Loop() {
				round()
				rounds++
			}
			runtime.ReadMemStats(&after)
			per := float64(rounds * tc.n)
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/session-round")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/per, "B/session-round")
		})
	}
}
