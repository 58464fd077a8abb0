package namespace

import (
	"errors"
	"fmt"
	"math"
	"reflect"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
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
// flags and modes as one byte, all written and read with internal/wire. The encoding is canonical: decodeRec accepts
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

// errRecord is the cause of a record that decodes but holds something its
// format forbids (wrong version or kind, unknown flag bits, holders out of
// order); decodeRec wraps it, or the *wire.Error of a malformed encoding,
// in ErrCorrupt.
var errRecord = errors.New("malformed record")

// newRecWriter starts a record of the given kind in a buffer of size bytes.
func newRecWriter(size int, kind byte) wire.Writer {
	w := wire.NewWriter(make([]byte, 0, size))
	w.Byte(recordVersion)
	w.Byte(kind)
	return w
}

func encodeNode(n *nodeRec) []byte {
	w := newRecWriter(64+len(n.ACL.Read)+len(n.ACL.Write)+len(n.ACL.ChangeACL)+wire.MaxVarintLen*len(n.Holders), tagNode)
	var flags byte
	if n.Dir {
		flags |= nodeFlagDir
	}
	w.Byte(flags)
	w.Uvarint(n.Instance)
	w.Uvarint(n.Owner)
	w.Uvarint(n.ContentGen)
	w.Uvarint(n.LockGen)
	w.Uvarint(n.ACLGen)
	w.Uint64(n.Sum)
	w.Uvarint(n.Size)
	w.Varint(n.Created)
	w.Varint(n.Modified)
	w.LenString(n.ACL.Read)
	w.LenString(n.ACL.Write)
	w.LenString(n.ACL.ChangeACL)
	w.Varint(n.LockDelay)
	w.Byte(byte(n.Mode))
	w.Uvarint(uint64(len(n.Holders)))
	for _, h := range n.Holders {
		w.Uvarint(h)
	}
	w.Varint(n.DelayUntil)
	return w.Bytes()
}

func encodeSession(s *sessionRec) []byte {
	w := newRecWriter(2+2*wire.MaxVarintLen+len(s.Tenant)+len(s.Principal)+wire.MaxVarintLen, tagSession)
	w.LenString(s.Tenant)
	w.LenString(s.Principal)
	w.Varint(s.Created)
	return w.Bytes()
}

func encodeTenant(t *tenantRec) []byte {
	w := newRecWriter(2+2+(quotaFields+usageFields+1)*wire.MaxVarintLen, tagTenant)
	writeUints(&w, reflect.ValueOf(&t.Quota).Elem())
	writeUints(&w, reflect.ValueOf(&t.Usage).Elem())
	w.Varint(t.Created)
	return w.Bytes()
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

func writeUints(w *wire.Writer, v reflect.Value) {
	n := v.NumField()
	for n > 0 && v.Field(n-1).Uint() == 0 {
		n--
	}
	w.Uvarint(uint64(n))
	for i := 0; i < n; i++ {
		w.Uvarint(v.Field(i).Uint())
	}
}

func readUints(r *wire.Reader, v reflect.Value, what string) {
	pos := r.Pos()
	n := r.Count(uint64(v.NumField()), 1, what)
	for i := 0; i < n; i++ {
		x := r.Uvarint(what)
		if i == n-1 && x == 0 && r.Err() == nil {
			r.Fail(pos, what, errRecord, "ends in a zero field")
		}
		v.Field(i).SetUint(x)
	}
}

// encodeCounters writes the three sequences and then, if either is not
// zero, the clock and the lock-delay end. A record without the last two is
// what store format 2 wrote; it reads as clock 0, and one encoding per value
// keeps the record canonical.
func encodeCounters(c *counters) []byte {
	w := newRecWriter(2+5*wire.MaxVarintLen, tagCounters)
	w.Uvarint(c.Session)
	w.Uvarint(c.Instance)
	w.Uvarint(c.LockGen)
	if c.Clock != 0 || c.DelayEnd != 0 {
		w.Varint(c.Clock)
		w.Varint(c.DelayEnd)
	}
	return w.Bytes()
}

func encodeToken(t *tokenRec) []byte {
	w := newRecWriter(2+3*wire.MaxVarintLen+len(t.Tenant)+len(t.Principal)+len(t.Hash), tagToken)
	w.LenString(t.Tenant)
	w.LenString(t.Principal)
	w.LenBytes(t.Hash)
	w.Varint(t.Created)
	return w.Bytes()
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
		r    = wire.NewReader(b)
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
	if ver := r.Byte("version"); r.Err() == nil && ver != recordVersion {
		r.Fail(0, "version", errRecord, "record version %d, want %d", ver, recordVersion)
	}
	if k := r.Byte("kind"); r.Err() == nil && k != kind {
		r.Fail(1, "kind", errRecord, "record kind %q, want %q", k, kind)
	}
	switch x := v.(type) {
	case *nodeRec:
		readNode(&r, x)
	case *sessionRec:
		*x = sessionRec{Tenant: r.LenString(math.MaxUint64, "tenant"), Principal: r.LenString(math.MaxUint64, "principal"), Created: r.Varint("created")}
	case *tenantRec:
		*x = tenantRec{}
		readUints(&r, reflect.ValueOf(&x.Quota).Elem(), "quota")
		readUints(&r, reflect.ValueOf(&x.Usage).Elem(), "usage")
		x.Created = r.Varint("created")
	case *counters:
		*x = counters{Session: r.Uvarint("session"), Instance: r.Uvarint("instance"), LockGen: r.Uvarint("lock generation")}
		if r.Len() > 0 {
			pos := r.Pos()
			x.Clock, x.DelayEnd = r.Varint("clock"), r.Varint("delay end")
			if x.Clock == 0 && x.DelayEnd == 0 && r.Err() == nil {
				r.Fail(pos, "clock", errRecord, "counters with an explicit zero clock")
			}
		}
	case *tokenRec:
		*x = tokenRec{Tenant: r.LenString(math.MaxUint64, "tenant"), Principal: r.LenString(math.MaxUint64, "principal"),
			Hash: []byte(r.LenString(math.MaxUint64, "hash")), Created: r.Varint("created")}
	}
	if err := r.Done(); err != nil {
		if !errors.Is(err, errRecord) {
			err = fmt.Errorf("%w: %w", errRecord, err)
		}
		return fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	return nil
}

func readNode(r *wire.Reader, n *nodeRec) {
	flags := r.Byte("flags")
	if flags&^nodeFlagKnown != 0 {
		r.Fail(r.Pos()-1, "flags", errRecord, "unknown node flags %#x", flags)
	}
	*n = nodeRec{
		Dir:        flags&nodeFlagDir != 0,
		Instance:   r.Uvarint("instance"),
		Owner:      r.Uvarint("owner"),
		ContentGen: r.Uvarint("content generation"),
		LockGen:    r.Uvarint("lock generation"),
		ACLGen:     r.Uvarint("acl generation"),
		Sum:        r.Uint64("checksum"),
		Size:       r.Uvarint("size"),
		Created:    r.Varint("created"),
		Modified:   r.Varint("modified"),
		ACL: api.ACLNames{Read: r.LenString(math.MaxUint64, "acl read"), Write: r.LenString(math.MaxUint64, "acl write"),
			ChangeACL: r.LenString(math.MaxUint64, "acl change")},
		LockDelay: r.Varint("lock delay"),
	}
	pos := r.Pos()
	mode := api.LockMode(r.Byte("mode"))
	if mode > api.LockShared {
		r.Fail(pos, "mode", errRecord, "lock mode %d", mode)
	}
	n.Mode = mode
	// Each holder takes at least a byte.
	count := r.Count(math.MaxInt32, 1, "holders")
	if count > 0 {
		n.Holders = make([]uint64, count)
		for i := range n.Holders {
			pos := r.Pos()
			n.Holders[i] = r.Uvarint("holder")
			if i > 0 && n.Holders[i] <= n.Holders[i-1] && r.Err() == nil {
				r.Fail(pos, "holder", errRecord, "holders not increasing")
			}
		}
	}
	n.DelayUntil = r.Varint("delay until")
}
