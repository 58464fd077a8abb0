package session

import (
	"testing"
	"testing/quick"

	"github.com/lockcell/lockcell/api"
)

// queueOp pushes an event (Ack false) or acknowledges up to Back events
// before the last one (Ack true).
type queueOp struct {
	Ack  bool
	Back uint8
}

// TestQueueDeliversOrMarks checks the queue's promise against a log of every
// event ever pushed: each event not yet acknowledged is either still queued
// unchanged, or dropped behind an overflow marker that comes after it; the
// queue never holds more than max events, and sequence numbers only grow.
func TestQueueDeliversOrMarks(t *testing.T) {
	f := func(ops []queueOp, maxSeed uint8) bool {
		limit := 2 + int(maxSeed%7)
		var q queue
		var pushed []api.Event // every event pushed, with its Seq
		acked := uint64(0)
		for i, op := range ops {
			if op.Ack {
				back := uint64(op.Back % 4)
				if back > q.last {
					back = q.last
				}
				q.ack(q.last - back)
				acked = max(acked, q.last-back) // a stale ack changes nothing
			} else {
				ev := api.Event{Kind: api.EventContentsModified, Generation: uint64(i)}
				q.push(ev, limit)
				ev.Seq = q.last
				pushed = append(pushed, ev)
			}
			q.check(limit)
			queued := map[uint64]api.Event{}
			lastMarker := uint64(0)
			for _, ev := range q.events {
				queued[ev.Seq] = ev
				if ev.Kind == api.EventOverflow {
					lastMarker = ev.Seq
				}
			}
			for _, ev := range pushed {
				if ev.Seq <= acked {
					if _, ok := queued[ev.Seq]; ok {
						t.Logf("op %d: acknowledged event %v still queued", i, ev)
						return false
					}
					continue
				}
				if got, ok := queued[ev.Seq]; ok {
					if got != ev {
						t.Logf("op %d: queued %v, pushed %v", i, got, ev)
						return false
					}
				} else if lastMarker <= ev.Seq {
					t.Logf("op %d: event %v lost without an overflow marker after it (queue %v)", i, ev, q.events)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 1000}); err != nil {
		t.Error(err)
	}
}
