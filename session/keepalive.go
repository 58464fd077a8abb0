package session

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// Reply is the master's answer to a KeepAlive.
type Reply struct {
	// LeaseTimeout is how long the session's lease runs from the moment the
	// master answered. It is relative because clocks differ between
	// machines; the client measures it from when it sent the request, which
	// can only shorten its view of the lease.
	LeaseTimeout time.Duration
	// Events are the session's unacknowledged events in Seq order. They are
	// sent again on every reply until a KeepAlive acknowledges them.
	Events []api.Event
	// Epoch is the master epoch (Config.Epoch) the sequence numbers belong to.
	Epoch uint64
	// At is when, on the Manager's clock, the reply was made: LeaseTimeout
	// runs from it.
	At monotime.Time
	// Held is how long the Manager held the request: At minus its arrival,
	// both on the Manager's clock. The cell tells the client, so the client
	// can count the lease from later than its send time (send + Held +
	// LeaseTimeout) without ever overestimating it.
	Held time.Duration
	// Cadence is Config.KeepAliveCadence: the longest this master parks a
	// KeepAlive (zero: until shortly before the lease ends).
	Cadence time.Duration
	// Superseded: a newer KeepAlive of the same session replaced this
	// parked one. The reply carries no events (the newer one gets them),
	// but its lease is as honest as any reply's: the newer KeepAlive's
	// arrival, At, renewed the lease, and LeaseTimeout runs from At.
	Superseded bool
}

// KeepAlive is the session's long-poll. It acknowledges the events with Seq
// at or below ack, renews the lease at once (a KeepAlive arriving proves the
// client alive), and then parks until either events are pending for the
// session, the lease is Config.KeepAliveEarly from its end, or (if set)
// Config.KeepAliveCadence has passed since its arrival. Its answer
// renews the lease again to a full grant from the moment of answering and
// carries every unacknowledged event.
//
// ack refers to sequence numbers of this Manager's stream (Reply.Epoch); the
// client starts again from 0 after a fail-over. Only one KeepAlive per
// session is parked: a new one replaces the old, which returns at once a
// Reply marked Superseded, with the lease as renewed by the new one's
// arrival and no events. A superseded KeepAlive is a client's quickest
// proof of its lease (it sends a second KeepAlive to get one), so it is
// answered with the lease the master really holds, not with an error the
// client would have to read a lease length into.
//
// It returns ctx.Err() if ctx ends first (the renewal on arrival stands, the
// events stay queued); ErrNotServing, also when Stop is called while it is
// parked; ErrUnknownSession; ErrExpired if the session's expiry is decided or
// it is removed, also while parked; and an error wrapping ErrBadAck, without
// renewing anything, if ack is beyond the last sequence number issued.
func (m *Manager) KeepAlive(ctx context.Context, id ID, ack uint64) (Reply, error) {
	if err := ctx.Err(); err != nil {
		return Reply{}, err
	}
	m.mu.Lock()
	s, err := m.liveLocked(id)
	if err != nil {
		m.mu.Unlock()
		return Reply{}, err
	}
	if ack > s.q.last {
		m.mu.Unlock()
		return Reply{}, fmt.Errorf("%w: ack %d, last event of session %d is %d", ErrBadAck, ack, id, s.q.last)
	}
	m.mu.keepalives++
	now := m.clock.Now()
	s.q.ack(ack)
	m.broadcastAckLocked()
	if s.failoverSeq != 0 && ack >= s.failoverSeq {
		m.clearFailoverLocked(s)
	}
	m.renewLocked(s, now)
	if s.parked != nil {
		m.supersedeLocked(s, now)
	}
	arrived := now
	if len(s.q.events) > 0 {
		r := m.replyLocked(s, arrived, now)
		m.mu.Unlock()
		return r, nil
	}
	w := &waiter{wake: make(chan struct{}, 1), arrived: arrived}
	s.parked = w
	answerAt := m.answerAtLocked(s, arrived)
	m.checkLocked(s)
	m.keepalives.Add(1)
	m.mu.Unlock()
	defer m.keepalives.Done()

	t := m.clock.NewTimer(answerAt.Sub(now))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			if s.parked == w {
				s.parked = nil
			}
			m.mu.Unlock()
			return Reply{}, ctx.Err()
		case <-w.wake:
		case <-t.C():
		}
		m.mu.Lock()
		if w.err != nil {
			m.mu.Unlock()
			return Reply{}, w.err
		}
		if w.superseded != nil {
			m.mu.Unlock()
			return *w.superseded, nil
		}
		now = m.clock.Now()
		answerAt = m.answerAtLocked(s, arrived)
		if len(s.q.events) > 0 || !now.Before(answerAt) {
			s.parked = nil
			r := m.replyLocked(s, arrived, now)
			m.mu.Unlock()
			return r, nil
		}
		// A fire from before a renewal: wait for the new answer time.
		t.Reset(answerAt.Sub(now))
		m.mu.Unlock()
	}
}

// answerAtLocked is when a KeepAlive of s that arrived at arrived is
// answered if no event comes first: KeepAliveEarly before the lease ends,
// or the cadence after its arrival if that is sooner.
// REQUIRES: m.mu held.
func (m *Manager) answerAtLocked(s *sess, arrived monotime.Time) monotime.Time {
	at := s.leaseEnd.Add(-m.cfg.KeepAliveEarly)
	if c := m.cadenceLocked(); c > 0 {
		at = min(at, arrived.Add(c))
	}
	return at
}

// cadenceLocked is the KeepAlive cadence now: Config.KeepAliveCadence,
// lengthened in proportion while a load extension lengthens the lease
// (SetLeaseExtension), so that a loaded master processes fewer
// KeepAlives as Chubby's does, and clients keep the same share of their
// lease in hand. Zero if no cadence is set.
// REQUIRES: m.mu held.
func (m *Manager) cadenceLocked() time.Duration {
	c := m.cfg.KeepAliveCadence
	if c <= 0 || m.mu.extension <= 0 {
		return c
	}
	return time.Duration(float64(c) * float64(m.grantLocked()) / float64(m.cfg.Lease))
}

// supersedeLocked answers the session's parked KeepAlive, replaced at now
// by a newer one whose arrival renewed the lease: the lease is counted
// from now, and the events stay queued for the newer one.
// REQUIRES: m.mu held; s.parked != nil; the lease renewed at now.
func (m *Manager) supersedeLocked(s *sess, now monotime.Time) {
	w := s.parked
	s.parked = nil
	w.superseded = &Reply{
		LeaseTimeout: s.leaseEnd.Sub(now),
		Epoch:        m.cfg.Epoch,
		At:           now,
		Held:         now.Sub(w.arrived),
		Cadence:      m.cadenceLocked(),
		Superseded:   true,
	}
	w.signal()
}

// replyLocked renews the session's lease and builds the answer to a
// KeepAlive that arrived at arrived.
// REQUIRES: m.mu held; s live and not parked.
func (m *Manager) replyLocked(s *sess, arrived, now monotime.Time) Reply {
	m.renewLocked(s, now)
	m.checkLocked(s)
	return Reply{
		LeaseTimeout: s.leaseEnd.Sub(now),
		Events:       slices.Clone(s.q.events),
		Epoch:        m.cfg.Epoch,
		At:           now,
		Held:         now.Sub(arrived),
		Cadence:      m.cadenceLocked(),
	}
}
