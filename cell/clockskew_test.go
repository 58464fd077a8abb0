package cell_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/transport"
)

// TestLockDelayAcrossSkewedMasters: replica 2's wall clock is five minutes
// ahead, replica 3's five minutes behind, replica 1's right. Three times a
// holder's session expires holding a lock with lock-delay and, while the
// delay runs, the master changes: 1 → 2 (ahead), 2 → 3 (ten minutes
// behind the stamps 2 made), 3 → 1. Each time nobody gets the lock before
// the delay has passed on the test's monotonic clock, counted from Bob's
// last attempt that still found the lock held (the expiry came after it),
// and Bob gets it well within minutes of that (a stamp that stood still
// for the skew would hold it that long). The cell's time, read from
// modification stamps and every replica's applied clock, never goes back.
func TestLockDelayAcrossSkewedMasters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 4 * time.Second
		skew := map[uint64]time.Duration{1: 0, 2: 5 * time.Minute, 3: -5 * time.Minute}
		// The clocks are skewed once the cell is up, so that its time starts
		// from the host's whichever replica is master first.
		var skewed atomic.Bool
		lc := simCell(t, 3, func(c *cell.Config) {
			d := skew[c.ID]
			cell.SetWallClock(c, func() time.Time {
				if skewed.Load() {
					return time.Now().Add(d)
				}
				return time.Now()
			})
		})
		ctx := testCtx(t, 150*time.Second)
		failOverTo(t, ctx, lc, 1)
		skewed.Store(true)

		bob := newTestClient(t, lc, "t", "bob")
		bob.createSession(ctx)
		kaCtx, stopKA := context.WithCancel(ctx)
		kaDone := make(chan struct{})
		go func() { defer close(kaDone); bob.keepAliveLoop(kaCtx, make(chan api.Event, 64)) }()
		defer func() { stopKA(); <-kaDone }()

		// The cell's time as Bob's writes and the replicas' applied clocks show
		// it; it must never go back.
		stamps := bob.mustOpen(ctx, "/t/stamps")
		var lastStamp int64
		clocks := map[uint64]int64{}
		observe := func(what string) int64 {
			t.Helper()
			st := bobRetry(t, ctx, bob, func() (api.StatResponse, error) { return bob.setContents(ctx, stamps, []byte(what)) })
			if st.Stat.Modified < lastStamp {
				t.Fatalf("%s: the cell's time went back %v (modified %v after %v)", what,
					time.Duration(lastStamp-st.Stat.Modified), time.Unix(0, st.Stat.Modified).UTC(), time.Unix(0, lastStamp).UTC())
			}
			lastStamp = st.Stat.Modified
			for _, r := range lc.Running() {
				c, err := r.CellClock()
				if err != nil {
					t.Fatal(err)
				}
				if c < clocks[r.ID()] {
					t.Fatalf("%s: replica %d's applied clock went back %v", what, r.ID(), time.Duration(clocks[r.ID()]-c))
				}
				clocks[r.ID()] = c
			}
			return st.Stat.Modified
		}
		observe("start")

		for i, step := range []struct{ from, to uint64 }{{1, 2}, {2, 3}, {3, 1}} {
			path := fmt.Sprintf("/t/lock%d", i)
			failOverTo(t, ctx, lc, step.from)
			observe(fmt.Sprintf("step %d under %d", i, step.from))
			h := newTestClient(t, lc, "t", fmt.Sprintf("holder%d", i))
			h.createSession(ctx)
			resp, err := h.open(ctx, api.OpenRequest{Path: path, Create: true, LockDelay: int64(delay)})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h.acquire(ctx, resp.Handle, api.LockExclusive, false); err != nil {
				t.Fatal(err)
			}
			// The holder falls silent; Bob tries until its session has expired.
			hb := bob.mustOpen(ctx, path)
			var lastHeld time.Time
			for {
				sent := time.Now()
				_, err := bob.acquire(ctx, hb, api.LockExclusive, false)
				if errors.Is(err, api.ErrLocked) {
					lastHeld = sent
				} else if errors.Is(err, api.ErrLockDelay) {
					break
				} else if err == nil {
					t.Fatalf("step %d: Bob got the lock without a lock-delay", i)
				} else if !transient(err) {
					t.Fatalf("step %d: acquire while the holder lives: %v", i, err)
				}
				pause(ctx, 20*time.Millisecond)
			}
			if lastHeld.IsZero() {
				t.Fatalf("step %d: the holder's session expired before Bob first tried", i)
			}
			if m := lc.Master(); m == nil || m.ID() != step.from {
				t.Fatalf("step %d: the expiry was not under replica %d", i, step.from)
			}
			// The delay runs; the master changes.
			failOverTo(t, ctx, lc, step.to)
			var granted time.Time
			sawDelayAtNew := false
			for granted.IsZero() {
				_, err := bob.acquire(ctx, hb, api.LockExclusive, false)
				switch {
				case err == nil:
					granted = time.Now()
				case errors.Is(err, api.ErrLockDelay):
					if m := lc.Master(); m != nil && m.ID() == step.to {
						sawDelayAtNew = true
					}
				case !transient(err):
					t.Fatalf("step %d: acquire during the lock-delay: %v", i, err)
				}
				if waited := time.Since(lastHeld); granted.IsZero() && waited > delay+45*time.Second {
					t.Fatalf("step %d: lock-delay of %v, but nobody got the lock %v after the expiry (under %d, then %d)",
						i, delay, waited.Round(time.Millisecond), step.from, step.to)
				}
				pause(ctx, 20*time.Millisecond)
			}
			// The expiry was applied after Bob's last attempt that found the
			// lock held; allow 50 ms for it having been stamped just before
			// that attempt reached the master.
			if waited := granted.Sub(lastHeld); waited < delay-50*time.Millisecond {
				t.Fatalf("step %d: Bob got the lock %v after the holder still held it, within its lock-delay of %v (expired under %d, granted under %d)",
					i, waited.Round(time.Millisecond), delay, step.from, step.to)
			}
			if !sawDelayAtNew {
				t.Fatalf("step %d: replica %d served only after the lock-delay had ended: the step tested nothing", i, step.to)
			}
			t.Logf("step %d: expired under %d (skew %v), granted under %d (skew %v) %v after the last held attempt (lock-delay %v)",
				i, step.from, skew[step.from], step.to, skew[step.to], granted.Sub(lastHeld).Round(time.Millisecond), delay)
			g, err := bob.acquire(ctx, hb, api.LockExclusive, false)
			if !errors.Is(err, api.ErrFailedPrecondition) {
				t.Fatalf("step %d: Bob's lock is not held by Bob (%v, %v)", i, g, err)
			}
			now := observe(fmt.Sprintf("step %d granted under %d", i, step.to))
			if step.to == 2 {
				// No lock-delay runs now: replica 2's stamps follow its wall
				// clock, five minutes ahead.
				if off := time.Duration(now - time.Now().UnixNano()); off < 4*time.Minute || off > 6*time.Minute {
					t.Fatalf("step %d: replica 2 stamps %v off the host's clock once no lock-delay runs; want about +5m", i, off.Round(time.Second))
				}
			}
		}
		waitConverged(t, ctx, lc)
	})
}

// failOverTo makes replica id the master by planned hand-overs.
func failOverTo(t *testing.T, ctx context.Context, lc *celltest.Cell, id uint64) {
	t.Helper()
	for i := 0; ; i++ {
		m, err := lc.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID() == id {
			return
		}
		if i == 20 {
			t.Fatalf("replica %d did not become master after %d hand-overs", id, i)
		}
		if err := m.StepDown(ctx, id); err != nil {
			t.Logf("step down %d: %v", m.ID(), err)
		}
	}
}

// transient reports whether err is what a client sees while the master
// changes (it retries after re-establishing its session).
func transient(err error) bool {
	return errors.Is(err, api.ErrNotMaster) || errors.Is(err, api.ErrFailover) || errors.Is(err, api.ErrUnavailable) ||
		errors.Is(err, transport.ErrConnClosed) || errors.Is(err, context.DeadlineExceeded)
}

// bobRetry runs call until it succeeds or fails with a non-transient error.
func bobRetry[T any](t *testing.T, ctx context.Context, c *testClient, call func() (T, error)) T {
	t.Helper()
	for {
		v, err := call()
		if err == nil {
			return v
		}
		if !transient(err) || ctx.Err() != nil {
			t.Fatal(err)
		}
		pause(ctx, 20*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
