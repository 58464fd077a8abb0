package cell_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

// heldOutcome is the outcome of a head waiter's Acquire, held back from
// the master by a test until it calls deliver.
type heldOutcome struct {
	err     error
	gone    <-chan struct{}
	deliver func()
}

// holdHeadOutcome returns a Tune that makes the master hand the first
// outcome of an Acquire it proposes for path's head waiter that hold
// accepts to the returned channel instead of handling it (every other
// outcome is handled at once).
func holdHeadOutcome(path string, hold func(err error) bool) (func(*cell.Config), <-chan heldOutcome) {
	held := make(chan heldOutcome, 1)
	var taken atomic.Bool
	tune := func(c *cell.Config) {
		cell.SetHeadOutcomeHook(c, func(p string, err error, gone <-chan struct{}, deliver func()) {
			if p == path && hold(err) && taken.CompareAndSwap(false, true) {
				held <- heldOutcome{err, gone, deliver} // buffered, sent once
				return
			}
			deliver()
		})
	}
	return tune, held
}

// cancelWhileInPaxos starts a blocking Acquire of h by c, takes the
// outcome of its Acquire in Paxos from held, cancels the call, and returns
// the held outcome once the master has seen the cancellation (gone).
func cancelWhileInPaxos(t *testing.T, ctx context.Context, c *testClient, h api.Handle, held <-chan heldOutcome) heldOutcome {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := c.acquire(wctx, h, api.LockExclusive, true)
		errc <- err
	}()
	var out heldOutcome
	select {
	case out = <-held:
	case <-ctx.Done():
		t.Fatal("the waiter's Acquire never reached its outcome")
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v; want context.Canceled", err)
	}
	select {
	case <-out.gone:
	case <-ctx.Done():
		t.Fatal("the master never saw the Acquire's cancellation")
	}
	return out
}

// TestCancelledWaiterLockedOutcome: a blocked Acquire cancelled while its
// Acquire is in Paxos, which then comes back Locked, leaves the queue as
// that outcome arrives (a cancelled Acquire leaves nothing behind); the
// next session takes the lock as soon as the holder releases. The
// interleaving is forced: the outcome is held back until the master has
// seen the cancellation.
func TestCancelledWaiterLockedOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tune, held := holdHeadOutcome("/t/q", func(err error) bool { return errors.Is(err, api.ErrLocked) })
		lc := simCell(t, 3, tune)
		ctx := testCtx(t, 60*time.Second)
		var wg sync.WaitGroup
		kaCtx, stopKA := context.WithCancel(ctx)
		defer func() { stopKA(); wg.Wait() }()
		clients := map[string]*testClient{}
		for _, name := range []string{"alice", "bob", "carol"} {
			c := newTestClient(t, lc, "t", name)
			c.createSession(ctx)
			wg.Add(1)
			go func() { defer wg.Done(); c.keepAliveLoop(kaCtx, make(chan api.Event, 16)) }()
			clients[name] = c
		}
		ha := clients["alice"].mustOpen(ctx, "/t/q")
		ga, err := clients["alice"].acquire(ctx, ha, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		hb := clients["bob"].mustOpen(ctx, "/t/q")
		out := cancelWhileInPaxos(t, ctx, clients["bob"], hb, held)
		if !errors.Is(out.err, api.ErrLocked) {
			t.Fatalf("held outcome %v; want Locked", out.err)
		}
		m := lc.Master()
		if n := m.Status().LockWaiters; n != 1 {
			t.Fatalf("%d waiters while the cancelled waiter's Acquire is in Paxos; want 1 (the interleaving was not forced)", n)
		}
		out.deliver()
		if n := m.Status().LockWaiters; n != 0 {
			t.Fatalf("%d waiters after the cancelled waiter's Locked outcome; want 0", n)
		}
		if err := clients["alice"].release(ctx, ha, ga.Generation); err != nil {
			t.Fatal(err)
		}
		hc := clients["carol"].mustOpen(ctx, "/t/q")
		if _, err := clients["carol"].acquire(ctx, hc, api.LockExclusive, false); err != nil {
			t.Fatalf("TryAcquire after the holder released and the waiter cancelled: %v", err)
		}
	})
}

// TestCancelledWaiterGrantReleased: a blocked Acquire cancelled while its
// Acquire is in Paxos, which then comes back granted, leaves the queue and
// the master gives the grant back: another session's blocked Acquire gets
// the lock. The interleaving is forced as above.
func TestCancelledWaiterGrantReleased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tune, held := holdHeadOutcome("/t/q", func(err error) bool { return err == nil })
		lc := simCell(t, 3, tune)
		ctx := testCtx(t, 60*time.Second)
		var wg sync.WaitGroup
		kaCtx, stopKA := context.WithCancel(ctx)
		defer func() { stopKA(); wg.Wait() }()
		bob := newTestClient(t, lc, "t", "bob")
		bob.createSession(ctx)
		carol := newTestClient(t, lc, "t", "carol")
		carol.createSession(ctx)
		for _, c := range []*testClient{bob, carol} {
			wg.Add(1)
			go func() { defer wg.Done(); c.keepAliveLoop(kaCtx, make(chan api.Event, 16)) }()
		}
		// The lock is free: bob's first Acquire is granted, and held back.
		hb := bob.mustOpen(ctx, "/t/q")
		out := cancelWhileInPaxos(t, ctx, bob, hb, held)
		if out.err != nil {
			t.Fatalf("held outcome %v; want a grant", out.err)
		}
		m := lc.Master()
		out.deliver()
		if n := m.Status().LockWaiters; n != 0 {
			t.Fatalf("%d waiters after the cancelled waiter's grant; want 0", n)
		}
		// The master gives the grant back; carol's blocked Acquire gets it.
		hc := carol.mustOpen(ctx, "/t/q")
		if _, err := carol.acquire(ctx, hc, api.LockExclusive, true); err != nil {
			t.Fatalf("blocked Acquire after the cancelled waiter's grant: %v", err)
		}
	})
}

// TestWaiterGrantedAfterRoleEnded: a blocked Acquire whose grant is applied
// but reaches the lock queues only after the master role ended (a
// step-down) is answered with that grant, not NotMaster: the session holds
// the lock and knows it (another session is refused it at the new master;
// the holder releases it there). Before, the waiter was told NotMaster at
// the step-down and the grant stood unknown until its session ended. The
// interleaving is forced: the grant's outcome is held back across the
// step-down.
func TestWaiterGrantedAfterRoleEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tune, held := holdHeadOutcome("/t/q", func(err error) bool { return err == nil })
		lc := simCell(t, 3, tune)
		ctx := testCtx(t, 60*time.Second)
		var wg sync.WaitGroup
		kaCtx, stopKA := context.WithCancel(ctx)
		defer func() { stopKA(); wg.Wait() }()
		bob := newTestClient(t, lc, "t", "bob")
		bob.createSession(ctx)
		wg.Add(1)
		go func() { defer wg.Done(); bob.keepAliveLoop(kaCtx, make(chan api.Event, 16)) }()
		hb := bob.mustOpen(ctx, "/t/q")
		type acquired struct {
			resp api.SequencerResponse
			err  error
		}
		got := make(chan acquired, 1)
		go func() {
			resp, err := bob.acquire(ctx, hb, api.LockExclusive, true)
			got <- acquired{resp, err}
		}()
		var out heldOutcome
		select {
		case out = <-held:
		case <-ctx.Done():
			t.Fatal("the waiter's Acquire never reached its outcome")
		}
		if out.err != nil {
			t.Fatalf("held outcome %v; want a grant", out.err)
		}
		old := lc.Master()
		if err := old.StepDown(ctx, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case a := <-got:
			t.Fatalf("the waiter was answered (%+v, %v) when the role ended, before its Acquire's outcome", a.resp, a.err)
		default:
		}
		out.deliver()
		a := <-got
		if a.err != nil || a.resp.Generation == 0 {
			t.Fatalf("the waiter granted after the role ended got %+v, %v; want the grant", a.resp, a.err)
		}

		// The new master knows bob holds it: carol is refused it until bob
		// releases it there.
		cl := lc.Dial(ctx, lc.ClientConfig("", "carol"))
		carol, err := cl.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hc, err := carol.Open(ctx, "/t/q", client.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if l, err := hc.TryAcquire(ctx, api.LockExclusive); !errors.Is(err, client.ErrLocked) {
			t.Fatalf("carol's TryAcquire while bob holds the lock: %v, %v; want ErrLocked", l, err)
		}
		bob.resync(ctx)
		if err := bob.call(ctx, api.MethodRelease, &api.ReleaseRequest{Header: bob.header(), Handle: hb, Generation: a.resp.Generation}, &api.Empty{}, true); err != nil {
			t.Fatalf("bob's release of the grant at the new master: %v", err)
		}
		if _, err := hc.TryAcquire(ctx, api.LockExclusive); err != nil {
			t.Fatalf("carol's TryAcquire after bob released: %v", err)
		}
		if m := lc.Master(); m == nil || m.ID() == old.ID() {
			t.Fatalf("the step-down did not move the master role (now %v)", m)
		}
	})
}
