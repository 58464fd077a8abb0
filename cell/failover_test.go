package cell_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestMasterKilled: kill the master; a new master serves within a few
// seconds; the client's session survives with a fail-over event, and its
// lock and sequencer stay valid. The cell runs in-process on simulated
// time (celltest under synctest).
func TestMasterKilled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cfg := c.ClientConfig("", "alice")
		s := newSession(t, ctx, c, cfg)
		h, err := s.Open(ctx, "/t/lock", client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.TryAcquire(ctx, api.LockExclusive)
		if err != nil {
			t.Fatal(err)
		}

		old := c.Master()
		oldEpoch := old.Status().Epoch
		killed := time.Now()
		c.Crash(old.ID())
		nm, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("new master %d serving %v (simulated) after the kill", nm.ID(), time.Since(killed))
		if nm.Status().Epoch <= oldEpoch {
			t.Fatalf("new epoch %d not above old %d", nm.Status().Epoch, oldEpoch)
		}

		// The client hears of the fail-over through its KeepAlive.
		for waitFailover := true; waitFailover; {
			select {
			case ev := <-s.Events():
				waitFailover = ev.Kind != client.EventFailover
			case <-ctx.Done():
				t.Fatal("no fail-over event reached the client")
			}
		}
		// The session, the lock and the sequencer survived. (The Lock's
		// own context was cancelled when the session's local lease ran out
		// before it found the new master, as its doc says: jeopardy, then
		// safe, is Chubby's fail-over as a client sees it.)
		if st := s.State(); st != client.StateSafe {
			t.Fatalf("session after fail-over: %v; want safe", st)
		}
		if ok, why, err := s.CheckSequencer(ctx, l.Sequencer()); err != nil || !ok {
			t.Fatalf("sequencer after fail-over: valid %v (%s), %v; want valid", ok, why, err)
		}
		bob := newSession(t, ctx, c, c.ClientConfig("", "bob"))
		hb, err := bob.Open(ctx, "/t/lock", client.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := hb.TryAcquire(ctx, api.LockExclusive); !errors.Is(err, api.ErrLocked) {
			t.Fatalf("acquire by another session after fail-over: %v; want Locked", err)
		}
		// A request naming the old epoch is refused with Failover.
		conn, err := c.DialReplica(ctx, nm.ID(), *cfg.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var resp api.StatResponse
		err = celltest.Call(ctx, conn, api.MethodGetStat, &api.HandleRequest{Header: api.Header{Session: s.ID(), Epoch: oldEpoch}}, &resp)
		if !errors.Is(err, api.ErrFailover) {
			t.Fatalf("request with the old epoch: %v; want Failover", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("release after fail-over: %v", err)
		}
	})
}

// newSession dials a client with cfg and opens a session on it.
func newSession(t *testing.T, ctx context.Context, c *celltest.Cell, cfg client.Config) *client.Session {
	t.Helper()
	s, err := c.Dial(ctx, cfg).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestIsolatedMasterStopsServing: cut the master off from the others; it
// stops serving when its lease runs out, never overlapping the next master
// (sampled every simulated millisecond across the transition).
func TestIsolatedMasterStopsServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		old, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg := c.ClientConfig("", "alice")
		s := newSession(t, ctx, c, cfg)
		if _, err := s.Open(ctx, "/t/data", client.OpenOptions{Create: true}); err != nil {
			t.Fatal(err)
		}
		// A raw connection to the old master, which the test keeps talking
		// to directly.
		conn, err := c.DialReplica(ctx, old.ID(), *cfg.Certificate)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		epoch := s.Epoch()
		c.Partition([]uint64{old.ID()}, others(c, old.ID()))
		deadline := time.Now().Add(20 * time.Second)
		var sawNew bool
		for time.Now().Before(deadline) && !sawNew {
			ms := c.Masters()
			for _, m := range ms {
				sawNew = sawNew || m.ID() != old.ID()
			}
			if len(ms) > 1 {
				t.Fatalf("two replicas serve as master at once")
			}
			time.Sleep(time.Millisecond)
		}
		if !sawNew {
			t.Fatal("no new master within 20s of isolating the old one")
		}
		if old.Status().Master {
			t.Fatal("the isolated master still serves")
		}
		// Reads at the old master are refused now that its lease is gone.
		var resp api.ContentsResponse
		err = celltest.Call(ctx, conn, api.MethodGetContentsAndStat, &api.HandleRequest{Header: api.Header{Session: s.ID(), Epoch: epoch}}, &resp)
		if !errors.Is(err, api.ErrNotMaster) {
			t.Fatalf("read at the isolated old master: %v; want NotMaster", err)
		}
		c.Heal()
		// The old master rejoins as a follower and catches up; the
		// session follows the fail-over by itself.
		if _, err := s.Open(ctx, "/t/after-heal", client.OpenOptions{Create: true}); err != nil {
			t.Fatal(err)
		}
		if err := c.WaitConverged(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// others returns the replica ids of c other than id.
func others(c *celltest.Cell, id uint64) []uint64 {
	var out []uint64
	for _, x := range c.IDs() {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// waitConverged waits until every running replica applied the same slot
// and holds the same state checksum; it fails the test, listing each
// replica's progress, if they still differ when ctx ends.
func waitConverged(t *testing.T, ctx context.Context, lc *celltest.Cell) {
	t.Helper()
	if err := lc.WaitConverged(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSessionExpiryLockDelay: a client that stops its KeepAlives loses its
// session after the lease; its lock is released and lock-delay holds others
// back. A normal release has no delay. Default session lease, on simulated
// time.
func TestSessionExpiryLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 60*time.Second)
		a := newTestClient(t, lc, "t", "alice")
		a.createSession(ctx)
		const delay = 3 * time.Second
		resp, err := a.open(ctx, api.OpenRequest{Path: "/t/delayed", Create: true, LockDelay: int64(delay)})
		if err != nil {
			t.Fatal(err)
		}
		grant, err := a.acquire(ctx, resp.Handle, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		b := newTestClient(t, lc, "t", "bob")
		b.createSession(ctx)
		bEvents := make(chan api.Event, 16)
		go b.keepAliveLoop(ctx, bEvents)
		hb := b.mustOpen(ctx, "/t/delayed")

		// Alice sends no KeepAlive: her session expires; the lock enters
		// lock-delay rather than going to Bob at once.
		var sawDelay bool
		for {
			_, err := b.acquire(ctx, hb, api.LockExclusive, false)
			if err == nil {
				break
			}
			if errors.Is(err, api.ErrLockDelay) {
				sawDelay = true
			} else if !errors.Is(err, api.ErrLocked) {
				t.Fatalf("acquire while waiting for expiry: %v", err)
			}
			if ctx.Err() != nil {
				t.Fatal("Bob never got the lock")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !sawDelay {
			t.Fatal("the lock of an expired session went to another session with no lock-delay")
		}
		if chk, err := b.checkSequencer(ctx, grant.Sequencer); err != nil || chk.Valid {
			t.Fatalf("expired holder's sequencer: %+v, %v; want invalid", chk, err)
		}
		if _, err := a.getContents(ctx, resp.Handle); !errors.Is(err, api.ErrSessionExpired) {
			t.Fatalf("call on the expired session: %v; want SessionExpired", err)
		}

		// A normal release: no delay.
		h2 := b.mustOpen(ctx, "/t/plain")
		g, err := b.acquire(ctx, h2, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.release(ctx, h2, g.Generation); err != nil {
			t.Fatal(err)
		}
		c := newTestClient(t, lc, "t", "carol")
		c.createSession(ctx)
		h3 := c.mustOpen(ctx, "/t/plain")
		if _, err := c.acquire(ctx, h3, api.LockExclusive, false); err != nil {
			t.Fatalf("acquire right after a normal release: %v; want no lock-delay", err)
		}
	})
}

// TestRestartCatchUp: a replica stopped while the cell moves on restarts
// from its data dir and catches up — through a snapshot when the log it
// needs was compacted.
func TestRestartCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3, Tune: func(c *cell.Config) { c.SnapshotEvery = 20 }})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		m, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		follower := others(c, m.ID())[0]
		c.Crash(follower)
		s := newSession(t, ctx, c, c.ClientConfig("", "alice"))
		h, err := s.Open(ctx, "/t/counter", client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 60; i++ {
			if _, err := h.SetContents(ctx, []byte{byte(i)}); err != nil {
				t.Fatal(err)
			}
		}
		if st := c.Master().Status(); st.Compacted == 0 {
			t.Fatalf("the master did not compact its log (status %+v)", st)
		}
		c.Restart(follower)
		if err := c.WaitConverged(ctx); err != nil {
			t.Fatal(err)
		}
		if st := c.Replica(follower).Status(); st.Compacted == 0 {
			t.Fatalf("the restarted replica caught up without a snapshot (status %+v)", st)
		}
	})
}

// TestFIFOWaiters: ten sessions wait for one lock; grants follow arrival
// order, and a waiter that cancels leaves no trace. The cell runs
// in-process on simulated time, so the master keeps its role however
// loaded the machine is.
func TestFIFOWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 60*time.Second)
		holder := newTestClient(t, lc, "t", "holder")
		holder.createSession(ctx)
		h := holder.mustOpen(ctx, "/t/queue")
		g, err := holder.acquire(ctx, h, api.LockExclusive, false)
		if err != nil {
			t.Fatal(err)
		}
		const n = 10
		const canceled = 4
		order := make(chan int, n)
		var wg sync.WaitGroup
		cancelCtx, cancelOne := context.WithCancel(ctx)
		for i := 0; i < n; i++ {
			w := newTestClient(t, lc, "t", "waiter")
			w.createSession(ctx)
			go w.keepAliveLoop(ctx, make(chan api.Event, 16))
			hw := w.mustOpen(ctx, "/t/queue")
			wctx := ctx
			if i == canceled {
				wctx = cancelCtx
			}
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				gw, err := w.acquire(wctx, hw, api.LockExclusive, true)
				if err != nil {
					if i != canceled {
						t.Errorf("waiter %d: %v", i, err)
					}
					return
				}
				order <- i
				if err := w.release(ctx, hw, gw.Generation); err != nil {
					t.Errorf("waiter %d release: %v", i, err)
				}
			}(i)
			// Wait until this waiter is queued so arrival order is known.
			for lc.Master().Status().LockWaiters != i+1 {
				if ctx.Err() != nil {
					t.Fatal("waiter never queued")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		cancelOne()
		for lc.Master().Status().LockWaiters != n-1 {
			if ctx.Err() != nil {
				t.Fatal("the canceled waiter stayed in the queue")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := holder.release(ctx, h, g.Generation); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(order)
		want := 0
		for got := range order {
			if want == canceled {
				want++
			}
			if got != want {
				t.Fatalf("grant order: got waiter %d, want %d", got, want)
			}
			want++
		}
		if want != n {
			t.Fatalf("only %d waiters were granted", want)
		}
		if st := lc.Master().Status(); st.LockWaiters != 0 {
			t.Fatalf("%d waiters left behind", st.LockWaiters)
		}
	})
}
