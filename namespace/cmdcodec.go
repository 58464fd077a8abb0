package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/api"
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
// The reader is only as strict as it needs to be: DecodeCommand re-encodes
// what it read and accepts the input only if it is exactly that encoding.

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
func mpMap(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, mpFixMap|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, mpMap16), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpMap32), uint32(n))
}

// mpKey writes a one-letter-ish field name (all ours are fixstr).
func mpKey(b []byte, k string) []byte { return append(append(b, mpFixStr|byte(len(k))), k...) }

func count(conds ...bool) int {
	n := 0
	for _, c := range conds {
		if c {
			n++
		}
	}
	return n
}

func mpACL(b []byte, a api.ACLNames) []byte {
	b = mpMap(b, count(a.Read != "", a.Write != "", a.ChangeACL != ""))
	if a.Read != "" {
		b = mpStr(mpKey(b, "r"), a.Read)
	}
	if a.Write != "" {
		b = mpStr(mpKey(b, "w"), a.Write)
	}
	if a.ChangeACL != "" {
		b = mpStr(mpKey(b, "a"), a.ChangeACL)
	}
	return b
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

// appendOp writes op as msgpack would. REQUIRES: op is a non-nil pointer of
// one of the operation types.
func appendOp(b []byte, op Op) []byte {
	switch o := op.(type) {
	case *CreateSession:
		return mpMap(b, 0)
	case *CloseSession:
		return mpUint(mpKey(mpMap(b, 1), "s"), o.Session)
	case *ExpireSession:
		return mpUint(mpKey(mpMap(b, 1), "s"), o.Session)
	case *OpenNode:
		b = mpMap(b, 1+count(o.Session != 0, o.Create, o.Exclusive, o.Dir, o.Ephemeral, len(o.Contents) > 0, o.ACL != nil, o.LockDelay != 0))
		if o.Session != 0 {
			b = mpUint(mpKey(b, "s"), o.Session)
		}
		b = mpStr(mpKey(b, "p"), o.Path)
		if o.Create {
			b = mpBool(mpKey(b, "c"), true)
		}
		if o.Exclusive {
			b = mpBool(mpKey(b, "x"), true)
		}
		if o.Dir {
			b = mpBool(mpKey(b, "d"), true)
		}
		if o.Ephemeral {
			b = mpBool(mpKey(b, "e"), true)
		}
		if len(o.Contents) > 0 {
			b = mpBin(mpKey(b, "b"), o.Contents)
		}
		if o.ACL != nil {
			b = mpACL(mpKey(b, "a"), *o.ACL)
		}
		if o.LockDelay != 0 {
			b = mpInt(mpKey(b, "l"), o.LockDelay)
		}
		return b
	case *SetContents:
		b = mpMap(b, 1+count(o.Session != 0, len(o.Contents) > 0, o.IfGeneration != 0))
		if o.Session != 0 {
			b = mpUint(mpKey(b, "s"), o.Session)
		}
		b = mpStr(mpKey(b, "p"), o.Path)
		if len(o.Contents) > 0 {
			b = mpBin(mpKey(b, "b"), o.Contents)
		}
		if o.IfGeneration != 0 {
			b = mpUint(mpKey(b, "g"), o.IfGeneration)
		}
		return b
	case *Delete:
		b = mpMap(b, 1+count(o.Session != 0, o.IfInstance != 0))
		if o.Session != 0 {
			b = mpUint(mpKey(b, "s"), o.Session)
		}
		b = mpStr(mpKey(b, "p"), o.Path)
		if o.IfInstance != 0 {
			b = mpUint(mpKey(b, "i"), o.IfInstance)
		}
		return b
	case *SetACL:
		b = mpMap(b, 2+count(o.Session != 0, o.IfGeneration != 0))
		if o.Session != 0 {
			b = mpUint(mpKey(b, "s"), o.Session)
		}
		b = mpStr(mpKey(b, "p"), o.Path)
		b = mpACL(mpKey(b, "a"), o.ACL)
		if o.IfGeneration != 0 {
			b = mpUint(mpKey(b, "g"), o.IfGeneration)
		}
		return b
	case *Acquire:
		b = mpUint(mpKey(mpMap(b, 3), "s"), o.Session)
		b = mpStr(mpKey(b, "p"), o.Path)
		return mpUint(mpKey(b, "m"), uint64(o.Mode))
	case *Release:
		b = mpUint(mpKey(mpMap(b, 3), "s"), o.Session)
		b = mpStr(mpKey(b, "p"), o.Path)
		return mpUint(mpKey(b, "g"), o.Generation)
	case *CreateTenant:
		b = mpStr(mpKey(mpMap(b, 3), "n"), o.Name)
		b = mpQuota(mpKey(b, "q"), o.Quota)
		return mpACL(mpKey(b, "a"), o.ACL)
	case *UpdateTenant:
		b = mpStr(mpKey(mpMap(b, 2), "n"), o.Name)
		return mpQuota(mpKey(b, "q"), o.Quota)
	case *IssueToken:
		b = mpStr(mpKey(mpMap(b, 4), "id"), o.ID)
		b = mpStr(mpKey(b, "t"), o.Tenant)
		b = mpStr(mpKey(b, "p"), o.Principal)
		return mpBin(mpKey(b, "h"), o.Hash)
	case *RevokeToken:
		b = mpStr(mpKey(mpMap(b, 2), "t"), o.Tenant)
		return mpStr(mpKey(b, "id"), o.ID)
	}
	panic(fmt.Sprintf("namespace: BUG: appendOp of %T", op))
}

// opSizeHint estimates an operation's encoded size, to size the buffer once.
func opSizeHint(op Op) int {
	switch o := op.(type) {
	case *OpenNode:
		return 64 + len(o.Path) + len(o.Contents)
	case *SetContents:
		return 48 + len(o.Path) + len(o.Contents)
	case *Delete:
		return 32 + len(o.Path)
	case *SetACL:
		return 48 + len(o.Path) + len(o.ACL.Read) + len(o.ACL.Write) + len(o.ACL.ChangeACL)
	case *Acquire:
		return 32 + len(o.Path)
	case *Release:
		return 32 + len(o.Path)
	case *CreateTenant:
		return 96 + len(o.Name) + len(o.ACL.Read) + len(o.ACL.Write) + len(o.ACL.ChangeACL)
	case *UpdateTenant:
		return 64 + len(o.Name)
	case *IssueToken:
		return 32 + len(o.ID) + len(o.Tenant) + len(o.Principal) + len(o.Hash)
	case *RevokeToken:
		return 16 + len(o.ID) + len(o.Tenant)
	}
	return 16
}

// appendCommand writes the whole envelope (wireCommand) as msgpack would.
func appendCommand(b []byte, c Command) []byte {
	b = mpMap(b, 5)
	b = mpUint(mpKey(b, "v"), CommandVersion)
	b = mpUint(mpKey(b, "k"), uint64(c.Op.Kind()))
	b = mpInt(mpKey(b, "t"), c.Time)
	b = mpMap(mpKey(b, "c"), 2)
	b = mpStr(mpKey(b, "p"), c.Caller.Principal)
	b = mpStr(mpKey(b, "t"), c.Caller.Tenant)
	return appendOp(mpKey(b, "o"), c.Op)
}

// errMsg is the cause of every cmdReader failure; DecodeCommand wraps it in
// ErrBadCommand.
var errMsg = errors.New("malformed command")

// cmdReader reads the msgpack subset the command encoding uses. The first
// defect sticks in err; later reads return zero values.
type cmdReader struct {
	b   []byte
	err error
}

func (r *cmdReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errMsg, what)
	}
	r.b = nil
}

func (r *cmdReader) next(n int, what string) []byte {
	if n < 0 || len(r.b) < n {
		r.fail("truncated " + what)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *cmdReader) code(what string) byte {
	p := r.next(1, what)
	if p == nil {
		return 0
	}
	return p[0]
}

// length reads the big-endian length of 1, 2 or 4 bytes.
func (r *cmdReader) length(size int, what string) int {
	p := r.next(size, what)
	switch {
	case p == nil:
		return 0
	case size == 1:
		return int(p[0])
	case size == 2:
		return int(binary.BigEndian.Uint16(p))
	}
	return int(binary.BigEndian.Uint32(p))
}

func (r *cmdReader) uint(what string) uint64 {
	c := r.code(what)
	switch {
	case r.err != nil:
		return 0
	case c <= math.MaxInt8:
		return uint64(c)
	case c == mpUint8:
		return uint64(r.length(1, what))
	case c == mpUint16:
		return uint64(r.length(2, what))
	case c == mpUint32:
		return uint64(r.length(4, what))
	case c == mpUint64:
		if p := r.next(8, what); p != nil {
			return binary.BigEndian.Uint64(p)
		}
		return 0
	}
	r.fail(what + ": not an unsigned integer")
	return 0
}

func (r *cmdReader) int(what string) int64 {
	if len(r.b) == 0 {
		r.fail("truncated " + what)
		return 0
	}
	c := r.b[0]
	switch {
	case c <= math.MaxInt8 || (c >= mpUint8 && c <= mpUint64):
		u := r.uint(what)
		if u > math.MaxInt64 {
			r.fail(what + ": overflows int64")
			return 0
		}
		return int64(u)
	case c >= mpNegFixLo:
		r.b = r.b[1:]
		return int64(int8(c))
	}
	r.b = r.b[1:]
	switch c {
	case mpInt8:
		if p := r.next(1, what); p != nil {
			return int64(int8(p[0]))
		}
	case mpInt16:
		if p := r.next(2, what); p != nil {
			return int64(int16(binary.BigEndian.Uint16(p)))
		}
	case mpInt32:
		if p := r.next(4, what); p != nil {
			return int64(int32(binary.BigEndian.Uint32(p)))
		}
	case mpInt64:
		if p := r.next(8, what); p != nil {
			return int64(binary.BigEndian.Uint64(p))
		}
	default:
		r.fail(what + ": not an integer")
	}
	return 0
}

func (r *cmdReader) str(what string) string {
	c := r.code(what)
	var n int
	switch {
	case r.err != nil:
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
		r.fail(what + ": not a string")
		return ""
	}
	return string(r.next(n, what))
}

func (r *cmdReader) bin(what string) []byte {
	c := r.code(what)
	var n int
	switch {
	case r.err != nil:
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
		r.fail(what + ": not bytes")
		return nil
	}
	p := r.next(n, what)
	if p == nil {
		return nil
	}
	return append(make([]byte, 0, n), p...)
}

func (r *cmdReader) bool(what string) bool {
	switch r.code(what) {
	case mpTrue:
		return true
	case mpFalse:
		return false
	}
	r.fail(what + ": not a bool")
	return false
}

// mapLen reads a map header.
func (r *cmdReader) mapLen(what string) int {
	c := r.code(what)
	switch {
	case r.err != nil:
		return 0
	case c&0xf0 == mpFixMap:
		return int(c & 0x0f)
	case c == mpMap16:
		return r.length(2, what)
	case c == mpMap32:
		return r.length(4, what)
	}
	r.fail(what + ": not a map")
	return 0
}

// fields walks a struct map whose fields must come in declaration order,
// each at most once: at(name) reports whether the next key is name and, if
// so, consumes it.
type fields struct {
	r    *cmdReader
	left int
}

func (r *cmdReader) fields(what string) fields { return fields{r: r, left: r.mapLen(what)} }

func (f *fields) at(name string) bool {
	r := f.r
	if f.left == 0 || r.err != nil || len(r.b) < 1+len(name) || r.b[0] != mpFixStr|byte(len(name)) || string(r.b[1:1+len(name)]) != name {
		return false
	}
	r.b = r.b[1+len(name):]
	f.left--
	return true
}

// done fails unless every field was read (an unknown or misplaced one was
// not).
func (f *fields) done(what string) {
	if f.left != 0 {
		f.r.fail(what + ": unknown, repeated or misplaced field")
	}
}

func (r *cmdReader) acl(what string) api.ACLNames {
	var a api.ACLNames
	f := r.fields(what)
	if f.at("r") {
		a.Read = r.str(what)
	}
	if f.at("w") {
		a.Write = r.str(what)
	}
	if f.at("a") {
		a.ChangeACL = r.str(what)
	}
	f.done(what)
	return a
}

// quota reads a tenant quota with the msgpack library (see mpQuota),
// refusing unknown fields.
func (r *cmdReader) quota(what string) api.TenantQuota {
	var q api.TenantQuota
	if r.err != nil {
		return q
	}
	br := bytes.NewReader(r.b)
	dec := msgpack.NewDecoder(br)
	dec.DisallowUnknownFields(true)
	if err := dec.Decode(&q); err != nil {
		r.fail(what + ": " + err.Error())
		return q
	}
	r.b = r.b[len(r.b)-br.Len():]
	return q
}

// op reads an operation of kind k.
func (r *cmdReader) op(k OpKind) Op {
	f := r.fields("op")
	var op Op
	switch k {
	case KindCreateSession:
		op = &CreateSession{}
	case KindCloseSession, KindExpireSession:
		var sid uint64
		if f.at("s") {
			sid = r.uint("session")
		}
		if k == KindCloseSession {
			op = &CloseSession{Session: sid}
		} else {
			op = &ExpireSession{Session: sid}
		}
	case KindOpen:
		o := &OpenNode{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("c") {
			o.Create = r.bool("create")
		}
		if f.at("x") {
			o.Exclusive = r.bool("exclusive")
		}
		if f.at("d") {
			o.Dir = r.bool("dir")
		}
		if f.at("e") {
			o.Ephemeral = r.bool("ephemeral")
		}
		if f.at("b") {
			o.Contents = r.bin("contents")
		}
		if f.at("a") {
			acl := r.acl("acl")
			o.ACL = &acl
		}
		if f.at("l") {
			o.LockDelay = r.int("lock-delay")
		}
		op = o
	case KindSetContents:
		o := &SetContents{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("b") {
			o.Contents = r.bin("contents")
		}
		if f.at("g") {
			o.IfGeneration = r.uint("generation")
		}
		op = o
	case KindDelete:
		o := &Delete{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("i") {
			o.IfInstance = r.uint("instance")
		}
		op = o
	case KindSetACL:
		o := &SetACL{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("a") {
			o.ACL = r.acl("acl")
		}
		if f.at("g") {
			o.IfGeneration = r.uint("generation")
		}
		op = o
	case KindAcquire:
		o := &Acquire{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("m") {
			m := r.uint("mode")
			if m > math.MaxUint8 {
				r.fail("mode overflows")
			}
			o.Mode = api.LockMode(m)
		}
		op = o
	case KindRelease:
		o := &Release{}
		if f.at("s") {
			o.Session = r.uint("session")
		}
		if f.at("p") {
			o.Path = r.str("path")
		}
		if f.at("g") {
			o.Generation = r.uint("generation")
		}
		op = o
	case KindCreateTenant:
		o := &CreateTenant{}
		if f.at("n") {
			o.Name = r.str("name")
		}
		if f.at("q") {
			o.Quota = r.quota("quota")
		}
		if f.at("a") {
			o.ACL = r.acl("acl")
		}
		op = o
	case KindUpdateTenant:
		o := &UpdateTenant{}
		if f.at("n") {
			o.Name = r.str("name")
		}
		if f.at("q") {
			o.Quota = r.quota("quota")
		}
		op = o
	case KindIssueToken:
		o := &IssueToken{}
		if f.at("id") {
			o.ID = r.str("token id")
		}
		if f.at("t") {
			o.Tenant = r.str("tenant")
		}
		if f.at("p") {
			o.Principal = r.str("principal")
		}
		if f.at("h") {
			o.Hash = r.bin("hash")
		}
		op = o
	case KindRevokeToken:
		o := &RevokeToken{}
		if f.at("t") {
			o.Tenant = r.str("tenant")
		}
		if f.at("id") {
			o.ID = r.str("token id")
		}
		op = o
	default:
		r.fail(fmt.Sprintf("unknown kind %d", uint8(k)))
		return nil
	}
	f.done("op")
	return op
}

// readCommand reads an envelope and its operation. It does not check that
// b is canonical: DecodeCommand does, by re-encoding.
func readCommand(b []byte) (Command, error) {
	r := &cmdReader{b: b}
	f := r.fields("command")
	var (
		cmd  Command
		ver  uint64
		kind uint64
	)
	if f.at("v") {
		ver = r.uint("version")
	}
	if f.at("k") {
		kind = r.uint("kind")
	}
	if f.at("t") {
		cmd.Time = r.int("time")
	}
	if f.at("c") {
		cf := r.fields("caller")
		if cf.at("p") {
			cmd.Caller.Principal = r.str("principal")
		}
		if cf.at("t") {
			cmd.Caller.Tenant = r.str("tenant")
		}
		cf.done("caller")
	}
	if r.err != nil {
		return Command{}, r.err
	}
	if ver != CommandVersion {
		return Command{}, fmt.Errorf("version %d", ver)
	}
	if kind == 0 || kind >= uint64(numKinds) {
		return Command{}, fmt.Errorf("unknown kind %d", kind)
	}
	if !f.at("o") {
		return Command{}, errors.New("missing op")
	}
	cmd.Op = r.op(OpKind(kind))
	f.done("command")
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return Command{}, r.err
	}
	return cmd, nil
}
