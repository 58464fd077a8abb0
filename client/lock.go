package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// Lock is a held lock: its mode, generation and sequencer, and a context
// cancelled the moment the lock may be lost — when the session's local
// lease runs out (jeopardy) or the session ends, when the node is deleted,
// or on Release — so that work under the lock can stop in time.
// context.Cause of the context says why (ErrJeopardy, ErrSessionExpired,
// ErrClosed, ErrHandleInvalid, ErrReleased).
//
// The context is exact on the session's monotonic clock: its Err, Done and
// Value (and so context.Cause) compare the local lease deadline with the
// clock when called, so once the lease has run out the very first look
// reports the lock lost — also in the first instant after the process was
// paused (SIGSTOP, a long GC pause, a frozen VM), before any other
// goroutine has run. Check Context().Err() (or Err) right before every
// action that relies on holding the lock, and hand the sequencer to the
// servers you act on: only they can refuse a holder that was paused after
// its last look.
//
// Contexts derived from it (context.WithTimeout and the like) are
// cancelled through it: by whoever first finds the lock lost — a look at
// this context, Session.State, a call in the session — or else by the
// KeepAlive loop's timer at the lease's end. Their own Err does not
// consult the deadline; look at this context itself where it matters.
//
// After jeopardy the session may yet turn out safe and still hold the lock,
// but this Lock's context stays cancelled: Release it and acquire again to
// get a new one.
type Lock struct {
	h      *Handle
	mode   api.LockMode
	gen    uint64
	seq    sequencer.Sequencer
	raw    []byte
	ctx    *lockCtx
	cancel context.CancelCauseFunc
	// gone is why the lock left the session's set of held locks.
	// REQUIRES: h.s.mu held.
	gone error
}

// Context returns the lock's context (see Lock).
func (l *Lock) Context() context.Context { return l.ctx }

// Done is the lock's context's Done channel. Like the context's, it is
// already closed when returned if the lease has run out.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lock is held as far as the session can prove
// now, and otherwise why it may be lost (the context's cause: ErrJeopardy,
// ErrSessionExpired, ErrClosed, ErrHandleInvalid or ErrReleased).
func (l *Lock) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// Mode returns the mode the lock is held in.
func (l *Lock) Mode() api.LockMode { return l.mode }

// Generation returns the lock generation of the grant.
func (l *Lock) Generation() uint64 { return l.gen }

// Sequencer returns the grant's sequencer (signed by the cell).
func (l *Lock) Sequencer() sequencer.Sequencer { return l.seq }

// SequencerBytes returns the sequencer's binary form as the cell sent it.
func (l *Lock) SequencerBytes() []byte { return append([]byte(nil), l.raw...) }

// Handle returns the handle the lock was acquired through.
func (l *Lock) Handle() *Handle { return l.h }

func (l *Lock) lost(cause error) { l.cancel(cause) }

// lockCtx is a Lock's context. Before answering, Err, Done and Value ask
// the session whether the lock is still held as of now
// (Session.lockLoss), which compares the local lease deadline with the
// clock and, if the lock may be lost, cancels inner synchronously. So the
// answer is exact at the first look, whatever the KeepAlive goroutine has
// done, and context.Cause — which finds the nearest cancelCtx through
// Value — reports the reason. Contexts derived from it register with inner
// (context's propagation finds it through Value and Done).
//
// A lock's context has no Deadline: the lease end moves forward with every
// KeepAlive, and a context's deadline may not change (context.WithTimeout
// on a parent whose deadline is sooner drops its own timer).
type lockCtx struct {
	inner context.Context
	l     *Lock
}

// check cancels the context if the lock may be lost as of now.
func (c *lockCtx) check() {
	if exactLease && c.inner.Err() == nil {
		c.l.h.s.lockLoss(c.l)
	}
}

// Deadline reports none (see lockCtx).
func (c *lockCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done returns a channel closed once the lock may be lost; it is already
// closed if the lease has run out.
func (c *lockCtx) Done() <-chan struct{} {
	c.check()
	return c.inner.Done()
}

// Err returns context.Canceled once the lock may be lost, exactly.
func (c *lockCtx) Err() error {
	c.check()
	return c.inner.Err()
}

// Value returns inner's values; it checks first so that context.Cause is
// exact too.
func (c *lockCtx) Value(key any) any {
	c.check()
	return c.inner.Value(key)
}

// String names the lock.
func (c *lockCtx) String() string {
	return fmt.Sprintf("client.Lock(%s, generation %d)", c.l.h.h.Path, c.l.gen)
}

// Acquire takes the node's lock in mode, waiting in the lock's FIFO queue
// at the master until it is granted or ctx ends. A cancelled Acquire leaves
// no waiter and no grant behind. It returns ctx's error, api errors such as
// api.ErrNotFound, and the session's errors.
func (h *Handle) Acquire(ctx context.Context, mode api.LockMode) (*Lock, error) {
	return h.acquire(ctx, mode, true)
}

// TryAcquire takes the node's lock in mode if it is free now; otherwise it
// returns at once an error wrapping ErrLocked (and api.ErrLocked or
// api.ErrLockDelay).
func (h *Handle) TryAcquire(ctx context.Context, mode api.LockMode) (*Lock, error) {
	return h.acquire(ctx, mode, false)
}

func (h *Handle) acquire(ctx context.Context, mode api.LockMode, wait bool) (*Lock, error) {
	if mode != api.LockExclusive && mode != api.LockShared {
		return nil, fmt.Errorf("acquire %s: %w: mode %v", h.h.Path, api.ErrInvalidArgument, mode)
	}
	h.lkmu.Lock()
	defer h.lkmu.Unlock()
	var resp api.SequencerResponse
	// Whether a lost reply or a master change granted the lock after all is
	// read back before every retry, so Acquire may be repeated.
	held := func(ctx context.Context, _ error) (bool, error) {
		r, err := h.getSequencer(ctx)
		if err == nil {
			resp = r
			return true, nil
		}
		return false, nil
	}
	err := h.s.callWith(ctx, api.MethodAcquire, func(hd api.Header) any {
		return &api.AcquireRequest{Header: hd, Handle: h.h, Mode: mode, Wait: wait}
	}, &resp, held)
	if errors.Is(err, api.ErrFailedPrecondition) {
		// "already holds": an earlier attempt took it.
		if ok, _ := held(ctx, nil); ok {
			err = nil
		}
	}
	if err != nil {
		if ctx.Err() != nil && wait {
			// The grant may have raced with the cancellation and its reply
			// been lost with the stream: give back anything found.
			go h.cleanupAfterCancel()
		}
		if errors.Is(err, api.ErrLocked) || errors.Is(err, api.ErrLockDelay) {
			return nil, fmt.Errorf("acquire %s: %w", h.h.Path, &lockedError{cell: err})
		}
		return nil, fmt.Errorf("acquire %s: %w", h.h.Path, err)
	}
	seq, err := sequencer.Parse(resp.Sequencer)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: the cell sent a bad sequencer: %w", h.h.Path, err)
	}
	l := &Lock{h: h, mode: resp.Mode, gen: resp.Generation, seq: seq, raw: resp.Sequencer}
	inner, cancel := context.WithCancelCause(context.Background())
	l.ctx, l.cancel = &lockCtx{inner: inner, l: l}, cancel
	if cause := h.s.addLock(l); cause != nil {
		// Jeopardy or the end of the session came first.
		l.cancel(cause)
	}
	return l, nil
}

// cleanupAfterCancel releases a grant that an Acquire cancelled by its
// caller may have received without the reply reaching us.
func (h *Handle) cleanupAfterCancel() {
	ctx, cancel := context.WithTimeout(h.s.ctx, 10*time.Second)
	defer cancel()
	h.lkmu.Lock()
	defer h.lkmu.Unlock()
	if h.s.holdsLockOn(h) {
		return
	}
	r, err := h.getSequencer(ctx)
	if err != nil {
		return
	}
	_ = h.s.call(ctx, api.MethodRelease, func(hd api.Header) any {
		return &api.ReleaseRequest{Header: hd, Handle: h.h, Generation: r.Generation}
	}, &api.Empty{})
}

// holdsLockOn reports whether a live Lock object exists for h.
func (s *Session) holdsLockOn(h *Handle) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.mu.locks {
		if l.h == h {
			return true
		}
	}
	return false
}

// Release gives the lock up. The release names the lock's generation, so a
// stale Release — of a grant already released or lost — frees nothing and
// returns an error wrapping ErrNotHeld.
func (l *Lock) Release(ctx context.Context) error {
	h := l.h
	h.lkmu.Lock()
	defer h.lkmu.Unlock()
	ambiguous := false
	err := h.s.callWith(ctx, api.MethodRelease, func(hd api.Header) any {
		return &api.ReleaseRequest{Header: hd, Handle: h.h, Generation: l.gen}
	}, &api.Empty{}, func(_ context.Context, last error) (bool, error) {
		if _, noEffect := classify(last); !noEffect {
			ambiguous = true
		}
		return false, nil
	})
	if errors.Is(err, api.ErrFailedPrecondition) && ambiguous {
		// An earlier attempt whose reply was lost released it.
		err = nil
	}
	switch {
	case err == nil:
		h.s.removeLock(l, ErrReleased)
		l.cancel(ErrReleased)
		return nil
	case errors.Is(err, api.ErrFailedPrecondition), errors.Is(err, api.ErrNotFound):
		h.s.removeLock(l, ErrReleased)
		l.cancel(ErrReleased)
		return fmt.Errorf("release %s (generation %d): %w: %w", h.h.Path, l.gen, ErrNotHeld, err)
	}
	return fmt.Errorf("release %s: %w", h.h.Path, err)
}
