package wire

import (
	"encoding/binary"
	"fmt"
)

// Reader reads encodings written by a Writer from one input. The first
// defect sticks (see the package comment); every later read returns a zero
// value and nil. Slices it returns alias the input.
type Reader struct {
	in  []byte
	off int
	err *Error
}

// NewReader returns a reader of in.
func NewReader(in []byte) Reader { return Reader{in: in} }

// Err returns the first defect, an *Error, or nil.
func (r *Reader) Err() error {
	if r.err == nil {
		return nil
	}
	return r.err
}

// Pos returns the offset of the next byte to read.
func (r *Reader) Pos() int { return r.off }

// Len returns the number of bytes left to read (0 after a defect).
func (r *Reader) Len() int {
	if r.err != nil {
		return 0
	}
	return len(r.in) - r.off
}

// Peek returns the unread rest of the input without consuming it (nil
// after a defect).
func (r *Reader) Peek() []byte {
	if r.err == nil {
		return r.in[r.off:]
	}
	return nil
}

// SkipIf consumes c followed by s, and reports true, if the unread input
// starts with them; otherwise it consumes nothing and reports false. It is
// how a decoder tests for an optional tagged field.
func (r *Reader) SkipIf(c byte, s string) bool {
	if r.err != nil || len(r.in)-r.off <= len(s) || r.in[r.off] != c || string(r.in[r.off+1:r.off+1+len(s)]) != s {
		return false
	}
	r.off += 1 + len(s)
	return true
}

// Fail records a defect at pos (an offset of the input, usually where the
// field began) unless one is already recorded: a format-level check that
// the primitives cannot make (an unknown flag bit, a zero where the format
// forbids it). cause becomes Error.Err; detail may use fmt verbs.
func (r *Reader) Fail(pos int, what string, cause error, detail string, args ...any) {
	if r.err != nil {
		return
	}
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	r.err = &Error{Pos: pos, What: what, Err: cause, Detail: detail}
}

// fail is Fail at the current position, for the primitives.
func (r *Reader) fail(what string, cause error, detail string) {
	if r.err == nil {
		r.err = &Error{Pos: r.off, What: what, Err: cause, Detail: detail}
	}
}

// Next consumes n bytes and returns them (capacity n, aliasing the input),
// or fails with ErrTruncated. A negative n is ErrTooLong.
func (r *Reader) Next(n int, what string) []byte {
	if r.err != nil || uint(n) > uint(len(r.in)-r.off) {
		r.short(n, what)
		return nil
	}
	off := r.off
	r.off += n
	return r.in[off:r.off:r.off]
}

// short records why Next could not take n bytes (unless a defect is
// already recorded).
func (r *Reader) short(n int, what string) {
	switch {
	case r.err != nil:
	case n < 0:
		r.fail(what, ErrTooLong, "negative length")
	default:
		r.fail(what, ErrTruncated, fmt.Sprintf("%d bytes needed, %d left", n, len(r.in)-r.off))
	}
}

// Byte reads one byte.
func (r *Reader) Byte(what string) byte {
	if r.err != nil || r.off >= len(r.in) {
		r.short(1, what)
		return 0
	}
	r.off++
	return r.in[r.off-1]
}

// Uint16 reads a big-endian 2-byte integer.
func (r *Reader) Uint16(what string) uint16 {
	if p := r.Next(2, what); p != nil {
		return binary.BigEndian.Uint16(p)
	}
	return 0
}

// Uint32 reads a big-endian 4-byte integer.
func (r *Reader) Uint32(what string) uint32 {
	if p := r.Next(4, what); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

// Uint64 reads a big-endian 8-byte integer.
func (r *Reader) Uint64(what string) uint64 {
	if p := r.Next(8, what); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

// varintFailed records why encoding/binary refused a varint (n <= 0).
func (r *Reader) varintFailed(n int, what string) {
	if n == 0 {
		r.fail(what, ErrTruncated, "varint")
	} else {
		r.fail(what, ErrOverflow, "")
	}
}

// Uvarint reads an unsigned varint, which must be canonical.
func (r *Reader) Uvarint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	x, n := binary.Uvarint(r.in[r.off:])
	if n <= 0 {
		r.varintFailed(n, what)
		return 0
	}
	if !canonical(n, UvarintLen(x), true) {
		r.fail(what, ErrNonCanonical, "padded varint")
		return 0
	}
	r.off += n
	return x
}

// Varint reads a zig-zag varint, which must be canonical.
func (r *Reader) Varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	ux, n := binary.Uvarint(r.in[r.off:])
	if n <= 0 {
		r.varintFailed(n, what)
		return 0
	}
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	if !canonical(n, varintLen(x), true) {
		r.fail(what, ErrNonCanonical, "padded varint")
		return 0
	}
	r.off += n
	return x
}

// Count reads a uvarint count of items that each take at least minSize
// bytes (a minSize below 1 counts as 1) and fails with ErrTooLong if it is
// over max or if the rest of the input could not hold that many: a bound on
// what a decoder allocates for it.
func (r *Reader) Count(max uint64, minSize int, what string) int {
	if minSize < 1 {
		minSize = 1
	}
	pos := r.off
	n := r.Uvarint(what)
	if r.err != nil {
		return 0
	}
	if n > max {
		r.Fail(pos, what, ErrTooLong, "%d, more than %d", n, max)
		return 0
	}
	if left := uint64(len(r.in) - r.off); n > left/uint64(minSize) {
		r.Fail(pos, what, ErrTooLong, "%d items of at least %d bytes in %d bytes", n, minSize, left)
		return 0
	}
	return int(n)
}

// LenBytes reads a uvarint length of at most max, then that many bytes
// (aliasing the input).
func (r *Reader) LenBytes(max uint64, what string) []byte {
	pos := r.off
	n := r.Uvarint(what)
	if r.err != nil {
		return nil
	}
	if n > max {
		r.Fail(pos, what, ErrTooLong, "length %d, more than %d", n, max)
		return nil
	}
	if n > uint64(len(r.in)-r.off) {
		r.Fail(pos, what, ErrTruncated, "length %d, %d bytes left", n, len(r.in)-r.off)
		return nil
	}
	return r.Next(int(n), what)
}

// LenString is LenBytes as a string (a copy).
func (r *Reader) LenString(max uint64, what string) string {
	return string(r.LenBytes(max, what))
}

// Done fails with ErrTrailing if input is left, and returns Err.
func (r *Reader) Done() error {
	if r.err == nil && r.off != len(r.in) {
		r.fail("end", ErrTrailing, fmt.Sprintf("%d bytes after the last field", len(r.in)-r.off))
	}
	return r.Err()
}
