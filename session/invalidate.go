package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// Invalidate publishes ev to the session (as Publish does) and waits until
// the session has acknowledged it, or the session can no longer be relying
// on what ev invalidates: its lease ran out (a client stops using its cache
// when its own, more conservative, view of the lease ends), its expiry was
// decided, or it was removed. This is how the master keeps client caches
// consistent (Chubby §2.5): it invalidates every caching session before a
// write completes.
//
// It returns nil in all those cases, ctx's error if ctx ends first, and
// ErrNotServing if the Manager stops (the write must then not complete at
// this master). A session unknown or already expiring returns nil at once:
// nothing of it is cached any more.
func (m *Manager) Invalidate(ctx context.Context, id ID, ev api.Event) error {
	seq, err := m.publish(id, ev)
	switch {
	case errors.Is(err, ErrUnknownSession), errors.Is(err, ErrExpired):
		return nil
	case err != nil:
		return err
	}
	for {
		m.mu.Lock()
		if m.mu.state != stateServing {
			m.mu.Unlock()
			return ErrNotServing
		}
		s, ok := m.mu.sessions[id]
		if !ok || s.expiring || s.q.acked >= seq {
			m.mu.Unlock()
			return nil
		}
		now := m.clock.Now()
		left := s.leaseEnd.Sub(now)
		if left <= 0 {
			m.mu.Unlock()
			return nil
		}
		changed := m.ackChangedLocked()
		m.mu.Unlock()
		t := m.clock.NewTimer(left)
		select {
		case <-changed:
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-m.stop:
			t.Stop()
			return ErrNotServing
		}
		t.Stop()
	}
}

// ackChangedLocked returns a channel closed at the next change that can end
// an Invalidate wait: an acknowledgement, a removal, an expiry decision.
// REQUIRES: m.mu held.
func (m *Manager) ackChangedLocked() <-chan struct{} {
	if m.mu.ackChanged == nil {
		m.mu.ackChanged = make(chan struct{})
	}
	return m.mu.ackChanged
}

// broadcastAckLocked wakes every Invalidate wait to look again.
// REQUIRES: m.mu held.
func (m *Manager) broadcastAckLocked() {
	if m.mu.ackChanged != nil {
		close(m.mu.ackChanged)
		m.mu.ackChanged = nil
	}
}

// publish is Publish returning the event's sequence number.
func (m *Manager) publish(id ID, ev api.Event) (uint64, error) {
	switch ev.Kind {
	case api.EventContentsModified, api.EventChildAdded, api.EventChildRemoved,
		api.EventLockAcquired, api.EventConflictingLock, api.EventHandleInvalid:
	default:
		return 0, fmt.Errorf("%w: kind %v", ErrBadEvent, ev.Kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.liveLocked(id)
	if err != nil {
		return 0, err
	}
	if s.q.push(ev, m.cfg.MaxEvents) {
		m.mu.overflows++
		m.log.Warn("session event queue overflowed; client must re-read",
			"session", id, "max_events", m.cfg.MaxEvents)
	}
	if s.parked != nil {
		s.parked.signal()
	}
	m.checkLocked(s)
	return s.q.last, nil
}
