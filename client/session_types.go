package client

import (
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// State is a session's state as the client library sees it (Chubby §2.8).
type State uint8

// The session states.
const (
	// StateSafe: the local lease runs; calls go through.
	StateSafe State = iota + 1
	// StateJeopardy: the local lease ran out without a KeepAlive reply. The
	// cache is emptied and off, every held lock's context is cancelled,
	// calls wait, and the library looks for a master for the grace period.
	// The session is in jeopardy from the instant the lease runs out on the
	// session's monotonic clock, whether or not any goroutine has run since.
	StateJeopardy
	// StateExpired: the session ended (the master expired it, or the grace
	// period ran out). Final.
	StateExpired
	// StateClosed: the owner closed the session. Final.
	StateClosed
)

// String returns "safe", "jeopardy", "expired" or "closed".
func (s State) String() string {
	switch s {
	case StateSafe:
		return "safe"
	case StateJeopardy:
		return "jeopardy"
	case StateExpired:
		return "expired"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// EventKind says what an Event reports.
type EventKind uint8

// The event kinds. Jeopardy, Safe and Expired are the library's own; the
// others come from the master.
const (
	// EventJeopardy: the local lease ran out; the session is in jeopardy.
	EventJeopardy EventKind = iota + 1
	// EventSafe: the session survived jeopardy.
	EventSafe
	// EventExpired: the session ended (expired or closed).
	EventExpired
	// EventFailover: a new master took over; Node.Epoch is its epoch. Events
	// may have been lost: re-read what you watch.
	EventFailover
	// EventNode: a node event (Node says which), including
	// api.EventHandleInvalid and api.EventOverflow.
	EventNode
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventJeopardy:
		return "jeopardy"
	case EventSafe:
		return "safe"
	case EventExpired:
		return "expired"
	case EventFailover:
		return "failover"
	case EventNode:
		return "node"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one session event.
type Event struct {
	Kind EventKind
	// Node is the master's event for EventNode and EventFailover.
	Node api.Event
}

// String returns a short human form.
func (e Event) String() string {
	if e.Kind == EventNode || e.Kind == EventFailover {
		return e.Kind.String() + " " + e.Node.String()
	}
	return e.Kind.String()
}
