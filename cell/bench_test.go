package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

// benchClients starts a five-replica cell and n clients with sessions kept
// alive in the background.
func benchClients(b *testing.B, n int) ([]*testClient, context.Context) {
	_, clients, ctx := benchCell(b, n)
	return clients, ctx
}

// benchCell is benchClients that also returns the cell.
func benchCell(b *testing.B, n int) (*cell.LocalCell, []*testClient, context.Context) {
	lc := startCell(b, 5, nil)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	clients := make([]*testClient, n)
	for i := range clients {
		c := newTestClient(b, lc, "t", fmt.Sprintf("bench%d", i))
		c.createSession(ctx)
		go c.keepAliveLoop(ctx, make(chan api.Event, 16))
		clients[i] = c
	}
	return lc, clients, ctx
}

// processCPU returns the CPU time (user and system) this process has used:
// all five replicas, their disks' fsync calls and the clients together.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter reports the process CPU per operation as the metric cpu-ms/op.
type cpuMeter struct {
	b     *testing.B
	start time.Duration
}

// startCPU resets the benchmark timer and starts measuring CPU from here.
func startCPU(b *testing.B) *cpuMeter {
	b.ReportAllocs()
	b.ResetTimer()
	return &cpuMeter{b: b, start: processCPU(b)}
}

// report divides the CPU used since startCPU by ops.
func (m *cpuMeter) report(ops int64) {
	used := processCPU(m.b) - m.start
	if ops > 0 {
		m.b.ReportMetric(float64(used)/float64(time.Millisecond)/float64(ops), "cpu-ms/op")
	}
}

// acquireRelease acquires h's lock and releases it.
func acquireRelease(ctx context.Context, c *testClient, h api.Handle, wait bool) error {
	g, err := c.acquire(ctx, h, api.LockExclusive, wait)
	if err != nil {
		return err
	}
	return c.release(ctx, h, g.Generation)
}

// recoverHold brings c back after a call failed with an unknown outcome (on
// a loaded machine the master can lose its lease mid-run and the cell fail
// over): it reconnects to the master and, while the session holds h's lock
// (an Acquire that was granted after all, a Release that was lost), releases
// it. It gives up after two minutes.
func recoverHold(ctx context.Context, c *testClient, h api.Handle) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for ctx.Err() == nil {
		_ = c.dial(ctx)
		var seq api.SequencerResponse
		err := c.callOnce(ctx, api.MethodGetSequencer, &api.HandleRequest{Header: c.header(), Handle: h}, &seq)
		var ae *api.Error
		switch {
		case err == nil:
			err = c.release(ctx, h, seq.Generation)
			if err == nil {
				return nil
			}
		case errors.As(err, &ae) && ae.Code == api.FailedPrecondition:
			return nil // not held
		case errors.As(err, &ae) && ae.Code == api.Failover:
			_, _ = c.keepAlive(ctx) // learn the new master's epoch
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("recovering the lock %s: %w", h.Path, ctx.Err())
}

// BenchmarkAcquireRelease: acquire+release pairs (one op is one pair), each
// client with its own session on its own lock, through five replicas on
// loopback QUIC with real Pebble fsync. cpu-ms/op is the CPU of the whole
// process (every replica and the clients) per pair; allocs/op likewise.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, n := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			clients, ctx := benchClients(b, n)
			handles := make([]api.Handle, n)
			for i, c := range clients {
				handles[i] = c.mustOpen(ctx, fmt.Sprintf("/t/lock%d", i))
			}
			var next atomic.Int64
			var recoveries atomic.Int64
			cpu := startCPU(b)
			start := time.Now()
			var wg sync.WaitGroup
			for i := range clients {
				wg.Add(1)
				go func(i int) {
					defer wg.Done()
					c, h := clients[i], handles[i]
					for next.Add(1) <= int64(b.N) {
						for {
							err := acquireRelease(ctx, c, h, false)
							if err == nil {
								break
							}
							recoveries.Add(1)
							if rerr := recoverHold(ctx, c, h); rerr != nil {
								b.Errorf("after %v: %v", err, rerr)
								return
							}
						}
					}
				}(i)
			}
			wg.Wait()
			cpu.report(int64(b.N))
			b.ReportMetric(float64(recoveries.Load()), "recoveries")
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "pairs/s")
		})
	}
}

// BenchmarkHandOver: 64 clients, each with its own session, contend for one
// lock with blocking Acquire; each hand-over (one op) is a release that
// wakes exactly the next waiter. cpu-ms/op and allocs/op are the whole
// process's per grant. commands/op, slots/op and fsyncs/op are the
// master's Paxos work per grant (its metrics; meaningless if the master
// changed during the run, which recoveries > 0 hints at): a hand-over that
// rides on the Release (lockhandover.go) costs one command, and the
// Releases and Acquires of a busy lock share slots.
func BenchmarkHandOver(b *testing.B) {
	const n = 64
	lc, clients, ctx := benchCell(b, n)
	handles := make([]api.Handle, n)
	for i, c := range clients {
		handles[i] = c.mustOpen(ctx, "/t/hot")
	}
	var grants atomic.Int64
	var holders atomic.Int32
	var recoveries atomic.Int64
	m := lc.Master()
	paxosBefore := countPaxos(m)
	cpu := startCPU(b)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, h := clients[i], handles[i]
			for grants.Load() < int64(b.N) {
				g, err := c.acquire(ctx, h, api.LockExclusive, true)
				if err == nil {
					if holders.Add(1) != 1 {
						b.Error("two holders of an exclusive lock")
					}
					grants.Add(1)
					holders.Add(-1)
					err = c.release(ctx, h, g.Generation)
				}
				if err != nil {
					recoveries.Add(1)
					if rerr := recoverHold(ctx, c, h); rerr != nil {
						b.Errorf("after %v: %v", err, rerr)
						return
					}
				}
			}
		}(i)
	}
	wg.Wait()
	cpu.report(grants.Load())
	if g := float64(grants.Load()); g > 0 {
		d := countPaxos(m).minus(paxosBefore)
		b.ReportMetric(d.commands/g, "commands/op")
		b.ReportMetric(d.slots/g, "slots/op")
		b.ReportMetric(d.fsyncs/g, "fsyncs/op")
	}
	b.ReportMetric(float64(recoveries.Load()), "recoveries")
	b.ReportMetric(float64(grants.Load())/time.Since(start).Seconds(), "handovers/s")
}

// BenchmarkKeepAlive: KeepAlive requests per second the master absorbs.
// Each session has two callers, so every KeepAlive that arrives renews the
// lease and supersedes (answers) the one parked before it: the rate is the
// rate at which the master processes arrivals.
func BenchmarkKeepAlive(b *testing.B) {
	const sessions = 32
	lc := startCell(b, 5, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var clients []*testClient
	for i := 0; i < sessions; i++ {
		c := newTestClient(b, lc, "t", fmt.Sprintf("ka%d", i))
		c.createSession(ctx)
		// Take the fail-over event so later calls park.
		if _, err := c.keepAlive(ctx); err != nil {
			b.Fatal(err)
		}
		c2 := newTestClient(b, lc, "t", fmt.Sprintf("ka%d", i))
		c2.sess, c2.epoch, c2.ack = c.sess, c.epoch, c.ack
		clients = append(clients, c, c2)
	}
	b.ResetTimer()
	start := time.Now()
	for _, c := range clients {
		wg.Add(1)
		go func(c *testClient) {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				var resp api.KeepAliveResponse
				err := c.callOnce(ctx, api.MethodKeepAlive, &api.KeepAliveRequest{Header: c.header(), Ack: c.ack}, &resp)
				if err != nil && !errors.Is(err, api.ErrAborted) && ctx.Err() == nil {
					b.Error(err)
					return
				}
			}
		}(c)
	}
	// The last caller of each session stays parked; end it.
	go func() {
		for next.Load() <= int64(b.N) {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "keepalives/s")
}
