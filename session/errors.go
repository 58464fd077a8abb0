package session

import "errors"

// The errors the Manager returns. Wrapped errors carry detail; compare with
// errors.Is.
var (
	// ErrNotServing: the Manager is not started, or was stopped because the
	// replica lost mastership. The client must find the current master.
	ErrNotServing = errors.New("session: not serving")
	// ErrUnknownSession: no session with that ID is known to this master.
	ErrUnknownSession = errors.New("session: unknown session")
	// ErrExpired: the session's lease ran out (its expiry is decided and
	// final), or it was closed or removed.
	ErrExpired = errors.New("session: session expired")
	// ErrBadAck: a KeepAlive acknowledged an event sequence number this
	// master never issued (for example one from a previous master's epoch).
	ErrBadAck = errors.New("session: acknowledgement beyond the last event")
	// ErrBadEvent: Publish was given an event of an unknown kind or of a kind
	// only the Manager may create.
	ErrBadEvent = errors.New("session: invalid event")
	// ErrDuplicateSession: Add or Start named a session that already exists.
	ErrDuplicateSession = errors.New("session: session already exists")
	// ErrAlreadyStarted: Start was called twice.
	ErrAlreadyStarted = errors.New("session: already started")
	// ErrBadConfig: a Config or a lease extension contradicts itself.
	ErrBadConfig = errors.New("session: invalid configuration")
)
