package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lockcell/lockcell/api"
)

// Mutex is an exclusive lock on one node: Lock waits, TryLock does not.
// The node is created (permanent, empty) if missing. The *Lock that Lock
// returns is the grant: it carries the sequencer to hand to protected
// servers and a context cancelled the moment the lock may be lost, and its
// Release gives the mutex back. There is no Mutex.Unlock: a release names
// the grant it ends (its generation), so a late release of an old grant
// can never free a newer one taken through the same Mutex.
//
// A Mutex belongs to one session and is safe for concurrent use; it holds
// at most one grant at a time. Lock and TryLock on a Mutex that is already
// held return an error wrapping api.ErrFailedPrecondition; once the grant
// may have been lost (its context ended) they acquire again.
type Mutex struct {
	s    *Session
	path string
	opts OpenOptions

	// lk serializes Lock and TryLock; it is held across their calls to
	// the cell, so it is a chanLock (see there), and it guards h.
	lk chanLock
	h  *Handle
	mu sync.Mutex
	// held is the last grant. REQUIRES: mu held (and lk to set it).
	held *Lock
}

// NewMutex returns a mutex on the node at path.
func NewMutex(s *Session, path string) *Mutex {
	return &Mutex{s: s, path: path, opts: OpenOptions{Create: true}, lk: newChanLock()}
}

// NewMutexWithOptions is NewMutex with the options used to open (and
// create) the node, for example a lock-delay.
func NewMutexWithOptions(s *Session, path string, opts OpenOptions) *Mutex {
	return &Mutex{s: s, path: path, opts: opts, lk: newChanLock()}
}

// Path returns the mutex's node path.
func (m *Mutex) Path() string { return m.path }

// Lock waits until the mutex is granted or ctx ends.
func (m *Mutex) Lock(ctx context.Context) (*Lock, error) { return m.lock(ctx, true) }

// TryLock takes the mutex if it is free now and otherwise returns at once an
// error wrapping ErrLocked.
func (m *Mutex) TryLock(ctx context.Context) (*Lock, error) { return m.lock(ctx, false) }

func (m *Mutex) lock(ctx context.Context, wait bool) (*Lock, error) {
	if err := m.lk.lock(ctx); err != nil {
		return nil, fmt.Errorf("lock %s: %w", m.path, err)
	}
	defer m.lk.unlock()
	if m.Held() != nil {
		return nil, fmt.Errorf("lock %s: %w: this mutex is already held", m.path, api.ErrFailedPrecondition)
	}
	// A grant that may have been lost is replaced once Acquire succeeds:
	// it takes the lock again or, if the session turned out to hold it
	// still, returns it anew with a context of the current lease.
	if m.h == nil {
		h, err := m.s.Open(ctx, m.path, m.opts)
		if err != nil {
			return nil, err
		}
		m.h = h
	}
	var (
		l   *Lock
		err error
	)
	if wait {
		l, err = m.h.Acquire(ctx, api.LockExclusive)
	} else {
		l, err = m.h.TryAcquire(ctx, api.LockExclusive)
	}
	if errors.Is(err, api.ErrNotFound) {
		// The node was deleted since the handle was opened: open afresh
		// next time.
		m.h = nil
	}
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.held = l
	m.mu.Unlock()
	return l, nil
}

// Held returns the current grant, or nil if there is none or it may have
// been lost (exactly, as of now: see Lock).
func (m *Mutex) Held() *Lock {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held == nil || m.held.ctx.Err() != nil {
		return nil
	}
	return m.held
}
