package cell_test

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

var flagPairs = flag.Int("cell.pairs", 16, "acquire+release pairs each client of TestAcquireReleaseCost makes (run it at two counts under callgrind for the instructions per pair)")

// pairClients is how many clients TestAcquireReleaseCost runs, each on its
// own lock.
const pairClients = 16

// TestAcquireReleaseCost runs pairClients clients, each with its own
// session, through -cell.pairs acquire+release pairs on its own lock in a
// three-replica cell on synctest's clock (simulated network, real Pebble),
// every fsync of the Paxos log taking pairFsync. Under callgrind at two
// values of -cell.pairs, the difference of the instruction counts divided
// by the difference of the pairs is the whole cell's CPU per pair (the
// clock is synctest's, so callgrind's slowness expires no lease). It
// reports the master's Paxos work per pair.
func TestAcquireReleaseCost(t *testing.T) {
	n := *flagPairs
	if n < 1 {
		t.Fatalf("-cell.pairs=%d: no pair judged", n)
	}
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, time.Duration(n)*time.Minute)
		m, before, ops := runPairs(t, ctx, n, nil, nil)
		d := countPaxos(m).minus(before)
		t.Logf("%d pairs: %.2f commands, %.3f slots, %.3f fsyncs per pair on the master", ops, d.commands/float64(ops), d.slots/float64(ops), d.fsyncs/float64(ops))
	})
}

// pairFsync is how long every fsync of the Paxos log takes in the pair
// tests: longer than a network round trip, as on a real disk.
const pairFsync = 4 * time.Millisecond

// runPairs starts the cell, opens each client's lock, and runs n pairs per
// client, client i pausing i/pairClients of an fsync before each; sample, if not nil, runs on the master every 100 µs meanwhile. It
// returns the master, its Paxos counts before the pairs, and the pairs made.
// tune, if not nil, adjusts every replica's Config.
func runPairs(t *testing.T, ctx context.Context, n int, tune func(*cell.Config), sample func(m *cell.Replica)) (*cell.Replica, paxosCounts, int) {
	t.Helper()
	names := make([]string, pairClients)
	for i := range names {
		names[i] = fmt.Sprintf("c%d", i)
	}
	hc := startHandOverCell(t, ctx, func(cfg *cell.Config) {
		cfg.SyncDelay = pairFsync
		if tune != nil {
			tune(cfg)
		}
	}, names...)
	m := hc.lc.Master()
	handles := make([]api.Handle, len(names))
	for i, name := range names {
		handles[i] = hc.clients[name].mustOpen(ctx, fmt.Sprintf("/t/pair%d", i))
	}
	synctest.Wait()
	before := countPaxos(m)
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sample != nil {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Microsecond):
			}
			sample(m)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	for i, name := range names {
		c, h := hc.clients[name], handles[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < n; k++ {
				// Clients spread over one fsync, as independent clients
				// are, not in step with each other.
				time.Sleep(time.Duration(i) * pairFsync / pairClients)
				seq, err := c.acquire(ctx, h, api.LockExclusive, false)
				if err == nil {
					err = c.release(ctx, h, seq.Generation)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d, pair %d: %w", i, k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if hc.lc.Master() != m {
		t.Fatalf("the master changed during the pairs")
	}
	return m, before, n * len(names)
}
