package celltest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// Hand-over targets, in simulated time.
const (
	// handOverBudget is the longest any client may go without a completed
	// lock operation across a planned hand-over, and the latest its first
	// operation at the new master may complete after the step-down began.
	handOverBudget = 20 * time.Millisecond
	// handOverLatency and handOverFsync model the network (one way) and
	// the disk: a LAN and an SSD's fsync.
	handOverLatency = 250 * time.Microsecond
	handOverFsync   = time.Millisecond
	// overlapSampleEvery is how often the overlap check looks at every
	// replica; overlapSampleFloor the least number of looks a run must
	// make for the check to count.
	overlapSampleEvery = 50 * time.Microsecond
	overlapSampleFloor = 1000
)

// TestPlannedHandOverInvisible: clients that each hold a lock and lock and
// unlock a second one in a loop see a planned hand-over (Replica.StepDown)
// as a pause of at most handOverBudget of simulated time: the old master
// finishes what is in Paxos, hands over to a caught-up successor, answers
// the held commands and every parked KeepAlive with a redirect naming the
// successor, and the successor serves within round trips. Throughout, no
// session leaves the safe state, every held lock stays held (its context
// never ends), and an overlap check that looks at every replica every
// 50 µs never finds two serving at once. Three hand-overs in a row, each
// to the replica the master picks.
func TestPlannedHandOverInvisible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startHandOverCell(t)
		const clients = 4
		w := newHandOverWorld(t, ctx, c, clients)
		defer w.stop()
		samples := 0
		for round := 0; round < 3; round++ {
			old, err := c.WaitMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // steady state
			stop := make(chan struct{})
			sampled := make(chan int)
			go func() { sampled <- w.checkOverlap(stop) }()
			looks := -1
			endSampling := func() {
				if looks < 0 {
					close(stop)
					looks = <-sampled
				}
			}
			defer endSampling() // a failed round leaves no goroutine behind
			t0 := time.Now()
			w.mark(t0)
			w.mu.Lock()
			clear(w.mu.servingSince)
			w.mu.Unlock()
			if err := old.StepDown(ctx, 0); err != nil {
				t.Fatalf("round %d: StepDown at %d: %v", round, old.ID(), err)
			}
			stepped := time.Since(t0)
			// Wait for another master, and for every client to complete an
			// operation there.
			var next *cell.Replica
			for deadline := t0.Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				for _, m := range c.Masters() {
					if m != old {
						next = m
					}
				}
				if next != nil && w.allMoved(next.ID()) {
					break
				}
			}
			time.Sleep(50 * time.Millisecond)
			endSampling()
			samples += looks
			w.check(t) // two masters at once, a session in jeopardy, a lock lost
			if next == nil {
				t.Fatalf("round %d: no replica but %d served within a second of its step-down", round, old.ID())
			}
			firsts, gaps := w.outage(t0, old.ID())
			w.mu.Lock()
			serves := w.mu.servingSince[next.ID()].Sub(t0)
			w.mu.Unlock()
			t.Logf("round %d: replica %d handed over to %d; StepDown returned after %v; the successor served after %v; first operation at the new master after %v (per client); longest gap %v",
				round, old.ID(), next.ID(), stepped, serves, firsts, gaps)
			for i := range firsts {
				if firsts[i] < 0 || firsts[i] > handOverBudget || gaps[i] > handOverBudget {
					t.Errorf("round %d: client %d: first operation at the new master %v after the step-down began, longest gap %v; want both within %v",
						round, i, firsts[i], gaps[i], handOverBudget)
				}
			}
		}
		if samples < overlapSampleFloor {
			t.Fatalf("the overlap check looked only %d times (floor %d)", samples, overlapSampleFloor)
		}
		t.Logf("overlap check: %d looks at every replica, never two serving", samples)
	})
}

// handOverWorld is the clients of TestPlannedHandOverInvisible.
type handOverWorld struct {
	c       *celltest.Cell
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	workers []*handOverWorker

	mu struct {
		sync.Mutex
		violations []string
		// servingSince holds when the overlap check first saw each
		// replica serve alone in the current round.
		servingSince map[uint64]time.Time
	}
}

// handOverWorker is one client: a session, the lock it holds throughout,
// and the record of its completed operations on a second lock.
type handOverWorker struct {
	s    *client.Session
	held *client.Lock
	mu   struct {
		sync.Mutex
		since time.Time      // start of the current measurement
		ops   []time.Time    // completions since then
		where []uint64       // replica that served each (the master then)
		last  time.Time      // latest completion before since
		moved map[uint64]int // completions per serving replica
	}
}

// startHandOverCell starts a cell with the hand-over tests' latency and
// fsync delay, and a context that bounds the test (a hang guard).
func startHandOverCell(t *testing.T) (*celltest.Cell, context.Context) {
	t.Helper()
	c := celltest.Start(t, celltest.Options{
		Latency: handOverLatency,
		Tune:    func(cfg *cell.Config) { cfg.SyncDelay = handOverFsync },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

func newHandOverWorld(t *testing.T, ctx context.Context, c *celltest.Cell, n int) *handOverWorld {
	w := &handOverWorld{c: c}
	w.mu.servingSince = map[uint64]time.Time{}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	for i := 0; i < n; i++ {
		s, err := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("worker%d", i))).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := client.NewMutex(s, fmt.Sprintf("/t/held%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		wk := &handOverWorker{s: s, held: held}
		wk.mu.moved = map[uint64]int{}
		w.workers = append(w.workers, wk)
		work := client.NewMutex(s, fmt.Sprintf("/t/work%d", i))
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for wctx.Err() == nil {
				l, err := work.Lock(wctx)
				if err == nil {
					wk.done(c)
					err = l.Release(wctx)
				}
				if err == nil {
					wk.done(c)
					continue
				}
				if errors.Is(err, client.ErrClosed) {
					return
				}
				if wctx.Err() == nil {
					w.violate("client %d: lock operation failed: %v", i, err)
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	return w
}

// done records a completed operation and the replica serving as master.
func (wk *handOverWorker) done(c *celltest.Cell) {
	var at uint64
	if m := c.Master(); m != nil {
		at = m.ID()
	}
	wk.mu.Lock()
	defer wk.mu.Unlock()
	wk.mu.ops = append(wk.mu.ops, time.Now())
	wk.mu.where = append(wk.mu.where, at)
	wk.mu.moved[at]++
}

// mark starts a measurement at t0.
func (w *handOverWorld) mark(t0 time.Time) {
	for _, wk := range w.workers {
		wk.mu.Lock()
		if k := len(wk.mu.ops); k > 0 {
			wk.mu.last = wk.mu.ops[k-1]
		}
		wk.mu.since, wk.mu.ops, wk.mu.where = t0, nil, nil
		clear(wk.mu.moved)
		wk.mu.Unlock()
	}
}

// allMoved reports whether every client completed an operation while
// replica id served.
func (w *handOverWorld) allMoved(id uint64) bool {
	for _, wk := range w.workers {
		wk.mu.Lock()
		n := wk.mu.moved[id]
		wk.mu.Unlock()
		if n == 0 {
			return false
		}
	}
	return true
}

// outage returns, per client, when after t0 its first operation served by
// a master other than oldMaster completed (-1 if none), and the longest gap between completions around
// the hand-over (from its last completion before t0).
func (w *handOverWorld) outage(t0 time.Time, oldMaster uint64) (firsts, gaps []time.Duration) {
	for _, wk := range w.workers {
		wk.mu.Lock()
		first, gap := time.Duration(-1), time.Duration(0)
		prev := wk.mu.last
		for i, at := range wk.mu.ops {
			if d := at.Sub(prev); !prev.IsZero() && d > gap {
				gap = d
			}
			prev = at
			if first < 0 && wk.mu.where[i] != 0 && wk.mu.where[i] != oldMaster {
				first = at.Sub(t0)
			}
		}
		wk.mu.Unlock()
		firsts, gaps = append(firsts, first), append(gaps, gap)
	}
	return firsts, gaps
}

// checkOverlap looks at every replica every overlapSampleEvery until stop
// is closed, recording a violation whenever two serve at once, and
// returns the number of looks. It also checks that every session is safe
// and every held lock held.
func (w *handOverWorld) checkOverlap(stop <-chan struct{}) int {
	looks := 0
	for {
		select {
		case <-stop:
			return looks
		case <-time.After(overlapSampleEvery):
		}
		looks++
		var serving []uint64
		for _, r := range w.c.Running() {
			if r.Serving() {
				serving = append(serving, r.ID())
			}
		}
		if len(serving) == 1 {
			w.mu.Lock()
			if _, ok := w.mu.servingSince[serving[0]]; !ok {
				w.mu.servingSince[serving[0]] = time.Now()
			}
			w.mu.Unlock()
		}
		if len(serving) > 1 {
			w.violate("at %v replicas %v serve as master at once", time.Now().Format("15:04:05.000000"), serving)
		}
		for i, wk := range w.workers {
			if st := wk.s.State(); st != client.StateSafe {
				w.violate("client %d: session %v during the hand-over", i, st)
			}
			if err := wk.held.Err(); err != nil {
				w.violate("client %d: held lock lost: %v", i, err)
			}
		}
	}
}

func (w *handOverWorld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.violations) < 20 {
		w.mu.violations = append(w.mu.violations, fmt.Sprintf(format, args...))
	}
}

// check fails the test on the violations recorded so far.
func (w *handOverWorld) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	v := slices.Clone(w.mu.violations)
	w.mu.Unlock()
	if len(v) > 0 {
		t.Fatalf("%d violations, first: %v", len(v), v)
	}
}

// stop ends the clients' loops.
func (w *handOverWorld) stop() {
	w.cancel()
	w.wg.Wait()
}

// TestStepDownThenStop: a master stopped the moment its StepDown returns
// (what lockcelld does on SIGTERM) has already got its hand-over across:
// another replica serves well before the stopped master's lease could
// have run out, rather than after it. Five hand-overs in a row, each
// master crashed at once and restarted after its successor serves.
func TestStepDownThenStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startHandOverCell(t)
		// Well under the 0.8 s master lease that a lost hand-over makes the
		// cell wait out.
		const budget = 100 * time.Millisecond
		judged := 0
		for round := 0; round < 5; round++ {
			old, err := c.WaitMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // steady state
			t0 := time.Now()
			if err := old.StepDown(ctx, 0); err != nil {
				t.Fatalf("round %d: StepDown at %d: %v", round, old.ID(), err)
			}
			c.Crash(old.ID())
			var next *cell.Replica
			for deadline := t0.Add(3 * time.Second); next == nil && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				next = c.Master()
			}
			if next == nil {
				t.Fatalf("round %d: no master within 3s of replica %d's step-down and stop", round, old.ID())
			}
			took := time.Since(t0)
			t.Logf("round %d: replica %d stepped down and stopped; replica %d served after %v", round, old.ID(), next.ID(), took)
			if took > budget {
				t.Errorf("round %d: replica %d served %v after replica %d stepped down and stopped; want within %v (the hand-over was lost and the cell waited out the lease)",
					round, next.ID(), took, old.ID(), budget)
			}
			judged++
			c.Restart(old.ID())
		}
		if judged < 5 {
			t.Fatalf("judged %d hand-overs, want 5", judged)
		}
	})
}
