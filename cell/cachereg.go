package cell

import (
	"context"
	"maps"
	"sync"

	"github.com/lockcell/lockcell/api"
)

// cacheRegistry knows which sessions may hold which nodes in their client
// caches, and makes a write to a node wait until every such session has
// dropped it (Chubby §2.5: the master invalidates caches before a write
// completes).
//
// The rules it keeps:
//   - A session is registered before its read through a Cache handle, and
//     the read is cacheable only if no invalidating write to the node is in
//     progress (the read could return the old value after the session was
//     invalidated).
//   - A session stays registered until its invalidation returned nil (it
//     acknowledged, or its lease ran out). A write that gives up waiting
//     leaves the session registered, so the next write, and any write
//     running beside it, waits for that session too. Dropping the entry up
//     front let such a write complete while the session still served the
//     old contents from its cache.
//   - A session that may no longer read the node is dropped without an
//     invalidation: the event would reveal the write, and waiting for its
//     acknowledgement would let it stall writers it may not even see.
//   - No write proceeds before the master's fail-over was acknowledged by
//     every session: until then a client may still trust a cache the old
//     master was keeping consistent.
//
// Its methods are safe for concurrent use; invalidate blocks.
type cacheRegistry struct {
	deps cacheDeps

	mu struct {
		sync.Mutex
		// cachers maps a path to the sessions that may hold it in their
		// cache.
		cachers map[string]map[uint64]struct{}
		// writing counts the invalidating writes in progress per path.
		writing map[string]int
	}
}

// cacheDeps is what a cacheRegistry needs from the master.
type cacheDeps struct {
	// mayRead reports whether session sess may read path now.
	mayRead func(sess uint64, path string) bool
	// failoverDone returns a channel closed once every session acknowledged
	// the master's fail-over (or ended).
	failoverDone func() <-chan struct{}
	// stopped is closed when the master role ends; stoppedErr is then what
	// a waiting writer is told.
	stopped    <-chan struct{}
	stoppedErr func() error
	// invalidate sends the invalidation ev to session sess and waits until
	// it acknowledged or its lease ran out (nil), or fails.
	invalidate func(ctx context.Context, sess uint64, ev api.Event) error
	// invalidateErr maps a failure of invalidate to the writer's error.
	invalidateErr func(error) error
	// sent counts invalidations sent; it may be nil.
	sent func(n int)
}

func newCacheRegistry(deps cacheDeps) *cacheRegistry {
	c := &cacheRegistry{deps: deps}
	c.mu.cachers = map[string]map[uint64]struct{}{}
	c.mu.writing = map[string]int{}
	return c
}

// register records, before a read through a Cache handle, that session
// sess may cache path, and reports whether the read is cacheable. A session
// that is told no is not registered.
func (c *cacheRegistry) register(sess uint64, path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.writing[path] > 0 {
		return false
	}
	cs := c.mu.cachers[path]
	if cs == nil {
		cs = map[uint64]struct{}{}
		c.mu.cachers[path] = cs
	}
	cs[sess] = struct{}{}
	return true
}

// forget records that session sess no longer caches path.
func (c *cacheRegistry) forget(path string, sess uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgetLocked(path, sess)
}

// forgetSession forgets every path session sess may cache (it ended).
func (c *cacheRegistry) forgetSession(sess uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for path := range c.mu.cachers {
		c.forgetLocked(path, sess)
	}
}

// REQUIRES: c.mu held.
func (c *cacheRegistry) forgetLocked(path string, sess uint64) {
	if cs := c.mu.cachers[path]; cs != nil {
		delete(cs, sess)
		if len(cs) == 0 {
			delete(c.mu.cachers, path)
		}
	}
}

// cachers returns how many sessions may cache path.
func (c *cacheRegistry) cachers(path string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.mu.cachers[path])
}

// invalidate is called before a write to path is proposed. It marks the
// write in progress, waits for the fail-over to be acknowledged, then
// invalidates (with an event of kind) every session caching path and waits
// until each acknowledged or its lease ran out. On success the caller must
// call end once the write was applied or failed; on failure the write must
// not be proposed, and end is nil.
func (c *cacheRegistry) invalidate(ctx context.Context, path string, kind api.EventKind) (end func(), err error) {
	c.mu.Lock()
	c.mu.writing[path]++
	cachers := maps.Clone(c.mu.cachers[path])
	c.mu.Unlock()
	end = func() {
		c.mu.Lock()
		if c.mu.writing[path]--; c.mu.writing[path] <= 0 {
			delete(c.mu.writing, path)
		}
		c.mu.Unlock()
	}
	for sess := range cachers {
		if !c.deps.mayRead(sess, path) {
			// Whatever it cached it read while it could.
			delete(cachers, sess)
			c.forget(path, sess)
		}
	}
	select {
	case <-c.deps.failoverDone():
	case <-ctx.Done():
		end()
		return nil, ctxError(ctx)
	case <-c.deps.stopped:
		end()
		return nil, c.deps.stoppedErr()
	}
	if len(cachers) == 0 {
		return end, nil
	}
	errs := make(chan error, len(cachers))
	for sess := range cachers {
		go func(sess uint64) {
			err := c.deps.invalidate(ctx, sess, api.Event{Kind: kind, Path: path})
			if err == nil {
				// It holds nothing of path any more, and cannot cache it
				// again while this write is in progress (register).
				c.forget(path, sess)
			}
			errs <- err
		}(sess)
	}
	var first error
	for range cachers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if c.deps.sent != nil {
		c.deps.sent(len(cachers))
	}
	if first != nil {
		end()
		return nil, c.deps.invalidateErr(first)
	}
	return end, nil
}
