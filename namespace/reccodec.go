package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/lockcell/lockcell/api"
)

// Record encoding, store format 2.
//
// Every record value is
//
//	version:1 kind:1 fields...
//
// where version is recordVersion and kind repeats the key's tag byte (so a
// record read under the wrong key, or a node record decoded as a tenant,
// fails loudly). Fields are, in declaration order: unsigned integers as
// minimal uvarints, signed ones as minimal zig-zag varints, a content
// checksum as 8 bytes big-endian, strings as a uvarint length and the bytes,
// flags and modes as one byte. The encoding is canonical: decodeRec accepts
// exactly what encodeRec writes (no trailing bytes, no padded varints, no
// unknown flag bits, holders strictly increasing), so equal records have
// equal bytes and the state checksum, a hash of the bytes, is a function of
// the logical state.
//
// Format 1 stored the same records as msgpack maps. Profiles of the apply
// path showed msgpack's reflection-driven encode and decode at about 15% of
// all apply CPU; this hand-written form (the shape paxos/storage_pebble.go
// uses for its log) costs a few per cent of that and is smaller.
const recordVersion byte = 2

// nodeRec flag bits.
const (
	nodeFlagDir   = 1 << 0
	nodeFlagKnown = nodeFlagDir
)

// errRecord is the cause decodeRec wraps in ErrCorrupt.
var errRecord = errors.New("malformed record")

func appendUvarint(b []byte, x uint64) []byte { return binary.AppendUvarint(b, x) }
func appendVarint(b []byte, x int64) []byte   { return binary.AppendVarint(b, x) }
func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func encodeNode(n *nodeRec) []byte {
	b := make([]byte, 0, 64+len(n.ACL.Read)+len(n.ACL.Write)+len(n.ACL.ChangeACL)+binary.MaxVarintLen64*len(n.Holders))
	b = append(b, recordVersion, tagNode)
	var flags byte
	if n.Dir {
		flags |= nodeFlagDir
	}
	b = append(b, flags)
	b = appendUvarint(b, n.Instance)
	b = appendUvarint(b, n.Owner)
	b = appendUvarint(b, n.ContentGen)
	b = appendUvarint(b, n.LockGen)
	b = appendUvarint(b, n.ACLGen)
	b = binary.BigEndian.AppendUint64(b, n.Sum)
	b = appendUvarint(b, n.Size)
	b = appendVarint(b, n.Created)
	b = appendVarint(b, n.Modified)
	b = appendString(b, n.ACL.Read)
	b = appendString(b, n.ACL.Write)
	b = appendString(b, n.ACL.ChangeACL)
	b = appendVarint(b, n.LockDelay)
	b = append(b, byte(n.Mode))
	b = appendUvarint(b, uint64(len(n.Holders)))
	for _, h := range n.Holders {
		b = appendUvarint(b, h)
	}
	return appendVarint(b, n.DelayUntil)
}

func encodeSession(s *sessionRec) []byte {
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+len(s.Tenant)+len(s.Principal)+binary.MaxVarintLen64)
	b = append(b, recordVersion, tagSession)
	b = appendString(b, s.Tenant)
	b = appendString(b, s.Principal)
	return appendVarint(b, s.Created)
}

func encodeTenant(t *tenantRec) []byte {
	b := make([]byte, 0, 2+2+(quotaFields+usageFields+1)*binary.MaxVarintLen64)
	b = append(b, recordVersion, tagTenant)
	b = appendUints(b, reflect.ValueOf(&t.Quota).Elem())
	b = appendUints(b, reflect.ValueOf(&t.Usage).Elem())
	return appendVarint(b, t.Created)
}

// The quota and usage structs belong to package api and grow fields over
// time (every one an unsigned integer, TestRecordCodecKnowsAPIStructs checks),
// so a tenant record stores each as a count n and its first n fields in
// declaration order, n being the position of the last non-zero field: a
// field added at the end reads as zero from older records, and a record
// has one encoding.
var (
	quotaFields = reflect.TypeFor[api.TenantQuota]().NumField()
	usageFields = reflect.TypeFor[api.TenantUsage]().NumField()
)

func appendUints(b []byte, v reflect.Value) []byte {
	n := v.NumField()
	for n > 0 && v.Field(n-1).Uint() == 0 {
		n--
	}
	b = appendUvarint(b, uint64(n))
	for i := 0; i < n; i++ {
		b = appendUvarint(b, v.Field(i).Uint())
	}
	return b
}

func (r *recReader) uints(v reflect.Value, what string) {
	n := r.uvarint()
	if n > uint64(v.NumField()) {
		r.fail("%s of %d fields, this build knows %d", what, n, v.NumField())
		return
	}
	for i := 0; i < int(n); i++ {
		x := r.uvarint()
		if i == int(n)-1 && x == 0 && r.err == nil {
			r.fail("%s ends in a zero field", what)
		}
		v.Field(i).SetUint(x)
	}
}

// encodeCounters writes the three sequences and then, if either is not
// zero, the clock and the lock-delay end. A record without the last two is
// what store format 2 wrote; it reads as clock 0, and one encoding per value
// keeps the record canonical.
func encodeCounters(c *counters) []byte {
	b := make([]byte, 0, 2+5*binary.MaxVarintLen64)
	b = append(b, recordVersion, tagCounters)
	b = appendUvarint(b, c.Session)
	b = appendUvarint(b, c.Instance)
	b = appendUvarint(b, c.LockGen)
	if c.Clock == 0 && c.DelayEnd == 0 {
		return b
	}
	b = appendVarint(b, c.Clock)
	return appendVarint(b, c.DelayEnd)
}

func encodeToken(t *tokenRec) []byte {
	b := make([]byte, 0, 2+3*binary.MaxVarintLen64+len(t.Tenant)+len(t.Principal)+len(t.Hash))
	b = append(b, recordVersion, tagToken)
	b = appendString(b, t.Tenant)
	b = appendString(b, t.Principal)
	b = appendString(b, string(t.Hash))
	return appendVarint(b, t.Created)
}

// encodeRec encodes one of the record types (*nodeRec, *sessionRec,
// *tenantRec, *counters, *tokenRec).
func encodeRec(v any) []byte {
	switch r := v.(type) {
	case *tokenRec:
		return encodeToken(r)
	case *nodeRec:
		return encodeNode(r)
	case *sessionRec:
		return encodeSession(r)
	case *tenantRec:
		return encodeTenant(r)
	case *counters:
		return encodeCounters(r)
	}
	// Only this package calls it, with its own record types.
	panic(fmt.Sprintf("namespace: BUG: encodeRec of %T", v))
}

// decodeRec decodes the record b stored at key into v, one of the record
// types. Anything but the canonical encoding of a record of v's type gives
// an error wrapping ErrCorrupt.
func decodeRec(key, b []byte, v any) error {
	var (
		r    = recReader{b: b}
		kind byte
	)
	switch v.(type) {
	case *nodeRec:
		kind = tagNode
	case *sessionRec:
		kind = tagSession
	case *tenantRec:
		kind = tagTenant
	case *counters:
		kind = tagCounters
	case *tokenRec:
		kind = tagToken
	default:
		panic(fmt.Sprintf("namespace: BUG: decodeRec into %T", v))
	}
	if ver := r.byte(); r.err == nil && ver != recordVersion {
		r.fail("record version %d, want %d", ver, recordVersion)
	}
	if k := r.byte(); r.err == nil && k != kind {
		r.fail("record kind %q, want %q", k, kind)
	}
	switch x := v.(type) {
	case *nodeRec:
		r.node(x)
	case *sessionRec:
		*x = sessionRec{Tenant: r.string(), Principal: r.string(), Created: r.varint()}
	case *tenantRec:
		*x = tenantRec{}
		r.uints(reflect.ValueOf(&x.Quota).Elem(), "quota")
		r.uints(reflect.ValueOf(&x.Usage).Elem(), "usage")
		x.Created = r.varint()
	case *counters:
		*x = counters{Session: r.uvarint(), Instance: r.uvarint(), LockGen: r.uvarint()}
		if len(r.b) > 0 && r.err == nil {
			x.Clock, x.DelayEnd = r.varint(), r.varint()
			if x.Clock == 0 && x.DelayEnd == 0 && r.err == nil {
				r.fail("counters with an explicit zero clock")
			}
		}
	case *tokenRec:
		*x = tokenRec{Tenant: r.string(), Principal: r.string(), Hash: []byte(r.string()), Created: r.varint()}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, r.err)
	}
	return nil
}

// recReader decodes record fields; the first defect sticks in err and every
// later read returns zero.
type recReader struct {
	b   []byte
	err error
}

func (r *recReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{errRecord}, args...)...)
	}
	r.b = nil
}

func (r *recReader) byte() byte {
	if len(r.b) < 1 {
		r.fail("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

// canonical reports whether the n-byte varint at the front of r.b is
// minimal: a multi-byte varint must not end in a zero byte.
func (r *recReader) canonical(n int) bool { return n == 1 || r.b[n-1] != 0 }

func (r *recReader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 || !r.canonical(n) {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *recReader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 || !r.canonical(n) {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *recReader) string() string {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail("truncated string")
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *recReader) node(n *nodeRec) {
	flags := r.byte()
	if flags&^nodeFlagKnown != 0 {
		r.fail("unknown node flags %#x", flags)
	}
	*n = nodeRec{
		Dir:        flags&nodeFlagDir != 0,
		Instance:   r.uvarint(),
		Owner:      r.uvarint(),
		ContentGen: r.uvarint(),
		LockGen:    r.uvarint(),
		ACLGen:     r.uvarint(),
	}
	if len(r.b) < 8 {
		r.fail("truncated")
		return
	}
	n.Sum = binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	n.Size = r.uvarint()
	n.Created = r.varint()
	n.Modified = r.varint()
	n.ACL = api.ACLNames{Read: r.string(), Write: r.string(), ChangeACL: r.string()}
	n.LockDelay = r.varint()
	mode := api.LockMode(r.byte())
	if mode > api.LockShared {
		r.fail("lock mode %d", mode)
	}
	n.Mode = mode
	count := r.uvarint()
	if count > uint64(len(r.b)) || count > math.MaxInt32 { // each holder takes at least a byte
		r.fail("%d holders in %d bytes", count, len(r.b))
		return
	}
	if count > 0 {
		n.Holders = make([]uint64, count)
		for i := range n.Holders {
			n.Holders[i] = r.uvarint()
			if i > 0 && n.Holders[i] <= n.Holders[i-1] && r.err == nil {
				r.fail("holders not increasing")
			}
		}
	}
	n.DelayUntil = r.varint()
}
