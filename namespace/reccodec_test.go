package namespace

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
)

func randRecords(r *rand.Rand, n int) []any {
	u := func() uint64 { return r.Uint64() >> r.IntN(64) }
	i := func() int64 { return int64(r.Uint64()) >> r.IntN(64) }
	s := func() string { return string(bytes.Repeat([]byte{'a' + byte(r.IntN(26))}, r.IntN(300))) }
	var out []any
	for len(out) < n {
		switch r.IntN(5) {
		case 0:
			nr := &nodeRec{Instance: u(), Dir: r.IntN(2) == 0, Owner: u(), ContentGen: u(), LockGen: u(), ACLGen: u(),
				Sum: r.Uint64(), Size: u(), Created: i(), Modified: i(), ACL: api.ACLNames{Read: s(), Write: s(), ChangeACL: s()},
				LockDelay: i(), Mode: api.LockMode(r.IntN(3)), DelayUntil: i()}
			for h := uint64(0); h < uint64(r.IntN(5)); h++ {
				nr.Holders = append(nr.Holders, h*h*1000+1)
			}
			out = append(out, nr)
		case 1:
			out = append(out, &sessionRec{Tenant: s(), Principal: s(), Created: i()})
		case 2:
			tr := &tenantRec{Created: i()}
			randUints(r, reflect.ValueOf(&tr.Quota).Elem(), u)
			randUints(r, reflect.ValueOf(&tr.Usage).Elem(), func() uint64 { return math.MaxUint64 })
			out = append(out, tr)
		case 3:
			out = append(out, &counters{Session: u(), Instance: u(), LockGen: u()})
		case 4:
			out = append(out, &tokenRec{Tenant: s(), Principal: s(), Hash: []byte(s()), Created: i()})
		}
	}
	return out
}

// TestRecordCodec: records round-trip; every truncation, an extra byte, a
// wrong kind and a padded varint are ErrCorrupt.
func TestRecordCodec(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, rec := range randRecords(r, 400) {
		b := encodeRec(rec)
		got := reflect.New(reflect.TypeOf(rec).Elem()).Interface()
		if err := decodeRec([]byte("k"), b, got); err != nil {
			t.Fatalf("%T: %v", rec, err)
		}
		if !reflect.DeepEqual(got, rec) {
			t.Fatalf("round trip:\n%+v\n%+v", got, rec)
		}
		if !bytes.Equal(encodeRec(got), b) {
			t.Fatal("re-encoding differs")
		}
		for n := 0; n < len(b); n += 1 + n/8 {
			if err := decodeRec(nil, b[:n], got); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("%T truncated to %d of %d: %v", rec, n, len(b), err)
			}
		}
		if err := decodeRec(nil, append(bytes.Clone(b), 0), got); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%T with a trailing byte: %v", rec, err)
		}
		other := &counters{}
		if _, ok := rec.(*counters); ok {
			var s sessionRec
			if err := decodeRec(nil, b, &s); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("counters decoded as a session: %v", err)
			}
		} else if err := decodeRec(nil, b, other); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("%T decoded as counters: %v", rec, err)
		}
	}
	// A padded varint (1 as 0x81 0x00) is not canonical, nor a padded
	// zig-zag one (-1 as 0x81 0x00).
	b := encodeRec(&counters{Session: 1, Instance: 2, LockGen: 3})
	padded := append(append(bytes.Clone(b[:2]), 0x81, 0x00), b[3:]...)
	if err := decodeRec(nil, padded, &counters{}); !errors.Is(err, ErrCorrupt) || !errors.Is(err, wire.ErrNonCanonical) {
		t.Fatalf("padded varint: %v", err)
	}
	b = encodeRec(&sessionRec{Tenant: "t", Principal: "p", Created: -1})
	padded = append(bytes.Clone(b[:len(b)-1]), 0x81, 0x00)
	if err := decodeRec(nil, padded, &sessionRec{}); !errors.Is(err, ErrCorrupt) || !errors.Is(err, wire.ErrNonCanonical) {
		t.Fatalf("padded zig-zag varint: %v", err)
	}
	// Holders out of order.
	b = encodeRec(&nodeRec{Holders: []uint64{1, 2}, Mode: api.LockShared})
	i := bytes.LastIndex(b, []byte{2, 1, 2})
	bad := append(append(bytes.Clone(b[:i]), 2, 2, 1), b[i+3:]...)
	if err := decodeRec(nil, bad, &nodeRec{}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("holders out of order: %v", err)
	}
}

// TestRecordCodecKnowsAPIStructs: the hand-written codecs store api structs
// field by field. Quota and usage are handled generically but need unsigned
// integer fields; ACL names are written out by name (reccodec.go node,
// cmdcodec.go aclFields). A change to these structs must fail here
// rather than be dropped silently.
func TestRecordCodecKnowsAPIStructs(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[api.TenantQuota](), reflect.TypeFor[api.TenantUsage]()} {
		for i := 0; i < typ.NumField(); i++ {
			if f := typ.Field(i); f.Type.Kind() < reflect.Uint || f.Type.Kind() > reflect.Uint64 {
				t.Errorf("api.%s.%s is a %s: reccodec.go (writeUints) handles unsigned integers only", typ.Name(), f.Name, f.Type)
			}
		}
	}
	acl := reflect.TypeFor[api.ACLNames]()
	var names []string
	for i := 0; i < acl.NumField(); i++ {
		names = append(names, acl.Field(i).Name+" "+acl.Field(i).Type.String()+" "+acl.Field(i).Tag.Get("msgpack"))
	}
	if want := []string{"Read string r,omitempty", "Write string w,omitempty", "ChangeACL string a,omitempty"}; !reflect.DeepEqual(names, want) {
		t.Errorf("api.ACLNames is now %q: update reccodec.go (node) and cmdcodec.go (aclFields)", names)
	}
	if reflect.TypeFor[api.LockMode]().Kind() != reflect.Uint8 {
		t.Error("api.LockMode is no longer a uint8: update reccodec.go and cmdcodec.go")
	}
}

// FuzzDecodeRecord: decodeRec never panics; for any input and record type
// it either fails with ErrCorrupt, or the record re-encodes to exactly the
// input (the encoding is canonical).
func FuzzDecodeRecord(f *testing.F) {
	for _, rec := range randRecords(rand.New(rand.NewPCG(3, 4)), 20) {
		f.Add(encodeRec(rec))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, v := range []any{&nodeRec{}, &sessionRec{}, &tenantRec{}, &counters{}, &tokenRec{}} {
			err := decodeRec(nil, b, v)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%T: untyped error %v", v, err)
				}
				continue
			}
			if enc := encodeRec(v); !bytes.Equal(enc, b) {
				t.Fatalf("%T: accepted a non-canonical encoding:\n%x\n%x", v, b, enc)
			}
		}
	})
}
