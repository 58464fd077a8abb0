package cell

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/lockcell/lockcell/api"
)

// cacheFixture is a cacheRegistry whose sessions answer invalidations as a
// test tells them: each invalidation waits on the session's ack channel
// (closed: acknowledged) or on ctx.
type cacheFixture struct {
	*cacheRegistry
	failover chan struct{}
	stopped  chan struct{}
	mu       sync.Mutex
	readable map[uint64]bool
	acks     map[uint64]chan struct{}
	sent     []uint64 // sessions sent an invalidation, in order
}

var errFixtureStopped = errors.New("fixture: master stopped")

func newCacheFixture() *cacheFixture {
	f := &cacheFixture{failover: make(chan struct{}), stopped: make(chan struct{}), readable: map[uint64]bool{}, acks: map[uint64]chan struct{}{}}
	f.cacheRegistry = newCacheRegistry(cacheDeps{
		mayRead: func(sess uint64, path string) bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return f.readable[sess]
		},
		failoverDone: func() <-chan struct{} { return f.failover },
		stopped:      f.stopped,
		stoppedErr:   func() error { return errFixtureStopped },
		invalidate: func(ctx context.Context, sess uint64, ev api.Event) error {
			f.mu.Lock()
			f.sent = append(f.sent, sess)
			ack := f.acks[sess]
			f.mu.Unlock()
			select {
			case <-ack:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
		invalidateErr: func(err error) error { return err },
	})
	return f
}

// cacher registers a readable session caching path whose acknowledgement
// the test releases by closing the returned channel.
func (f *cacheFixture) cacher(t *testing.T, sess uint64, path string) chan struct{} {
	t.Helper()
	f.mu.Lock()
	f.readable[sess] = true
	ack := make(chan struct{})
	f.acks[sess] = ack
	f.mu.Unlock()
	if !f.register(sess, path) {
		t.Fatalf("register(%d, %s) refused with no write in progress", sess, path)
	}
	return ack
}

func (f *cacheFixture) takeSent() []uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.sent
	f.sent = nil
	slices.Sort(out)
	return out
}

type invalidation struct {
	end func()
	err error
}

func (f *cacheFixture) goInvalidate(ctx context.Context, path string) <-chan invalidation {
	ch := make(chan invalidation, 1)
	go func() {
		end, err := f.invalidate(ctx, path, api.EventContentsModified)
		ch <- invalidation{end, err}
	}()
	return ch
}

func pending(ch <-chan invalidation) bool {
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

// A write waits for the fail-over and then for every session caching the
// node; while it runs, reads of the node are not cacheable.
func TestCacheRegistryWriteWaitsForEveryCacher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newCacheFixture()
		ack1 := f.cacher(t, 1, "/t/f")
		ack2 := f.cacher(t, 2, "/t/f")
		f.cacher(t, 3, "/t/other")

		w := f.goInvalidate(t.Context(), "/t/f")
		synctest.Wait()
		if !pending(w) || len(f.takeSent()) != 0 {
			t.Fatal("the write invalidated before the fail-over was acknowledged")
		}
		if f.register(4, "/t/f") {
			t.Fatal("a read during the write was cacheable")
		}
		close(f.failover)
		synctest.Wait()
		if got := f.takeSent(); !slices.Equal(got, []uint64{1, 2}) {
			t.Fatalf("invalidations sent to %v, want [1 2]", got)
		}
		close(ack1)
		synctest.Wait()
		if !pending(w) {
			t.Fatal("the write went on with session 2 not acknowledged")
		}
		close(ack2)
		synctest.Wait()
		out := <-w
		if out.err != nil {
			t.Fatalf("invalidate: %v", out.err)
		}
		if n := f.cachers("/t/f"); n != 0 {
			t.Fatalf("%d sessions still cache /t/f after acknowledging", n)
		}
		if n := f.cachers("/t/other"); n != 1 {
			t.Fatalf("%d sessions cache /t/other, want 1 (another path's write)", n)
		}
		out.end()
		if !f.register(4, "/t/f") {
			t.Fatal("a read after the write ended was not cacheable")
		}
	})
}

// A write that gives up waiting leaves the session that did not acknowledge
// registered: the next write must wait for it too.
func TestCacheRegistryAbandonedWriteKeepsCacher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newCacheFixture()
		close(f.failover)
		ack := f.cacher(t, 1, "/t/f")

		ctx, cancel := context.WithCancel(t.Context())
		w := f.goInvalidate(ctx, "/t/f")
		synctest.Wait()
		cancel()
		out := <-w
		if out.err == nil || out.end != nil {
			t.Fatalf("abandoned invalidate = (end %v, %v), want an error and no end", out.end != nil, out.err)
		}
		if n := f.cachers("/t/f"); n != 1 {
			t.Fatalf("%d sessions cache /t/f after an abandoned write, want 1: it never acknowledged", n)
		}
		ack2 := f.cacher(t, 2, "/t/f") // fails if the abandoned write still counts
		f.takeSent()

		w = f.goInvalidate(t.Context(), "/t/f")
		synctest.Wait()
		if got := f.takeSent(); !slices.Contains(got, 1) {
			t.Fatalf("the next write invalidated %v, not the session the abandoned one left behind", got)
		}
		if !pending(w) {
			t.Fatal("the next write completed without session 1's acknowledgement")
		}
		close(ack)
		close(ack2)
		if out := <-w; out.err != nil {
			t.Fatalf("invalidate: %v", out.err)
		} else {
			out.end()
		}
	})
}

// A session that may no longer read the node is dropped without an
// invalidation, and a master that stops ends the wait for the fail-over.
func TestCacheRegistryUnreadableAndStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newCacheFixture()
		f.cacher(t, 1, "/t/f")
		f.mu.Lock()
		f.readable[1] = false
		f.mu.Unlock()

		w := f.goInvalidate(t.Context(), "/t/f")
		synctest.Wait()
		close(f.stopped)
		out := <-w
		if !errors.Is(out.err, errFixtureStopped) {
			t.Fatalf("invalidate after stop: %v, want the stopped error", out.err)
		}
		if n := f.cachers("/t/f"); n != 0 {
			t.Fatalf("%d sessions cache /t/f; the unreadable one should be dropped", n)
		}
		if got := f.takeSent(); len(got) != 0 {
			t.Fatalf("invalidations sent to %v, want none", got)
		}
		if !f.register(2, "/t/f") {
			t.Fatal("the stopped write is still counted in progress")
		}
	})
}
