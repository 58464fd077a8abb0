package api

import "strconv"

// EventKind says what an Event reports. The zero value is not a kind: an
// Event with Kind 0 is malformed.
//
// Chubby §2.5 lists the events a client may subscribe to when it opens a
// handle; lockcell keeps the ones the master sends. Client-side states
// (jeopardy, safe, expired) are the client library's and never travel.
type EventKind uint8

// The event kinds. Numbers are stable on the wire and only appended.
const (
	// EventContentsModified: the contents of the node at Path were written;
	// Generation is its new content generation. Cached contents are stale.
	EventContentsModified EventKind = 1
	// EventChildAdded: the directory at Path gained the child named Child.
	EventChildAdded EventKind = 2
	// EventChildRemoved: the directory at Path lost the child named Child.
	EventChildRemoved EventKind = 3
	// EventLockAcquired: the lock of the node at Path was acquired (by anyone
	// holding a handle that asked for this event); Generation is the lock
	// generation of the grant.
	EventLockAcquired EventKind = 4
	// EventConflictingLock: another session requested, in a conflicting mode,
	// the lock of the node at Path that this session holds at Generation.
	// A holder may release early in answer (Chubby uses it for caching locks).
	EventConflictingLock EventKind = 5
	// EventHandleInvalid: the handle Handle (on Path) is no longer valid, for
	// example because its node was deleted; any lock held through it is gone.
	EventHandleInvalid EventKind = 6
	// EventMasterFailover: a new master with epoch Epoch took over. Events
	// may have been lost: the client flushes its caches and re-reads
	// (Chubby §2.9). The client acknowledges it like any other event.
	EventMasterFailover EventKind = 7
	// EventOverflow: the master dropped this session's unacknowledged events
	// because its per-session queue was full. As after a fail-over, the client
	// flushes its caches and re-reads what it watches.
	EventOverflow EventKind = 8
)

var eventKindNames = [...]string{
	EventContentsModified: "contents-modified",
	EventChildAdded:       "child-added",
	EventChildRemoved:     "child-removed",
	EventLockAcquired:     "lock-acquired",
	EventConflictingLock:  "conflicting-lock",
	EventHandleInvalid:    "handle-invalid",
	EventMasterFailover:   "master-failover",
	EventOverflow:         "overflow",
}

// String returns the kind's name, such as "contents-modified", or
// "event-kind(N)" for a number that is not a kind.
func (k EventKind) String() string {
	if int(k) < len(eventKindNames) && eventKindNames[k] != "" {
		return eventKindNames[k]
	}
	return "event-kind(" + strconv.FormatUint(uint64(k), 10) + ")"
}

// Event is one notification the master delivers to a session on a KeepAlive
// reply. Delivery is at least once: the master numbers each session's events
// with Seq (increasing within one master epoch) and re-sends every event the
// client has not yet acknowledged by sequence number.
//
// Fields that do not apply to a kind are zero.
type Event struct {
	// Kind says what happened.
	Kind EventKind `msgpack:"k"`
	// Seq is the event's number in its session's stream for the current
	// master epoch; the master assigns it.
	Seq uint64 `msgpack:"s"`
	// Path is the node the event concerns (for child events, the directory).
	Path string `msgpack:"p,omitempty"`
	// Child is the name (not the path) of the child added or removed.
	Child string `msgpack:"c,omitempty"`
	// Handle is the handle the event is delivered for, 0 for session-wide
	// events (fail-over, overflow).
	Handle uint64 `msgpack:"h,omitempty"`
	// Instance is the instance number of the node at Path.
	Instance uint64 `msgpack:"in,omitempty"`
	// Generation is the content generation (contents-modified) or the lock
	// generation (lock-acquired, conflicting-lock).
	Generation uint64 `msgpack:"g,omitempty"`
	// Epoch is the new master's epoch (master-failover).
	Epoch uint64 `msgpack:"e,omitempty"`
}

// String returns a short human form such as
// "#3 contents-modified /ls/a (gen 7)".
func (e Event) String() string {
	s := "#" + strconv.FormatUint(e.Seq, 10) + " " + e.Kind.String()
	if e.Path != "" {
		s += " " + e.Path
	}
	if e.Child != "" {
		s += " child " + e.Child
	}
	if e.Handle != 0 {
		s += " handle " + strconv.FormatUint(e.Handle, 10)
	}
	if e.Generation != 0 {
		s += " (gen " + strconv.FormatUint(e.Generation, 10) + ")"
	}
	if e.Epoch != 0 {
		s += " (epoch " + Epoch(e.Epoch).String() + ")"
	}
	return s
}
