package session

import (
	"github.com/lockcell/lockcell/internal/monotime"
)

// run is the expiry goroutine: decide what is due, hand the decisions out,
// sleep until the next deadline or a poke, repeat until Stop.
func (m *Manager) run() {
	defer close(m.loopDone)
	t := m.clock.NewTimer(0)
	defer t.Stop()
	for {
		now := m.clock.Now()
		due, next, ok := m.decide(now)
		for _, d := range due {
			select {
			case m.decisions <- d:
			case <-m.stop:
				return
			}
		}
		if len(due) > 0 {
			continue // handing out may have taken a while; look again
		}
		if ok {
			t.Reset(next.Sub(now))
		} else {
			t.Stop()
		}
		select {
		case <-t.C():
		case <-m.wake:
		case <-m.stop:
			return
		}
	}
}

// decide makes the expiry decisions due at now and returns them with the
// next deadline. Each decided session is marked expiring and leaves the
// lease index; its parked KeepAlive returns ErrExpired.
func (m *Manager) decide(now monotime.Time) (due []Decision, next monotime.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.state != stateServing {
		return nil, 0, false
	}
	popped := m.mu.leases.popDue(now)
	for _, s := range popped {
		s.expiring = true // all at once: they all left the lease index
	}
	for _, s := range popped {
		m.broadcastAckLocked()
		if s.parked != nil {
			m.releaseLocked(s, ErrExpired)
		}
		m.clearFailoverLocked(s)
		m.mu.expiries++
		due = append(due, Decision{Session: s.id, LeaseEnd: s.leaseEnd})
		m.log.Debug("session lease ran out; expiry decided",
			"session", s.id, "late_by", now.Sub(s.leaseEnd))
		m.checkLocked(s)
	}
	next, ok = m.mu.leases.next(now)
	return due, next, ok
}
