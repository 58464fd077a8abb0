package session

import (
	"github.com/lockcell/lockcell/api"
)

// queue holds one session's events that the client has not acknowledged, in
// sequence order. Events stay queued after they are sent and leave only when
// a KeepAlive acknowledges them, so a lost reply loses nothing: the next
// KeepAlive (carrying the old acknowledgement) gets them again.
//
// INVARIANT: Seq strictly increases along events, every Seq is in
// (acked, last], and len(events) never exceeds the Manager's MaxEvents.
type queue struct {
	events []api.Event
	last   uint64 // the highest Seq assigned; 0 before the first event
	acked  uint64 // the highest Seq acknowledged
}

// push assigns ev the next sequence number and appends it. If the queue
// already holds max events, they are replaced by a single overflow marker
// first; push reports whether that happened. REQUIRES: max >= 2.
func (q *queue) push(ev api.Event, max int) (overflowed bool) {
	if len(q.events) >= max {
		// NB: a fresh slice, so the full one (and its strings) is freed.
		q.last++
		q.events = append(make([]api.Event, 0, 2), api.Event{Kind: api.EventOverflow, Seq: q.last})
		overflowed = true
	}
	q.last++
	ev.Seq = q.last
	q.events = append(q.events, ev)
	return overflowed
}

// ack drops every event with Seq at or below seq. An acknowledgement at or
// below an earlier one changes nothing. REQUIRES: seq <= q.last.
func (q *queue) ack(seq uint64) {
	if seq <= q.acked {
		return
	}
	q.acked = seq
	n := 0
	for n < len(q.events) && q.events[n].Seq <= seq {
		n++
	}
	clear(q.events[:n]) // release the dropped events' strings
	q.events = q.events[n:]
	if len(q.events) == 0 {
		q.events = nil
	}
}

// check panics if the queue invariants are broken.
func (q *queue) check(max int) {
	if len(q.events) > max {
		panic("session: invariant broken: event queue longer than MaxEvents")
	}
	prev := q.acked
	for _, ev := range q.events {
		if ev.Seq <= prev || ev.Seq > q.last {
			panic("session: invariant broken: event sequence numbers out of order")
		}
		prev = ev.Seq
	}
}
