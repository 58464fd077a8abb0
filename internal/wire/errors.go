package wire

import (
	"errors"
	"strconv"
)

// The sentinel causes of Reader errors. Every *Error wraps exactly one of
// them, or the cause its caller passed to Reader.Fail.
var (
	// ErrTruncated: the input ends inside a field.
	ErrTruncated = errors.New("wire: truncated")
	// ErrNonCanonical: a field, or a whole encoding, is not the one
	// encoding of its value (a padded varint, for example).
	ErrNonCanonical = errors.New("wire: not canonical")
	// ErrOverflow: a varint does not fit in 64 bits.
	ErrOverflow = errors.New("wire: varint overflows 64 bits")
	// ErrTooLong: a length or count is over the bound the format sets for
	// it, or over what the rest of the input could hold.
	ErrTooLong = errors.New("wire: length over its bound")
	// ErrTrailing: bytes are left after the last field.
	ErrTrailing = errors.New("wire: trailing bytes")
)

// Error is a Reader's error: what was wrong (Err), in which field (What),
// and at which byte offset of the input that field starts (Pos).
type Error struct {
	// Pos is the offset, in the Reader's input, of the field's first byte.
	Pos int
	// What names the field, as the format's decoder called it.
	What string
	// Err is the cause: one of this package's sentinels or a caller's.
	Err error
	// Detail is extra human-readable context, or "".
	Detail string
}

// Error returns "<what> at byte <pos>: <cause>[: <detail>]".
func (e *Error) Error() string {
	cause := "malformed"
	if e.Err != nil {
		cause = e.Err.Error()
	}
	s := e.What + " at byte " + strconv.Itoa(e.Pos) + ": " + cause
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Unwrap returns the cause, so errors.Is matches the sentinels.
func (e *Error) Unwrap() error { return e.Err }
