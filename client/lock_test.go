package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

// TestTryLockHeld: TryLock on a held mutex fails at once with ErrLocked
// (and api.ErrLocked), without waiting; after Unlock it succeeds. It runs
// on celltest in simulated time, as do the other tests of this file.
func TestTryLockHeld(t *testing.T) {
	synctest.Test(t, testTryLockHeld)
}

func testTryLockHeld(t *testing.T) {
	tc := startSimCell(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := simSession(t, ctx, tc, "alice")
	b := simSession(t, ctx, tc, "bob")
	ma := client.NewMutex(a, "/t/m")
	mb := client.NewMutex(b, "/t/m")
	la, err := ma.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A TryLock that waited would block until tryCtx ends; it must return
	// ErrLocked instead.
	tryCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := mb.TryLock(tryCtx); !errors.Is(err, client.ErrLocked) || !errors.Is(err, api.ErrLocked) {
		t.Fatalf("TryLock on a held mutex: %v; want ErrLocked", err)
	}
	if tryCtx.Err() != nil {
		t.Fatal("TryLock waited for its context")
	}
	if _, err := ma.TryLock(ctx); !errors.Is(err, api.ErrFailedPrecondition) {
		t.Fatalf("TryLock by the holder: %v; want FailedPrecondition", err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if context.Cause(la.Context()) != client.ErrReleased {
		t.Fatalf("lock context cause after Release: %v", context.Cause(la.Context()))
	}
	if ma.Held() != nil {
		t.Fatal("Mutex.Held returns a released grant")
	}
	lb, err := mb.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Release: %v", err)
	}
	if lb.Generation() <= la.Generation() {
		t.Fatalf("generation %d after %d", lb.Generation(), la.Generation())
	}
	if err := la.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("a second Release of a released grant: %v; want ErrNotHeld", err)
	}
	if lb.Err() != nil {
		t.Fatalf("a stale Release of alice's old grant touched bob's: %v", lb.Err())
	}
}

// TestCancelledAcquireLeavesNoWaiter: an Acquire waiting behind a holder
// and then cancelled leaves no waiter at the master and gets no grant: when
// the holder releases, a third session takes the lock at once.
func TestCancelledAcquireLeavesNoWaiter(t *testing.T) {
	synctest.Test(t, testCancelledAcquireLeavesNoWaiter)
}

func testCancelledAcquireLeavesNoWaiter(t *testing.T) {
	tc := startSimCell(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a := simSession(t, ctx, tc, "alice")
	b := simSession(t, ctx, tc, "bob")
	c := simSession(t, ctx, tc, "carol")
	la, err := client.NewMutex(a, "/t/q").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Open(ctx, "/t/q", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancelB := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		_, err := hb.Acquire(bctx, api.LockExclusive)
		errc <- err
	}()
	waitWaiters(t, ctx, tc, 1)
	cancelB()
	if err := recv(t, ctx, "the cancelled Acquire to return", errc); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v; want context.Canceled", err)
	}
	waitWaiters(t, ctx, tc, 0)
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NewMutex(c, "/t/q").TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the holder released and the waiter cancelled: %v", err)
	}
	if _, err := hb.Sequencer(ctx); !errors.Is(err, api.ErrFailedPrecondition) {
		t.Fatalf("the cancelled session holds the lock: %v", err)
	}
}

// waitWaiters waits until the master has n blocked Acquire calls.
func waitWaiters(t *testing.T, ctx context.Context, tc interface{ Master() *cell.Replica }, n int) {
	t.Helper()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if m := tc.Master(); m != nil && m.Status().LockWaiters == n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the master never had %d waiters", n)
		case <-tick.C:
		}
	}
}

// TestStaleReleaseFreesNothing: releasing an old grant (an older
// generation) after the same session took the lock again frees nothing.
func TestStaleReleaseFreesNothing(t *testing.T) {
	synctest.Test(t, testStaleReleaseFreesNothing)
}

func testStaleReleaseFreesNothing(t *testing.T) {
	tc := startSimCell(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := simSession(t, ctx, tc, "alice")
	b := simSession(t, ctx, tc, "bob")
	h, err := a.Open(ctx, "/t/s", client.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	l1, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	if err := l1.Release(ctx); !errors.Is(err, client.ErrNotHeld) {
		t.Fatalf("stale Release: %v; want ErrNotHeld", err)
	}
	if _, err := client.NewMutex(b, "/t/s").TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("after a stale release another session got the lock: %v", err)
	}
	if l2.Context().Err() != nil {
		t.Fatal("the stale release cancelled the current lock's context")
	}
	seq, err := h.Sequencer(ctx)
	if err != nil || seq.Generation != l2.Generation() {
		t.Fatalf("current sequencer %v, %v; want generation %d", seq, err, l2.Generation())
	}
}
