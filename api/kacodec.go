package api

import (
	"encoding/binary"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// The KeepAlive batch frames (KeepAliveBatchRequest, KeepAliveBatchReply)
// carry one entry per session on a connection, once a KeepAlive round: at
// scale they are most of what a master decodes and encodes. Their msgpack
// codec is therefore written out by hand instead of left to msgpack's
// reflection, which spends a microsecond or so per entry walking struct
// fields. The wire form does not change: the same maps with the same keys
// as the struct tags name, so replicas and clients of any version read
// each other's frames.
//
// Encoding writes integers in their shortest msgpack form (reflection
// writes every 64-bit field in nine bytes); every msgpack decoder reads
// either form into the same 64-bit field. Decoding reads what reflection
// reads, with reflection's rules: any integer form, nil as zero, unknown
// keys skipped, keys in any order. A value in an unusual form (a struct
// sent as an array, a key that is not a short string) is handed to
// reflection, so that nothing decodes differently from before.

// kaBatchRequestWire and kaBatchReplyWire are the batch types without
// their codec methods: msgpack's reflection decodes them as it decoded the
// batch types before they had a codec of their own.
type (
	kaBatchRequestWire KeepAliveBatchRequest
	kaBatchReplyWire   KeepAliveBatchReply
)

// maxPrealloc bounds the entries a decoder allocates room for up front
// from a declared array length, which a hostile frame may inflate; more
// entries than that grow the slice as they are read.
const maxPrealloc = 1 << 12

// kaEntryBytes bounds the bytes an entry's fixed fields take in the hand
// encoding: maps, keys, integers of at most nine bytes each.
const kaEntryBytes = 96

// EncodeMsgpack writes the batch as msgpack's reflection would (a map
// {"k": [entries]}), integers in their shortest form.
func (r *KeepAliveBatchRequest) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := enc.Writer()
	var buf [kaEntryBytes]byte
	b := appendArrayLen(append(buf[:0], 0x81, 0xa1, 'k'), len(r.KeepAlives), r.KeepAlives == nil)
	if _, err := w.Write(b); err != nil {
		return err
	}
	for i := range r.KeepAlives {
		q := &r.KeepAlives[i]
		b = append(buf[:0], 0x82, 0xa1, 'c')
		b = appendUint(b, q.Call)
		b = append(b, 0xa1, 'k')
		if q.KeepAlive.Token == "" {
			b = append(b, 0x83)
		} else {
			b = append(b, 0x84)
		}
		b = append(b, 0xa1, 's')
		b = appendUint(b, q.KeepAlive.Session)
		b = append(b, 0xa1, 'e')
		b = appendUint(b, q.KeepAlive.Epoch)
		if q.KeepAlive.Token != "" {
			b = append(b, 0xa2, 't', 'k')
			if _, err := w.Write(b); err != nil {
				return err
			}
			if err := enc.EncodeString(q.KeepAlive.Token); err != nil {
				return err
			}
			b = buf[:0]
		}
		b = append(b, 0xa1, 'a')
		b = appendUint(b, q.KeepAlive.Ack)
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// UnmarshalMsgpack reads a batch from b, one msgpack value, as
// msgpack's reflection would into a zero KeepAliveBatchRequest. The forms
// the batch encoders write (this codec's and reflection's) it parses from
// the bytes directly; any other form (a struct as an array, a key it does
// not know, a repeated batch key), and a damaged b, it hands to
// reflection, which decides. A master reads one of these frames a round
// per connection, with an entry per session: transport.Frame.Decode hands
// it the frame's body without a msgpack.Decoder in between.
func (r *KeepAliveBatchRequest) UnmarshalMsgpack(b []byte) error {
	p := kaParser{b: b}
	if qs, ok := p.batchRequest(); ok && p.i == len(b) {
		r.KeepAlives = qs
		return nil
	}
	*r = KeepAliveBatchRequest{}
	return msgpack.Unmarshal(b, (*kaBatchRequestWire)(r))
}

// kaParser parses the canonical forms of a KeepAlive batch request from
// bytes: every method reports false, leaving i wherever it stopped, for a
// form it does not parse or bytes that end early.
type kaParser struct {
	b []byte
	i int
}

// batchRequest parses {"k": [entries]}.
func (p *kaParser) batchRequest() (qs []KeepAliveStreamRequest, ok bool) {
	n, ok := p.mapLen()
	if !ok {
		return nil, false
	}
	seen := false
	for range n {
		if k, ok := p.key(); !ok || k != 'k' || seen {
			return nil, false
		}
		seen = true
		if p.i < len(p.b) && p.b[p.i] == msgpcode.Nil {
			p.i++
			continue
		}
		m, ok := p.arrayLen()
		if !ok {
			return nil, false
		}
		qs = make([]KeepAliveStreamRequest, 0, min(m, maxPrealloc))
		for range m {
			qs = append(qs, KeepAliveStreamRequest{})
			if !p.streamRequest(&qs[len(qs)-1]) {
				return nil, false
			}
		}
	}
	return qs, true
}

// streamRequest parses {"c": call, "k": {...}} into q.
func (p *kaParser) streamRequest(q *KeepAliveStreamRequest) bool {
	n, ok := p.mapLen()
	if !ok {
		return false
	}
	for range n {
		k, ok := p.key()
		if !ok {
			return false
		}
		switch k {
		case 'c':
			q.Call, ok = p.uint()
		case 'k':
			ok = p.keepAliveRequest(&q.KeepAlive)
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// keepAliveRequest parses {"s": session, "e": epoch, "tk": token, "a":
// ack} into k.
func (p *kaParser) keepAliveRequest(k *KeepAliveRequest) bool {
	n, ok := p.mapLen()
	if !ok {
		return false
	}
	for range n {
		key, ok := p.key()
		if !ok {
			return false
		}
		switch key {
		case 's':
			k.Session, ok = p.uint()
		case 'e':
			k.Epoch, ok = p.uint()
		case 'a':
			k.Ack, ok = p.uint()
		case 't'<<8 | 'k':
			k.Token, ok = p.str()
		default:
			return false
		}
		if !ok {
			return false
		}
	}
	return true
}

// key parses a key of one or two bytes as a fixstr, returned as a
// number: one byte is itself, two are first<<8 | second.
func (p *kaParser) key() (int, bool) {
	if p.i >= len(p.b) {
		return 0, false
	}
	c := p.b[p.i]
	switch {
	case c == msgpcode.FixedStrLow|1 && p.i+2 <= len(p.b):
		p.i += 2
		return int(p.b[p.i-1]), true
	case c == msgpcode.FixedStrLow|2 && p.i+3 <= len(p.b):
		p.i += 3
		return int(p.b[p.i-2])<<8 | int(p.b[p.i-1]), true
	}
	return 0, false
}

// mapLen parses the header of a fixmap.
func (p *kaParser) mapLen() (int, bool) {
	if p.i >= len(p.b) || !msgpcode.IsFixedMap(p.b[p.i]) {
		return 0, false
	}
	p.i++
	return int(p.b[p.i-1] & msgpcode.FixedMapMask), true
}

// arrayLen parses the header of an array. The length is not trusted:
// each entry is parsed from bytes that must be there.
func (p *kaParser) arrayLen() (int, bool) {
	if p.i >= len(p.b) {
		return 0, false
	}
	c := p.b[p.i]
	switch {
	case c >= msgpcode.FixedArrayLow && c <= msgpcode.FixedArrayHigh:
		p.i++
		return int(c & msgpcode.FixedArrayMask), true
	case c == msgpcode.Array16:
		n, ok := p.fixed(2)
		return int(n), ok
	case c == msgpcode.Array32:
		n, ok := p.fixed(4)
		return int(n), ok
	}
	return 0, false
}

// fixed parses a code byte followed by a big-endian number of size bytes.
func (p *kaParser) fixed(size int) (uint64, bool) {
	if p.i+1+size > len(p.b) {
		return 0, false
	}
	var n uint64
	for _, c := range p.b[p.i+1 : p.i+1+size] {
		n = n<<8 | uint64(c)
	}
	p.i += 1 + size
	return n, true
}

// uint parses an integer of any form, or nil, into a uint64 as msgpack's
// DecodeUint64 does (a negative one wraps).
func (p *kaParser) uint() (uint64, bool) {
	if p.i >= len(p.b) {
		return 0, false
	}
	c := p.b[p.i]
	if msgpcode.IsFixedNum(c) {
		p.i++
		return uint64(int8(c)), true
	}
	switch c {
	case msgpcode.Nil:
		p.i++
		return 0, true
	case msgpcode.Uint8:
		return p.fixed(1)
	case msgpcode.Uint16:
		return p.fixed(2)
	case msgpcode.Uint32:
		return p.fixed(4)
	case msgpcode.Uint64, msgpcode.Int64:
		return p.fixed(8)
	case msgpcode.Int8:
		n, ok := p.fixed(1)
		return uint64(int8(n)), ok
	case msgpcode.Int16:
		n, ok := p.fixed(2)
		return uint64(int16(n)), ok
	case msgpcode.Int32:
		n, ok := p.fixed(4)
		return uint64(int32(n)), ok
	}
	return 0, false
}

// str parses a string (str8, str16, str32 or fixstr).
func (p *kaParser) str() (string, bool) {
	if p.i >= len(p.b) {
		return "", false
	}
	c := p.b[p.i]
	var n uint64
	ok := true
	switch {
	case msgpcode.IsFixedString(c):
		n = uint64(c & msgpcode.FixedStrMask)
		p.i++
	case c == msgpcode.Str8:
		n, ok = p.fixed(1)
	case c == msgpcode.Str16:
		n, ok = p.fixed(2)
	case c == msgpcode.Str32:
		n, ok = p.fixed(4)
	default:
		return "", false
	}
	if !ok || n > uint64(len(p.b)-p.i) {
		return "", false
	}
	s := string(p.b[p.i : p.i+int(n)])
	p.i += int(n)
	return s, true
}

// EncodeMsgpack writes the reply as msgpack's reflection would (a map
// {"r": [replies]}, omitting empty optional fields), integers in their
// shortest form.
func (r *KeepAliveBatchReply) EncodeMsgpack(enc *msgpack.Encoder) error {
	w := enc.Writer()
	var buf [kaEntryBytes]byte
	b := appendArrayLen(append(buf[:0], 0x81, 0xa1, 'r'), len(r.Replies), r.Replies == nil)
	if _, err := w.Write(b); err != nil {
		return err
	}
	for i := range r.Replies {
		rp := &r.Replies[i]
		fields := byte(1)
		if rp.KeepAlive != nil {
			fields++
		}
		if rp.Err != nil {
			fields++
		}
		b = append(buf[:0], 0x80|fields, 0xa1, 'c')
		b = appendUint(b, rp.Call)
		if ka := rp.KeepAlive; ka != nil {
			fields := byte(2)
			if ka.Held != 0 {
				fields++
			}
			if len(ka.Events) > 0 {
				fields++
			}
			if ka.Cadence != 0 {
				fields++
			}
			b = append(b, 0xa1, 'k', 0x80|fields, 0xa2, 'l', 't')
			b = appendInt(b, ka.LeaseTimeout)
			if ka.Held != 0 {
				b = append(b, 0xa1, 'h')
				b = appendInt(b, ka.Held)
			}
			b = append(b, 0xa1, 'e')
			b = appendUint(b, ka.Epoch)
			if len(ka.Events) > 0 {
				b = append(b, 0xa2, 'e', 'v')
				if _, err := w.Write(b); err != nil {
					return err
				}
				if err := enc.Encode(ka.Events); err != nil {
					return err
				}
				b = buf[:0]
			}
			if ka.Cadence != 0 {
				b = append(b, 0xa2, 'c', 'a')
				b = appendInt(b, ka.Cadence)
			}
		}
		if rp.Err != nil {
			b = append(b, 0xa3, 'e', 'r', 'r')
			if _, err := w.Write(b); err != nil {
				return err
			}
			if err := enc.Encode(rp.Err); err != nil {
				return err
			}
			b = buf[:0]
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// DecodeMsgpack reads a reply as msgpack's reflection would. The
// responses of a frame share one allocation.
func (r *KeepAliveBatchReply) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, ok, err := mapStart(dec)
	if err != nil {
		return err
	}
	if !ok {
		return dec.Decode((*kaBatchReplyWire)(r))
	}
	if n < 0 {
		*r = KeepAliveBatchReply{}
		return nil
	}
	var kb keyBuf
	for range n {
		key, err := kb.read(dec)
		if err != nil {
			return err
		}
		if string(key) != "r" {
			if err := dec.Skip(); err != nil {
				return err
			}
			continue
		}
		m, err := dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		if m < 0 {
			r.Replies = nil
			continue
		}
		rps := make([]KeepAliveStreamReply, 0, min(m, maxPrealloc))
		var resps []KeepAliveResponse // room for the responses, handed out in turn
		for range m {
			rps = append(rps, KeepAliveStreamReply{})
			if len(resps) == 0 {
				resps = make([]KeepAliveResponse, min(m, maxPrealloc))
			}
			rp := &rps[len(rps)-1]
			used, err := decodeStreamReply(dec, &kb, rp, &resps[0])
			if err != nil {
				return err
			}
			if used {
				resps = resps[1:]
			}
		}
		r.Replies = rps
	}
	return nil
}

// decodeStreamReply reads one reply into rp (a zero value). A response it
// carries is read into *room, which it reports it used.
func decodeStreamReply(dec *msgpack.Decoder, kb *keyBuf, rp *KeepAliveStreamReply, room *KeepAliveResponse) (used bool, err error) {
	n, ok, err := mapStart(dec)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, dec.Decode(rp)
	}
	for range n {
		key, err := kb.read(dec)
		if err != nil {
			return used, err
		}
		switch string(key) {
		case "c":
			rp.Call, err = dec.DecodeUint64()
		case "k":
			var c byte
			if c, err = dec.PeekCode(); err != nil {
				break
			}
			if c == msgpcode.Nil {
				err = dec.DecodeNil()
				rp.KeepAlive = nil
				break
			}
			if rp.KeepAlive == nil {
				// A repeated key decodes into the same response, as
				// reflection does.
				*room, used = KeepAliveResponse{}, true
				rp.KeepAlive = room
			}
			err = decodeKeepAliveResponse(dec, kb, rp.KeepAlive)
		case "err":
			err = dec.Decode(&rp.Err)
		default:
			err = dec.Skip()
		}
		if err != nil {
			return used, err
		}
	}
	return used, nil
}

// decodeKeepAliveResponse reads a KeepAliveResponse into k (a zero value).
func decodeKeepAliveResponse(dec *msgpack.Decoder, kb *keyBuf, k *KeepAliveResponse) error {
	n, ok, err := mapStart(dec)
	if err != nil {
		return err
	}
	if !ok {
		return dec.Decode(k)
	}
	for range n {
		key, err := kb.read(dec)
		if err != nil {
			return err
		}
		switch string(key) {
		case "lt":
			k.LeaseTimeout, err = dec.DecodeInt64()
		case "h":
			k.Held, err = dec.DecodeInt64()
		case "e":
			k.Epoch, err = dec.DecodeUint64()
		case "ev":
			err = dec.Decode(&k.Events)
		case "ca":
			k.Cadence, err = dec.DecodeInt64()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mapStart reads the header of a map, the form msgpack gives a struct: n
// is its length (-1 for nil). ok false: the next value is not a map or nil
// (it is left unread), for reflection to decode.
func mapStart(dec *msgpack.Decoder) (n int, ok bool, err error) {
	c, err := dec.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if !msgpcode.IsFixedMap(c) && c != msgpcode.Map16 && c != msgpcode.Map32 && c != msgpcode.Nil {
		return 0, false, nil
	}
	n, err = dec.DecodeMapLen()
	return n, err == nil, err
}

// keyBuf reads map keys without allocating for the short ones the batch
// types use.
type keyBuf struct{ b [32]byte }

// read reads a map key. The bytes it returns for a short key are valid
// until the next read; a key of another form is read by DecodeString (as
// reflection reads it). Callers switch on string(key), which the compiler
// compares without allocating.
func (kb *keyBuf) read(dec *msgpack.Decoder) ([]byte, error) {
	c, err := dec.PeekCode()
	if err != nil {
		return nil, err
	}
	// NB: a fixstr's header and at most 31 bytes always fit kb.b.
	if !msgpcode.IsFixedString(c) {
		s, err := dec.DecodeString()
		return []byte(s), err
	}
	b := kb.b[:1+int(c&msgpcode.FixedStrMask)]
	if err := dec.ReadFull(b); err != nil {
		return nil, err
	}
	return b[1:], nil
}

// appendUint appends n in msgpack's shortest form.
func appendUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, msgpcode.Uint8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Uint16), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Uint32), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, msgpcode.Uint64), n)
	}
}

// appendInt appends n in msgpack's shortest form.
func appendInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return appendUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, msgpcode.Int8, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Int16), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Int32), uint32(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, msgpcode.Int64), uint64(n))
	}
}

// appendArrayLen appends the header of an array of n values, or nil for
// a nil slice (as reflection encodes one).
func appendArrayLen(b []byte, n int, isNil bool) []byte {
	switch {
	case isNil:
		return append(b, msgpcode.Nil)
	case n < 16:
		return append(b, msgpcode.FixedArrayLow|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, msgpcode.Array16), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, msgpcode.Array32), uint32(n))
	}
}
