package client

import (
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// lapseIfDueLocked moves a safe session whose local lease has run out into
// jeopardy and returns the locks it held (nil if nothing changed); the
// caller must pass them to afterLapse once s.mu is released. Everything
// that answers "is the session safe" or "is this lock held" calls it first,
// so that the answer does not wait for the KeepAlive loop to run.
// REQUIRES: s.mu held.
func (s *Session) lapseIfDueLocked() []*Lock {
	if !exactLease || s.mu.state != StateSafe || s.clock.Now().Before(s.mu.leaseEnd) {
		return nil
	}
	return s.jeopardyLocked()
}

// jeopardyLocked makes the move from safe to jeopardy: the held locks leave
// the session (their contexts must be cancelled by afterLapse), the cache
// is emptied and off, waiters wake and the event is queued. It returns the
// locks, never nil. The cache and the event change under s.mu, so that a
// concurrent return to safe (extendLease) cannot overtake them.
// REQUIRES: s.mu held; s.mu.state is StateSafe.
func (s *Session) jeopardyLocked() []*Lock {
	s.mu.state = StateJeopardy
	locks := s.takeLocksLocked(ErrJeopardy)
	s.changedLocked()
	s.cache.disable()
	s.emit(Event{Kind: EventJeopardy})
	return locks
}

// afterLapse finishes a move to jeopardy that jeopardyLocked made (locks is
// its result; nil means there was none): it cancels the locks' contexts and
// wakes the loop, which then looks for a master.
func (s *Session) afterLapse(locks []*Lock) {
	if locks == nil {
		return
	}
	for _, l := range locks {
		l.lost(ErrJeopardy)
	}
	s.nudge()
}

func (s *Session) shorten(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - s.cfg.Drift))
}

// takeLocksLocked empties the session's set of held locks, recording cause
// as the reason each may be lost, and returns them (never nil).
// REQUIRES: s.mu held.
func (s *Session) takeLocksLocked(cause error) []*Lock {
	out := make([]*Lock, 0, len(s.mu.locks))
	for l := range s.mu.locks {
		l.gone = cause
		out = append(out, l)
	}
	clear(s.mu.locks)
	return out
}

// addLock records a granted lock as held. If the session is not safe (as
// of now) the lock may already be lost: it is not added, and the reason is
// returned.
func (s *Session) addLock(l *Lock) error {
	s.mu.Lock()
	lapsed := s.lapseIfDueLocked()
	var cause error
	switch s.mu.state {
	case StateSafe:
		s.mu.locks[l] = struct{}{}
	case StateJeopardy:
		cause = ErrJeopardy
	default:
		cause = s.mu.err
	}
	if cause != nil {
		l.gone = cause
	}
	s.mu.Unlock()
	s.afterLapse(lapsed)
	return cause
}

// removeLock forgets a lock that is no longer held, for cause.
func (s *Session) removeLock(l *Lock, cause error) {
	s.mu.Lock()
	if _, ok := s.mu.locks[l]; ok {
		delete(s.mu.locks, l)
		l.gone = cause
	}
	s.mu.Unlock()
}

// lockLoss returns nil while l is held as far as the session knows as of
// now, and otherwise why it may be lost. It is what makes a Lock's context
// exact: it lapses the session first if its lease has run out.
func (s *Session) lockLoss(l *Lock) error {
	s.mu.Lock()
	lapsed := s.lapseIfDueLocked()
	_, held := s.mu.locks[l]
	cause := l.gone
	s.mu.Unlock()
	if !held && cause == nil {
		// INVARIANT: a lock leaves the set only with its reason recorded.
		cause = ErrJeopardy
	}
	if !held {
		// Cancel this lock before the others, so that the caller sees the
		// loss however the rest of afterLapse is delayed.
		l.lost(cause)
	}
	s.afterLapse(lapsed)
	if held {
		return nil
	}
	return cause
}

// loopState returns the session's state for the loop: like State, it
// lapses the session if the lease has run out (in every build: this is the
// KeepAlive loop's own timer-driven transition).
func (s *Session) loopState() State {
	s.mu.Lock()
	var lapsed []*Lock
	if s.mu.state == StateSafe && !s.clock.Now().Before(s.mu.leaseEnd) {
		lapsed = s.jeopardyLocked()
	}
	st := s.mu.state
	s.mu.Unlock()
	s.afterLapse(lapsed)
	return st
}

// extendLease records a proof, sent at from, that the lease runs until
// end: it moves the local lease end forward to end; if the session was in
// jeopardy and the lease now runs, it is safe again, and extendLease
// reports true. Locks lost in jeopardy stay lost.
//
// A proof extends a safe session's lease only if the lease is continuous:
// it had not run out when the proof's request was sent, nor has it now. If
// it had — the process was paused past the lease end, or the reply came
// after it, and nobody happened to look in between — the session lapsed at
// that deadline whatever the reply says: extendLease first makes the move
// to jeopardy that the first look would have made (every held lock lost
// for good, its context cancelled with ErrJeopardy) and only then takes
// the session back to safe on the fresh lease. So the answers to "is the
// session safe, is the lock held" depend on the clock alone, never on
// whether anyone asked while the lease had run out: a lock context that
// was Done by its deadline stays Done.
func (s *Session) extendLease(from, end monotime.Time) bool {
	s.mu.Lock()
	var lapsed []*Lock
	if exactLease && s.mu.state == StateSafe {
		if now := s.clock.Now(); !from.Before(s.mu.leaseEnd) || !now.Before(s.mu.leaseEnd) {
			lapsed = s.jeopardyLocked()
		}
	}
	if end.After(s.mu.leaseEnd) {
		s.mu.leaseEnd = end
	}
	again := s.mu.state == StateJeopardy && s.clock.Now().Before(s.mu.leaseEnd)
	if again {
		s.mu.state = StateSafe
		s.changedLocked()
		s.cache.enable()
		s.emit(Event{Kind: EventSafe})
	}
	s.mu.Unlock()
	if lapsed != nil {
		for _, l := range lapsed {
			l.lost(ErrJeopardy)
		}
		s.c.log.Info("client: session lapsed before a late KeepAlive reply", "session", s.id)
	}
	if again {
		s.wakeWatchers("")
	}
	return again
}
