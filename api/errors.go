package api

import (
	"errors"
	"fmt"
	"time"
)

// Code classifies an error on the wire. Codes are stable: a code's number
// never changes meaning, and new codes are only appended.
type Code uint16

// The error codes. OK is the zero value and never appears inside an *Error.
const (
	// OK means success; an *Error never carries it.
	OK Code = iota
	// InvalidArgument: the request is malformed whatever the state (bad path,
	// bad name, unknown mode, contents on a directory, ...).
	InvalidArgument
	// NotFound: the named node, session or tenant does not exist.
	NotFound
	// AlreadyExists: a must-create open named an existing node, or a tenant
	// already exists.
	AlreadyExists
	// PermissionDenied: the caller is authenticated but an ACL or the tenant
	// boundary forbids the operation.
	PermissionDenied
	// Unauthenticated: the request carries no usable principal.
	Unauthenticated
	// ResourceExhausted: a tenant quota would be exceeded; the message names
	// the quota and its limit.
	ResourceExhausted
	// FailedPrecondition: the state forbids the operation (directory not
	// empty, compare-and-set mismatch, not the lock holder, ...).
	FailedPrecondition
	// Locked: the lock is held by someone else in a conflicting mode.
	Locked
	// LockDelay: the lock is free but in lock-delay after its holder's session
	// expired; Error.Until says when the delay ends.
	LockDelay
	// Aborted: the operation was abandoned (for example a conflict with a
	// concurrent operation); retrying may succeed.
	Aborted
	// NotMaster: the replica that received the request is not the master;
	// Error.Master may name the master.
	NotMaster
	// Failover: the request names a stale master epoch; the client must
	// re-establish its session with the new master.
	Failover
	// SessionExpired: the session named by the request has ended (expired or
	// closed). Session IDs are never reused.
	SessionExpired
	// Unavailable: the cell cannot serve now (no quorum, shutting down).
	Unavailable
	// Canceled: the caller canceled the request.
	Canceled
	// DeadlineExceeded: the request's deadline passed.
	DeadlineExceeded
	// Internal: a broken invariant or storage failure inside the cell.
	Internal
	// TooLarge: a value (contents, frame, batch) exceeds its size limit.
	TooLarge

	numCodes // keep last
)

var codeNames = [...]string{
	OK:                 "ok",
	InvalidArgument:    "invalid argument",
	NotFound:           "not found",
	AlreadyExists:      "already exists",
	PermissionDenied:   "permission denied",
	Unauthenticated:    "unauthenticated",
	ResourceExhausted:  "resource exhausted",
	FailedPrecondition: "failed precondition",
	Locked:             "locked",
	LockDelay:          "lock delay",
	Aborted:            "aborted",
	NotMaster:          "not master",
	Failover:           "failover",
	SessionExpired:     "session expired",
	Unavailable:        "unavailable",
	Canceled:           "canceled",
	DeadlineExceeded:   "deadline exceeded",
	Internal:           "internal",
	TooLarge:           "too large",
}

// String returns the code's name, for example "not found".
func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint16(c))
}

// Valid reports whether c is a known code.
func (c Code) Valid() bool { return c < numCodes }

// Error is the error value of the wire contract. Two *Error values match
// under errors.Is when their codes are equal, whatever their messages, so
// errors.Is(err, api.ErrNotFound) holds for every not-found error.
type Error struct {
	// Code classifies the error.
	Code Code `msgpack:"c"`
	// Msg is a human-readable explanation; it never carries secrets.
	Msg string `msgpack:"m,omitempty"`
	// Until, for LockDelay, is when the delay ends, in unix nanoseconds of
	// the cell's time (the masters' command stamps: close to the wall
	// clock, but while a lock-delay runs it advances with the master's
	// monotonic clock, so it may differ from the caller's clock).
	Until int64 `msgpack:"u,omitempty"`
	// Master, for NotMaster, names the current master if known.
	Master string `msgpack:"ms,omitempty"`
	// RetryAfter, for ResourceExhausted from a rate limit or from shedding
	// under overload, is how long the client should wait before retrying,
	// in nanoseconds (0: the limit is a quota; retrying will not help
	// until usage falls).
	RetryAfter int64 `msgpack:"ra,omitempty"`
}

// Error formats the error as "lockcell: <code>: <msg>".
func (e *Error) Error() string {
	if e == nil {
		return "lockcell: <nil error>"
	}
	s := "lockcell: " + e.Code.String()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	if e.Code == LockDelay && e.Until != 0 {
		s += " (until " + time.Unix(0, e.Until).UTC().Format(time.RFC3339Nano) + ")"
	}
	if e.RetryAfter > 0 {
		s += " (retry after " + time.Duration(e.RetryAfter).String() + ")"
	}
	return s
}

// Is reports whether target is an *Error with the same code.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) || e == nil || t == nil {
		return false
	}
	return t.Code == e.Code
}

// Sentinels, one per code, for errors.Is. They carry no message; compare
// with errors.Is, never with ==.
var (
	ErrInvalidArgument    = &Error{Code: InvalidArgument}
	ErrNotFound           = &Error{Code: NotFound}
	ErrAlreadyExists      = &Error{Code: AlreadyExists}
	ErrPermissionDenied   = &Error{Code: PermissionDenied}
	ErrUnauthenticated    = &Error{Code: Unauthenticated}
	ErrResourceExhausted  = &Error{Code: ResourceExhausted}
	ErrFailedPrecondition = &Error{Code: FailedPrecondition}
	ErrLocked             = &Error{Code: Locked}
	ErrLockDelay          = &Error{Code: LockDelay}
	ErrAborted            = &Error{Code: Aborted}
	ErrNotMaster          = &Error{Code: NotMaster}
	ErrFailover           = &Error{Code: Failover}
	ErrSessionExpired     = &Error{Code: SessionExpired}
	ErrUnavailable        = &Error{Code: Unavailable}
	ErrCanceled           = &Error{Code: Canceled}
	ErrDeadlineExceeded   = &Error{Code: DeadlineExceeded}
	ErrInternal           = &Error{Code: Internal}
	ErrTooLarge           = &Error{Code: TooLarge}
)

// Errorf returns an *Error with the given code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// NewError returns an *Error with the given code and message.
func NewError(code Code, msg string) *Error {
	return &Error{Code: code, Msg: msg}
}

// LockDelayError returns a LockDelay error for a lock that may not be
// acquired before until (unix nanoseconds).
func LockDelayError(path string, until int64) *Error {
	return &Error{Code: LockDelay, Msg: "lock " + path + " is in lock-delay", Until: until}
}

// QuotaError returns a ResourceExhausted error naming the tenant, the quota
// and its limit, for example `tenant "t": quota max_nodes (10) exceeded`.
func QuotaError(tenant, quota string, limit uint64) *Error {
	return &Error{Code: ResourceExhausted, Msg: fmt.Sprintf("tenant %q: quota %s (%d) exceeded", tenant, quota, limit)}
}

// RetryAfterError returns a ResourceExhausted error for a call refused by a
// rate limit or shed under overload, telling the client to retry after d.
func RetryAfterError(msg string, d time.Duration) *Error {
	if d <= 0 {
		d = time.Millisecond
	}
	return &Error{Code: ResourceExhausted, Msg: msg, RetryAfter: int64(d)}
}

// CodeOf returns the code of the first *Error in err's chain, OK for nil,
// and Internal for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e.Code
	}
	return Internal
}
