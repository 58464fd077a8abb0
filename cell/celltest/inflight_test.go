package celltest_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

var (
	flagWindows = flag.String("celltest.windows", "", "TestInflightWindows: comma-separated cell.Config.MaxInflight values to compare (empty: the test is skipped)")
	flagClients = flag.String("celltest.clients", "1,8,64", "TestInflightWindows: comma-separated client counts")
	flagSimFor  = flag.Duration("celltest.simfor", 2*time.Second, "TestInflightWindows: simulated time each run measures")
)

// TestInflightWindows compares Paxos windows (cell.Config.MaxInflight) on
// a five-replica cell in simulated time: every client runs acquire+release
// cycles on a lock of its own for -celltest.simfor of synctest's clock,
// over a network with a one-way latency of 100 µs and a log whose fsync
// takes 500 µs (TestLightLoadCycle's LAN and SSD). It reports the cycles
// per simulated second and the p50 and p99 of one cycle for each window
// and client count. Nothing here depends on the machine's speed: only the
// simulated network and disk take time. Run under callgrind at two values
// of -celltest.simfor, the difference of the instruction counts over the
// difference of the cycles is the whole cell's CPU per cycle.
//
// It is a measurement, not a check of the default, so it runs only when
// -celltest.windows names the windows, e.g.
//
//	go test ./cell/celltest -run TestInflightWindows -v -celltest.windows=1,4,32
func TestInflightWindows(t *testing.T) {
	if *flagWindows == "" {
		t.Skip("no -celltest.windows given")
	}
	windows, err := intList(*flagWindows)
	if err != nil {
		t.Fatalf("-celltest.windows: %v", err)
	}
	clients, err := intList(*flagClients)
	if err != nil {
		t.Fatalf("-celltest.clients: %v", err)
	}
	var table []string
	for _, k := range clients {
		for _, w := range windows {
			r := measureWindow(t, w, k, *flagSimFor)
			if r.cycles == 0 {
				t.Fatalf("window %d, %d clients: no cycle completed in %v of simulated time", w, k, *flagSimFor)
			}
			table = append(table, fmt.Sprintf("| %d | %d | %d | %.0f | %v | %v | %.2f |",
				k, w, r.cycles, float64(r.cycles)/flagSimFor.Seconds(), r.p50, r.p99, float64(r.slots)/float64(r.cycles)))
		}
	}
	t.Logf("\n| clients | MaxInflight | cycles | cycles/s (simulated) | p50 | p99 | slots/cycle |\n|---|---|---|---|---|---|---|\n%s", strings.Join(table, "\n"))
}

type windowResult struct {
	cycles   int
	slots    uint64
	p50, p99 time.Duration
}

// measureWindow runs k clients' cycles for d of simulated time on a fresh
// cell with MaxInflight w.
func measureWindow(t *testing.T, w, k int, d time.Duration) windowResult {
	var res windowResult
	t.Run(fmt.Sprintf("clients=%d/window=%d", k, w), func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const (
				latency = 100 * time.Microsecond
				fsync   = 500 * time.Microsecond
			)
			c := celltest.Start(t, celltest.Options{
				Latency: latency,
				Tune: func(cfg *cell.Config) {
					cfg.SyncDelay = fsync
					cfg.MaxInflight = w
				},
			})
			ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Minute)
			defer cancel()
			handles := make([]*client.Handle, k)
			for i := range handles {
				name := fmt.Sprintf("c%d", i)
				s, err := c.Dial(ctx, c.ClientConfig("", name)).NewSession(ctx)
				if err != nil {
					t.Fatal(err)
				}
				h, err := s.Open(ctx, "/t/"+name, client.OpenOptions{Create: true})
				if err != nil {
					t.Fatal(err)
				}
				handles[i] = h
			}
			m := c.Master()
			if m == nil {
				t.Fatal("no master after the clients opened their locks")
			}
			var (
				mu   sync.Mutex
				lats []time.Duration
				wg   sync.WaitGroup
			)
			start := time.Now()
			end := start.Add(d)
			before := m.Status().Chosen
			for _, h := range handles {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var mine []time.Duration
					for time.Now().Before(end) {
						t0 := time.Now()
						l, err := h.Acquire(ctx, api.LockExclusive)
						if err != nil {
							t.Errorf("acquire: %v", err)
							return
						}
						if err := l.Release(ctx); err != nil {
							t.Errorf("release: %v", err)
							return
						}
						if t1 := time.Now(); !t1.After(end) {
							mine = append(mine, t1.Sub(t0))
						}
					}
					mu.Lock()
					lats = append(lats, mine...)
					mu.Unlock()
				}()
			}
			wg.Wait()
			res.slots = m.Status().Chosen - before
			slices.Sort(lats)
			res.cycles = len(lats)
			if len(lats) > 0 {
				res.p50 = lats[len(lats)/2]
				res.p99 = lats[(len(lats)*99)/100]
			}
		})
	})
	return res
}

func intList(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}
