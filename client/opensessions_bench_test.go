package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// BenchmarkOpenSessions: the cost of opening a session on a whole cell in
// this process (five replicas with real Paxos and Pebble on the simulated
// network of transport/memnet, and its clients), as the benchmark harness
// opens them (bench/lockcell.go OpenSessions): on 8 connections (Clients)
// at once, each with a number of NewSession calls in flight (24, the
// harness's, and 64), which a Client joins into CreateSessions calls.
// ns/op is the wall time of one open with every part sharing the
// machine's CPUs and disk, so it is a cost only on an otherwise idle
// machine; allocs/op and B/op count every allocation of the cell and the
// clients per open and do not depend on the machine's load.
// sessions/slot is how many creations shared a Paxos slot. The sessions
// stay open (their KeepAlives run) until the benchmark ends, as a user's
// do. Compare runs of the same size:
//
//	go test -run '^$' -bench BenchmarkOpenSessions -benchtime 8000x -benchmem ./client/
func BenchmarkOpenSessions(b *testing.B) {
	for _, perConn := range []int{24, 64} {
		b.Run(fmt.Sprintf("conns=8/inflight=%d", perConn), func(b *testing.B) { benchOpenSessions(b, 8, perConn) })
	}
}

func benchOpenSessions(b *testing.B, conns, perConn int) {
	c := celltest.Start(b, celltest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	clients := make([]*client.Client, conns)
	for i := range clients {
		clients[i] = c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("p%d", i)))
	}
	m := c.Master()
	if m == nil {
		b.Fatal("no master")
	}
	before := m.Status()
	var (
		left   atomic.Int64
		failed atomic.Pointer[error]
		opened atomic.Int64
		wg     sync.WaitGroup
		held   = make([][]*client.Session, conns*perConn)
	)
	left.Store(int64(b.N))
	b.ReportAllocs()
	b.ResetTimer()
	for i := range conns * perConn {
		cl := clients[i%conns]
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				s, err := cl.NewSession(ctx)
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				held[i] = append(held[i], s)
				opened.Add(1)
			}
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
	if opened.Load() != int64(b.N) || after.Sessions < b.N || slots == 0 {
		b.Fatalf("%d sessions opened of %d, the master holds %d, %d slots", opened.Load(), b.N, after.Sessions, slots)
	}
	b.ReportMetric(float64(b.N)/float64(slots), "sessions/slot")
}
