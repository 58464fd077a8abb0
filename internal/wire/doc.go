// Package wire is the one low-level binary codec under lockcell's
// hand-written formats: the namespace's command and record encodings, the
// paxos log and state records, and the sequencer's binary form. A Writer
// appends the primitives those formats use — unsigned and zig-zag varints,
// big-endian fixed-width integers, single bytes, raw and uvarint
// length-prefixed bytes and strings — and a Reader reads them back, strictly.
//
// # The canonical rule
//
// Every format built on this package is canonical: one value has exactly
// one encoding, so a decoder that succeeds implies the encoder of the result
// gives back the input, byte for byte (state checksums hash stored bytes, and
// replicas compare commands as bytes). The rule is written once, in
// canonical.go: bytes read as the encoding of a value are accepted only if
// they are exactly the bytes the Writer writes for that value. The Reader
// applies it to every varint it reads (so 1 padded as 0x81 0x00 is refused),
// and a format whose reader is lenient by design (the msgpack command
// encoding) applies it to the whole input with Canonical.
//
// # Errors
//
// A Reader never panics on input. The first defect sticks: it is an *Error
// that names the field being read, the byte offset where that field starts,
// and one of the sentinel errors below (ErrTruncated, ErrNonCanonical,
// ErrOverflow, ErrTooLong, ErrTrailing), or the caller's own cause for a
// format-level check (Reader.Fail). Every later read returns a zero value,
// so a decoder reads all its fields and checks Err once. Test with
// errors.Is against the sentinels, errors.As for the position.
//
// # Dependencies
//
// Only the standard library, and nothing of lockcell's: paxos and sequencer,
// which import nothing else of ours, may use it (internal/lint checks).
package wire
