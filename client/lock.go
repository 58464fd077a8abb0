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
// cancelled the moment the lock may be lost — when the session enters
// jeopardy or ends, when the node is deleted, or on Release — so that work
// under the lock can stop in time. context.Cause of the context says why
// (ErrJeopardy, ErrSessionExpired, ErrClosed, ErrHandleInvalid,
// ErrReleased).
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
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// Context returns the lock's context.
func (l *Lock) Context() context.Context { return l.ctx }

// Done is the lock's context's Done channel.
func (l *Lock) Done() <-chan struct{} { return l.ctx.Done() }

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
	}, &resp, true, held)
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
			return nil, fmt.Errorf("acquire %s: %w: %w", h.h.Path, ErrLocked, err)
		}
		return nil, fmt.Errorf("acquire %s: %w", h.h.Path, err)
	}
	seq, err := sequencer.Parse(resp.Sequencer)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: the cell sent a bad sequencer: %w", h.h.Path, err)
	}
	l := &Lock{h: h, mode: resp.Mode, gen: resp.Generation, seq: seq, raw: resp.Sequencer}
	l.ctx, l.cancel = context.WithCancelCause(context.Background())
	if !h.s.addLock(l) {
		// Jeopardy or the end of the session came first.
		l.cancel(ErrJeopardy)
		if err := h.s.Err(); err != nil {
			l.cancel(err)
		}
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
	}, &api.Empty{}, true)
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
	}, &api.Empty{}, true, func(_ context.Context, last error) (bool, error) {
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
		h.s.removeLock(l)
		l.cancel(ErrReleased)
		return nil
	case errors.Is(err, api.ErrFailedPrecondition), errors.Is(err, api.ErrNotFound):
		h.s.removeLock(l)
		l.cancel(ErrReleased)
		return fmt.Errorf("release %s (generation %d): %w: %w", h.h.Path, l.gen, ErrNotHeld, err)
	}
	return fmt.Errorf("release %s: %w", h.h.Path, err)
}
