package namespace

import (
	"flag"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/golden"
)

// updateGolden rewrites the golden hex files from the current encoders.
// Use it only to add a value: a changed line is a changed on-disk or
// replicated format.
var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/golden_*.hex")

// goldenCase is one named value whose exact encoding is pinned.
type goldenCase struct {
	name   string
	encode func() ([]byte, error)
	// decode decodes b and reports the decoded value's differences from the
	// value encode wrote, or an error.
	decode func(b []byte) error
}

// checkGolden pins every case's bytes to path and checks that the pinned
// bytes decode to the value. It fails if the file and the cases disagree
// in either direction.
func checkGolden(t *testing.T, path string, cases []goldenCase) {
	t.Helper()
	if *updateGolden {
		vals := make([]golden.Value, 0, len(cases))
		for _, c := range cases {
			b, err := c.encode()
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			vals = append(vals, golden.Value{Name: c.name, Bytes: b})
		}
		if err := golden.Write(path, "name hex: exact encodings pinned by TestGolden*; a changed line is a format change.", vals); err != nil {
			t.Fatal(err)
		}
	}
	want, err := golden.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != len(cases) {
		t.Errorf("%s has %d values, the test %d", path, len(want), len(cases))
	}
	checked := 0
	for _, c := range cases {
		w, ok := want[c.name]
		if !ok {
			t.Errorf("%s: not in %s", c.name, path)
			continue
		}
		got, err := c.encode()
		if err != nil {
			t.Errorf("%s: encode: %v", c.name, err)
			continue
		}
		if string(got) != string(w) {
			t.Errorf("%s: encoding changed:\n got %x\nwant %x", c.name, got, w)
			continue
		}
		if err := c.decode(w); err != nil {
			t.Errorf("%s: decoding the golden bytes: %v", c.name, err)
			continue
		}
		checked++
	}
	// Floor: an empty table or file would pass vacuously.
	if checked < len(cases) || checked == 0 {
		t.Errorf("checked %d of %d golden values", checked, len(cases))
	}
	t.Logf("%s: %d golden values checked", path, checked)
}

func goldenCommandCases() []goldenCase {
	admin := Caller{Principal: "admin"}
	bob := Caller{Principal: "bob", Tenant: "acme"}
	acl := &api.ACLNames{Read: "readers", Write: "writers", ChangeACL: "owners"}
	long := strings.Repeat("p", 40)
	ops := []struct {
		name string
		cmd  Command
	}{
		{"create-session", Command{Time: 1_700_000_000_000_000_000, Caller: bob, Op: &CreateSession{}}},
		{"close-session", Command{Time: 5, Caller: bob, Op: &CloseSession{Session: 300}}},
		{"expire-session", Command{Time: 6, Caller: admin, Op: &ExpireSession{Session: 1 << 40}}},
		{"open-minimal", Command{Time: 7, Caller: bob, Op: &OpenNode{Path: "/acme/a"}}},
		{"open-full", Command{Time: 8, Caller: bob, Op: &OpenNode{Session: 70000, Path: "/acme/" + long, Create: true, Exclusive: true,
			Dir: true, Ephemeral: true, Contents: []byte("hello"), ACL: acl, LockDelay: -1}}},
		{"open-lockdelay", Command{Time: 9, Caller: bob, Op: &OpenNode{Path: "/acme/f", Create: true, LockDelay: 10_000_000_000}}},
		{"set-contents", Command{Time: 10, Caller: bob, Op: &SetContents{Session: 2, Path: "/acme/f", Contents: make([]byte, 300), IfGeneration: 255}}},
		{"set-contents-empty", Command{Time: 11, Caller: bob, Op: &SetContents{Path: "/acme/f"}}},
		{"delete", Command{Time: 12, Caller: bob, Op: &Delete{Session: 3, Path: "/acme/f", IfInstance: 65536}}},
		{"set-acl", Command{Time: 13, Caller: bob, Op: &SetACL{Session: 4, Path: "/acme/d", ACL: *acl, IfGeneration: 2}}},
		{"set-acl-empty", Command{Time: 14, Caller: bob, Op: &SetACL{Path: "/acme/d"}}},
		{"acquire", Command{Time: 15, Caller: bob, Op: &Acquire{Session: 5, Path: "/acme/l", Mode: api.LockShared}}},
		{"release", Command{Time: 16, Caller: bob, Op: &Release{Session: 5, Path: "/acme/l", Generation: 1<<32 + 1}}},
		{"release-then-grant", Command{Time: 16, Caller: bob, Op: &Release{Session: 5, Path: "/acme/l", Generation: 7,
			Then: []Grant{{Caller: Caller{Principal: "carol", Tenant: "acme"}, Session: 300, Path: "/acme/l", Mode: api.LockExclusive}}}}},
		{"close-session-then-grant", Command{Time: 5, Caller: bob, Op: &CloseSession{Session: 300,
			Then: []Grant{{Caller: Caller{Principal: "carol", Tenant: "acme"}, Session: 301, Path: "/acme/l", Mode: api.LockExclusive}}}}},
		{"expire-session-then-grants", Command{Time: 6, Caller: admin, Op: &ExpireSession{Session: 9,
			Then: []Grant{{Caller: bob, Session: 6, Path: "/acme/l", Mode: api.LockShared}, {Caller: bob, Session: 7, Path: "/acme/m", Mode: api.LockExclusive}}}}},
		{"create-tenant", Command{Time: 17, Caller: admin, Op: &CreateTenant{Name: "acme",
			Quota: api.TenantQuota{MaxNodes: 1000, MaxBytes: 1 << 30, MaxSessions: 50, MaxLocks: 100, MaxWaiters: 10, MaxContents: 256 << 10,
				OpsPerSecond: 500, KeepAlivesPerSecond: 20, Weight: 3}, ACL: api.ACLNames{Read: "r"}}}},
		{"update-tenant", Command{Time: 18, Caller: admin, Op: &UpdateTenant{Name: "acme", Quota: api.TenantQuota{MaxNodes: 1}}}},
		{"issue-token", Command{Time: 19, Caller: admin, Op: &IssueToken{ID: "tok1", Tenant: "acme", Principal: "ci", Hash: []byte{1, 2, 3, 4}}}},
		{"issue-token-nil-hash", Command{Time: 20, Caller: admin, Op: &IssueToken{ID: "tok2", Tenant: "acme", Principal: "ci"}}},
		{"revoke-token", Command{Time: 21, Caller: admin, Op: &RevokeToken{Tenant: "acme", ID: "tok1"}}},
	}
	var cases []goldenCase
	for _, o := range ops {
		cases = append(cases, goldenCase{
			name:   "command/" + o.name,
			encode: func() ([]byte, error) { return EncodeCommand(o.cmd) },
			decode: func(b []byte) error {
				got, err := DecodeCommand(b)
				if err != nil {
					return err
				}
				if !reflect.DeepEqual(normalize(got), normalize(o.cmd)) {
					return fmt.Errorf("decoded %+v, want %+v", got, o.cmd)
				}
				return nil
			},
		})
	}
	return cases
}

// TestGoldenCommands pins the exact bytes of a command of every kind.
func TestGoldenCommands(t *testing.T) {
	kinds := map[OpKind]bool{}
	cases := goldenCommandCases()
	for _, c := range cases {
		b, err := c.encode()
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		kinds[cmd.Op.Kind()] = true
	}
	if len(kinds) != int(numKinds)-1 {
		t.Errorf("golden commands cover %d of %d kinds", len(kinds), int(numKinds)-1)
	}
	checkGolden(t, "testdata/golden_commands.hex", cases)
}

func recCase[T any](name string, key []byte, v *T) goldenCase {
	return goldenCase{
		name:   "record/" + name,
		encode: func() ([]byte, error) { return encodeRec(v), nil },
		decode: func(b []byte) error {
			var got T
			if err := decodeRec(key, b, &got); err != nil {
				return err
			}
			if !reflect.DeepEqual(&got, v) {
				return fmt.Errorf("decoded %+v, want %+v", got, *v)
			}
			return nil
		},
	}
}

// TestGoldenRecords pins the exact bytes of a stored record of every type.
func TestGoldenRecords(t *testing.T) {
	key := []byte("golden")
	cases := []goldenCase{
		recCase("node-file", key, &nodeRec{Instance: 7, Owner: 0, ContentGen: 3, LockGen: 300, ACLGen: 1, Sum: 0x0123456789abcdef,
			Size: 5, Created: 1_700_000_000_000_000_000, Modified: 1_700_000_000_500_000_000,
			ACL: api.ACLNames{Read: "r", Write: "w", ChangeACL: "a"}, LockDelay: 10_000_000_000, Mode: api.LockShared,
			Holders: []uint64{2, 129, 70000}, DelayUntil: -5}),
		recCase("node-dir", key, &nodeRec{Instance: 1, Dir: true, Owner: 9, ContentGen: 1, ACLGen: 1, Created: 1, Modified: 1}),
		recCase("session", key, &sessionRec{Tenant: "acme", Principal: "bob", Created: 1_700_000_000_000_000_000}),
		recCase("tenant", key, &tenantRec{Quota: api.TenantQuota{MaxNodes: 1000, MaxBytes: 1 << 30, MaxLocks: 100, Weight: 3},
			Usage: api.TenantUsage{Nodes: 12, Bytes: 4096, Sessions: 2}, Created: 99}),
		recCase("tenant-zero", key, &tenantRec{}),
		recCase("counters-old", key, &counters{Session: 10, Instance: 200, LockGen: 30000}),
		recCase("counters-clock", key, &counters{Session: 10, Instance: 200, LockGen: 30000, Clock: 1_700_000_000_000_000_000, DelayEnd: -1}),
		recCase("token", key, &tokenRec{Tenant: "acme", Principal: "ci", Hash: []byte{0xde, 0xad, 0xbe, 0xef}, Created: 42}),
	}
	checkGolden(t, "testdata/golden_records.hex", cases)
}
