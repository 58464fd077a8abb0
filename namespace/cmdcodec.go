package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
)

// A hand-written codec for the command encoding.
//
// The command encoding is msgpack as github.com/vmihailenco/msgpack/v5
// writes our structs with compact integers (command.go: wireCommand and the
// operation structs' tags): maps keyed by the field tags in declaration
// order, omitempty fields left out, integers in their smallest form, strings
// as fixstr/str8/16/32, bytes as bin8/16/32. Every replica decodes every
// command of every slot, and DecodeCommand re-encodes to insist on the
// canonical form, so the reflection-driven library cost about a fifth of
// apply CPU once the state reads were cached. This file writes and reads
// that same format directly; the bytes are identical (TestCommandCodecMatchesMsgpack
// checks it against the library on random commands), so the format, the
// command log and the fuzz corpus are unchanged.
//
// Each struct's fields are described once, in the tables below (opCodecs,
// aclFields, and the envelope and caller keys): the key, whether msgpack's
// omitempty leaves the field out when it is zero, and an accessor that
// returns a pointer to the field, whose type is the field's kind. Encoding,
// decoding and the buffer size estimate are all driven by those tables.
//
// The reader is only as strict as it needs to be: DecodeCommand re-encodes
// what it read and accepts the input only if it is exactly that encoding,
// by internal/wire's one canonical rule (wire.Canonical). The reader's
// errors are *wire.Error values naming the field and its byte offset.

// msgpack type codes used by the command encoding.
const (
	mpNil      = 0xc0
	mpFalse    = 0xc2
	mpTrue     = 0xc3
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
	mpUint8    = 0xcc
	mpUint16   = 0xcd
	mpUint32   = 0xce
	mpUint64   = 0xcf
	mpInt8     = 0xd0
	mpInt16    = 0xd1
	mpInt32    = 0xd2
	mpInt64    = 0xd3
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpFixArray = 0x90
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpMap16    = 0xde
	mpMap32    = 0xdf
	mpFixMap   = 0x80
	mpFixStr   = 0xa0
	mpNegFixLo = 0xe0
)

func mpUint(b []byte, n uint64) []byte {
	switch {
	case n <= math.MaxInt8:
		return append(b, byte(n))
	case n <= math.MaxUint8:
		return append(b, mpUint8, byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpUint16), uint16(n))
	case n <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, mpUint32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, mpUint64), n)
}

func mpInt(b []byte, n int64) []byte {
	switch {
	case n >= 0:
		return mpUint(b, uint64(n))
	case n >= -32:
		return append(b, byte(n))
	case n >= math.MinInt8:
		return append(b, mpInt8, byte(n))
	case n >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, mpInt16), uint16(n))
	case n >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, mpInt32), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, mpInt64), uint64(n))
}

func mpStr(b []byte, s string) []byte {
	switch l := len(s); {
	case l < 32:
		b = append(b, mpFixStr|byte(l))
	case l <= math.MaxUint8:
		b = append(b, mpStr8, byte(l))
	case l <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpStr16), uint16(l))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(l))
	}
	return append(b, s...)
}

func mpBin(b []byte, v []byte) []byte {
	if v == nil {
		return append(b, mpNil)
	}
	switch l := len(v); {
	case l <= math.MaxUint8:
		b = append(b, mpBin8, byte(l))
	case l <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, mpBin16), uint16(l))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(l))
	}
	return append(b, v...)
}

func mpBool(b []byte, v bool) []byte {
	if v {
		return append(b, mpTrue)
	}
	return append(b, mpFalse)
}

// mpMap writes a map header of n entries (n ≤ 15 for all our structs, but
// written in general).
func mpMap(b []byte, n int) []byte { return mpHeader(b, n, mpFixMap, mpMap16, mpMap32) }

// mpArray writes an array header of n elements.
func mpArray(b []byte, n int) []byte { return mpHeader(b, n, mpFixArray, mpArray16, mpArray32) }

// mpHeader writes a map's or an array's header of n entries in the shortest
// of its three forms (fix, 16-bit, 32-bit).
func mpHeader(b []byte, n int, fix, c16, c32 byte) []byte {
	switch {
	case n < 16:
		return append(b, fix|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, c16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, c32), uint32(n))
}

// mpKey writes a field key (all ours are fixstr).
func mpKey(b []byte, k string) []byte { return append(append(b, mpFixStr|byte(len(k))), k...) }

// field describes one field of a struct that the command encoding writes
// as a msgpack map: its key, whether it is left out when zero (msgpack's
// omitempty), and at, which returns a pointer to the field in v (a pointer
// to the struct).
// The pointer's type is the field's kind: *uint64, *int64, *string,
// *[]byte, *bool, *api.LockMode, *api.ACLNames, **api.ACLNames (left out
// when nil), *api.TenantQuota or *[]Grant (left out when empty). Fields are listed in declaration order,
// which is the order msgpack writes them and the only order DecodeCommand
// accepts.
type field struct {
	key  string
	omit bool
	at   func(v any) any
}

// opCodec describes an operation type: a constructor and its fields.
type opCodec struct {
	new    func() Op
	fields []field
}

// The envelope (wireCommand) and caller keys. The envelope is written from
// a Command passed by value, so it is spelled out in appendCommand and
// readCommand rather than walked through accessors, which would move the
// Command to the heap; its keys are still spelled only here.
const (
	keyVersion   = "v"
	keyKind      = "k"
	keyTime      = "t"
	keyCaller    = "c"
	keyOp        = "o"
	keyPrincipal = "p"
	keyTenant    = "t"
)

// The keys of a Grant, in declaration order; none is left out when zero.
// Its caller is written like the envelope's. Like the envelope, a grant is
// spelled out in appendGrants and cmdReader.grants.
const (
	keyGrantCaller  = "c"
	keyGrantSession = "s"
	keyGrantPath    = "p"
	keyGrantMode    = "m"
	grantKeys       = 4
)

// aclFields describes api.ACLNames.
var aclFields = []field{
	{"r", true, func(a any) any { return &a.(*api.ACLNames).Read }},
	{"w", true, func(a any) any { return &a.(*api.ACLNames).Write }},
	{"a", true, func(a any) any { return &a.(*api.ACLNames).ChangeACL }},
}

// opCodecs describes every operation type, by kind. It is the one place
// that names an operation's fields in the encoding (command.go's msgpack
// tags are the library's view of the same format, which
// TestCommandTablesMatchStructTags and TestCommandCodecMatchesMsgpack hold
// equal).
var opCodecs = [numKinds]opCodec{
	KindCreateSession: {func() Op { return &CreateSession{} }, nil},
	KindCloseSession: {func() Op { return &CloseSession{} }, []field{
		{"s", false, func(o any) any { return &o.(*CloseSession).Session }},
		{"h", true, func(o any) any { return &o.(*CloseSession).Then }},
	}},
	KindExpireSession: {func() Op { return &ExpireSession{} }, []field{
		{"s", false, func(o any) any { return &o.(*ExpireSession).Session }},
		{"h", true, func(o any) any { return &o.(*ExpireSession).Then }},
	}},
	KindOpen: {func() Op { return &OpenNode{} }, []field{
		{"s", true, func(o any) any { return &o.(*OpenNode).Session }},
		{"p", false, func(o any) any { return &o.(*OpenNode).Path }},
		{"c", true, func(o any) any { return &o.(*OpenNode).Create }},
		{"x", true, func(o any) any { return &o.(*OpenNode).Exclusive }},
		{"d", true, func(o any) any { return &o.(*OpenNode).Dir }},
		{"e", true, func(o any) any { return &o.(*OpenNode).Ephemeral }},
		{"b", true, func(o any) any { return &o.(*OpenNode).Contents }},
		{"a", true, func(o any) any { return &o.(*OpenNode).ACL }},
		{"l", true, func(o any) any { return &o.(*OpenNode).LockDelay }},
	}},
	KindSetContents: {func() Op { return &SetContents{} }, []field{
		{"s", true, func(o any) any { return &o.(*SetContents).Session }},
		{"p", false, func(o any) any { return &o.(*SetContents).Path }},
		{"b", true, func(o any) any { return &o.(*SetContents).Contents }},
		{"g", true, func(o any) any { return &o.(*SetContents).IfGeneration }},
	}},
	KindDelete: {func() Op { return &Delete{} }, []field{
		{"s", true, func(o any) any { return &o.(*Delete).Session }},
		{"p", false, func(o any) any { return &o.(*Delete).Path }},
		{"i", true, func(o any) any { return &o.(*Delete).IfInstance }},
	}},
	KindSetACL: {func() Op { return &SetACL{} }, []field{
		{"s", true, func(o any) any { return &o.(*SetACL).Session }},
		{"p", false, func(o any) any { return &o.(*SetACL).Path }},
		{"a", false, func(o any) any { return &o.(*SetACL).ACL }},
		{"g", true, func(o any) any { return &o.(*SetACL).IfGeneration }},
	}},
	KindAcquire: {func() Op { return &Acquire{} }, []field{
		{"s", false, func(o any) any { return &o.(*Acquire).Session }},
		{"p", false, func(o any) any { return &o.(*Acquire).Path }},
		{"m", false, func(o any) any { return &o.(*Acquire).Mode }},
	}},
	KindRelease: {func() Op { return &Release{} }, []field{
		{"s", false, func(o any) any { return &o.(*Release).Session }},
		{"p", false, func(o any) any { return &o.(*Release).Path }},
		{"g", false, func(o any) any { return &o.(*Release).Generation }},
		{"h", true, func(o any) any { return &o.(*Release).Then }},
	}},
	KindCreateTenant: {func() Op { return &CreateTenant{} }, []field{
		{"n", false, func(o any) any { return &o.(*CreateTenant).Name }},
		{"q", false, func(o any) any { return &o.(*CreateTenant).Quota }},
		{"a", false, func(o any) any { return &o.(*CreateTenant).ACL }},
	}},
	KindUpdateTenant: {func() Op { return &UpdateTenant{} }, []field{
		{"n", false, func(o any) any { return &o.(*UpdateTenant).Name }},
		{"q", false, func(o any) any { return &o.(*UpdateTenant).Quota }},
	}},
	KindIssueToken: {func() Op { return &IssueToken{} }, []field{
		{"id", false, func(o any) any { return &o.(*IssueToken).ID }},
		{"t", false, func(o any) any { return &o.(*IssueToken).Tenant }},
		{"p", false, func(o any) any { return &o.(*IssueToken).Principal }},
		{"h", false, func(o any) any { return &o.(*IssueToken).Hash }},
	}},
	KindRevokeToken: {func() Op { return &RevokeToken{} }, []field{
		{"t", false, func(o any) any { return &o.(*RevokeToken).Tenant }},
		{"id", false, func(o any) any { return &o.(*RevokeToken).ID }},
	}},
}

// appendStruct writes v as the map fields describe, with one type switch
// per field: the field's kind decides both whether omitempty leaves it out
// and how it is written. Nested structs (an ACL, a quota) are written by
// functions that do not recurse: a recursive encoder would make the
// compiler move every caller's buffer to the heap. Every struct has fewer
// than 16 fields (TestCommandTablesMatchStructTags), so the map header is
// one fixmap byte, written first and patched with the count of fields
// written.
func appendStruct(b []byte, fields []field, v any) []byte {
	hdr := len(b)
	b = append(b, mpFixMap)
	n := 0
	for i := range fields {
		f := &fields[i]
		start := len(b)
		b = mpKey(b, f.key)
		switch x := f.at(v).(type) {
		case *uint64:
			if f.omit && *x == 0 {
				b = b[:start]
				continue
			}
			b = mpUint(b, *x)
		case *int64:
			if f.omit && *x == 0 {
				b = b[:start]
				continue
			}
			b = mpInt(b, *x)
		case *string:
			if f.omit && *x == "" {
				b = b[:start]
				continue
			}
			b = mpStr(b, *x)
		case *[]byte:
			if f.omit && len(*x) == 0 {
				b = b[:start]
				continue
			}
			b = mpBin(b, *x)
		case *bool:
			if f.omit && !*x {
				b = b[:start]
				continue
			}
			b = mpBool(b, *x)
		case *api.LockMode:
			if f.omit && *x == 0 {
				b = b[:start]
				continue
			}
			b = mpUint(b, uint64(*x))
		case *api.ACLNames:
			b = appendACL(b, x)
		case **api.ACLNames:
			if *x == nil {
				b = b[:start]
				continue
			}
			b = appendACL(b, *x)
		case *api.TenantQuota:
			b = mpQuota(b, *x)
		case *[]Grant:
			if f.omit && len(*x) == 0 {
				b = b[:start]
				continue
			}
			b = appendGrants(b, *x)
		default:
			panic(fmt.Sprintf("namespace: BUG: command field of kind %T", x))
		}
		n++
	}
	b[hdr] = mpFixMap | byte(n)
	return b
}

// appendACL writes a as aclFields describe (all strings).
func appendACL(b []byte, a *api.ACLNames) []byte {
	hdr := len(b)
	b = append(b, mpFixMap)
	n := 0
	for i := range aclFields {
		f := &aclFields[i]
		if s := f.at(a).(*string); *s != "" || !f.omit {
			n++
			b = mpStr(mpKey(b, f.key), *s)
		}
	}
	b[hdr] = mpFixMap | byte(n)
	return b
}

// appendGrants writes gs as an array of Grant maps.
func appendGrants(b []byte, gs []Grant) []byte {
	b = mpArray(b, len(gs))
	for i := range gs {
		g := &gs[i]
		b = mpMap(b, grantKeys)
		b = mpMap(mpKey(b, keyGrantCaller), 2)
		b = mpStr(mpKey(b, keyPrincipal), g.Caller.Principal)
		b = mpStr(mpKey(b, keyTenant), g.Caller.Tenant)
		b = mpUint(mpKey(b, keyGrantSession), g.Session)
		b = mpStr(mpKey(b, keyGrantPath), g.Path)
		b = mpUint(mpKey(b, keyGrantMode), uint64(g.Mode))
	}
	return b
}

// structSizeHint estimates the encoded size of v's fields: a fixed part
// per field, and the length of each string or byte field.
func structSizeHint(fields []field, v any) int {
	n := 1
	for i := range fields {
		f := &fields[i]
		n += 1 + len(f.key)
		switch p := f.at(v).(type) {
		case *string:
			n += 5 + len(*p)
		case *[]byte:
			n += 5 + len(*p)
		case *bool:
			n++
		case *api.ACLNames, **api.ACLNames:
			// Three names, usually short.
			n += 32
		case *api.TenantQuota:
			n += 64
		case *[]Grant:
			n += 5
			for _, g := range *p {
				n += 32 + len(g.Caller.Principal) + len(g.Caller.Tenant) + len(g.Path)
			}
		default:
			n += 9
		}
	}
	return n
}

// mpQuota writes a tenant quota through the msgpack library itself:
// api.TenantQuota grows fields, and the commands that carry one are rare.
func mpQuota(b []byte, q api.TenantQuota) []byte {
	enc, err := marshal(&q)
	if err != nil {
		// A struct of integers always encodes.
		panic(fmt.Sprintf("namespace: BUG: encoding a quota: %v", err))
	}
	return append(b, enc...)
}

// commandSizeHint estimates c's encoded size, to size the buffer once.
func commandSizeHint(c Command) int {
	return 40 + len(c.Caller.Principal) + len(c.Caller.Tenant) + structSizeHint(opCodecs[c.Op.Kind()].fields, c.Op)
}

// appendCommand writes the whole envelope (wireCommand) as msgpack would.
// REQUIRES: c.Op is a non-nil pointer of one of the operation types.
func appendCommand(b []byte, c Command) []byte {
	k := c.Op.Kind()
	b = mpMap(b, 5)
	b = mpUint(mpKey(b, keyVersion), CommandVersion)
	b = mpUint(mpKey(b, keyKind), uint64(k))
	b = mpInt(mpKey(b, keyTime), c.Time)
	b = mpMap(mpKey(b, keyCaller), 2)
	b = mpStr(mpKey(b, keyPrincipal), c.Caller.Principal)
	b = mpStr(mpKey(b, keyTenant), c.Caller.Tenant)
	return appendStruct(mpKey(b, keyOp), opCodecs[k].fields, c.Op)
}

// errMsg is the cause of a command that reads but breaks a rule of the
// format (a wrong type, an unknown version, kind or field);
// DecodeCommand wraps it, or the *wire.Error of a truncated input, in
// ErrBadCommand.
var errMsg = errors.New("malformed command")

// cmdReader reads the msgpack subset the command encoding uses, on a
// wire.Reader: the first defect sticks, later reads return zero values.
type cmdReader struct {
	wire.Reader
}

// fail records a format defect in the field what that began at pos.
func (r *cmdReader) fail(pos int, what, detail string) { r.Fail(pos, what, errMsg, detail) }

// length reads the big-endian length of 1, 2 or 4 bytes.
func (r *cmdReader) length(size int, what string) int {
	switch size {
	case 1:
		return int(r.Byte(what))
	case 2:
		return int(r.Uint16(what))
	}
	return int(r.Uint32(what))
}

func (r *cmdReader) uint(what string) uint64 {
	pos := r.Pos()
	c := r.Byte(what)
	switch {
	case r.Err() != nil:
		return 0
	case c <= math.MaxInt8:
		return uint64(c)
	case c == mpUint8:
		return uint64(r.Byte(what))
	case c == mpUint16:
		return uint64(r.Uint16(what))
	case c == mpUint32:
		return uint64(r.Uint32(what))
	case c == mpUint64:
		return r.Uint64(what)
	}
	r.fail(pos, what, "not an unsigned integer")
	return 0
}

func (r *cmdReader) int(what string) int64 {
	pos := r.Pos()
	c := r.Byte(what)
	switch {
	case r.Err() != nil:
		return 0
	case c <= math.MaxInt8:
		return int64(c)
	case c >= mpNegFixLo:
		return int64(int8(c))
	}
	var u uint64
	switch c {
	case mpUint8:
		u = uint64(r.Byte(what))
	case mpUint16:
		u = uint64(r.Uint16(what))
	case mpUint32:
		u = uint64(r.Uint32(what))
	case mpUint64:
		if u = r.Uint64(what); u > math.MaxInt64 {
			r.fail(pos, what, "overflows int64")
			return 0
		}
	case mpInt8:
		return int64(int8(r.Byte(what)))
	case mpInt16:
		return int64(int16(r.Uint16(what)))
	case mpInt32:
		return int64(int32(r.Uint32(what)))
	case mpInt64:
		return int64(r.Uint64(what))
	default:
		r.fail(pos, what, "not an integer")
	}
	return int64(u)
}

func (r *cmdReader) str(what string) string {
	pos := r.Pos()
	c := r.Byte(what)
	var n int
	switch {
	case r.Err() != nil:
		return ""
	case c&0xe0 == mpFixStr:
		n = int(c & 0x1f)
	case c == mpStr8:
		n = r.length(1, what)
	case c == mpStr16:
		n = r.length(2, what)
	case c == mpStr32:
		n = r.length(4, what)
	default:
		r.fail(pos, what, "not a string")
		return ""
	}
	return string(r.Next(n, what))
}

func (r *cmdReader) bin(what string) []byte {
	pos := r.Pos()
	c := r.Byte(what)
	var n int
	switch {
	case r.Err() != nil:
		return nil
	case c == mpNil:
		return nil
	case c == mpBin8:
		n = r.length(1, what)
	case c == mpBin16:
		n = r.length(2, what)
	case c == mpBin32:
		n = r.length(4, what)
	default:
		r.fail(pos, what, "not bytes")
		return nil
	}
	p := r.Next(n, what)
	if p == nil {
		return nil
	}
	return append(make([]byte, 0, n), p...)
}

func (r *cmdReader) bool(what string) bool {
	pos := r.Pos()
	switch r.Byte(what) {
	case mpTrue:
		return true
	case mpFalse:
		return false
	}
	r.fail(pos, what, "not a bool")
	return false
}

// mapLen reads a map header.
func (r *cmdReader) mapLen(what string) int {
	pos := r.Pos()
	c := r.Byte(what)
	switch {
	case r.Err() != nil:
		return 0
	case c&0xf0 == mpFixMap:
		return int(c & 0x0f)
	case c == mpMap16:
		return int(r.Uint16(what))
	case c == mpMap32:
		return int(r.Uint32(what))
	}
	r.fail(pos, what, "not a map")
	return 0
}

// fields walks a struct map whose fields must come in declaration order,
// each at most once: at(key) reports whether the next key is key and, if
// so, consumes it.
type fields struct {
	r    *cmdReader
	left int
}

func (r *cmdReader) fields(what string) fields { return fields{r: r, left: r.mapLen(what)} }

func (f *fields) at(key string) bool {
	if f.left == 0 {
		return false
	}
	if !f.r.SkipIf(mpFixStr|byte(len(key)), key) {
		return false
	}
	f.left--
	return true
}

// done fails unless every field was read (an unknown or misplaced one was
// not).
func (f *fields) done(what string) {
	if f.left != 0 {
		f.r.fail(f.r.Pos(), what, "unknown, repeated or misplaced field")
	}
}

// readStruct reads into v the map that fields describe, with one type
// switch per field present. Like appendStruct it reads nested structs with
// a function that does not recurse, which keeps the reader on the caller's
// stack.
func readStruct(r *cmdReader, fields []field, v any, what string) {
	fs := r.fields(what)
	for i := range fields {
		f := &fields[i]
		if !fs.at(f.key) {
			continue
		}
		switch x := f.at(v).(type) {
		case *uint64:
			*x = r.uint(f.key)
		case *int64:
			*x = r.int(f.key)
		case *string:
			*x = r.str(f.key)
		case *[]byte:
			*x = r.bin(f.key)
		case *bool:
			*x = r.bool(f.key)
		case *api.LockMode:
			pos := r.Pos()
			m := r.uint(f.key)
			if m > math.MaxUint8 {
				r.fail(pos, f.key, "lock mode overflows")
			}
			*x = api.LockMode(m)
		case *api.ACLNames:
			readACL(r, x, f.key)
		case **api.ACLNames:
			acl := &api.ACLNames{}
			readACL(r, acl, f.key)
			*x = acl
		case *api.TenantQuota:
			*x = r.quota(f.key)
		case *[]Grant:
			*x = r.grants(f.key)
		default:
			panic(fmt.Sprintf("namespace: BUG: command field of kind %T", x))
		}
	}
	fs.done(what)
}

// readACL reads into a the map aclFields describe.
func readACL(r *cmdReader, a *api.ACLNames, what string) {
	fs := r.fields(what)
	for i := range aclFields {
		if fs.at(aclFields[i].key) {
			*aclFields[i].at(a).(*string) = r.str(aclFields[i].key)
		}
	}
	fs.done(what)
}

// caller reads a Caller map (a command's or a grant's); what, principal
// and tenant name the map and its fields in errors.
func (r *cmdReader) caller(what, principal, tenant string) Caller {
	var c Caller
	cf := r.fields(what)
	if cf.at(keyPrincipal) {
		c.Principal = r.str(principal)
	}
	if cf.at(keyTenant) {
		c.Tenant = r.str(tenant)
	}
	cf.done(what)
	return c
}

// minGrantSize is the fewest bytes an encoded Grant takes (empty strings,
// one-byte integers), which bounds what an array header may announce.
const minGrantSize = 1 + 2 + 1 + 2 + 1 + 2 + 1 + 2 + 1 + 2 + 1 + 2 + 1

// grants reads an array of Grant maps (appendGrants).
func (r *cmdReader) grants(what string) []Grant {
	pos := r.Pos()
	c := r.Byte(what)
	var n int
	switch {
	case r.Err() != nil:
		return nil
	case c&0xf0 == mpFixArray:
		n = int(c & 0x0f)
	case c == mpArray16:
		n = int(r.Uint16(what))
	case c == mpArray32:
		n = int(r.Uint32(what))
	default:
		r.fail(pos, what, "not an array")
		return nil
	}
	if n > r.Len()/minGrantSize {
		r.fail(pos, what, fmt.Sprintf("%d grants in %d bytes", n, r.Len()))
		return nil
	}
	gs := make([]Grant, n)
	for i := range gs {
		g := &gs[i]
		fs := r.fields(what)
		if fs.at(keyGrantCaller) {
			g.Caller = r.caller("grant caller", "grant principal", "grant tenant")
		}
		if fs.at(keyGrantSession) {
			g.Session = r.uint("grant session")
		}
		if fs.at(keyGrantPath) {
			g.Path = r.str("grant path")
		}
		if fs.at(keyGrantMode) {
			mpos := r.Pos()
			if m := r.uint("grant mode"); m > math.MaxUint8 {
				r.fail(mpos, "grant mode", "lock mode overflows")
			} else {
				g.Mode = api.LockMode(m)
			}
		}
		fs.done(what)
		if r.Err() != nil {
			return nil
		}
	}
	return gs
}

// quota reads a tenant quota with the msgpack library (see mpQuota),
// refusing unknown fields.
func (r *cmdReader) quota(what string) api.TenantQuota {
	var q api.TenantQuota
	if r.Err() != nil {
		return q
	}
	pos := r.Pos()
	rest := r.Peek()
	br := bytes.NewReader(rest)
	dec := msgpack.NewDecoder(br)
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(&q); err != nil {
		r.fail(pos, what, err.Error())
		return q
	}
	r.Next(len(rest)-br.Len(), what)
	return q
}

// readCommand reads an envelope and its operation. It does not check that
// b is canonical: DecodeCommand does, by re-encoding.
func readCommand(b []byte) (Command, error) {
	r := &cmdReader{wire.NewReader(b)}
	f := r.fields("command")
	var (
		cmd  Command
		ver  uint64
		kind uint64
	)
	if f.at(keyVersion) {
		ver = r.uint("version")
	}
	kindPos := r.Pos()
	if f.at(keyKind) {
		kind = r.uint("kind")
	}
	if f.at(keyTime) {
		cmd.Time = r.int("time")
	}
	if f.at(keyCaller) {
		cmd.Caller = r.caller("caller", "principal", "tenant")
	}
	switch {
	case r.Err() != nil:
	case ver != CommandVersion:
		r.fail(0, "version", fmt.Sprintf("version %d", ver))
	case kind == 0 || kind >= uint64(numKinds):
		r.fail(kindPos, "kind", fmt.Sprintf("unknown kind %d", kind))
	case !f.at(keyOp):
		r.fail(r.Pos(), "op", "missing op")
	default:
		oc := &opCodecs[kind]
		cmd.Op = oc.new()
		readStruct(r, oc.fields, cmd.Op, "op")
		f.done("command")
	}
	if err := r.Done(); err != nil {
		return Command{}, err
	}
	return cmd, nil
}
