package celltest_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// A waiter that cancels its Acquire at about the moment the holder releases
// the lock, while the master steps down, must not leave the lock held by
// its session: the release carries the grant to the head waiter (the
// cancelled one), the old master applies it while it finishes what is in
// Paxos, and its own give-back of the grant is refused because the role
// ended. The client gives such a grant back once a newer master answers.
// The cancel moves across the release's round trips, orphanStep further
// each round.
const (
	orphanRounds = 16
	orphanStep   = 150 * time.Microsecond
	// orphanCrashAfter is how long after the cancel the master crashes in
	// the rounds where it crashes instead of stepping down.
	orphanCrashAfter = 700 * time.Microsecond
	// orphanSettle bounds how long the lock may stay held after the new
	// master serves: the waiter's session learns the new epoch and gives
	// the grant back within round trips; the probe looks this long.
	orphanSettle = 3 * time.Second
)

// TestCancelledAcquireAcrossFailover: after each round the lock is free
// again (a third session takes it with TryLock), whatever the moment of
// the cancel, after a step-down or (every fourth round) a crash of the
// master. It must have judged rounds where the grant was really left
// behind: the waiter's client logged giving one back at least once.
func TestCancelledAcquireAcrossFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newOrphanWorld(t)
		cancelled := 0
		for round := 0; round < orphanRounds; round++ {
			path := fmt.Sprintf("/t/orphan%d", round)
			offset := time.Duration(round) * orphanStep
			// Every fourth round the master crashes instead.
			out := w.cancelRound(t, path, offset, round%4 == 3, nil)
			if out.cancelled {
				cancelled++
			}
			if err := w.lockFree(path); err != nil {
				t.Errorf("round %d (cancel %v after the release began): the lock is not free after the cancelled Acquire: %v", round, offset, err)
			}
		}
		gaveBack := w.logs.count(msgGaveBack + finalSuffix)
		t.Logf("%d of %d rounds cancelled the Acquire; the client gave back %d grants left behind at a newer master (%d in all)",
			cancelled, orphanRounds, gaveBack, w.logs.count(msgGaveBack))
		if cancelled < orphanRounds/2 {
			t.Errorf("only %d of %d rounds cancelled the Acquire; want at least %d", cancelled, orphanRounds, orphanRounds/2)
		}
		if gaveBack < 1 && !t.Failed() {
			t.Errorf("no round left a grant behind for a newer master to give back: the test judged nothing")
		}
	})
}

// TestReacquireAfterCancelledAcquireKept: as TestCancelledAcquireAcrossFailover,
// but right after the cancel, before the step-down, the waiter's session
// acquires the lock again, through the same handle in even rounds and
// through another handle in odd ones. That Acquire is retried at the new
// master, finds the grant left behind and takes it over ("already holds"),
// or gets the lock anew: either way it must keep it. Once the cell has
// settled (the client has looked at the lock), its Lock's context is live,
// its sequencer checks valid, and a third session cannot take the lock
// until it is released. It must have judged rounds where the grant left
// behind was taken over: the client logged finding it owned at least once.
func TestReacquireAfterCancelledAcquireKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newOrphanWorld(t)
		judged := 0
		for round := 0; round < orphanRounds; round++ {
			path := fmt.Sprintf("/t/again%d", round)
			offset := time.Duration(round) * orphanStep
			via := func(h *client.Handle) *client.Handle { return h }
			if round%2 == 1 {
				via = func(*client.Handle) *client.Handle {
					h2, err := w.waiter.Open(w.ctx, path, client.OpenOptions{})
					if err != nil {
						t.Fatalf("round %d: opening a second handle: %v", round, err)
					}
					return h2
				}
			}
			out := w.cancelRound(t, path, offset, false, via)
			if out.again == nil {
				continue // the first Acquire won: nothing to judge
			}
			judged++
			time.Sleep(orphanSettle)
			again := out.again
			if err := again.Err(); err != nil {
				t.Errorf("round %d (cancel %v after the release began): the second Acquire lost its lock: %v", round, offset, err)
			}
			if ok, reason, err := w.other.CheckSequencer(w.ctx, again.Sequencer()); err != nil || !ok {
				t.Errorf("round %d (cancel %v after the release began): the second Acquire's sequencer (generation %d) is not valid: %q %v",
					round, offset, again.Generation(), reason, err)
			}
			if l, err := client.NewMutex(w.other, path).TryLock(w.ctx); err == nil {
				t.Errorf("round %d (cancel %v after the release began): another session took the lock the second Acquire holds (generation %d; the other's %d)",
					round, offset, again.Generation(), l.Generation())
				_ = l.Release(w.ctx)
			} else if !errors.Is(err, client.ErrLocked) {
				t.Fatalf("round %d: probe: %v", round, err)
			}
			if err := again.Release(w.ctx); err != nil {
				t.Errorf("round %d (cancel %v after the release began): releasing the second Acquire's lock: %v", round, offset, err)
			}
			if err := w.lockFree(path); err != nil {
				t.Errorf("round %d (cancel %v after the release began): the lock is not free after the second Acquire's release: %v", round, offset, err)
			}
		}
		owned, tookOver := w.logs.count(msgOwned+finalSuffix), w.logs.count(msgTookOver)
		t.Logf("%d of %d rounds acquired again after the cancel; %d took a grant left behind over; %d looks at a newer master found the grant owned (%d looks in all)",
			judged, orphanRounds, tookOver, owned, w.logs.count(msgOwned))
		if judged < orphanRounds/2 {
			t.Errorf("only %d of %d rounds acquired again after a cancel; want at least %d", judged, orphanRounds, orphanRounds/2)
		}
		if (tookOver < 1 || owned < 1) && !t.Failed() {
			t.Errorf("no second Acquire took a grant left behind over (%d), or no look at a newer master found one owned (%d): the test judged nothing", tookOver, owned)
		}
	})
}

// The waiter's client's log messages the tests count (client/lock.go).
const (
	msgGaveBack = "client: gave back a grant a cancelled Acquire left behind"
	msgOwned    = "client: the grant a cancelled Acquire may have left is owned by a later Acquire"
	msgTookOver = "client: Acquire found the lock held by the session already and took the grant over"
)

type orphanWorld struct {
	c                     *celltest.Cell
	ctx                   context.Context
	holder, waiter, other *client.Session
	logs                  *countingLog
}

func newOrphanWorld(t *testing.T) *orphanWorld {
	c, ctx := startHandOverCell(t)
	w := &orphanWorld{c: c, ctx: ctx, logs: &countingLog{n: map[string]int{}}}
	session := func(name string, log *slog.Logger) *client.Session {
		cfg := c.ClientConfig("", name)
		if log != nil {
			cfg.Logger = log
		}
		s, err := c.Dial(ctx, cfg).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	w.holder = session("holder", nil)
	w.waiter = session("waiter", slog.New(w.logs))
	w.other = session("other", nil)
	return w
}

// roundOutcome is what cancelRound saw.
type roundOutcome struct {
	// cancelled: the waiter's Acquire ended with its context's error.
	cancelled bool
	// again is the lock of the second Acquire, if one was made.
	again *client.Lock
}

// cancelRound has the holder take path's lock and the waiter queue for it
// through a handle; then the holder releases it, offset later the waiter
// cancels, and the master steps down (or, with crash, crashes, to be
// restarted once the next master serves). If via is set, the waiter's session
// acquires the lock again right after the cancel, through the handle via
// returns (given the first), and that Acquire's lock is returned. A waiter
// granted the lock before its cancel releases it.
func (w *orphanWorld) cancelRound(t *testing.T, path string, offset time.Duration, crash bool, via func(*client.Handle) *client.Handle) roundOutcome {
	t.Helper()
	ctx := w.ctx
	old, err := w.c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, err := client.NewMutex(w.holder, path).Lock(ctx)
	if err != nil {
		t.Fatalf("%s: holder: %v", path, err)
	}
	h, err := w.waiter.Open(ctx, path, client.OpenOptions{})
	if err != nil {
		t.Fatalf("%s: open: %v", path, err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	type result struct {
		l   *client.Lock
		err error
	}
	first := make(chan result, 1)
	go func() {
		l, err := h.Acquire(wctx, api.LockExclusive)
		first <- result{l, err}
	}()
	time.Sleep(20 * time.Millisecond) // queued at the master
	released := make(chan error, 1)
	go func() { released <- held.Release(ctx) }()
	time.Sleep(offset)
	wcancel()
	var second chan result
	if via != nil {
		second = make(chan result, 1)
		h2 := via(h)
		go func() {
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			l, err := h2.Acquire(actx, api.LockExclusive)
			second <- result{l, err}
		}()
	}
	if crash {
		// Late enough that the grant may be chosen and the old master's
		// own give-back not yet.
		time.Sleep(orphanCrashAfter)
		w.c.Crash(old.ID())
	} else if err := old.StepDown(ctx, 0); err != nil {
		t.Fatalf("%s: StepDown at %d: %v", path, old.ID(), err)
	}
	if _, err := w.c.WaitMaster(ctx); err != nil {
		t.Fatal(err)
	}
	if crash {
		w.c.Restart(old.ID())
	}
	if err := <-released; err != nil {
		// A Release whose reply was lost in the step-down: the retry
		// names the generation, so it frees at most this grant.
		if err := held.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("%s: the holder's release: %v", path, err)
		}
	}
	var out roundOutcome
	r := <-first
	switch {
	case r.err == nil:
		// The grant won the race with the cancel.
		if second != nil {
			if s := <-second; s.err == nil {
				// The second Acquire found the first's grant ("already
				// holds"): two Locks of one grant; release it once.
				_ = s.l.Release(ctx)
			}
			second = nil
		}
		if err := r.l.Release(ctx); err != nil && !errors.Is(err, client.ErrNotHeld) {
			t.Fatalf("%s: releasing the grant: %v", path, err)
		}
	case errors.Is(r.err, context.Canceled):
		out.cancelled = true
	default:
		t.Fatalf("%s: the cancelled Acquire returned %v", path, r.err)
	}
	if second != nil {
		s := <-second
		if s.err != nil {
			t.Fatalf("%s: the second Acquire: %v", path, s.err)
		}
		out.again = s.l
	}
	return out
}

// lockFree reports nil once a third session takes path's lock with
// TryLock (and gives it back), or the last refusal after orphanSettle.
func (w *orphanWorld) lockFree(path string) error {
	probe := client.NewMutex(w.other, path)
	deadline := time.Now().Add(orphanSettle)
	for {
		l, err := probe.TryLock(w.ctx)
		if err == nil {
			return l.Release(w.ctx)
		}
		if !errors.Is(err, client.ErrLocked) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finalSuffix marks the count of a message's records with final=true
// (an answer from a master newer than the cancelled Acquire).
const finalSuffix = " (final)"

// countingLog is a slog.Handler that counts records by message, and
// those with the attribute final=true apart.
type countingLog struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countingLog) Enabled(context.Context, slog.Level) bool { return true }

func (c *countingLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "client: ") {
		return nil
	}
	final := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "final" {
			final = a.Value.Bool()
		}
		return true
	})
	c.mu.Lock()
	c.n[r.Message]++
	if final {
		c.n[r.Message+finalSuffix]++
	}
	c.mu.Unlock()
	return nil
}

func (c *countingLog) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *countingLog) WithGroup(string) slog.Handler      { return c }

func (c *countingLog) count(msg string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[msg]
}
