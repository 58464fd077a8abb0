package api

import (
	"bytes"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/transport"
)

// framed reports whether body passes the check every frame passes before
// it is decoded (transport.ReadFrame: exactly one well-formed msgpack
// value, no declared length beyond the body).
func framed(body []byte) bool {
	f, err := transport.AppendFrame(nil, 1, msgpack.RawMessage(body), 0)
	if err != nil {
		return false
	}
	_, err = transport.ReadFrame(bytes.NewReader(f), transport.MaxFrameLimit)
	return err == nil
}

// randUint returns numbers of every msgpack width, 0 and the extremes.
func randUint(r *rand.Rand) uint64 {
	switch r.IntN(6) {
	case 0:
		return 0
	case 1:
		return uint64(r.IntN(128))
	case 2:
		return uint64(r.IntN(1 << 16))
	case 3:
		return uint64(r.Uint32())
	case 4:
		return math.MaxUint64 - uint64(r.IntN(3))
	default:
		return r.Uint64()
	}
}

func randInt(r *rand.Rand) int64 {
	n := int64(randUint(r))
	if r.IntN(3) == 0 {
		n = -n
	}
	return n
}

func randBatchRequest(r *rand.Rand) KeepAliveBatchRequest {
	var req KeepAliveBatchRequest
	switch r.IntN(8) {
	case 0: // nil slice
	case 1:
		req.KeepAlives = []KeepAliveStreamRequest{}
	default:
		n := r.IntN(40)
		if r.IntN(10) == 0 {
			n = 70000 // a 32-bit array length
		}
		for range n {
			q := KeepAliveStreamRequest{Call: randUint(r), KeepAlive: KeepAliveRequest{
				Header: Header{Session: randUint(r), Epoch: randUint(r)}, Ack: randUint(r)}}
			if r.IntN(4) == 0 {
				q.KeepAlive.Token = string(bytes.Repeat([]byte("t"), r.IntN(300)))
			}
			req.KeepAlives = append(req.KeepAlives, q)
		}
	}
	return req
}

func randBatchReply(r *rand.Rand) KeepAliveBatchReply {
	var rep KeepAliveBatchReply
	switch r.IntN(8) {
	case 0:
	case 1:
		rep.Replies = []KeepAliveStreamReply{}
	default:
		n := r.IntN(40)
		if r.IntN(10) == 0 {
			n = 300
		}
		for range n {
			rp := KeepAliveStreamReply{Call: randUint(r)}
			if r.IntN(4) != 0 {
				ka := &KeepAliveResponse{LeaseTimeout: randInt(r), Epoch: randUint(r)}
				if r.IntN(2) == 0 {
					ka.Held = randInt(r)
				}
				if r.IntN(2) == 0 {
					ka.Cadence = randInt(r)
				}
				for range r.IntN(3) {
					ka.Events = append(ka.Events, Event{Kind: EventChildAdded, Seq: randUint(r), Path: "/d", Child: "c", Handle: randUint(r)})
				}
				rp.KeepAlive = ka
			}
			if r.IntN(5) == 0 {
				rp.Err = &Error{Code: ResourceExhausted, Msg: "busy", RetryAfter: randInt(r)}
			}
			rep.Replies = append(rep.Replies, rp)
		}
	}
	return rep
}

// TestKeepAliveBatchCodecCompatible: what the hand codec writes,
// msgpack's reflection (a replica or client of an older version) reads as
// the value written, and what reflection writes the hand codec reads as
// reflection does; the hand encoding is never longer.
func TestKeepAliveBatchCodecCompatible(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	entries := 0
	for range 300 {
		req := randBatchRequest(r)
		entries += len(req.KeepAlives)
		hand, err := msgpack.Marshal(&req)
		if err != nil {
			t.Fatal(err)
		}
		old, err := msgpack.Marshal((*kaBatchRequestWire)(&req))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(hand, old) && len(req.KeepAlives) > 0 {
			t.Fatal("the hand codec was not used: it wrote what reflection writes")
		}
		// Both forms take the master's fast path, not the fallback.
		for _, b := range [][]byte{hand, old} {
			p := kaParser{b: b}
			if _, ok := p.batchRequest(); !ok || p.i != len(b) {
				t.Fatalf("the request parser left %x to reflection (stopped at %d of %d bytes)", b, p.i, len(b))
			}
		}
		if len(hand) > len(old) {
			t.Fatalf("the hand encoding is %d bytes, reflection's %d", len(hand), len(old))
		}
		var byOld kaBatchRequestWire
		if err := msgpack.Unmarshal(hand, &byOld); err != nil {
			t.Fatalf("reflection cannot read the hand encoding: %v", err)
		}
		if !reflect.DeepEqual(KeepAliveBatchRequest(byOld), req) {
			t.Fatalf("reflection read the hand encoding as %+v, want %+v", byOld, req)
		}
		var byHand KeepAliveBatchRequest
		if err := msgpack.Unmarshal(old, &byHand); err != nil {
			t.Fatalf("the hand codec cannot read reflection's encoding: %v", err)
		}
		if !reflect.DeepEqual(byHand, req) {
			t.Fatalf("the hand codec read reflection's encoding as %+v, want %+v", byHand, req)
		}

		rep := randBatchReply(r)
		entries += len(rep.Replies)
		hand, err = msgpack.Marshal(&rep)
		if err != nil {
			t.Fatal(err)
		}
		old, err = msgpack.Marshal((*kaBatchReplyWire)(&rep))
		if err != nil {
			t.Fatal(err)
		}
		if len(hand) > len(old) {
			t.Fatalf("the hand encoding is %d bytes, reflection's %d", len(hand), len(old))
		}
		var repOld kaBatchReplyWire
		if err := msgpack.Unmarshal(hand, &repOld); err != nil {
			t.Fatalf("reflection cannot read the hand encoding: %v", err)
		}
		if !reflect.DeepEqual(KeepAliveBatchReply(repOld), rep) {
			t.Fatalf("reflection read the hand encoding as %+v, want %+v", repOld, rep)
		}
		var repHand KeepAliveBatchReply
		if err := msgpack.Unmarshal(old, &repHand); err != nil {
			t.Fatalf("the hand codec cannot read reflection's encoding: %v", err)
		}
		if !reflect.DeepEqual(repHand, rep) {
			t.Fatalf("the hand codec read reflection's encoding as %+v, want %+v", repHand, rep)
		}
	}
	if entries < 5000 {
		t.Fatalf("only %d entries compared", entries)
	}
}

// sameDecoding checks that the hand codec and reflection decode body
// alike: both fail, or both give the same value.
func sameDecoding(t *testing.T, body []byte) (failed bool) {
	t.Helper()
	var hq KeepAliveBatchRequest
	var oq kaBatchRequestWire
	// As transport.Frame.Decode decodes a request: its bytes handed over.
	he, oe := hq.UnmarshalMsgpack(body), msgpack.Unmarshal(body, &oq)
	if (he != nil) != (oe != nil) || (he == nil && !reflect.DeepEqual(hq, KeepAliveBatchRequest(oq))) {
		t.Fatalf("request body %x: hand codec %+v, %v; reflection %+v, %v", body, hq, he, oq, oe)
	}
	var hr KeepAliveBatchReply
	var or kaBatchReplyWire
	hre, ore := msgpack.Unmarshal(body, &hr), msgpack.Unmarshal(body, &or)
	if (hre != nil) != (ore != nil) || (hre == nil && !reflect.DeepEqual(hr, KeepAliveBatchReply(or))) {
		t.Fatalf("reply body %x: hand codec %+v, %v; reflection %+v, %v", body, hr, hre, or, ore)
	}
	return he != nil
}

// TestKeepAliveBatchDecodeLikeReflection: bodies in unusual forms (keys
// unknown, long or out of order, integers of every width, nil, structs as
// arrays) and damaged bodies decode with the hand codec exactly as with
// reflection.
func TestKeepAliveBatchDecodeLikeReflection(t *testing.T) {
	type (
		anyMap = map[string]any
		anyArr = []any
	)
	odd := []any{
		nil,
		anyMap{},
		anyMap{"k": nil, "r": nil},
		anyMap{"k": anyArr{}, "r": anyArr{}, "zz": anyArr{1, "x", anyMap{"q": 1}}},
		anyMap{"k": anyArr{anyMap{"k": anyMap{"a": int8(-3), "s": uint16(700), "tk": "tok", "x": 1.5}, "c": int64(-1)}}},
		anyMap{"k": anyArr{anyArr{uint8(9), anyMap{"s": 1}}}}, // an entry as an array
		anyMap{"k": anyArr{anyMap{"c": 1, "k": anyArr{1, 2, "t", 4}}}},
		anyMap{"k": anyArr{anyMap{"c": "not a number"}}},
		anyMap{"k": anyArr{anyMap{"a-long-key-beyond-the-short-buffer-of-32": 1, "c": 2}}},
		anyMap{"r": anyArr{anyMap{"c": 1, "k": anyMap{"lt": uint32(5), "h": int16(-2), "e": 3, "ca": 7}}}},
		anyMap{"r": anyArr{anyMap{"c": 1, "k": nil, "err": anyMap{"c": 5, "m": "x"}}}},
		anyMap{"r": anyArr{anyMap{"c": 1, "k": anyMap{"lt": 1}, "k ": 2}}},
		anyMap{"r": anyArr{anyMap{"k": anyMap{"lt": 1}}, anyMap{"k": anyMap{"e": 2, "ev": anyArr{anyMap{"k": 1, "s": 2}}}}}},
		anyMap{"r": anyArr{anyMap{"k": anyArr{1, 2, 3, nil, 5}}}},
		anyMap{"r": anyArr{anyMap{"k": 1}}},
		anyArr{anyArr{}},
		anyArr{1, 2},
		"a string",
	}
	// Integers of every width and sign, and nil, in every integer field,
	// in the forms the fast parser takes itself (known keys only).
	for _, n := range []any{int8(-3), int16(-300), int32(-70000), int64(-5), int64(math.MinInt64), uint8(200),
		uint16(60000), uint32(1 << 31), uint64(1 << 63), nil, 7, "x"} {
		for _, key := range []string{"s", "e", "a", "c"} {
			ka := anyMap{"s": 1, "e": 2, "a": 3}
			q := anyMap{"c": 4, "k": ka}
			if key == "c" {
				q["c"] = n
			} else {
				ka[key] = n
			}
			odd = append(odd, anyMap{"k": anyArr{q}})
		}
		odd = append(odd, anyMap{"r": anyArr{anyMap{"c": n, "k": anyMap{"lt": n, "h": n, "e": n, "ca": n}}}})
	}
	for _, v := range odd {
		body, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		sameDecoding(t, body)
	}
	// A repeated key: the later value wins, in the same response.
	var enc bytes.Buffer
	e := msgpack.NewEncoder(&enc)
	_ = e.EncodeMapLen(1)
	_ = e.EncodeString("r")
	_ = e.EncodeArrayLen(1)
	_ = e.EncodeMapLen(3)
	_ = e.EncodeString("k")
	_ = e.Encode(anyMap{"lt": 1, "h": 2})
	_ = e.EncodeString("k")
	_ = e.Encode(anyMap{"lt": 3})
	_ = e.EncodeString("c")
	_ = e.EncodeUint(4)
	sameDecoding(t, enc.Bytes())

	// Damaged bodies: every byte of valid encodings changed in turn (those
	// a replica's frame check lets through).
	r := rand.New(rand.NewPCG(3, 4))
	judged, failed := 0, 0
	for range 40 {
		var bodies [][]byte
		req, rep := randBatchRequest(r), randBatchReply(r)
		for _, v := range []any{&req, &rep} {
			b, err := msgpack.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if len(b) < 4096 {
				bodies = append(bodies, b)
			}
		}
		for _, b := range bodies {
			for i := range b {
				d := bytes.Clone(b)
				d[i] ^= byte(1 + r.IntN(255))
				for _, d := range [][]byte{d, d[:i]} {
					if !framed(d) {
						continue
					}
					if sameDecoding(t, d) {
						failed++
					}
					judged++
				}
			}
		}
	}
	if judged < 2000 || failed < 50 {
		t.Fatalf("judged %d damaged bodies, %d of them refused: too few to judge", judged, failed)
	}
	t.Logf("%d damaged bodies decoded alike, %d refused by both", judged, failed)
}

// BenchmarkKeepAliveBatchCodec: one op encodes a 10,000-entry batch
// request and reply and decodes them, by the hand codec ("hand") and by
// msgpack's reflection ("reflection", the codec before the hand one). It
// reports per entry (a request and its reply): ns/entry is CPU time on
// whatever the machine is doing, allocs/entry is exact.
func BenchmarkKeepAliveBatchCodec(b *testing.B) {
	const n = 10000
	req := KeepAliveBatchRequest{KeepAlives: make([]KeepAliveStreamRequest, n)}
	rep := KeepAliveBatchReply{Replies: make([]KeepAliveStreamReply, n)}
	resps := make([]KeepAliveResponse, n)
	for i := range n {
		req.KeepAlives[i] = KeepAliveStreamRequest{Call: uint64(100000 + i), KeepAlive: KeepAliveRequest{
			Header: Header{Session: uint64(1<<40 + i), Epoch: 3}, Ack: uint64(i % 7)}}
		resps[i] = KeepAliveResponse{LeaseTimeout: 12e9, Held: 1e9, Epoch: 3, Cadence: 1e9}
		rep.Replies[i] = KeepAliveStreamReply{Call: uint64(100000 + i), KeepAlive: &resps[i]}
	}
	for _, c := range []struct {
		name           string
		req, rep       any
		newReq, newRep func() any
	}{
		{"hand", &req, &rep, func() any { return new(KeepAliveBatchRequest) }, func() any { return new(KeepAliveBatchReply) }},
		{"reflection", (*kaBatchRequestWire)(&req), (*kaBatchReplyWire)(&rep),
			func() any { return new(kaBatchRequestWire) }, func() any { return new(kaBatchReplyWire) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var buf bytes.Buffer
			enc := msgpack.NewEncoder(&buf)
			var rd bytes.Reader
			dec := msgpack.NewDecoder(&rd)
			size := 0
			for b.Loop() {
				size = 0
				for _, v := range []struct {
					v   any
					new func() any
				}{{c.req, c.newReq}, {c.rep, c.newRep}} {
					buf.Reset()
					if err := enc.Encode(v.v); err != nil {
						b.Fatal(err)
					}
					size += buf.Len()
					if err := decode(dec, &rd, buf.Bytes(), v.new()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/entry")
			b.ReportMetric(float64(testing.AllocsPerRun(1, func() {
				buf.Reset()
				_ = enc.Encode(c.req)
				_ = decode(dec, &rd, buf.Bytes(), c.newReq())
				buf.Reset()
				_ = enc.Encode(c.rep)
				_ = decode(dec, &rd, buf.Bytes(), c.newRep())
			}))/n, "allocs/entry")
			b.ReportMetric(float64(size)/n, "bytes/entry")
		})
	}
}

// decode decodes body into v as transport.Frame.Decode does.
func decode(dec *msgpack.Decoder, rd *bytes.Reader, body []byte, v any) error {
	if u, ok := v.(msgpack.Unmarshaler); ok {
		return u.UnmarshalMsgpack(body)
	}
	rd.Reset(body)
	return dec.Decode(v)
}

// TestKeepAliveBatchDecodeAllocs: a request, and a reply without events
// or errors, decode in a few allocations per frame, not per entry. For a
// reply, reflection (the fallback) makes several per entry, so a fast
// path that stopped taking the common reply shows here; for a request it
// does not (its entries hold no pointers), so what shows a request left to
// reflection is TestKeepAliveBatchCodecCompatible's parser check.
func TestKeepAliveBatchDecodeAllocs(t *testing.T) {
	const n = 1000
	rep := KeepAliveBatchReply{Replies: make([]KeepAliveStreamReply, n)}
	for i := range rep.Replies {
		rep.Replies[i] = KeepAliveStreamReply{Call: uint64(i + 1), KeepAlive: &KeepAliveResponse{LeaseTimeout: int64(12e9), Held: int64(i) * 1e6, Cadence: 1e9}}
	}
	body, err := msgpack.Marshal(&rep)
	if err != nil {
		t.Fatal(err)
	}
	// The master's side: a request of n entries, parsed from its bytes.
	req := KeepAliveBatchRequest{KeepAlives: make([]KeepAliveStreamRequest, n)}
	for i := range req.KeepAlives {
		req.KeepAlives[i] = KeepAliveStreamRequest{Call: uint64(i + 1), KeepAlive: KeepAliveRequest{Header: Header{Session: uint64(i + 7), Epoch: 3}, Ack: uint64(i)}}
	}
	reqBody, err := msgpack.Marshal(&req)
	if err != nil {
		t.Fatal(err)
	}
	var gotReq KeepAliveBatchRequest
	reqAllocs := testing.AllocsPerRun(20, func() {
		gotReq = KeepAliveBatchRequest{}
		if err := msgpack.Unmarshal(reqBody, &gotReq); err != nil {
			t.Fatal(err)
		}
	})
	if !reflect.DeepEqual(gotReq, req) {
		t.Fatalf("decoded %d requests, not the %d encoded", len(gotReq.KeepAlives), n)
	}
	t.Logf("%v allocations to decode a request of %d entries", reqAllocs, n)
	if reqAllocs > n/10 {
		t.Fatalf("%v allocations to decode a request of %d entries: the hand codec's fast path was not taken", reqAllocs, n)
	}

	var got KeepAliveBatchReply
	allocs := testing.AllocsPerRun(20, func() {
		got = KeepAliveBatchReply{}
		if err := msgpack.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
	})
	if len(got.Replies) != n || !reflect.DeepEqual(got, rep) {
		t.Fatalf("decoded %d replies, not the %d encoded", len(got.Replies), n)
	}
	t.Logf("%v allocations to decode a reply of %d entries", allocs, n)
	if allocs > n/10 {
		t.Fatalf("%v allocations to decode a reply of %d entries: the hand codec's fast path was not taken", allocs, n)
	}
}
