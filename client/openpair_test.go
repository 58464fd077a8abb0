package client_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
)

// TestNewSessionWorkersComeBack: workers that each open sessions one after
// another on one Client (as a pool does) are not made to wait a whole
// CreateSessions call for the first of them to come back: that one goes
// alone, and once the rest of the last call's callers are queued they go
// beside it as a second call. On simulated time with 2 ms links, 24
// workers opening 10 sessions each take 16 times one call's time (the
// second call waits for the first's Paxos slot), not the 20 of calls that
// alternate between one caller and the other 23; the test allows 18.
// Floors: 240 sessions opened, the time of one call measured.
func TestNewSessionWorkersComeBack(t *testing.T) {
	const workers, rounds = 24, 10
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3, Latency: 2 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		// Warm up, then time one call alone.
		if _, err := cl.NewSession(ctx); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if _, err := cl.NewSession(ctx); err != nil {
			t.Fatal(err)
		}
		one := time.Since(start)
		if one <= 0 {
			t.Fatal("one NewSession took no simulated time; the links' latency is not in effect")
		}
		start = time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		opened := make([]int, workers)
		for i := range workers {
			wg.Go(func() {
				for range rounds {
					if _, err := cl.NewSession(ctx); err != nil {
						errs <- err
						return
					}
					opened[i]++
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		took := time.Since(start)
		total := 0
		for _, n := range opened {
			total += n
		}
		t.Logf("one NewSession alone: %v; %d workers × %d rounds: %v (%.1f calls' time)", one, workers, rounds, took, float64(took)/float64(one))
		if total != workers*rounds {
			t.Fatalf("%d sessions opened; want %d", total, workers*rounds)
		}
		if limit := time.Duration(rounds) * one * 9 / 5; took > limit {
			t.Errorf("%d rounds took %v, more than %v (1.8 calls' time a round): the workers that came back waited for the first one's call", rounds, took, limit)
		}
	})
}
