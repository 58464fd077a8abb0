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
//
// It is KeepAliveBatch with a batch of one.
func (m *Manager) KeepAlive(ctx context.Context, id ID, ack uint64) (Reply, error) {
	var out [1]BatchResult
	if err := m.KeepAliveBatch(ctx, []BatchEntry{{Session: id, Ack: ack}}, out[:]); err != nil {
		return Reply{}, err
	}
	return out[0].Reply, out[0].Err
}

// BatchEntry is one session's KeepAlive in a batch (see KeepAliveBatch).
type BatchEntry struct {
	Session ID
	Ack     uint64
}

// BatchResult is the answer to one BatchEntry: Err, or Reply if Err is nil.
type BatchResult struct {
	Reply Reply
	Err   error
}

// KeepAliveBatch serves the KeepAlives of many sessions as one long-poll,
// for a connection that carries them all: each entry is accepted exactly
// as KeepAlive accepts one (acknowledged, renewed at arrival, superseding
// the session's parked KeepAlive), and then the batch parks once, under one
// timer, until any of its sessions has events pending or the answer time
// of KeepAlive (the cadence after arrival, or KeepAliveEarly before the
// earliest lease end) comes. Then every entry still parked is answered
// together, each with its session's lease renewed at that instant and its
// own events; so one event answers the whole batch early, and every other
// session in it still gets its renewal.
//
// An entry's own failure is its result's Err, and leaves the others
// parked: ErrUnknownSession, ErrExpired (also when the session expires or
// is removed while parked), ErrBadAck (nothing renewed), and, for an entry
// replaced by a newer KeepAlive of its session, a Superseded Reply at once
// in its result. out must have len(entries) results; KeepAliveBatch fills
// it. It returns ErrNotServing (also if Stop is called while it is parked,
// with every result's Err ErrNotServing) or ctx.Err() if ctx ends first (the
// renewals on arrival stand); then out says nothing.
//
// The work is one timer and one wake-up per batch, and per session in it
// a constant number of map and lease-index operations: no goroutine,
// channel or timer per session.
func (m *Manager) KeepAliveBatch(ctx context.Context, entries []BatchEntry, out []BatchResult) error {
	if len(out) != len(entries) {
		panic("session: KeepAliveBatch: out and entries differ in length")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.mu.state != stateServing {
		m.mu.Unlock()
		return ErrNotServing
	}
	now := m.clock.Now()
	w := &waiter{wake: make(chan struct{}, 1), arrived: now, slots: make([]slot, len(entries))}
	events := false
	for i, e := range entries {
		sl := &w.slots[i]
		sl.done = true
		s, err := m.liveLocked(e.Session)
		if err != nil {
			out[i].Err = err
			continue
		}
		if e.Ack > s.q.last {
			out[i].Err = fmt.Errorf("%w: ack %d, last event of session %d is %d", ErrBadAck, e.Ack, e.Session, s.q.last)
			continue
		}
		m.mu.keepalives++
		s.q.ack(e.Ack)
		if s.failoverSeq != 0 && e.Ack >= s.failoverSeq {
			m.clearFailoverLocked(s)
		}
		m.renewLocked(s, now)
		if s.parked != nil {
			m.supersedeLocked(s, now)
		}
		sl.s, sl.done = s, false
		s.parked, s.slot = w, i
		w.open++
		events = events || len(s.q.events) > 0
	}
	m.broadcastAckLocked()
	if w.open == 0 || events {
		m.answerLocked(w, now)
		m.collectLocked(w, out)
		m.mu.Unlock()
		return nil
	}
	answerAt := m.batchAnswerAtLocked(w)
	m.keepalives.Add(1)
	m.mu.Unlock()
	defer m.keepalives.Done()

	t := m.clock.NewTimer(answerAt.Sub(now))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			for i := range w.slots {
				if sl := &w.slots[i]; !sl.done && sl.s.parked == w {
					sl.s.parked = nil
				}
			}
			m.mu.Unlock()
			return ctx.Err()
		case <-w.wake:
		case <-t.C():
		}
		m.mu.Lock()
		if w.stopped {
			m.mu.Unlock()
			return ErrNotServing
		}
		now = m.clock.Now()
		if w.open > 0 && now.Before(m.batchAnswerAtLocked(w)) && !w.eventsLocked() {
			// A fire from before a renewal, or a wake for a session that
			// left the batch: wait for the answer time.
			t.Reset(m.batchAnswerAtLocked(w).Sub(now))
			m.mu.Unlock()
			continue
		}
		m.answerLocked(w, now)
		m.collectLocked(w, out)
		m.mu.Unlock()
		return nil
	}
}

// batchAnswerAtLocked is when the parked batch w is answered if no event
// comes first: the earliest answer time (answerAtLocked) of its sessions
// still parked.
// REQUIRES: m.mu held; w.open > 0.
func (m *Manager) batchAnswerAtLocked(w *waiter) monotime.Time {
	var at monotime.Time
	first := true
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.done {
			continue
		}
		if a := m.answerAtLocked(sl.s, w.arrived); first || a.Before(at) {
			at, first = a, false
		}
	}
	return at
}

// eventsLocked reports whether a session still parked in w has events.
// REQUIRES: m.mu held.
func (w *waiter) eventsLocked() bool {
	for i := range w.slots {
		if sl := &w.slots[i]; !sl.done && len(sl.s.q.events) > 0 {
			return true
		}
	}
	return false
}

// answerLocked answers every entry of w still parked at now.
// REQUIRES: m.mu held.
func (m *Manager) answerLocked(w *waiter, now monotime.Time) {
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.done {
			continue
		}
		s := sl.s
		if s.parked == w && s.slot == i {
			s.parked = nil
		}
		sl.reply = m.replyLocked(s, w.arrived, now)
		sl.done = true
		w.open--
	}
}

// collectLocked copies w's answers and errors into out.
// REQUIRES: m.mu held; every slot of w done.
func (m *Manager) collectLocked(w *waiter, out []BatchResult) {
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.s == nil {
			continue // refused at arrival: out[i].Err is set
		}
		out[i] = BatchResult{Reply: sl.reply, Err: sl.err}
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
// from now, and the events stay queued for the newer one. The rest of its
// batch stays parked.
// REQUIRES: m.mu held; s.parked != nil; the lease renewed at now.
func (m *Manager) supersedeLocked(s *sess, now monotime.Time) {
	w := s.parked
	m.settleLocked(s, Reply{
		LeaseTimeout: s.leaseEnd.Sub(now),
		Epoch:        m.cfg.Epoch,
		At:           now,
		Held:         now.Sub(w.arrived),
		Cadence:      m.cadenceLocked(),
		Superseded:   true,
	}, nil)
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
