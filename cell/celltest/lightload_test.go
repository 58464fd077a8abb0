package celltest_test

import (
	"context"
	"flag"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

var flagCycles = flag.Int("celltest.cycles", 20, "TestLightLoadCycle's number of acquire+release cycles")

// TestLightLoadCycle pins the critical path of one client locking and
// unlocking its own lock on an otherwise idle five-replica cell, in
// simulated time. With a one-way network latency L and an fsync of S, an
// Acquire is client → master, Accept → followers, their fsync (the
// master's own overlaps it), Accepted → master, apply, reply → client:
// 4L + S, in one slot of its own; a Release the same. So a cycle takes
// 8L + 2S and two slots — the client's and the replicas' computing costs
// no simulated time — and nothing that waits for a tick, a batching delay
// or a timer, which would show as milliseconds on top: the network and
// the disk are those of a LAN and an SSD (L = 100 µs, S = 500 µs), the
// tick is 10 ms.
//
// A heartbeat that leaves while the followers are still writing a
// command's Accept carries that Accept again (the leader has no
// acknowledgement yet); a follower that already holds the entry does not
// write it a second time, so the next command's Accept never waits behind
// an extra fsync and every cycle stays on the critical path.
//
// bench/scripts/cpu-per-command.sh runs it under callgrind at two values
// of -celltest.cycles for the whole cell's instructions per cycle: the
// cell runs on synctest's clock, so callgrind's slowness changes no lease
// and no count.
func TestLightLoadCycle(t *testing.T) {
	lightLoadCycles(t, *flagCycles, 0)
}

// TestLightLoadCycleHeartbeatEveryTick runs TestLightLoadCycle's cycles
// with a heartbeat on every tick, so that many of them leave while the
// followers are still writing an Accept and carry it again: a follower
// that wrote the retransmitted entry a second time, with an fsync, would
// make the next command wait S + 2L more, and the cycle exceed the
// critical path.
func TestLightLoadCycleHeartbeatEveryTick(t *testing.T) {
	lightLoadCycles(t, 60, 1)
}

// lightLoadCycles runs n judged acquire+release cycles on a fresh cell
// whose leader heartbeats every heartbeatTicks ticks (0: the default).
func lightLoadCycles(t *testing.T, n, heartbeatTicks int) {
	const (
		latency = 100 * time.Microsecond
		fsync   = 500 * time.Microsecond
		// want is the critical path; slack covers nothing but rounding
		// (it is well below one latency, and a tick is 10 ms).
		want  = 8*latency + 2*fsync
		slack = latency / 2
	)
	if n < 1 {
		t.Fatalf("%d cycles: no cycle to judge (-celltest.cycles)", n)
	}
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{
			Latency: latency,
			Tune: func(cfg *cell.Config) {
				cfg.SyncDelay = fsync
				cfg.HeartbeatTicks = heartbeatTicks
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n+60)*time.Second)
		defer cancel()
		s, err := c.Dial(ctx, c.ClientConfig("", "light")).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Open(ctx, "/t/light", client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		cycle := func() (acq, rel time.Duration) {
			t0 := time.Now()
			l, err := h.Acquire(ctx, api.LockExclusive)
			if err != nil {
				t.Fatalf("acquire: %v", err)
			}
			t1 := time.Now()
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			return t1.Sub(t0), time.Since(t1)
		}
		cycle() // warm: the first call may set up what later ones reuse
		m := c.Master()
		if m == nil {
			t.Fatal("no master after the warm-up cycle")
		}
		var worstAcq, worstRel, total time.Duration
		judged := 0
		for i := 0; i < n; i++ {
			// Some cycles start right after the previous one, others at
			// another phase of the replicas' ticks.
			if i%2 == 1 {
				time.Sleep(time.Duration(i%7) * 1300 * time.Microsecond)
			}
			before := m.Status().Chosen
			acq, rel := cycle()
			slots := m.Status().Chosen - before
			worstAcq, worstRel = max(worstAcq, acq), max(worstRel, rel)
			total += acq + rel
			if acq+rel > want+slack {
				t.Errorf("cycle %d took %v (acquire %v, release %v) of simulated time; the critical path is %v (8 one-way latencies of %v and 2 fsyncs of %v)",
					i, acq+rel, acq, rel, want, latency, fsync)
			}
			if slots != 2 {
				t.Errorf("cycle %d took %d slots, want 2 (one per command)", i, slots)
			}
			judged++
		}
		if judged != n {
			t.Fatalf("judged %d cycles, want %d", judged, n)
		}
		avg := total / time.Duration(n)
		t.Logf("%d cycles: %v per cycle on average (critical path %v); worst acquire %v, worst release %v",
			n, avg, want, worstAcq, worstRel)
		if avg > want+slack {
			t.Errorf("a cycle took %v of simulated time on average; the critical path is %v", avg, want)
		}
	})
}
