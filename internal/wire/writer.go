package wire

import (
	"encoding/binary"
	"math/bits"
)

// MaxVarintLen is the longest varint encoding of a 64-bit integer.
const MaxVarintLen = binary.MaxVarintLen64

// Writer appends encodings to a byte slice. The zero value is an empty
// writer; NewWriter starts from a caller's buffer (to size it once, or to
// append after a header).
type Writer struct {
	b []byte
}

// NewWriter returns a writer that appends to buf.
func NewWriter(buf []byte) Writer { return Writer{b: buf} }

// Bytes returns everything written, including the initial buffer. It
// aliases the writer's buffer.
func (w *Writer) Bytes() []byte { return w.b }

// Len returns the length of Bytes.
func (w *Writer) Len() int { return len(w.b) }

// Byte appends c.
func (w *Writer) Byte(c byte) { w.b = append(w.b, c) }

// Raw appends p as it is, with no length.
func (w *Writer) Raw(p []byte) { w.b = append(w.b, p...) }

// RawString appends s as it is, with no length.
func (w *Writer) RawString(s string) { w.b = append(w.b, s...) }

// Uint16 appends x big-endian in 2 bytes.
func (w *Writer) Uint16(x uint16) { w.b = binary.BigEndian.AppendUint16(w.b, x) }

// Uint32 appends x big-endian in 4 bytes.
func (w *Writer) Uint32(x uint32) { w.b = binary.BigEndian.AppendUint32(w.b, x) }

// Uint64 appends x big-endian in 8 bytes.
func (w *Writer) Uint64(x uint64) { w.b = binary.BigEndian.AppendUint64(w.b, x) }

// Uvarint appends x as a minimal unsigned varint (encoding/binary's form).
func (w *Writer) Uvarint(x uint64) { w.b = binary.AppendUvarint(w.b, x) }

// Varint appends x as a minimal zig-zag varint (encoding/binary's form).
func (w *Writer) Varint(x int64) { w.b = binary.AppendVarint(w.b, x) }

// LenBytes appends len(p) as a uvarint, then p.
func (w *Writer) LenBytes(p []byte) {
	w.b = append(binary.AppendUvarint(w.b, uint64(len(p))), p...)
}

// LenString appends len(s) as a uvarint, then s.
func (w *Writer) LenString(s string) {
	w.b = append(binary.AppendUvarint(w.b, uint64(len(s))), s...)
}

// UvarintLen returns the length of x's uvarint encoding: one byte per 7
// significant bits, at least one.
func UvarintLen(x uint64) int {
	// (bits*9 + 64) / 64 is ceil(bits/7) for 1 <= bits <= 64.
	return (bits.Len64(x|1)*9 + 64) / 64
}

// varintLen returns the length of x's zig-zag varint encoding.
func varintLen(x int64) int { return UvarintLen(uint64(x<<1) ^ uint64(x>>63)) }
