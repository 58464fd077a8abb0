package wire

import (
	"bytes"
	"errors"
	"math"
	"testing"
)

// prim is one primitive a fuzz or table program reads and writes.
type prim byte

const (
	pByte prim = iota
	pUint16
	pUint32
	pUint64
	pUvarint
	pVarint
	pLenBytes
	pLenString
	pCount
	numPrims
)

// value is what a program read for one primitive.
type value struct {
	u uint64
	i int64
	b []byte
}

// read reads one p from r.
func read(r *Reader, p prim) value {
	switch p {
	case pByte:
		return value{u: uint64(r.Byte("byte"))}
	case pUint16:
		return value{u: uint64(r.Uint16("u16"))}
	case pUint32:
		return value{u: uint64(r.Uint32("u32"))}
	case pUint64:
		return value{u: r.Uint64("u64")}
	case pUvarint:
		return value{u: r.Uvarint("uvarint")}
	case pVarint:
		return value{i: r.Varint("varint")}
	case pLenBytes:
		return value{b: r.LenBytes(64, "bytes")}
	case pLenString:
		return value{b: []byte(r.LenString(64, "string"))}
	case pCount:
		return value{u: uint64(r.Count(16, 2, "count"))}
	}
	panic("unknown prim")
}

// write writes v as p.
func write(w *Writer, p prim, v value) {
	switch p {
	case pByte:
		w.Byte(byte(v.u))
	case pUint16:
		w.Uint16(uint16(v.u))
	case pUint32:
		w.Uint32(uint32(v.u))
	case pUint64:
		w.Uint64(v.u)
	case pUvarint, pCount:
		w.Uvarint(v.u)
	case pVarint:
		w.Varint(v.i)
	case pLenBytes:
		w.LenBytes(v.b)
	case pLenString:
		w.LenString(string(v.b))
	}
}

// roundTrip reads the program ops from data; if every read and Done
// succeed, it re-encodes what was read and reports the bytes and true.
func roundTrip(ops, data []byte) ([]byte, error) {
	r := NewReader(data)
	vals := make([]value, len(ops))
	for i, op := range ops {
		vals[i] = read(&r, prim(op)%numPrims)
	}
	if err := r.Done(); err != nil {
		return nil, err
	}
	var w Writer
	for i, op := range ops {
		write(&w, prim(op)%numPrims, vals[i])
	}
	return w.Bytes(), nil
}

func seedPrograms() [][2][]byte {
	var w Writer
	w.Byte(7)
	w.Uint16(0xbeef)
	w.Uint32(1 << 31)
	w.Uint64(math.MaxUint64)
	w.Uvarint(300)
	w.Varint(-65)
	w.LenBytes([]byte("abc"))
	w.LenString("")
	w.Uvarint(2)
	w.Raw([]byte{1, 2, 3, 4}) // what a count of 2 might precede; read as two uint16
	all := []byte{byte(pByte), byte(pUint16), byte(pUint32), byte(pUint64), byte(pUvarint), byte(pVarint),
		byte(pLenBytes), byte(pLenString), byte(pCount), byte(pUint16), byte(pUint16)}
	return [][2][]byte{
		{all, w.Bytes()},
		{{byte(pUvarint)}, {0x81, 0x00}},                 // padded: refused
		{{byte(pVarint)}, {0x80, 0x80, 0x00}},            // padded: refused
		{{byte(pUvarint), byte(pUvarint)}, {0x00, 0x7f}}, // zero and 127
		{{byte(pLenBytes)}, {0x03, 'a', 'b'}},            // truncated
		{{}, {}},
	}
}

// TestRoundTrip: every seed program that decodes re-encodes to its input.
func TestRoundTrip(t *testing.T) {
	ok := 0
	for _, s := range seedPrograms() {
		out, err := roundTrip(s[0], s[1])
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%x: error %v is not an *Error", s[1], err)
			}
			continue
		}
		if !bytes.Equal(out, s[1]) {
			t.Fatalf("%x re-encodes as %x", s[1], out)
		}
		ok++
	}
	if ok < 3 {
		t.Fatalf("only %d seed programs decoded", ok)
	}
}

// TestReaderErrors: each defect gives its sentinel, the field's name and
// the offset where the field starts, and changes nothing after it.
func TestReaderErrors(t *testing.T) {
	type step func(r *Reader)
	cases := []struct {
		name  string
		in    []byte
		steps []step
		want  error
		pos   int
		what  string
	}{
		{"padded uvarint", []byte{9, 0x81, 0x00}, []step{func(r *Reader) { r.Byte("b") }, func(r *Reader) { r.Uvarint("n") }}, ErrNonCanonical, 1, "n"},
		{"padded zero uvarint", []byte{0x80, 0x00}, []step{func(r *Reader) { r.Uvarint("n") }}, ErrNonCanonical, 0, "n"},
		{"padded varint", []byte{0x81, 0x80, 0x00}, []step{func(r *Reader) { r.Varint("v") }}, ErrNonCanonical, 0, "v"},
		{"truncated varint", []byte{0x81}, []step{func(r *Reader) { r.Uvarint("n") }}, ErrTruncated, 0, "n"},
		{"overflowing varint", bytes.Repeat([]byte{0xff}, 11), []step{func(r *Reader) { r.Uvarint("n") }}, ErrOverflow, 0, "n"},
		{"truncated fixed", []byte{1, 2, 3}, []step{func(r *Reader) { r.Uint32("crc") }}, ErrTruncated, 0, "crc"},
		{"empty byte", nil, []step{func(r *Reader) { r.Byte("version") }}, ErrTruncated, 0, "version"},
		{"length over bound", []byte{0, 5, 'a', 'b', 'c', 'd', 'e'}, []step{func(r *Reader) { r.Byte("k") }, func(r *Reader) { r.LenBytes(4, "name") }}, ErrTooLong, 1, "name"},
		{"length over input", []byte{5, 'a'}, []step{func(r *Reader) { r.LenString(10, "name") }}, ErrTruncated, 0, "name"},
		{"count over bound", []byte{9}, []step{func(r *Reader) { r.Count(8, 1, "holders") }}, ErrTooLong, 0, "holders"},
		{"count over input", []byte{3, 1, 2, 3, 4, 5}, []step{func(r *Reader) { r.Count(100, 2, "cmds") }}, ErrTooLong, 0, "cmds"},
		{"trailing", []byte{1, 2}, []step{func(r *Reader) { r.Byte("b") }}, ErrTrailing, 1, "end"},
	}
	for _, c := range cases {
		r := NewReader(c.in)
		for _, s := range c.steps {
			s(&r)
		}
		// Reads after a defect return zero and keep the first error.
		if r.Err() != nil && (r.Uvarint("later") != 0 || r.Byte("later") != 0 || r.Len() != 0 || r.Peek() != nil) {
			t.Errorf("%s: a read after the defect returned something", c.name)
		}
		err := r.Done()
		var e *Error
		switch {
		case !errors.Is(err, c.want):
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		case !errors.As(err, &e):
			t.Errorf("%s: %v is not an *Error", c.name, err)
		case e.Pos != c.pos || e.What != c.what:
			t.Errorf("%s: error at %d in %q, want %d in %q (%v)", c.name, e.Pos, e.What, c.pos, c.what, err)
		}
	}
}

// TestCanonical: Canonical accepts equal bytes and names the first
// difference otherwise.
func TestCanonical(t *testing.T) {
	if err := Canonical([]byte{1, 2, 3}, []byte{1, 2, 3}, "cmd"); err != nil {
		t.Fatal(err)
	}
	err := Canonical([]byte{1, 0xcc, 3}, []byte{1, 3}, "cmd")
	var e *Error
	if !errors.Is(err, ErrNonCanonical) || !errors.As(err, &e) || e.Pos != 1 {
		t.Fatalf("got %v", err)
	}
}

// TestVarintBoundaries: every varint at and around each 7-bit boundary
// round-trips, has UvarintLen bytes, and refuses each of its padded forms.
func TestVarintBoundaries(t *testing.T) {
	checked := 0
	for shift := 0; shift < 64; shift += 7 {
		for _, x := range []uint64{1<<shift - 1, 1 << shift, 1<<shift + 1, math.MaxUint64} {
			var w Writer
			w.Uvarint(x)
			w.Varint(int64(x))
			b := w.Bytes()
			if n := UvarintLen(x); n != len(b)-len(varintBytes(int64(x))) {
				t.Fatalf("UvarintLen(%d) = %d, encoding %x", x, n, b)
			}
			r := NewReader(b)
			if r.Uvarint("u") != x || r.Varint("v") != int64(x) || r.Done() != nil {
				t.Fatalf("%d: round trip failed: %v", x, r.Err())
			}
			// Pad the uvarint by one byte: set the continuation bit on its
			// last byte and append a zero.
			u := b[:UvarintLen(x)]
			if len(u) < MaxVarintLen {
				padded := append(append(bytes.Clone(u[:len(u)-1]), u[len(u)-1]|0x80), 0)
				r := NewReader(padded)
				r.Uvarint("u")
				if !errors.Is(r.Done(), ErrNonCanonical) {
					t.Fatalf("%d: padded %x accepted (%v)", x, padded, r.Err())
				}
				checked++
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d padded forms checked", checked)
	}
}

// varintBytes returns the zig-zag varint of x on its own, for length checks.
func varintBytes(x int64) []byte {
	var w Writer
	w.Varint(x)
	return w.Bytes()
}

// FuzzReaderRoundTrip: for any program and input, the Reader either fails
// with an *Error, or the values it read re-encode to exactly the input
// (the canonical rule, checked from the outside).
func FuzzReaderRoundTrip(f *testing.F) {
	for _, s := range seedPrograms() {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, ops, data []byte) {
		if len(ops) > 64 {
			ops = ops[:64]
		}
		out, err := roundTrip(ops, data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Pos < 0 || e.Pos > len(data) {
				t.Fatalf("bad error %v", err)
			}
			return
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("ops %x: %x decoded and re-encoded as %x", ops, data, out)
		}
	})
}
