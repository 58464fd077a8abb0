package transport

import (
	"bytes"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

type frameValue struct {
	A int               `msgpack:"a"`
	B string            `msgpack:"b"`
	C []uint64          `msgpack:"c"`
	D map[string][]byte `msgpack:"d"`
	E *frameValue       `msgpack:"e"`
	F float64           `msgpack:"f"`
	G bool              `msgpack:"g"`
}

func TestFrameRoundTrip(t *testing.T) {
	values := []any{
		nil, true, int64(-5), uint64(math.MaxUint64), 3.25, "hello", []byte{0, 1, 2},
		[]any{1, "x", []any{}}, map[string]any{"k": []int{1, 2}},
		frameValue{A: 1, B: strings.Repeat("b", 70000), C: []uint64{1, 1 << 40}, D: map[string][]byte{"x": make([]byte, 300)}, E: &frameValue{A: 2}, F: -1.5, G: true},
	}
	var buf bytes.Buffer
	for i, v := range values {
		if err := WriteFrame(&buf, uint16(i), v); err != nil {
			t.Fatal(err)
		}
	}
	for i, v := range values {
		f, err := ReadFrame(&buf, 1<<20)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if f.Tag != uint16(i) {
			t.Fatalf("frame %d: tag %d", i, f.Tag)
		}
		want, _ := msgpack.Marshal(v)
		if !bytes.Equal(f.Body, want) {
			t.Fatalf("frame %d: body differs", i)
		}
		if fv, ok := v.(frameValue); ok {
			var got frameValue
			if err := f.Decode(&got); err != nil || got.B != fv.B || got.E.A != 2 || len(got.D["x"]) != 300 {
				t.Fatalf("decode: %v", err)
			}
		}
	}
	if _, err := ReadFrame(&buf, 0); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}
}

// TestReadFrameErrors: every kind of bad input gets its typed error.
func TestReadFrameErrors(t *testing.T) {
	hdr := func(n uint32, body ...byte) []byte {
		return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 0, 9}, body...)
	}
	const max = 16
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"header cut", []byte{0, 0, 0}, ErrTruncatedFrame},
		{"body cut", hdr(4, 0x93, 1), ErrTruncatedFrame},
		{"no body", hdr(3), ErrTruncatedFrame},
		{"over max by one", hdr(max+1, make([]byte, max+1)...), ErrFrameTooLarge},
		{"huge length", hdr(math.MaxUint32), ErrFrameTooLarge},
		{"empty body", hdr(0), ErrMalformedFrame},
		{"reserved byte", hdr(1, 0xc1), ErrMalformedFrame},
		{"trailing byte", hdr(2, 0x01, 0x02), ErrMalformedFrame},
		{"array owes elements", hdr(2, 0x93, 0x01), ErrMalformedFrame},
		{"str overruns", hdr(3, 0xa5, 'a', 'b'), ErrMalformedFrame},
		{"str8 length cut", hdr(1, 0xd9), ErrMalformedFrame},
		{"array32 of 4e9", hdr(5, 0xdd, 0xff, 0xff, 0xff, 0xff), ErrMalformedFrame},
		{"map16 over bytes", hdr(4, 0xde, 0x00, 0x09, 0x01), ErrMalformedFrame},
		{"bin32 overruns", hdr(6, 0xc6, 0, 0, 1, 0, 0), ErrMalformedFrame},
		{"fixext cut", hdr(2, 0xd5, 0x01), ErrMalformedFrame},
		{"too deep", hdr(max, bytes.Repeat([]byte{0x91}, max)...), ErrMalformedFrame},
	}
	for _, tc := range cases {
		f, err := ReadFrame(bytes.NewReader(tc.in), max)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v (frame %v), want %v", tc.name, err, f, tc.want)
		}
	}
	// Exactly at the maximum: accepted.
	body := append([]byte{0xc4, max - 2}, make([]byte, max-2)...)
	if _, err := ReadFrame(bytes.NewReader(hdr(max, body...)), max); err != nil {
		t.Fatalf("frame of exactly max: %v", err)
	}
	// Deep but within the nesting limit: accepted; one deeper: refused.
	ok := append(bytes.Repeat([]byte{0x91}, maxNesting), 0xc0)
	if err := validMsgpack(ok); err != nil {
		t.Fatalf("nesting %d: %v", maxNesting, err)
	}
	if err := validMsgpack(append([]byte{0x91}, ok...)); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("nesting %d: %v", maxNesting+1, err)
	}
}

func TestDecodeMismatch(t *testing.T) {
	var buf bytes.Buffer
	_ = WriteFrame(&buf, 1, "a string")
	f, err := ReadFrame(&buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := f.Decode(&n); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("decoding a string into an int: %v", err)
	}
	var v frameValue
	if err := (Frame{Body: []byte{0x01, 0x02}}).Decode(&v); !errors.Is(err, ErrMalformedFrame) {
		t.Fatalf("trailing bytes: %v", err)
	}
}

func TestAppendFrameLimits(t *testing.T) {
	dst := []byte("prefix")
	out, err := AppendFrame(dst, 1, make([]byte, 100), 50)
	if !errors.Is(err, ErrEncode) || string(out) != "prefix" {
		t.Fatalf("over the limit: %v, %q", err, out)
	}
	if _, err := AppendFrame(nil, 1, func() {}, 0); !errors.Is(err, ErrEncode) {
		t.Fatalf("unencodable: %v", err)
	}
	out, err = AppendFrame(dst, 1, make([]byte, 48), 50) // bin8 header (2 bytes) + 48
	if err != nil || len(out) != len(dst)+HeaderLen+50 {
		t.Fatalf("at the limit: %v, %d bytes", err, len(out))
	}
}

// TestValidMsgpackMatchesEncoder: whatever msgpack encodes, the validator
// accepts in full, and every strict prefix it refuses.
func TestValidMsgpackMatchesEncoder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		v := randomValue(r, 0)
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := validMsgpack(b); err != nil {
			t.Fatalf("value %d (%x): %v", i, b, err)
		}
		cuts := []int{len(b) - 1}
		for range 32 {
			cuts = append(cuts, r.IntN(len(b)))
		}
		for _, cut := range cuts {
			if validMsgpack(b[:cut]) == nil {
				t.Fatalf("value %d: prefix of %d/%d bytes accepted", i, cut, len(b))
			}
		}
	}
}

func randomValue(r *rand.Rand, depth int) any {
	k := r.IntN(12)
	if depth > 4 && k >= 9 {
		k = 0
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return r.Int64() >> r.IntN(64)
	case 3:
		return -r.Int64() >> r.IntN(64)
	case 4:
		return r.Float64()
	case 5:
		return float32(r.Float64())
	case 6:
		return strings.Repeat("s", r.IntN(70000)>>r.IntN(16))
	case 7:
		return make([]byte, r.IntN(70000)>>r.IntN(16))
	case 8:
		return msgpack.RawMessage{0xd6, 0xff, 0, 0, 0, 1} // timestamp ext
	case 9:
		a := make([]any, r.IntN(20)>>r.IntN(4))
		for i := range a {
			a[i] = randomValue(r, depth+1)
		}
		return a
	default:
		m := map[string]any{}
		for i := range r.IntN(20) >> r.IntN(4) {
			m[strings.Repeat("k", i+1)] = randomValue(r, depth+1)
		}
		return m
	}
}

// FuzzReadFrame: the decoder never panics; a frame it accepts re-encodes to
// the bytes it consumed, decodes as a msgpack value without error, and
// respects the maximum; a frame it refuses gets one of the typed errors.
// Seed corpus: testdata/fuzz/FuzzReadFrame.
func FuzzReadFrame(f *testing.F) {
	for _, v := range []any{nil, 1, "x", []any{1, "a", nil}, map[string]any{"a": 1}, frameValue{A: 1, E: &frameValue{}}} {
		b, _ := AppendFrame(nil, 3, v, 0)
		f.Add(b, 64)
	}
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = max%(1<<16) + 1
		if max <= 0 {
			max += 1 << 16
		}
		r := bytes.NewReader(data)
		fr, err := ReadFrame(r, max)
		if err != nil {
			if err != io.EOF && !isFrameError(err) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if len(fr.Body) > max {
			t.Fatalf("body %d over max %d", len(fr.Body), max)
		}
		consumed := data[:len(data)-r.Len()]
		re, err := AppendFrame(nil, fr.Tag, msgpack.RawMessage(fr.Body), 0)
		if err != nil || !bytes.Equal(re, consumed) {
			t.Fatalf("re-encoding differs: %v\n%x\n%x", err, re, consumed)
		}
		var v any
		if err := fr.Decode(&v); err != nil && !errors.Is(err, ErrMalformedFrame) {
			t.Fatalf("decode: %v", err)
		}
	})
}

// FuzzValidMsgpack checks the frame body validator against msgpack's own
// Skip: they agree on every input, except that the validator also refuses
// nesting deeper than maxNesting.
func FuzzValidMsgpack(f *testing.F) {
	for _, v := range []any{nil, 1, "x", []any{1, "a", nil}, map[string]any{"a": 1}, frameValue{A: 1, E: &frameValue{}}} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := validMsgpack(data)
		if err != nil && strings.Contains(err.Error(), "nesting") {
			return
		}
		r := bytes.NewReader(data)
		dec := msgpack.NewDecoder(r)
		skipErr := dec.Skip()
		skipOK := len(data) > 0 && skipErr == nil && r.Len() == 0
		if (err == nil) != skipOK {
			t.Fatalf("validator: %v; msgpack Skip: %v with %d bytes left", err, skipErr, r.Len())
		}
	})
}
