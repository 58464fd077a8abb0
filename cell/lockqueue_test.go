package cell

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// fakeLockPaxos is a lockProposer whose Acquires the test answers by hand
// and whose Releases it records.
type fakeLockPaxos struct {
	mu       sync.Mutex
	acquires []*proposedAcquire
	releases []namespace.Release
	// released holds the done of each release, in order.
	released  []func(namespace.Result, error)
	conflicts []string
	gen       uint64
}

type proposedAcquire struct {
	caller namespace.Caller
	op     namespace.Acquire
	queued bool
	done   func(namespace.Result, error)
}

func (f *fakeLockPaxos) acquire(caller namespace.Caller, op *namespace.Acquire, queued bool, done func(namespace.Result, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acquires = append(f.acquires, &proposedAcquire{caller, *op, queued, done})
}

func (f *fakeLockPaxos) release(caller namespace.Caller, op *namespace.Release, done func(namespace.Result, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, *op)
	f.released = append(f.released, done)
}

// take returns the Acquires proposed since the last take.
func (f *fakeLockPaxos) take() []*proposedAcquire {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.acquires
	f.acquires = nil
	return out
}

// one returns the single Acquire proposed since the last take, for session
// sess.
func (f *fakeLockPaxos) one(t *testing.T, sess uint64) *proposedAcquire {
	t.Helper()
	got := f.take()
	if len(got) != 1 || got[0].op.Session != sess {
		var ss []uint64
		for _, p := range got {
			ss = append(ss, p.op.Session)
		}
		t.Fatalf("proposed Acquires for sessions %v, want exactly [%d]", ss, sess)
	}
	return got[0]
}

func (f *fakeLockPaxos) takeReleases() []namespace.Release {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.releases
	f.releases = nil
	return out
}

// grant answers p with a grant of a fresh generation and returns it.
func (f *fakeLockPaxos) grant(p *proposedAcquire) uint64 {
	f.mu.Lock()
	f.gen++
	gen := f.gen
	f.mu.Unlock()
	p.done(namespace.Result{Reply: &namespace.Granted{Tenant: p.caller.Tenant, Path: p.op.Path, Mode: p.op.Mode, Generation: gen}}, nil)
	return gen
}

func (f *fakeLockPaxos) locked(p *proposedAcquire) {
	p.done(namespace.Result{Err: apiErr(api.Locked, "held")}, nil)
}

func newTestLockQueues() (*lockQueues, *fakeLockPaxos) {
	f := &fakeLockPaxos{}
	l := newLockQueues(lockDeps{
		prop: f,
		conflict: func(path string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.conflicts = append(f.conflicts, path)
		},
		now: func() (int64, error) { return time.Now().UnixNano(), nil },
	})
	return l, f
}

var lqCaller = namespace.Caller{Tenant: "t", Principal: "p"}

type waitOut struct {
	g   *namespace.Granted
	err error
}

// goWait starts a blocking Acquire of path for sess and lets it queue.
func goWait(ctx context.Context, l *lockQueues, sess uint64, path string, mode api.LockMode) <-chan waitOut {
	ch := make(chan waitOut, 1)
	go func() {
		g, err := l.wait(ctx, lqCaller, sess, path, mode)
		ch <- waitOut{g, err}
	}()
	synctest.Wait()
	return ch
}

func waiting(ch <-chan waitOut) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// Waiters get the lock in arrival order, one Acquire in Paxos at a time,
// and a release wakes only the head.
func TestLockQueuesFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		var ws []<-chan waitOut
		for sess := uint64(1); sess <= 3; sess++ {
			ws = append(ws, goWait(t.Context(), l, sess, "/t/l", api.LockExclusive))
		}
		if n := l.count(); n != 3 {
			t.Fatalf("count = %d, want 3", n)
		}
		// A held lock keeps its head at the head and tells the holders.
		f.locked(f.one(t, 1))
		synctest.Wait()
		if got := f.take(); len(got) != 0 {
			t.Fatalf("a refused head let %d more Acquires into Paxos", len(got))
		}
		if !slices.Equal(f.conflicts, []string{"/t/l"}) {
			t.Fatalf("conflicts told %v, want [/t/l]", f.conflicts)
		}
		for sess := uint64(1); sess <= 3; sess++ {
			if sess > 1 {
				// Only the release of the previous grant wakes the next.
				synctest.Wait()
				if got := f.take(); len(got) != 0 {
					t.Fatalf("session %d's Acquire went to Paxos before the lock was freed", sess)
				}
			}
			l.lockFreed(namespace.FreedLock{Path: "/t/l"})
			synctest.Wait()
			gen := f.grant(f.one(t, sess))
			out := <-ws[sess-1]
			if out.err != nil || out.g == nil || out.g.Generation != gen {
				t.Fatalf("session %d: wait = %+v, %v; want generation %d", sess, out.g, out.err, gen)
			}
		}
		if n := l.count(); n != 0 || l.queued("/t/l") {
			t.Fatalf("count = %d, queued %v after every waiter was served", n, l.queued("/t/l"))
		}
	})
}

// A shared grant lets the run of shared waiters behind it in at once, but
// not the exclusive waiter after them.
func TestLockQueuesSharedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		s1 := goWait(t.Context(), l, 1, "/t/l", api.LockShared)
		s2 := goWait(t.Context(), l, 2, "/t/l", api.LockShared)
		x3 := goWait(t.Context(), l, 3, "/t/l", api.LockExclusive)
		f.grant(f.one(t, 1))
		synctest.Wait()
		f.grant(f.one(t, 2))
		synctest.Wait()
		if got := f.take(); len(got) != 0 {
			t.Fatal("the exclusive waiter went to Paxos behind shared grants")
		}
		for i, ch := range []<-chan waitOut{s1, s2} {
			if out := <-ch; out.err != nil || out.g.Mode != api.LockShared {
				t.Fatalf("shared waiter %d: %+v, %v", i+1, out.g, out.err)
			}
		}
		if !waiting(x3) {
			t.Fatal("the exclusive waiter returned while shared holders hold the lock")
		}
	})
}

// A canceled Acquire leaves nothing behind, whenever it is canceled: no
// waiter in the queue and no lock held by its session.
func TestLockQueuesCancelLeavesNothing(t *testing.T) {
	t.Run("in flight, then granted: released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			ctx, cancel := context.WithCancel(t.Context())
			w1 := goWait(ctx, l, 1, "/t/l", api.LockExclusive)
			p := f.one(t, 1)
			cancel()
			if out := <-w1; !errors.Is(out.err, api.ErrCanceled) {
				t.Fatalf("canceled wait = %+v, %v; want Canceled", out.g, out.err)
			}
			gen := f.grant(p)
			synctest.Wait()
			rel := f.takeReleases()
			if len(rel) != 1 || rel[0].Session != 1 || rel[0].Path != "/t/l" || rel[0].Generation != gen || rel[0].Then != nil {
				t.Fatalf("releases %+v, want one of session 1's generation %d", rel, gen)
			}
			if n := l.count(); n != 0 || l.queued("/t/l") {
				t.Fatalf("count = %d, queued %v: the canceled waiter stayed", n, l.queued("/t/l"))
			}
		})
	})
	t.Run("in flight, then refused: gone, next waiter's turn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			ctx, cancel := context.WithCancel(t.Context())
			w1 := goWait(ctx, l, 1, "/t/l", api.LockExclusive)
			w2 := goWait(t.Context(), l, 2, "/t/l", api.LockExclusive)
			p := f.one(t, 1)
			cancel()
			<-w1
			f.locked(p)
			synctest.Wait()
			if rel := f.takeReleases(); len(rel) != 0 {
				t.Fatalf("releases %+v of a lock that was never granted", rel)
			}
			if n := l.count(); n != 1 {
				t.Fatalf("count = %d, want 1 (session 2 only)", n)
			}
			f.grant(f.one(t, 2))
			if out := <-w2; out.err != nil {
				t.Fatalf("session 2: %v", out.err)
			}
			if n := l.count(); n != 0 || l.queued("/t/l") {
				t.Fatalf("count = %d, queued %v after the last waiter was served", n, l.queued("/t/l"))
			}
		})
	})
	t.Run("queued: never proposed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			goWait(t.Context(), l, 1, "/t/l", api.LockExclusive)
			ctx, cancel := context.WithCancel(t.Context())
			w2 := goWait(ctx, l, 2, "/t/l", api.LockExclusive)
			f.locked(f.one(t, 1))
			cancel()
			<-w2
			if n := l.count(); n != 1 {
				t.Fatalf("count = %d, want 1: the canceled waiter is still queued", n)
			}
			l.lockFreed(namespace.FreedLock{Path: "/t/l"})
			synctest.Wait()
			f.one(t, 1)
		})
	})
	t.Run("granted before the caller looked: released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w := newLockWaiter(lqCaller, 1, api.LockExclusive)
			if err := l.enqueue("/t/l", w); err != nil {
				t.Fatal(err)
			}
			gen := f.grant(f.one(t, 1)) // delivered to w.result
			l.cancel("/t/l", w)         // the caller gave up without reading it
			rel := f.takeReleases()
			if len(rel) != 1 || rel[0].Generation != gen {
				t.Fatalf("releases %+v, want the delivered generation %d", rel, gen)
			}
			if n := l.count(); n != 0 {
				t.Fatalf("count = %d, want 0", n)
			}
		})
	})
	t.Run("try in flight, then granted: released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() {
				_, err := l.try(ctx, lqCaller, 7, "/t/l", api.LockExclusive)
				done <- err
			}()
			synctest.Wait()
			p := f.one(t, 7)
			if p.queued {
				t.Fatal("a try was proposed as a queued (never shed) Acquire")
			}
			cancel()
			<-done
			gen := f.grant(p)
			if rel := f.takeReleases(); len(rel) != 1 || rel[0].Generation != gen || rel[0].Session != 7 {
				t.Fatalf("releases %+v, want session 7's generation %d", rel, gen)
			}
		})
	})
}

// A try never overtakes waiters, and a held lock tells its holders.
func TestLockQueuesTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		goWait(t.Context(), l, 1, "/t/l", api.LockExclusive)
		f.one(t, 1)
		if _, err := l.try(t.Context(), lqCaller, 2, "/t/l", api.LockExclusive); !errors.Is(err, api.ErrLocked) {
			t.Fatalf("try behind a waiter: %v, want Locked", err)
		}
		if got := f.take(); len(got) != 0 {
			t.Fatal("a try behind a waiter was proposed")
		}
		done := make(chan error, 1)
		go func() {
			_, err := l.try(t.Context(), lqCaller, 2, "/t/m", api.LockExclusive)
			done <- err
		}()
		synctest.Wait()
		f.locked(f.one(t, 2))
		if err := <-done; !errors.Is(err, api.ErrLocked) {
			t.Fatalf("try of a held lock: %v, want Locked", err)
		}
		if !slices.Equal(f.conflicts, []string{"/t/m"}) {
			t.Fatalf("conflicts told %v, want [/t/m]", f.conflicts)
		}
	})
}

// A lock-delay retries the head when the delay ends, not before.
func TestLockQueuesLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		w := goWait(t.Context(), l, 1, "/t/l", api.LockExclusive)
		until := time.Now().Add(5 * time.Second).UnixNano()
		f.one(t, 1).done(namespace.Result{Err: &api.Error{Code: api.LockDelay, Msg: "delay", Until: until}}, nil)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if got := f.take(); len(got) != 0 {
			t.Fatal("the head was retried before its lock-delay ended")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		f.grant(f.one(t, 1))
		if out := <-w; out.err != nil {
			t.Fatalf("wait: %v", out.err)
		}
	})
}

// A deleted node fails its waiters; a stopped master fails every waiter
// and every later Acquire.
func TestLockQueuesNodeDeletedAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		goWait(t.Context(), l, 1, "/t/a", api.LockExclusive)
		a2 := goWait(t.Context(), l, 2, "/t/a", api.LockExclusive)
		f.locked(f.one(t, 1))
		l.lockFreed(namespace.FreedLock{Path: "/t/a", NodeDeleted: true})
		if out := <-a2; !errors.Is(out.err, api.ErrNotFound) {
			t.Fatalf("waiter of a deleted node: %v, want NotFound", out.err)
		}

		b1 := goWait(t.Context(), l, 3, "/t/b", api.LockExclusive)
		f.locked(f.one(t, 3)) // b1 waits at the head, no Acquire in flight
		stopErr := apiErr(api.NotMaster, "stopped")
		l.stop(stopErr)
		if out := <-b1; !errors.Is(out.err, api.ErrNotMaster) {
			t.Fatalf("waiter at stop: %v, want NotMaster", out.err)
		}
		synctest.Wait()
		if n := l.count(); n != 0 {
			t.Fatalf("count = %d after stop, want 0", n)
		}
		if _, err := l.wait(t.Context(), lqCaller, 4, "/t/b", api.LockExclusive); !errors.Is(err, api.ErrNotMaster) {
			t.Fatalf("wait after stop: %v, want NotMaster", err)
		}
		if got := f.take(); len(got) != 0 {
			t.Fatal("an Acquire was proposed after stop")
		}
	})
}

// A waiter that joins a queue whose head was told Locked proposes
// nothing; the free of the lock serves the head.
func TestLockQueuesJoinProposesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		w1 := goWait(t.Context(), l, 1, "/t/l", api.LockExclusive)
		f.locked(f.one(t, 1))
		synctest.Wait()
		w2 := goWait(t.Context(), l, 2, "/t/l", api.LockExclusive)
		if got := f.take(); len(got) != 0 {
			t.Fatalf("a waiter joining the queue sent %d Acquires to Paxos", len(got))
		}
		if !slices.Equal(f.conflicts, []string{"/t/l"}) {
			t.Fatalf("conflicts told %v; want one, for the head's Locked", f.conflicts)
		}
		l.lockFreed(namespace.FreedLock{Path: "/t/l"})
		synctest.Wait()
		f.grant(f.one(t, 1))
		if out := <-w1; out.err != nil {
			t.Fatal(out.err)
		}
		if !waiting(w2) {
			t.Fatal("session 2 returned while session 1 holds the lock")
		}
	})
}

// handOverHead queues session 1 behind a held lock (its Acquire comes back
// Locked) and returns its wait and the lock's hand-over to it.
func handOverHead(t *testing.T, l *lockQueues, f *fakeLockPaxos, ctx context.Context) (<-chan waitOut, namespace.Grant, func(namespace.Handed, bool)) {
	t.Helper()
	w1 := goWait(ctx, l, 1, "/t/l", api.LockExclusive)
	f.locked(f.one(t, 1))
	synctest.Wait()
	gs, settleRun, ok := l.handOver("/t/l")
	if !ok || len(gs) != 1 {
		t.Fatalf("handOver = %+v, %v; want session 1's grant", gs, ok)
	}
	g := gs[0]
	if g.Session != 1 || g.Path != "/t/l" || g.Mode != api.LockExclusive || g.Caller != lqCaller {
		t.Fatalf("handOver = %+v; want session 1's grant", g)
	}
	settle := func(h namespace.Handed, applied bool) { settleRun([]namespace.Handed{h}, applied) }
	if _, _, ok := l.handOver("/t/l"); ok {
		t.Fatal("a second hand-over while the first is in flight")
	}
	l.kick("/t/l")
	if got := f.take(); len(got) != 0 {
		t.Fatal("an Acquire went to Paxos while the head's grant rides on a release")
	}
	return w1, g, settle
}

// The hand-over of a lock to its head waiter inside the command that frees
// it (lockhandover.go): the head's Acquire is in flight until the grant is
// settled, whatever the outcome.
func TestLockQueuesHandOver(t *testing.T) {
	t.Run("no waiter: nothing to carry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, _ := newTestLockQueues()
			if g, _, ok := l.handOver("/t/l"); ok {
				t.Fatalf("handOver of a lock nobody waits for = %+v", g)
			}
		})
	})
	t.Run("granted: the head has it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w1, g, settle := handOverHead(t, l, f, t.Context())
			settle(namespace.Handed{Tried: true, Reply: &namespace.Granted{Path: g.Path, Mode: g.Mode, Generation: 9}}, true)
			if out := <-w1; out.err != nil || out.g.Generation != 9 {
				t.Fatalf("head's wait = %+v, %v; want generation 9", out.g, out.err)
			}
			settle(namespace.Handed{}, false) // a second settle changes nothing
			if n := l.count(); n != 0 || l.queued("/t/l") {
				t.Fatalf("count = %d, queued %v after the hand-over", n, l.queued("/t/l"))
			}
		})
	})
	t.Run("not applied: the head keeps its place and is not re-proposed", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w1, _, settle := handOverHead(t, l, f, t.Context())
			settle(namespace.Handed{}, false)
			synctest.Wait()
			if got := f.take(); len(got) != 0 {
				t.Fatal("an Acquire was proposed after a hand-over whose release was not applied")
			}
			if !waiting(w1) || l.count() != 1 {
				t.Fatal("the head left the queue")
			}
			l.lockFreed(namespace.FreedLock{Path: "/t/l"})
			synctest.Wait()
			f.grant(f.one(t, 1))
			if out := <-w1; out.err != nil {
				t.Fatal(out.err)
			}
		})
	})
	t.Run("not tried, lock freed meanwhile: the head asks again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w1, _, settle := handOverHead(t, l, f, t.Context())
			// Another command freed the lock while the grant was in flight;
			// the grant's own release then failed (stale).
			l.lockFreed(namespace.FreedLock{Path: "/t/l"})
			synctest.Wait()
			if got := f.take(); len(got) != 0 {
				t.Fatal("lockFreed proposed an Acquire while the head's grant was in flight")
			}
			settle(namespace.Handed{}, true)
			synctest.Wait()
			f.grant(f.one(t, 1))
			if out := <-w1; out.err != nil {
				t.Fatal(out.err)
			}
		})
	})
	t.Run("lock-delay: the head retries when it ends", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w1, g, settle := handOverHead(t, l, f, t.Context())
			until := time.Now().Add(5 * time.Second).UnixNano()
			settle(namespace.Handed{Tried: true, Err: api.LockDelayError(g.Path, until)}, true)
			synctest.Wait()
			if got := f.take(); len(got) != 0 {
				t.Fatal("the head retried inside the lock-delay")
			}
			time.Sleep(5 * time.Second)
			synctest.Wait()
			f.grant(f.one(t, 1))
			if out := <-w1; out.err != nil {
				t.Fatal(out.err)
			}
		})
	})
	t.Run("canceled in flight, then granted: given back and handed on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			ctx, cancel := context.WithCancel(t.Context())
			w1, g, settle := handOverHead(t, l, f, ctx)
			w2 := goWait(t.Context(), l, 2, "/t/l", api.LockExclusive)
			cancel()
			if out := <-w1; !errors.Is(out.err, api.ErrCanceled) {
				t.Fatalf("canceled wait = %+v, %v", out.g, out.err)
			}
			settle(namespace.Handed{Tried: true, Reply: &namespace.Granted{Path: g.Path, Mode: g.Mode, Generation: 9}}, true)
			synctest.Wait()
			rel := f.takeReleases()
			if len(rel) != 1 || rel[0].Session != 1 || rel[0].Generation != 9 {
				t.Fatalf("releases %+v; want session 1's generation 9 given back", rel)
			}
			// The give-back carries session 2's grant.
			if len(rel[0].Then) != 1 || rel[0].Then[0].Session != 2 {
				t.Fatalf("the give-back carries %+v; want session 2's grant", rel[0].Then)
			}
			f.mu.Lock()
			done := f.released[len(f.released)-1]
			f.mu.Unlock()
			done(namespace.Result{Reply: &namespace.Released{Freed: true}, Handed: []namespace.Handed{{Tried: true, Reply: &namespace.Granted{Path: "/t/l", Mode: api.LockExclusive, Generation: 10}}}}, nil)
			if out := <-w2; out.err != nil || out.g.Generation != 10 {
				t.Fatalf("session 2: %+v, %v; want generation 10", out.g, out.err)
			}
			if n := l.count(); n != 0 {
				t.Fatalf("count = %d", n)
			}
		})
	})
}

// A head whose Acquire is in Paxos when the master role ends is told that
// Acquire's outcome, not the stop: a grant that arrives after the stop is
// the head's (it holds it; nothing is released), an Acquire that was not
// granted tells it the stop's error, and a head that gave up meanwhile has
// its late grant released. The waiters behind it are told the stop at
// once.
func TestLockQueuesStopKeepsHeadInPaxos(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		stopErr := apiErr(api.NotMaster, "stopped")
		granted := goWait(t.Context(), l, 1, "/t/a", api.LockExclusive)
		behind := goWait(t.Context(), l, 2, "/t/a", api.LockExclusive)
		pGranted := f.one(t, 1)
		locked := goWait(t.Context(), l, 3, "/t/b", api.LockExclusive)
		pLocked := f.one(t, 3)
		cctx, cancel := context.WithCancel(t.Context())
		canceled := goWait(cctx, l, 4, "/t/c", api.LockExclusive)
		pCanceled := f.one(t, 4)

		l.stop(stopErr)
		synctest.Wait()
		if out := <-behind; !errors.Is(out.err, api.ErrNotMaster) {
			t.Fatalf("a waiter behind the head at stop: %v, want NotMaster", out.err)
		}
		for name, ch := range map[string]<-chan waitOut{"granted": granted, "locked": locked, "canceled": canceled} {
			if !waiting(ch) {
				t.Fatalf("the head with an Acquire in Paxos (%s) was answered at stop, before its outcome", name)
			}
		}

		gen := f.grant(pGranted)
		out := <-granted
		if out.err != nil || out.g == nil || out.g.Generation != gen {
			t.Fatalf("the head granted after the stop got %+v, %v; want the grant of generation %d", out.g, out.err, gen)
		}

		f.locked(pLocked)
		if out := <-locked; !errors.Is(out.err, api.ErrNotMaster) {
			t.Fatalf("the head refused (Locked) after the stop: %v, want the stop's NotMaster", out.err)
		}

		cancel()
		if out := <-canceled; !errors.Is(out.err, api.ErrCanceled) {
			t.Fatalf("the canceled head: %v, want Canceled", out.err)
		}
		late := f.grant(pCanceled)
		synctest.Wait()
		rel := f.takeReleases()
		if len(rel) != 1 || rel[0].Session != 4 || rel[0].Generation != late {
			t.Fatalf("releases %+v; want exactly the canceled head's late grant (session 4, generation %d)", rel, late)
		}
		if got := f.take(); len(got) != 0 {
			t.Fatal("an Acquire was proposed after stop")
		}
	})
}

// A head whose grant rides on a release when the master role ends is told
// the grant's outcome: granted, it holds the lock; not tried, it is told
// the stop's error.
func TestLockQueuesStopKeepsHandedHead(t *testing.T) {
	for _, granted := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			l, f := newTestLockQueues()
			w1, g, settle := handOverHead(t, l, f, t.Context())
			l.stop(apiErr(api.NotMaster, "stopped"))
			synctest.Wait()
			if !waiting(w1) {
				t.Fatal("the head whose grant is in Paxos was answered at stop")
			}
			if granted {
				settle(namespace.Handed{Tried: true, Reply: &namespace.Granted{Path: g.Path, Mode: g.Mode, Generation: 9}}, true)
				if out := <-w1; out.err != nil || out.g.Generation != 9 {
					t.Fatalf("head granted after the stop: %+v, %v; want generation 9", out.g, out.err)
				}
			} else {
				settle(namespace.Handed{}, false)
				if out := <-w1; !errors.Is(out.err, api.ErrNotMaster) {
					t.Fatalf("head not tried after the stop: %v; want NotMaster", out.err)
				}
			}
			if rel := f.takeReleases(); len(rel) != 0 {
				t.Fatalf("releases %+v", rel)
			}
		})
	}
}

// A hand-over to a queue that starts with shared waiters carries the whole
// run of them, and only them: the exclusive waiter behind the run (and the
// shared one behind it) stays queued. Each member of the run is in flight
// until the grant is settled: one that cancels meanwhile stays until then,
// and the grant it got is given back.
func TestLockQueuesHandOverSharedRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, f := newTestLockQueues()
		l.deps.runs = func() bool { return true }
		s1 := goWait(t.Context(), l, 1, "/t/l", api.LockShared)
		f.locked(f.one(t, 1))
		synctest.Wait()
		ctx2, cancel2 := context.WithCancel(t.Context())
		s2 := goWait(ctx2, l, 2, "/t/l", api.LockShared)
		s3 := goWait(t.Context(), l, 3, "/t/l", api.LockShared)
		x4 := goWait(t.Context(), l, 4, "/t/l", api.LockExclusive)
		s5 := goWait(t.Context(), l, 5, "/t/l", api.LockShared)
		gs, settle, ok := l.handOver("/t/l")
		var sessions []uint64
		for _, g := range gs {
			if g.Mode != api.LockShared || g.Path != "/t/l" {
				t.Fatalf("hand-over grant %+v; want shared grants of /t/l", g)
			}
			sessions = append(sessions, g.Session)
		}
		if !ok || !slices.Equal(sessions, []uint64{1, 2, 3}) {
			t.Fatalf("handOver carries sessions %v (ok %v); want the run [1 2 3]", sessions, ok)
		}
		cancel2()
		synctest.Wait()
		if n := l.count(); n != 5 {
			t.Fatalf("count = %d after a run member canceled in flight; want 5 until the outcome", n)
		}
		handed := make([]namespace.Handed, len(gs))
		for i, g := range gs {
			handed[i] = namespace.Handed{Tried: true, Reply: &namespace.Granted{Path: g.Path, Mode: g.Mode, Generation: 9}}
		}
		settle(handed, true)
		synctest.Wait()
		for _, c := range []struct {
			sess uint64
			ch   <-chan waitOut
		}{{1, s1}, {3, s3}} {
			if out := <-c.ch; out.err != nil || out.g.Generation != 9 {
				t.Fatalf("session %d: %+v, %v; want generation 9", c.sess, out.g, out.err)
			}
		}
		if out := <-s2; out.err == nil {
			t.Fatalf("canceled session 2 returned a grant: %+v", out.g)
		}
		if rs := f.takeReleases(); len(rs) != 1 || rs[0].Session != 2 || rs[0].Generation != 9 {
			t.Fatalf("releases %+v; want session 2's grant of generation 9 given back", rs)
		}
		if got := f.take(); len(got) != 0 {
			t.Fatal("an Acquire went to Paxos with an exclusive waiter at the head of a shared-held lock")
		}
		if !waiting(x4) || !waiting(s5) {
			t.Fatal("a waiter behind the run returned")
		}
		if n := l.count(); n != 2 {
			t.Fatalf("count = %d; want 2 (the waiters behind the run)", n)
		}
	})
}
