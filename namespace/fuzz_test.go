package namespace

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lockcell/lockcell/api"
)

// seedCommands are valid encodings of every operation kind, the fuzzers'
// starting points (testdata/fuzz holds more, committed).
func seedCommands(t testing.TB) [][]byte {
	acl := api.ACLNames{Read: "/a/acl"}
	ops := []Command{
		{Time: 1, Caller: admin, Op: &CreateTenant{Name: "a", Quota: api.TenantQuota{MaxNodes: 3}, ACL: acl}},
		{Time: 2, Caller: admin, Op: &UpdateTenant{Name: "a", Quota: api.TenantQuota{MaxLocks: 1}}},
		{Time: 3, Caller: alice, Op: &CreateSession{}},
		{Time: 4, Caller: alice, Op: &CloseSession{Session: 1}},
		{Time: 5, Caller: admin, Op: &ExpireSession{Session: 2}},
		{Time: 6, Caller: alice, Op: &OpenNode{Session: 1, Path: "/a/f", Create: true, Exclusive: true, Ephemeral: true, Contents: []byte("x"), ACL: &acl, LockDelay: 5}},
		{Time: 7, Caller: alice, Op: &SetContents{Path: "/a/f", Contents: []byte("y"), IfGeneration: 1}},
		{Time: 8, Caller: alice, Op: &Delete{Path: "/a/f", IfInstance: 2}},
		{Time: 9, Caller: alice, Op: &SetACL{Path: "/a/f", ACL: acl, IfGeneration: 1}},
		{Time: 10, Caller: alice, Op: &Acquire{Session: 1, Path: "/a/f", Mode: api.LockShared}},
		{Time: 11, Caller: alice, Op: &Release{Session: 1, Path: "/a/f", Generation: 1}},
		{Time: 12, Caller: alice, Op: &Release{Session: 1, Path: "/a/f", Generation: 1, Then: []Grant{{Caller: alice, Session: 2, Path: "/a/f", Mode: api.LockExclusive}}}},
		{Time: 13, Caller: admin, Op: &ExpireSession{Session: 1, Then: []Grant{{Caller: alice, Session: 2, Path: "/a/f", Mode: api.LockShared}}}},
	}
	var out [][]byte
	for _, c := range ops {
		out = append(out, encode(t, c))
	}
	return out
}

// FuzzDecodeCommand: any input either fails with ErrBadCommand, or decodes
// to a command that encodes to exactly the input and decodes back to the
// same command; applying it never panics and, if it fails,
// changes nothing.
func FuzzDecodeCommand(f *testing.F) {
	for _, b := range seedCommands(f) {
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{0xc0})
	f.Add([]byte{0xde, 0xff, 0xff})
	e := newEnv(f, Config{})
	e.tenant("a", api.TenantQuota{})
	e.session(alice)
	e.create(alice, 0, "/a/f", false, "x")
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		enc, err := EncodeCommand(cmd)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		if !bytes.Equal(enc, b) {
			t.Fatalf("accepted a non-canonical encoding:\n%x\n%x", b, enc)
		}
		again, err := DecodeCommand(enc)
		if err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
		if !reflect.DeepEqual(normalize(cmd), normalize(again)) {
			t.Fatalf("round trip changed the command:\n%+v\n%+v", cmd, again)
		}
		enc2, _ := EncodeCommand(again)
		if !bytes.Equal(enc, enc2) {
			t.Fatal("encoding is not a fixed point")
		}
		before := e.s.Checksum()
		e.slot++
		rs, err := e.s.ApplySlot(e.slot, [][]byte{b})
		if err != nil {
			t.Fatalf("storage error from a user command: %v", err)
		}
		if rs[0].Err != nil && e.s.Checksum() != before {
			t.Fatal("failed command changed the state")
		}
	})
}

// normalize maps empty byte slices to nil: the encoding does not keep the
// difference.
func normalize(c Command) Command {
	switch o := c.Op.(type) {
	case *OpenNode:
		if len(o.Contents) == 0 {
			o.Contents = nil
		}
	case *SetContents:
		if len(o.Contents) == 0 {
			o.Contents = nil
		}
	}
	return c
}

// naiveParse is the path rules written the obvious way, as a reference.
func naiveParse(s string) bool {
	if len(s) > MaxPathLenLimit || !strings.HasPrefix(s, "/") || !utf8.ValidString(s) {
		return false
	}
	parts := strings.Split(s[1:], "/")
	if len(parts) > MaxDepthLimit {
		return false
	}
	for i, c := range parts {
		if i == 0 {
			if c == "" || len(c) > MaxTenantNameLen || c[0] == '.' {
				return false
			}
			for _, r := range c {
				if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.", r) {
					return false
				}
			}
			continue
		}
		if c == "" || c == "." || c == ".." || len(c) > MaxComponentLen {
			return false
		}
		for _, r := range c {
			if r < 0x20 || r == 0x7f {
				return false
			}
		}
	}
	return true
}

// FuzzParsePath checks ParsePath against naiveParse, the accessors against
// strings.Split, and the key encoding's round trip and child-prefix property.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/a", "/a/b", "/a/b/c", "/a/", "//a", "/a//b", "/a/./b", "/a/..", "/.a", "/a/b\x00c", "/a/\x7f", "/a/é", "/a/\xff", "a/b", "", "/", "/a-b_c.d/x y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePath(s)
		if want := naiveParse(s); (err == nil) != want {
			t.Fatalf("ParsePath(%q) error %v, naive accepts %v", s, err, want)
		}
		if err != nil {
			if !errors.Is(err, api.ErrInvalidArgument) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if string(p) != s {
			t.Fatalf("not canonical: %q -> %q", s, p)
		}
		parts := strings.Split(s[1:], "/")
		if p.Tenant() != parts[0] || p.Base() != parts[len(parts)-1] || p.Depth() != len(parts) || p.IsRoot() != (len(parts) == 1) {
			t.Fatalf("accessors of %q: %q %q %d %v", s, p.Tenant(), p.Base(), p.Depth(), p.IsRoot())
		}
		got, ok := pathFromNodeKey(nodeKey(p))
		if !ok || got != p {
			t.Fatalf("node key round trip %q -> %q", p, got)
		}
		if parent, ok := p.Parent(); ok {
			if string(parent) != "/"+strings.Join(parts[:len(parts)-1], "/") {
				t.Fatalf("parent of %q: %q", p, parent)
			}
			if !bytes.HasPrefix(nodeKey(p), childPrefix(parent)) || bytes.IndexByte(nodeKey(p)[len(childPrefix(parent)):], 0) >= 0 {
				t.Fatalf("%q's key is not a direct child key of %q", p, parent)
			}
			if pp, ok := parent.Parent(); ok && bytes.HasPrefix(nodeKey(p), childPrefix(pp)) {
				t.Fatalf("grandchild %q falls in %q's child range", p, pp)
			}
		} else if !p.IsRoot() {
			t.Fatalf("%q has no parent but is not a root", p)
		}
	})
}

func TestDecodeRejectsNonCanonical(t *testing.T) {
	good := encode(t, Command{Time: 5, Caller: alice, Op: &Acquire{Session: 1, Path: "/a/f", Mode: api.LockShared}})
	if _, err := DecodeCommand(good); err != nil {
		t.Fatal(err)
	}
	// The mode as a 16-bit integer 0x0101: msgpack would truncate it to 1
	// (exclusive) without complaint.
	i := bytes.Index(good, []byte{0xa1, 'm', 0x02})
	if i < 0 {
		t.Fatalf("mode field not found in %x", good)
	}
	bad := append(append(bytes.Clone(good[:i+2]), 0xcd, 0x01, 0x01), good[i+3:]...)
	// Without the canonical check this would decode, as an exclusive lock.
	var w wireCommand
	var op Acquire
	if err := unmarshalStrict(bad, &w); err != nil {
		t.Fatal(err)
	}
	if err := unmarshalStrict(w.O, &op); err != nil || op.Mode != api.LockExclusive {
		t.Fatalf("msgpack no longer truncates (%v, %v): rethink this test", op.Mode, err)
	}
	for _, b := range [][]byte{
		bad,
		append(bytes.Clone(good), 0xc0), // trailing value
		good[:len(good)-1],              // truncated
	} {
		if _, err := DecodeCommand(b); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%x: %v, want ErrBadCommand", b, err)
		}
	}
}
