package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// no waiter and no grant behind; if the master changes at that moment, a
// grant it got may stand until the session learns of the new master,
// which it then gives back (unless a later Acquire of the session took it
// over: see orphanGrants). It returns ctx's error, api errors such as
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
	if err := h.lk.lock(ctx); err != nil {
		return nil, fmt.Errorf("acquire %s: %w", h.h.Path, err)
	}
	defer h.lk.unlock()
	// The session's Acquires of one path and the give-back of a grant
	// that no Lock owns take turns (see orphanGrants).
	p, err := h.s.orphans.enter(ctx, h.h.Path)
	if err != nil {
		return nil, fmt.Errorf("acquire %s: %w", h.h.Path, err)
	}
	defer h.s.orphans.leave(h.h.Path, p)
	var (
		resp     api.SequencerResponse
		tookOver bool // the grant was found held, not granted to this call
	)
	// Whether a lost reply or a master change granted the lock after all is
	// read back before every retry, so Acquire may be repeated.
	held := func(ctx context.Context, _ error) (bool, error) {
		r, err := h.getSequencer(ctx)
		if err == nil {
			resp, tookOver = r, true
			return true, nil
		}
		return false, nil
	}
	var (
		sent   bool   // an attempt was made
		sentAt uint64 // the epoch of the last attempt
	)
	err = h.s.callWith(ctx, api.MethodAcquire, func(hd api.Header) any {
		sent, sentAt = true, hd.Epoch
		return &api.AcquireRequest{Header: hd, Handle: h.h, Mode: mode, Wait: wait}
	}, &resp, held)
	if errors.Is(err, api.ErrFailedPrecondition) {
		// "already holds": an earlier attempt took it, or a cancelled
		// Acquire of the session (see orphanGrants).
		if ok, _ := held(ctx, nil); ok {
			err = nil
		}
	}
	if err == nil && tookOver {
		h.s.c.log.Debug("client: Acquire found the lock held by the session already and took the grant over",
			"session", h.s.id, "path", h.h.Path, "generation", resp.Generation)
	}
	if err != nil {
		if ctx.Err() != nil && sent {
			// The grant may have raced with the cancellation and its reply
			// been lost with the stream, or it may be in Paxos still, to be
			// applied under the next master: look now, and again once a
			// newer master serves.
			h.s.orphans.cancelled(h, sentAt)
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

// chanLock is a mutual-exclusion lock that may be held across calls to
// the cell: taking it waits on a channel, so the wait ends with ctx, and
// a goroutine waiting for it is durably blocked under testing/synctest
// (one waiting for a sync.Mutex is not, and a bubble whose holder waits
// for the clock would never advance it). The zero value is not usable;
// make one with newChanLock.
type chanLock chan struct{}

func newChanLock() chanLock { return make(chanLock, 1) }

// lock takes the lock, or returns ctx's error if ctx ends first.
func (c chanLock) lock(ctx context.Context) error {
	select {
	case c <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// unlock gives the lock back. REQUIRES: the caller holds it.
func (c chanLock) unlock() { <-c }

// Grants that no Lock owns.
//
// A waiter's Acquire (or the grant that a Release carries to the head
// waiter, cell/lockhandover.go) may be in Paxos when its caller cancels.
// The master that queued it gives back a grant that arrives for a waiter
// that left; but if that master's role ends first (a step-down, a crash),
// the next master applies the grant knowing nothing of the cancel, and the
// session would hold the lock, with no Lock to release it, until the
// session ends. The client closes that gap: the session remembers each
// path whose Acquire was cancelled with the epoch of its last attempt,
// looks at the lock at once, and looks again as soon as it learns of a
// newer master. A master serves only after applying every slot its
// predecessors may have filled (paxos Status.Master), so what a newer
// master answers is final: a grant the session holds on the path then is
// either owned by a Lock of the session at that very generation (a later
// Acquire took it, or was told "already holds" and took it over) or
// nobody's, and is released by its generation, which can never free a
// newer grant.
//
// Acquires of a path and a give-back of it take turns in the session (the
// path's gate), so no Acquire can take over a grant between the give-back's
// look and its release, and no Acquire's grant is unowned while it
// is on its way to becoming a Lock.
//
// What was tried first: forgetting the path once a later Acquire
// succeeds. It is right, but it leaves the ownership test untested in the
// common case; reading the generation a Lock owns is one rule for all of
// them. Telling the new master of the cancel as a command of its own was
// not taken: the cancel would race with an Acquire that takes the grant
// over, and the command would have to name the grant's generation, which
// only the cell knows when the cancel is sent.

// orphanGrants is a session's state per lock path for the above. The zero
// value is ready to use.
type orphanGrants struct {
	mu    sync.Mutex
	paths map[string]*orphanPath
}

// orphanPath is one path's gate and cancelled Acquire.
type orphanPath struct {
	gate  chanLock
	users int // holding or waiting for gate; REQUIRES: orphanGrants.mu held
	// The fields below are guarded by orphanGrants.mu.
	// unsure is the last cancelled Acquire whose grant may yet be nobody's;
	// nil if none.
	unsure *cancelledAcquire
	// looking: a look runs (look); again: another is due after it.
	looking, again bool
}

// cancelledAcquire is an Acquire cancelled with its outcome unknown.
type cancelledAcquire struct {
	// epoch is the master epoch of its last attempt: an answer from a
	// master of a newer epoch is final.
	epoch uint64
	// h is the handle it went through, without its event subscription (a
	// look must not re-establish the events of a handle closed meanwhile).
	h api.Handle
}

// giveBackTimeout bounds one look at a path with a cancelled Acquire.
// A look at a master newer than the Acquire that fails is repeated after
// giveBackPause, up to giveBackTries times, and then at the next master.
const (
	giveBackTimeout = 30 * time.Second
	giveBackPause   = time.Second
	giveBackTries   = 10
)

// enter takes path's gate, or returns ctx's error if ctx ends first.
func (o *orphanGrants) enter(ctx context.Context, path string) (*orphanPath, error) {
	o.mu.Lock()
	p := o.pathLocked(path)
	p.users++
	o.mu.Unlock()
	if err := p.gate.lock(ctx); err != nil {
		o.done(path, p)
		return nil, err
	}
	return p, nil
}

// leave gives path's gate back. REQUIRES: entered.
func (o *orphanGrants) leave(path string, p *orphanPath) {
	p.gate.unlock()
	o.done(path, p)
}

// done forgets p once nobody uses it and it has no cancelled Acquire.
func (o *orphanGrants) done(path string, p *orphanPath) {
	o.mu.Lock()
	p.users--
	o.dropIfIdleLocked(path, p)
	o.mu.Unlock()
}

// pathLocked returns path's entry, made if there is none. REQUIRES: o.mu
// held.
func (o *orphanGrants) pathLocked(path string) *orphanPath {
	if o.paths == nil {
		o.paths = map[string]*orphanPath{}
	}
	p := o.paths[path]
	if p == nil {
		p = &orphanPath{gate: newChanLock()}
		o.paths[path] = p
	}
	return p
}

// REQUIRES: o.mu held.
func (o *orphanGrants) dropIfIdleLocked(path string, p *orphanPath) {
	if p.users == 0 && p.unsure == nil && !p.looking && o.paths[path] == p {
		delete(o.paths, path)
	}
}

// cancelled records that an Acquire on h, last sent at epoch, was
// cancelled with its outcome unknown, and looks at h's lock now.
func (o *orphanGrants) cancelled(h *Handle, epoch uint64) {
	path := h.h.Path
	hd := h.h
	hd.Events = 0
	o.mu.Lock()
	p := o.pathLocked(path)
	if p.unsure == nil || p.unsure.epoch <= epoch {
		p.unsure = &cancelledAcquire{epoch: epoch, h: hd}
	}
	o.mu.Unlock()
	o.look(h.s, path)
}

// newEpoch looks again at every path whose cancelled Acquire was sent
// before epoch e, the epoch the session has just learned.
func (o *orphanGrants) newEpoch(s *Session, e uint64) {
	var due []string
	o.mu.Lock()
	for path, p := range o.paths {
		if p.unsure != nil && p.unsure.epoch < e {
			due = append(due, path)
		}
	}
	o.mu.Unlock()
	for _, path := range due {
		o.look(s, path)
	}
}

// look starts a give-back at path (giveBack) unless one runs, in which
// case that one looks once more when it ends. It does not block.
func (o *orphanGrants) look(s *Session, path string) {
	o.mu.Lock()
	p := o.paths[path]
	if p == nil || p.unsure == nil {
		o.mu.Unlock()
		return
	}
	if p.looking {
		p.again = true
		o.mu.Unlock()
		return
	}
	p.looking = true
	o.mu.Unlock()
	go func() {
		failed := 0
		for {
			settled, final := s.giveBack(path)
			o.mu.Lock()
			if settled || p.unsure == nil || s.ctx.Err() != nil || (!p.again && !final) || failed == giveBackTries {
				p.looking, p.again = false, false
				o.dropIfIdleLocked(path, p)
				o.mu.Unlock()
				return
			}
			p.again = false
			o.mu.Unlock()
			if final {
				// A newer master serves but the look failed: try again
				// after a pause rather than wait for the next master.
				failed++
				t := time.NewTimer(giveBackPause)
				select {
				case <-t.C:
				case <-s.ctx.Done():
					t.Stop()
				}
			}
		}
	}()
}

// giveBack looks at the session's grant on path, which has a cancelled
// Acquire, and releases it by its generation if no Lock of the session
// owns that generation. Once the answer came from a master newer than the
// cancelled Acquire's last attempt, the path's cancelled Acquire is
// settled and forgotten; otherwise it stays for the next master. It
// reports whether the path is settled, and whether the session knew a
// master newer than the Acquire when the look began (a failed look is
// then worth repeating at once).
func (s *Session) giveBack(path string) (settled, final bool) {
	ctx, cancel := context.WithTimeout(s.ctx, giveBackTimeout)
	defer cancel()
	p, err := s.orphans.enter(ctx, path)
	if err != nil {
		return false, false
	}
	defer s.orphans.leave(path, p)
	s.orphans.mu.Lock()
	ca := p.unsure
	s.orphans.mu.Unlock()
	if ca == nil {
		return true, true
	}
	final = s.Epoch() > ca.epoch
	var (
		resp     api.SequencerResponse
		answered uint64 // the epoch of the master that answered
	)
	err = s.call(ctx, api.MethodGetSequencer, func(hd api.Header) any {
		answered = hd.Epoch
		return &api.HandleRequest{Header: hd, Handle: ca.h}
	}, &resp)
	// settles: the answer came from a master newer than the Acquire's.
	settles := err == nil && answered > ca.epoch
	switch {
	case err == nil && s.ownsGrant(path, resp.Generation):
		s.c.log.Debug("client: the grant a cancelled Acquire may have left is owned by a later Acquire",
			"session", s.id, "path", path, "generation", resp.Generation, "final", settles)
	case err == nil:
		err = s.call(ctx, api.MethodRelease, func(hd api.Header) any {
			return &api.ReleaseRequest{Header: hd, Handle: ca.h, Generation: resp.Generation}
		}, &api.Empty{})
		if err != nil && !errors.Is(err, api.ErrFailedPrecondition) && !errors.Is(err, api.ErrNotFound) {
			s.c.log.Debug("client: giving back a grant no Lock owns failed; looking again at the next master",
				"session", s.id, "path", path, "generation", resp.Generation, "err", err)
			return false, final
		}
		if err == nil {
			s.c.log.Info("client: gave back a grant a cancelled Acquire left behind",
				"session", s.id, "path", path, "generation", resp.Generation, "final", settles)
		}
	case errors.Is(err, api.ErrFailedPrecondition), errors.Is(err, api.ErrNotFound):
		// The session holds nothing there (or the node is gone).
	default:
		s.c.log.Debug("client: looking for a grant a cancelled Acquire left failed; looking again at the next master",
			"session", s.id, "path", path, "err", err)
		return false, final
	}
	if answered <= ca.epoch {
		return false, false
	}
	s.orphans.mu.Lock()
	if p.unsure == ca {
		p.unsure = nil
	}
	s.orphans.mu.Unlock()
	return true, true
}

// ownsGrant reports whether a Lock of the session holds path's lock at
// generation gen as far as the session knows.
func (s *Session) ownsGrant(path string, gen uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for l := range s.mu.locks {
		if l.h.h.Path == path && l.gen == gen {
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
	if err := h.lk.lock(ctx); err != nil {
		return fmt.Errorf("release %s: %w", h.h.Path, err)
	}
	defer h.lk.unlock()
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
