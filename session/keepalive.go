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
// for a connection that carries them all: it is ParkBatch followed by
// Wait, with the results copied into out, which must have len(entries)
// results. It returns ParkBatch's and Wait's errors (then out says
// nothing).
func (m *Manager) KeepAliveBatch(ctx context.Context, entries []BatchEntry, out []BatchResult) error {
	if len(out) != len(entries) {
		panic("session: KeepAliveBatch: out and entries differ in length")
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := m.ParkBatch(entries)
	if err != nil {
		return err
	}
	res, err := b.Wait(ctx)
	if err != nil {
		return err
	}
	copy(out, res)
	return nil
}

// Batch is a batch of KeepAlives parked as one long-poll (ParkBatch):
// one timer and one wake-up per batch, and per session in it a constant
// number of map and lease-index operations; no goroutine, channel or
// timer per session. Wait must be called exactly once; Join may be called
// from other goroutines until then.
type Batch struct {
	m *Manager
	w *waiter
}

// ParkBatch accepts the KeepAlives of entries, each exactly as KeepAlive
// accepts one (acknowledged, renewed at arrival, superseding the session's
// parked KeepAlive), and parks them as one batch, answered by Wait: when
// any of its sessions has events pending, or at the answer time of
// KeepAlive (the cadence after arrival, or KeepAliveEarly before the lease
// ends) of the earliest of its entries, every entry still parked is
// answered together, each with its session's lease renewed at that instant
// and its own events, and Held counted from its own arrival. So one event
// answers the whole batch early, and every other session in it still gets
// its renewal.
//
// An entry's own failure is its result's Err, and leaves the others
// parked: ErrUnknownSession, ErrExpired (also when the session expires or
// is removed while parked), ErrBadAck (nothing renewed). An entry replaced
// by a newer KeepAlive of its session gets a Superseded Reply, and the
// batch is answered at once (a client sends that newer KeepAlive to prove
// its lease quickly). It returns ErrNotServing if the Manager does not
// serve.
func (m *Manager) ParkBatch(entries []BatchEntry) (*Batch, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.state != stateServing {
		return nil, ErrNotServing
	}
	w := &waiter{wake: make(chan struct{}, 1)}
	m.acceptLocked(w, entries)
	return &Batch{m: m, w: w}, nil
}

// Join adds entries to the batch, each accepted as ParkBatch accepts
// one (its Held counted from now), if the batch has not been answered
// yet; their results follow the batch's own in Wait's answer, in order.
// It reports false, and does nothing, if the batch was answered or ended:
// then the caller parks its entries otherwise.
func (b *Batch) Join(entries []BatchEntry) bool {
	m := b.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if b.w.closed || m.mu.state != stateServing {
		return false
	}
	if m.acceptLocked(b.w, entries) {
		b.w.signal()
	}
	return true
}

// acceptLocked accepts entries into w at now, parking each accepted one
// in its slot, and reports whether any of their sessions has events.
// REQUIRES: m.mu held; m serving; w not closed.
func (m *Manager) acceptLocked(w *waiter, entries []BatchEntry) (events bool) {
	now := m.clock.Now()
	for _, e := range entries {
		i := len(w.slots)
		w.slots = append(w.slots, slot{done: true, arrived: now})
		sl := &w.slots[i]
		s, err := m.liveLocked(e.Session)
		if err != nil {
			sl.err = err
			continue
		}
		if e.Ack > s.q.last {
			sl.err = fmt.Errorf("%w: ack %d, last event of session %d is %d", ErrBadAck, e.Ack, e.Session, s.q.last)
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
	return events
}

// Wait waits until the batch is answered (see ParkBatch) and returns a
// result per entry, those of ParkBatch then those of each Join in turn.
// It returns ErrNotServing (also if Stop is called while it waits) or
// ctx.Err() if ctx ends first (the renewals on arrival stand; the batch
// is ended, so no entry can join it any more).
func (b *Batch) Wait(ctx context.Context) ([]BatchResult, error) {
	m, w := b.m, b.w
	m.mu.Lock()
	if w.stopped {
		w.closed = true
		m.mu.Unlock()
		return nil, ErrNotServing
	}
	now := m.clock.Now()
	if w.open == 0 || w.early || w.eventsLocked() {
		m.answerLocked(w, now)
		out := m.collectLocked(w)
		m.mu.Unlock()
		return out, nil
	}
	m.keepalives.Add(1)
	t := m.clock.NewTimer(m.batchAnswerAtLocked(w).Sub(now))
	m.mu.Unlock()
	defer m.keepalives.Done()
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			w.closed = true
			for i := range w.slots {
				if sl := &w.slots[i]; !sl.done && sl.s.parked == w {
					sl.s.parked = nil
				}
			}
			m.mu.Unlock()
			return nil, ctx.Err()
		case <-w.wake:
		case <-t.C():
		}
		m.mu.Lock()
		if w.stopped {
			w.closed = true
			m.mu.Unlock()
			return nil, ErrNotServing
		}
		now = m.clock.Now()
		if w.open > 0 && !w.early && now.Before(m.batchAnswerAtLocked(w)) && !w.eventsLocked() {
			// A wake for a session that left the batch or for one that
			// joined it: wait for the answer time.
			t.Reset(m.batchAnswerAtLocked(w).Sub(now))
			m.mu.Unlock()
			continue
		}
		m.answerLocked(w, now)
		out := m.collectLocked(w)
		m.mu.Unlock()
		return out, nil
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
		if a := m.answerAtLocked(sl.s, sl.arrived); first || a.Before(at) {
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

// answerLocked answers every entry of w still parked at now, and closes w
// to joining.
// REQUIRES: m.mu held.
func (m *Manager) answerLocked(w *waiter, now monotime.Time) {
	w.closed = true
	for i := range w.slots {
		sl := &w.slots[i]
		if sl.done {
			continue
		}
		s := sl.s
		if s.parked == w && s.slot == i {
			s.parked = nil
		}
		sl.reply = m.replyLocked(s, sl.arrived, now)
		sl.done = true
		w.open--
	}
}

// collectLocked returns w's answers and errors, one per slot.
// REQUIRES: m.mu held; every slot of w done.
func (m *Manager) collectLocked(w *waiter) []BatchResult {
	out := make([]BatchResult, len(w.slots))
	for i := range w.slots {
		sl := &w.slots[i]
		out[i] = BatchResult{Reply: sl.reply, Err: sl.err}
	}
	return out
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
// batch is answered with it, at once (each renewed then): a superseded
// KeepAlive is how a client proves its lease quickly, so its answer must
// not wait for the batch's cadence.
// REQUIRES: m.mu held; s.parked != nil; the lease renewed at now.
func (m *Manager) supersedeLocked(s *sess, now monotime.Time) {
	w := s.parked
	w.early = true
	w.signal()
	m.settleLocked(s, Reply{
		LeaseTimeout: s.leaseEnd.Sub(now),
		Epoch:        m.cfg.Epoch,
		At:           now,
		Held:         now.Sub(w.slots[s.slot].arrived),
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
