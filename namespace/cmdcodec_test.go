package namespace

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
)

// msgpackEncode is the reference encoding: the msgpack library over
// wireCommand, as EncodeCommand worked before cmdcodec.go.
func msgpackEncode(t testing.TB, c Command) []byte {
	t.Helper()
	op, err := marshal(c.Op)
	if err != nil {
		t.Fatal(err)
	}
	b, err := marshal(&wireCommand{V: CommandVersion, K: c.Op.Kind(), T: c.Time, C: c.Caller, O: op})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// randCommands generates commands of every kind with field values at and
// around every msgpack size boundary.
func randCommands(r *rand.Rand, n int) []Command {
	uints := []uint64{0, 1, 127, 128, 255, 256, 65535, 65536, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64}
	ints := []int64{0, 1, -1, -32, -33, -128, -129, -32768, -32769, math.MinInt32, math.MinInt32 - 1, math.MinInt64, 127, 128, 65536, math.MaxInt64}
	lens := []int{0, 1, 31, 32, 33, 255, 256, 65535, 65536}
	u := func() uint64 {
		if r.IntN(2) == 0 {
			return uints[r.IntN(len(uints))]
		}
		return r.Uint64() >> r.IntN(64)
	}
	i := func() int64 {
		if r.IntN(2) == 0 {
			return ints[r.IntN(len(ints))]
		}
		return int64(r.Uint64())
	}
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return strings.Repeat("x", lens[r.IntN(len(lens))])
		case 1:
			return strings.Repeat("é", lens[r.IntN(len(lens))]/2)
		}
		return strings.Repeat("x", r.IntN(40))
	}
	bin := func() []byte {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return bytes.Repeat([]byte{byte(r.IntN(256))}, lens[r.IntN(len(lens))])
		}
		return bytes.Repeat([]byte{7}, r.IntN(20))
	}
	acl := func() api.ACLNames {
		var a api.ACLNames
		if r.IntN(2) == 0 {
			a.Read = str()
		}
		if r.IntN(2) == 0 {
			a.Write = str()
		}
		if r.IntN(2) == 0 {
			a.ChangeACL = str()
		}
		return a
	}
	quota := func() api.TenantQuota {
		var q api.TenantQuota
		randUints(r, reflect.ValueOf(&q).Elem(), u)
		return q
	}
	grants := func() []Grant {
		var gs []Grant
		for range []int{0, 0, 0, 1, 1, 2, 15, 16, 17}[r.IntN(9)] {
			gs = append(gs, Grant{Caller: Caller{Principal: str(), Tenant: str()}, Session: u(), Path: str(), Mode: api.LockMode(r.IntN(256))})
		}
		return gs
	}
	var out []Command
	for len(out) < n {
		var op Op
		switch OpKind(1 + r.IntN(int(numKinds)-1)) {
		case KindCreateSession:
			op = &CreateSession{}
		case KindCloseSession:
			op = &CloseSession{Session: u(), Then: grants()}
		case KindExpireSession:
			op = &ExpireSession{Session: u(), Then: grants()}
		case KindOpen:
			o := &OpenNode{Session: u(), Path: str(), Create: r.IntN(2) == 0, Exclusive: r.IntN(2) == 0, Dir: r.IntN(2) == 0,
				Ephemeral: r.IntN(2) == 0, Contents: bin(), LockDelay: i()}
			if r.IntN(2) == 0 {
				a := acl()
				o.ACL = &a
			}
			op = o
		case KindSetContents:
			op = &SetContents{Session: u(), Path: str(), Contents: bin(), IfGeneration: u()}
		case KindDelete:
			op = &Delete{Session: u(), Path: str(), IfInstance: u()}
		case KindSetACL:
			op = &SetACL{Session: u(), Path: str(), ACL: acl(), IfGeneration: u()}
		case KindAcquire:
			op = &Acquire{Session: u(), Path: str(), Mode: api.LockMode(r.IntN(256))}
		case KindRelease:
			op = &Release{Session: u(), Path: str(), Generation: u(), Then: grants()}
		case KindCreateTenant:
			op = &CreateTenant{Name: str(), Quota: quota(), ACL: acl()}
		case KindUpdateTenant:
			op = &UpdateTenant{Name: str(), Quota: quota()}
		case KindIssueToken:
			op = &IssueToken{ID: str(), Tenant: str(), Principal: str(), Hash: bin()}
		case KindRevokeToken:
			op = &RevokeToken{Tenant: str(), ID: str()}
		}
		out = append(out, Command{Time: i(), Caller: Caller{Principal: str(), Tenant: str()}, Op: op})
	}
	return out
}

// TestCommandCodecMatchesMsgpack: the hand-written codec writes exactly the
// msgpack library's bytes for every command, and reads them back to the
// same command the library's decoding gives.
func TestCommandCodecMatchesMsgpack(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cmds := randCommands(r, 3000)
	for _, b := range seedCommands(t) {
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	for i, c := range cmds {
		want := msgpackEncode(t, c)
		got, err := EncodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("command %d (%s): hand encoding differs from msgpack:\n%x\n%x", i, c.Op.Kind(), got, want)
		}
		// The library's reading of those bytes...
		var w wireCommand
		if err := unmarshalStrict(want, &w); err != nil {
			t.Fatal(err)
		}
		libOp := newOp(w.K)
		if err := unmarshalStrict(w.O, libOp); err != nil {
			t.Fatal(err)
		}
		// ...is ours.
		dec, err := DecodeCommand(want)
		if err != nil {
			t.Fatalf("command %d (%s): %v", i, c.Op.Kind(), err)
		}
		lib := Command{Time: w.T, Caller: w.C, Op: libOp}
		if !reflect.DeepEqual(normalize(dec), normalize(lib)) {
			t.Fatalf("command %d: decoded\n%+v\nlibrary\n%+v", i, dec, lib)
		}
	}
}

// TestCommandCodecRejectsWhatMsgpackAccepts: inputs the library decodes
// leniently (reordered or padded fields) are not canonical and are refused.
func TestCommandCodecRejectsWhatMsgpackAccepts(t *testing.T) {
	good := encode(t, Command{Time: 5, Caller: alice, Op: &Release{Session: 1, Path: "/a/f", Generation: 3}})
	// Generation 3 padded to a uint8, then to a uint64.
	i := bytes.Index(good, []byte{0xa1, 'g', 0x03})
	for _, pad := range [][]byte{{0xcc, 0x03}, {0xcf, 0, 0, 0, 0, 0, 0, 0, 0x03}} {
		bad := append(append(bytes.Clone(good[:i+2]), pad...), good[i+3:]...)
		var w wireCommand
		if err := unmarshalStrict(bad, &w); err != nil {
			t.Fatalf("library refuses %x: %v", bad, err)
		}
		if _, err := DecodeCommand(bad); !errors.Is(err, ErrBadCommand) || !errors.Is(err, wire.ErrNonCanonical) {
			t.Fatalf("padded integer %x: %v; want a non-canonical ErrBadCommand", bad, err)
		}
	}
}

// randUints sets each unsigned field of the struct v to zero or to u(), so
// tests cover fields added to api structs later.
func randUints(r *rand.Rand, v reflect.Value, u func() uint64) {
	for i := 0; i < v.NumField(); i++ {
		if r.IntN(2) == 0 {
			x := u()
			if bits := v.Field(i).Type().Bits(); bits < 64 {
				x &= 1<<bits - 1
			}
			v.Field(i).SetUint(x)
		}
	}
}

// checkFieldTable checks fields against the msgpack tags of the struct v
// points to: one entry per struct field, in declaration order, with the
// tag's key and omitempty, and an accessor that returns that very field.
// It returns the number of fields checked.
func checkFieldTable(t *testing.T, name string, fields []field, v any) int {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	if len(fields) != rv.NumField() {
		t.Errorf("%s: table has %d fields, the struct %d", name, len(fields), rv.NumField())
		return 0
	}
	if len(fields) >= 16 {
		t.Errorf("%s: %d fields; appendStruct writes a one-byte map header, for at most 15", name, len(fields))
	}
	for i, f := range fields {
		sf := rv.Type().Field(i)
		key, opts, _ := strings.Cut(sf.Tag.Get("msgpack"), ",")
		if f.key != key || f.omit != (opts == "omitempty") {
			t.Errorf("%s.%s: table says key %q omit %v, the struct tag %q", name, sf.Name, f.key, f.omit, sf.Tag.Get("msgpack"))
		}
		if got := reflect.ValueOf(f.at(v)); got.Kind() != reflect.Pointer || got.Pointer() != rv.Field(i).Addr().Pointer() || got.Elem().Type() != sf.Type {
			t.Errorf("%s.%s: the accessor of key %q returns another field", name, sf.Name, f.key)
		}
	}
	return len(fields)
}

// TestCommandTablesMatchStructTags: the codec's field tables describe the
// same format as the struct tags the msgpack library reads (the reference
// TestCommandCodecMatchesMsgpack compares bytes against).
func TestCommandTablesMatchStructTags(t *testing.T) {
	n := checkFieldTable(t, "api.ACLNames", aclFields, &api.ACLNames{})
	for k := KindCreateSession; k < numKinds; k++ {
		op := newOp(k)
		if op == nil || op.Kind() != k {
			t.Fatalf("opCodecs[%s].new makes %T", k, op)
		}
		n += checkFieldTable(t, k.String(), opCodecs[k].fields, op)
	}
	keys := []string{keyVersion, keyKind, keyTime, keyCaller, keyOp}
	wt := reflect.TypeFor[wireCommand]()
	for i, k := range keys {
		if tag := wt.Field(i).Tag.Get("msgpack"); tag != k {
			t.Errorf("envelope field %d: key %q, struct tag %q", i, k, tag)
		}
	}
	gt := reflect.TypeFor[Grant]()
	gkeys := []string{keyGrantCaller, keyGrantSession, keyGrantPath, keyGrantMode}
	if gt.NumField() != grantKeys || len(gkeys) != grantKeys {
		t.Errorf("Grant has %d fields, the codec writes %d", gt.NumField(), grantKeys)
	}
	for i, k := range gkeys {
		if tag := gt.Field(i).Tag.Get("msgpack"); tag != k {
			t.Errorf("grant field %d: key %q, struct tag %q", i, k, tag)
		}
	}
	ct := reflect.TypeFor[Caller]()
	for i, k := range []string{keyPrincipal, keyTenant} {
		if tag := ct.Field(i).Tag.Get("msgpack"); tag != k {
			t.Errorf("caller field %d: key %q, struct tag %q", i, k, tag)
		}
	}
	if n < 30 {
		t.Fatalf("only %d fields checked", n)
	}
}
