package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/lockcell/lockcell/internal/invariants"
	"github.com/vmihailenco/msgpack/v5"
)

// Frame layout on a stream (all integers big-endian):
//
//	+-----------------+---------+------------------------+
//	| length (uint32) | tag u16 | body (length bytes)    |
//	+-----------------+---------+------------------------+
//
// length counts the body only. The body is exactly one msgpack value; the
// tag says what it is (the layers above assign tags; transport never looks
// inside). A reader refuses a length above its maximum before reading or
// allocating the body, and checks that the body is one well-formed msgpack
// value (see validMsgpack) before handing it up, so a decoder above never
// meets truncated or hostile msgpack.

// HeaderLen is the length of a frame header: a 4-byte body length and a
// 2-byte tag.
const HeaderLen = 6

// Frame size limits.
const (
	// DefaultMaxClientFrame is the largest client frame body when
	// Config.MaxClientFrame and DialConfig.MaxFrame are zero: 1 MiB, four
	// times the largest file contents (256 KiB) a request may carry.
	DefaultMaxClientFrame = 1 << 20
	// DefaultMaxPeerFrame is the largest peer frame body when
	// Config.MaxPeerFrame is zero: 64 MiB, since Paxos snapshots travel on
	// the peer stream.
	DefaultMaxPeerFrame = 64 << 20
	// MaxFrameLimit is the largest maximum a configuration may set (1 GiB).
	MaxFrameLimit = 1 << 30
	// maxNesting is the deepest msgpack nesting of arrays and maps a frame
	// body may have. msgpack/v5 decodes recursively without a depth limit,
	// so a body of a million 0x91 bytes would otherwise exhaust the stack.
	maxNesting = 64
)

// Frame errors. A reader returns one of them (wrapped, with detail) for any
// frame it refuses; match with errors.Is.
var (
	// ErrFrameTooLarge reports a frame whose declared body length exceeds the
	// reader's maximum. Nothing of the body was read.
	ErrFrameTooLarge = errors.New("transport: frame too large")
	// ErrTruncatedFrame reports a stream that ended inside a frame.
	ErrTruncatedFrame = errors.New("transport: truncated frame")
	// ErrMalformedFrame reports a frame whose body is not exactly one
	// well-formed msgpack value, or a body that does not decode into the
	// value Decode was given.
	ErrMalformedFrame = errors.New("transport: malformed frame")
	// ErrEncode reports a value msgpack cannot encode, or an encoding larger
	// than the frame limit.
	ErrEncode = errors.New("transport: cannot encode message")
)

// Frame is one message read from a stream: its tag and its msgpack body.
type Frame struct {
	// Tag says what the body holds; its meaning belongs to the layer above.
	Tag uint16
	// Body is one well-formed msgpack value. The Frame owns it.
	Body []byte
}

// Decode unmarshals the body into v (a pointer). It returns an error wrapping
// ErrMalformedFrame if the body does not fit v.
func (f Frame) Decode(v any) error {
	return decodeBody(f.Body, v)
}

// Size is the frame's length on the wire, header included.
func (f Frame) Size() int { return HeaderLen + len(f.Body) }

// decodeBody decodes body, one msgpack value, into v. A v that parses its
// own bytes (msgpack.Unmarshaler, as a KeepAlive batch does) is handed
// the body itself, as msgpack's decoder would hand it the value's bytes,
// without a decoder's pass over them first. That rests on Frame.Body's
// contract (one well-formed msgpack value, as ReadFrame checks): trailing
// bytes, which the decoder below refuses, are then the Unmarshaler's to
// refuse.
func decodeBody(body []byte, v any) error {
	if u, ok := v.(msgpack.Unmarshaler); ok {
		if err := u.UnmarshalMsgpack(body); err != nil {
			return fmt.Errorf("%w: %v", ErrMalformedFrame, err)
		}
		return nil
	}
	fd := decoders.Get().(*frameDecoder)
	fd.r.Reset(body)
	err := fd.dec.Decode(v)
	rest := fd.r.Len()
	fd.r.Reset(nil)
	if err != nil {
		// Dropped, not reused: a decoder that failed half-way may hold
		// state of the value it gave up on.
		return fmt.Errorf("%w: %v", ErrMalformedFrame, err)
	}
	decoders.Put(fd)
	if rest != 0 {
		return fmt.Errorf("%w: %d trailing bytes after the body", ErrMalformedFrame, rest)
	}
	return nil
}

// frameDecoder is a msgpack decoder wired once to its own reader, so that
// decoding a frame body allocates neither a reader nor the decoder's
// wrapping of one (every frame a replica or client receives is decoded
// here). Kept in decoders.
type frameDecoder struct {
	r   bytes.Reader
	dec *msgpack.Decoder
}

var decoders = sync.Pool{New: func() any {
	fd := &frameDecoder{}
	fd.dec = msgpack.NewDecoder(&fd.r)
	return fd
}}

// frameEncoder is a msgpack encoder wired once to its own appendWriter,
// for the same reason as frameDecoder. Kept in encoders.
type frameEncoder struct {
	w   appendWriter
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	fe := &frameEncoder{}
	fe.enc = msgpack.NewEncoder(&fe.w)
	return fe
}}

// AppendFrame appends the frame for (tag, v) to dst and returns the extended
// slice. It returns an error wrapping ErrEncode if msgpack cannot encode v or
// the body exceeds max bytes (max ≤ 0 means MaxFrameLimit); dst is then
// returned unchanged. A msgpack.RawMessage value is copied verbatim, so
// AppendFrame(dst, f.Tag, msgpack.RawMessage(f.Body), 0) re-encodes a Frame.
func AppendFrame(dst []byte, tag uint16, v any, max int) ([]byte, error) {
	if max <= 0 || max > MaxFrameLimit {
		max = MaxFrameLimit
	}
	start := len(dst)
	if cap(dst)-start < minFrameBuf {
		// The encoder writes a value piece by piece: room for a small
		// message up front spares the slice's doubling from 8 bytes up.
		dst = slices.Grow(dst, minFrameBuf)
	}
	dst = append(dst, 0, 0, 0, 0, byte(tag>>8), byte(tag))
	fe := encoders.Get().(*frameEncoder)
	fe.w.b = dst
	err := fe.enc.Encode(v)
	dst, fe.w.b = fe.w.b, nil
	if err != nil {
		// Dropped, not reused, like a failed frameDecoder.
		return dst[:start], fmt.Errorf("%w: %v", ErrEncode, err)
	}
	encoders.Put(fe)
	n := len(dst) - start - HeaderLen
	if n > max {
		return dst[:start], fmt.Errorf("%w: body of %d bytes exceeds the %d-byte limit", ErrEncode, n, max)
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(n))
	return dst, nil
}

// minFrameBuf is the room AppendFrame makes before it encodes: enough for a
// lock request, its reply or a Paxos message of a few commands.
const minFrameBuf = 256

// maxPooledFrameBuf is the largest buffer putFrameBuf keeps: one reply
// carrying 256 KiB of file contents must not pin that much per pooled
// buffer, while the frames of lock calls all fit many times over.
const maxPooledFrameBuf = 16 << 10

// frameBuf is a buffer to encode one frame into before it is written,
// kept in frameBufs (a pointer, so that putting it back allocates
// nothing).
type frameBuf struct{ b []byte }

var frameBufs = sync.Pool{New: func() any { return &frameBuf{b: make([]byte, 0, minFrameBuf)} }}

// getFrameBuf returns an empty buffer from the pool.
func getFrameBuf() *frameBuf { return frameBufs.Get().(*frameBuf) }

// putFrameBuf returns fb to the pool, unless it grew beyond
// maxPooledFrameBuf. The caller must not use fb.b afterwards, nor must
// anything else still hold it (a failed stream Write may).
func putFrameBuf(fb *frameBuf) {
	if cap(fb.b) > maxPooledFrameBuf {
		return
	}
	if invariants.Enabled {
		// Poisoned with msgpack's reserved byte: a frame written from a
		// buffer after it went back is refused by its reader (a length
		// far over any limit, a body that is not msgpack).
		b := fb.b[:cap(fb.b)]
		for i := range b {
			b[i] = 0xc1
		}
	}
	fb.b = fb.b[:0]
	frameBufs.Put(fb)
}

// appendWriter is an io.Writer that appends to a slice. It is an
// io.ByteWriter too, which msgpack's encoder writes single bytes to
// directly; given a plain io.Writer, the encoder wraps it and allocates a
// one-byte slice for every byte it writes.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// WriteByte appends c.
func (w *appendWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

// WriteFrame encodes v with msgpack and writes it to w as one frame with the
// given tag, in a single Write call. It returns an error wrapping ErrEncode
// if v cannot be encoded or exceeds MaxFrameLimit, and otherwise any error
// of w.
func WriteFrame(w io.Writer, tag uint16, v any) error {
	buf, err := AppendFrame(nil, tag, v, 0)
	if err != nil {
		return err
	}
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame from r, refusing a body longer than max bytes
// (max ≤ 0 means DefaultMaxClientFrame). It never panics and allocates at
// most the declared body length, which it checks against max first.
//
// It returns io.EOF if r ends cleanly before the first header byte;
// ErrTruncatedFrame (wrapped) if r ends inside a frame; ErrFrameTooLarge if
// the declared length exceeds max; ErrMalformedFrame if the body is not
// exactly one well-formed msgpack value; and otherwise r's error. After a
// frame error the stream is out of step and must be abandoned.
func ReadFrame(r io.Reader, max int) (Frame, error) {
	var hdr [HeaderLen]byte
	return readFrame(r, max, &hdr)
}

// readFrame is ReadFrame with the caller's room for the header, which
// (passed to r, an interface) would otherwise be allocated on every call.
func readFrame(r io.Reader, max int, hdr *[HeaderLen]byte) (Frame, error) {
	if max <= 0 {
		max = DefaultMaxClientFrame
	}
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Frame{}, fmt.Errorf("%w: header cut short", ErrTruncatedFrame)
		}
		return Frame{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if uint64(n) > uint64(max) {
		return Frame{}, fmt.Errorf("%w: %d-byte body exceeds the %d-byte limit", ErrFrameTooLarge, n, max)
	}
	f := Frame{Tag: binary.BigEndian.Uint16(hdr[4:]), Body: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Body); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return Frame{}, fmt.Errorf("%w: body cut short (want %d bytes)", ErrTruncatedFrame, n)
		}
		return Frame{}, err
	}
	if err := validMsgpack(f.Body); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// validMsgpack checks that b is exactly one well-formed msgpack value: every
// declared length fits in the bytes that remain, nesting stays within
// maxNesting, and nothing trails. It is iterative (a count of values still
// owed) so hostile input cannot recurse, and it never allocates.
//
// The check exists because msgpack/v5 trusts declared lengths when decoding
// into slices (it may allocate a 4-billion-element slice for a 5-byte body)
// and recurses without bound; a body that passes here can declare no more
// elements than it has bytes.
func validMsgpack(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("%w: empty body", ErrMalformedFrame)
	}
	// pending[d] is how many values are still owed at nesting depth d.
	var pending [maxNesting + 1]uint64
	depth := 0
	pending[0] = 1
	i := 0
	for {
		for depth > 0 && pending[depth] == 0 {
			depth--
		}
		if pending[depth] == 0 {
			break
		}
		pending[depth]--
		if i >= len(b) {
			return fmt.Errorf("%w: body ends inside a value at byte %d", ErrMalformedFrame, i)
		}
		c := b[i]
		i++
		var skip uint64 // payload bytes to skip
		var children uint64
		switch {
		case c <= 0x7f, c >= 0xe0: // fixint
		case c >= 0x80 && c <= 0x8f: // fixmap
			children = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f: // fixarray
			children = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf: // fixstr
			skip = uint64(c & 0x1f)
		case c == 0xc0, c == 0xc2, c == 0xc3: // nil, false, true
		case c == 0xc1:
			return fmt.Errorf("%w: reserved byte 0xc1 at %d", ErrMalformedFrame, i-1)
		case c == 0xc4, c == 0xd9: // bin8, str8
			l, err := readLen(b, &i, 1)
			if err != nil {
				return err
			}
			skip = l
		case c == 0xc5, c == 0xda: // bin16, str16
			l, err := readLen(b, &i, 2)
			if err != nil {
				return err
			}
			skip = l
		case c == 0xc6, c == 0xdb: // bin32, str32
			l, err := readLen(b, &i, 4)
			if err != nil {
				return err
			}
			skip = l
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext8/16/32: length, type, data
			l, err := readLen(b, &i, 1<<(c-0xc7))
			if err != nil {
				return err
			}
			skip = l + 1
		case c == 0xca: // float32
			skip = 4
		case c == 0xcb: // float64
			skip = 8
		case c == 0xcc, c == 0xd0: // uint8, int8
			skip = 1
		case c == 0xcd, c == 0xd1:
			skip = 2
		case c == 0xce, c == 0xd2:
			skip = 4
		case c == 0xcf, c == 0xd3:
			skip = 8
		case c >= 0xd4 && c <= 0xd8: // fixext 1,2,4,8,16 plus the type byte
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc, c == 0xde: // array16, map16
			l, err := readLen(b, &i, 2)
			if err != nil {
				return err
			}
			children = l
			if c == 0xde {
				children *= 2
			}
		case c == 0xdd, c == 0xdf: // array32, map32
			l, err := readLen(b, &i, 4)
			if err != nil {
				return err
			}
			children = l
			if c == 0xdf {
				children *= 2
			}
		}
		if skip > uint64(len(b)-i) {
			return fmt.Errorf("%w: %d-byte payload at byte %d overruns the body", ErrMalformedFrame, skip, i)
		}
		i += int(skip)
		if children > 0 {
			// Every child takes at least one byte, so a container cannot
			// declare more children than bytes remain.
			if children > uint64(len(b)-i) {
				return fmt.Errorf("%w: container at byte %d declares %d elements, more than the body holds", ErrMalformedFrame, i, children)
			}
			if depth == maxNesting {
				return fmt.Errorf("%w: nesting deeper than %d", ErrMalformedFrame, maxNesting)
			}
			depth++
			pending[depth] = children
		}
	}
	if i != len(b) {
		return fmt.Errorf("%w: %d trailing bytes after the value", ErrMalformedFrame, len(b)-i)
	}
	return nil
}

// readLen reads a big-endian length of size bytes at b[*i:].
func readLen(b []byte, i *int, size int) (uint64, error) {
	if len(b)-*i < size {
		return 0, fmt.Errorf("%w: length field cut short at byte %d", ErrMalformedFrame, *i)
	}
	var l uint64
	for k := 0; k < size; k++ {
		l = l<<8 | uint64(b[*i+k])
	}
	*i += size
	return l, nil
}
