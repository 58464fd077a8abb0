package client_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// BenchmarkOpenSessions: the cost of opening a session on a whole cell in
// this process (five replicas with real Paxos and Pebble on the simulated
// network of transport/memnet, and one client), as the benchmark harness
// opens them: 192 NewSession calls in flight on one Client, which shares
// CreateSessions calls between them. ns/op is the wall time of one open
// with all six parts sharing the machine's CPUs, so it is a CPU cost only
// on an otherwise idle machine; allocs/op and B/op count every
// allocation of the cell and the client per open and do not depend on the
// machine's load. sessions/slot is how many creations shared a Paxos slot.
// The sessions stay open (their KeepAlives run) until the benchmark ends,
// as a user's do. Compare runs of the same size:
//
//	go test -run '^$' -bench BenchmarkOpenSessions -benchtime 4000x -benchmem ./client/
func BenchmarkOpenSessions(b *testing.B) {
	c := celltest.Start(b, celltest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cl := c.Dial(ctx, c.ClientConfig("", "alice"))
	m := c.Master()
	if m == nil {
		b.Fatal("no master")
	}
	before := m.Status()
	const inFlight = 192
	var (
		left   atomic.Int64
		failed atomic.Pointer[error]
		mu     sync.Mutex
		held   []*client.Session
		wg     sync.WaitGroup
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for range inFlight {
		wg.Go(func() {
			var mine []*client.Session
			for left.Add(-1) >= 0 {
				s, err := cl.NewSession(ctx)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				mine = append(mine, s)
			}
			mu.Lock()
			held = append(held, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	after := m.Status()
	slots := after.Chosen - before.Chosen
	// Floors: every open made a session the master holds, through Paxos.
	if len(held) != b.N || after.Sessions < b.N || slots == 0 {
		b.Fatalf("%d sessions opened of %d, the master holds %d, %d slots", len(held), b.N, after.Sessions, slots)
	}
	b.ReportMetric(float64(b.N)/float64(slots), "sessions/slot")
}
