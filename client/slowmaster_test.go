package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestSlowMasterNoStorm: a master whose run loop stalls for 500 ms (a
// stuck fsync; its lease, 0.8 s, outlives the stall, and its handlers
// still answer) leaves the calls of four clients unanswered for a quarter
// to half of the master lease, so each client probes or suspects it. Each
// must start at most one look-up (one per client, however many calls
// wait), move nowhere, and end the look-up as soon as the master answers
// again; every session stays safe, and the master stays the same.
func TestSlowMasterNoStorm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Latency: 250 * time.Microsecond})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		master, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const clients = 4
		var (
			cls      []*client.Client
			sessions []*client.Session
		)
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i := 0; i < clients; i++ {
			cl := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("slow%d", i)))
			s, err := cl.NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			cls, sessions = append(cls, cl), append(sessions, s)
			mu := client.NewMutex(s, fmt.Sprintf("/t/slowlock%d", i))
			// Four calls in flight per client at most: three writes and a
			// lock.
			for k := 0; k < 4; k++ {
				h, err := s.Open(ctx, fmt.Sprintf("/t/slow%d-%d", i, k), client.OpenOptions{Create: true})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; wctx.Err() == nil; n++ {
						var err error
						if k < 3 {
							_, err = h.SetContents(wctx, []byte(fmt.Sprint(n)))
						} else if l, lerr := mu.Lock(wctx); lerr == nil {
							err = l.Release(wctx)
						} else {
							err = lerr
						}
						if err != nil && wctx.Err() == nil && !errors.Is(err, client.ErrClosed) {
							t.Errorf("client %d: %v", i, err)
							return
						}
					}
				}()
			}
		}
		time.Sleep(500 * time.Millisecond) // steady state
		before, probesBefore := make([]uint64, clients), make([]uint64, clients)
		for i, cl := range cls {
			before[i], probesBefore[i], _ = client.Lookups(cl)
		}
		c.Stall(master.ID())
		time.Sleep(500 * time.Millisecond)
		c.Resume(master.ID())
		time.Sleep(100 * time.Millisecond)
		noticed := 0
		for i, cl := range cls {
			n, probes, busy := client.Lookups(cl)
			n, probes = n-before[i], probes-probesBefore[i]
			t.Logf("client %d: %d look-ups and %d probes during the stall, one under way after: %v", i, n, probes, busy)
			if n > 1 {
				t.Errorf("client %d: %d look-ups during one stall of its master; want at most one", i, n)
			}
			if busy {
				t.Errorf("client %d: a look-up is still under way 100 ms after its master answered again", i)
			}
			if n+probes > 0 {
				noticed++
			}
			if st := sessions[i].State(); st != client.StateSafe {
				t.Errorf("client %d: session %v", i, st)
			}
		}
		if m := c.Master(); m != master {
			t.Errorf("the master changed from %d during a stall shorter than its lease", master.ID())
		}
		time.Sleep(200 * time.Millisecond)
		wcancel()
		wg.Wait()
		// Floor: the stall must have made every client look (a look-up,
		// or a probe that the stalled master's handlers answered), or the
		// test judged nothing.
		if noticed < clients {
			t.Fatalf("only %d of %d clients probed or looked up: the stall was too short to judge", noticed, clients)
		}
	})
}
