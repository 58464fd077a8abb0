package namespace

import (
	"strings"
	"testing"

	"github.com/lockcell/lockcell/api"
)

func TestTenantIsolationByDefault(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.tenant("b", api.TenantQuota{})
	e.create(alice, 0, "/a/secret", false, "s")
	sid := e.session(carol)
	// carol (tenant b) can neither see nor touch tenant a's subtree, and
	// cannot even tell a missing node from a forbidden one.
	for _, p := range []string{"/a/secret", "/a/missing", "/a", "/zz/x"} {
		if _, err := e.s.Stat(carol, p); !isCode(err, api.PermissionDenied) {
			t.Errorf("carol Stat %s: %v, want permission denied", p, err)
		}
	}
	e.fails(carol, &SetContents{Path: "/a/secret", Contents: []byte("x")}, api.PermissionDenied)
	e.fails(carol, &OpenNode{Path: "/a/new", Create: true}, api.PermissionDenied)
	e.fails(carol, &Delete{Path: "/a/secret"}, api.PermissionDenied)
	e.fails(carol, &Acquire{Session: sid, Path: "/a/secret", Mode: api.LockShared}, api.PermissionDenied)
	e.fails(carol, &SetACL{Path: "/a/secret", ACL: api.ACLNames{}}, api.PermissionDenied)
	e.fails(carol, &OpenNode{Path: "/a/secret", Create: true, Exclusive: true}, api.PermissionDenied)
	if _, err := e.s.ReadDir(carol, "/a", "", 0); !isCode(err, api.PermissionDenied) {
		t.Errorf("carol ReadDir /a: %v", err)
	}
	// Her own tenant works, and alice sees NotFound for a missing node.
	e.create(carol, 0, "/b/mine", false, "")
	if _, err := e.s.Stat(alice, "/a/missing"); !isCode(err, api.NotFound) {
		t.Errorf("alice Stat /a/missing: %v", err)
	}
	// The administrator has no node access.
	if _, err := e.s.Stat(admin, "/a/secret"); !isCode(err, api.PermissionDenied) {
		t.Errorf("admin Stat: %v", err)
	}
	e.fails(admin, &OpenNode{Path: "/a/x", Create: true}, api.PermissionDenied)
}

func TestACLFiles(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.tenant("b", api.TenantQuota{})
	e.create(alice, 0, "/a/acl", true, "")
	e.create(alice, 0, "/a/acl/readers", false, "# readers\n bob \r\nb/carol\n")
	e.create(alice, 0, "/a/acl/writers", false, "alice")
	e.create(alice, 0, "/a/acl/admins", false, "alice\nb/*")
	acl := api.ACLNames{Read: "/a/acl/readers", Write: "/a/acl/writers", ChangeACL: "/a/acl/admins"}
	e.ok(alice, &OpenNode{Path: "/a/d", Create: true, Dir: true, ACL: &acl})
	// Children inherit the directory's ACL names.
	st := e.ok(alice, &OpenNode{Path: "/a/d/f", Create: true, Contents: []byte("data")}).(*Opened).Stat
	if st.ACL != acl {
		t.Fatalf("inherited ACL %+v", st.ACL)
	}
	// Read: bob and carol (cross-tenant, named) but not alice.
	for _, c := range []struct {
		who  Caller
		want bool
	}{{bob, true}, {carol, true}, {alice, false}, {Caller{Tenant: "b", Principal: "dave"}, false}} {
		ok, err := e.s.Allowed(c.who, "/a/d/f", api.PermRead)
		if err != nil || ok != c.want {
			t.Errorf("read %+v: %v %v, want %v", c.who, ok, err, c.want)
		}
	}
	if data, _, err := e.s.GetContentsAndStat(carol, "/a/d/f"); err != nil || string(data) != "data" {
		t.Errorf("carol reads: %q %v", data, err)
	}
	if _, _, err := e.s.GetContentsAndStat(alice, "/a/d/f"); !isCode(err, api.PermissionDenied) {
		t.Errorf("alice reads: %v", err)
	}
	// Write: alice only.
	e.ok(alice, &SetContents{Path: "/a/d/f", Contents: []byte("v2")})
	e.fails(bob, &SetContents{Path: "/a/d/f", Contents: []byte("v3")}, api.PermissionDenied)
	e.fails(carol, &SetContents{Path: "/a/d/f", Contents: []byte("v3")}, api.PermissionDenied)
	// Change-ACL: alice and all of tenant b ("b/*"); not bob.
	e.fails(bob, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{}}, api.PermissionDenied)
	e.ok(Caller{Tenant: "b", Principal: "dave"}, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{Read: "/a/acl/readers"}})
	// ACL names must stay inside the node's tenant.
	e.fails(alice, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{Read: "/b/x"}}, api.InvalidArgument)
	e.fails(alice, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{Read: "relative"}}, api.InvalidArgument)
	// A missing ACL file fails closed, even for the node's own tenant.
	e.ok(alice, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{Write: "/a/acl/none"}})
	e.fails(alice, &SetContents{Path: "/a/d/f", Contents: []byte("x")}, api.PermissionDenied)
	// A directory as ACL file fails closed too.
	e.ok(alice, &SetACL{Path: "/a/d/f", ACL: api.ACLNames{Write: "/a/acl"}})
	e.fails(alice, &SetContents{Path: "/a/d/f", Contents: []byte("x")}, api.PermissionDenied)
}

func TestACLLineGrammar(t *testing.T) {
	for _, c := range []struct {
		data string
		who  Caller
		want bool
	}{
		{"alice", alice, true},
		{"alice", Caller{Tenant: "b", Principal: "alice"}, false},
		{"*", bob, true},
		{"*", carol, false},
		{"b/*", carol, true},
		{"b/carol", carol, true},
		{"a/alice", alice, true},
		{"/alice", alice, false},
		{"#alice", alice, false},
		{"  alice\t\r", alice, true},
		{"alicex\nxalice", alice, false},
		{"admin\n*\n/admin", admin, false},
		{"", alice, false},
	} {
		if got := aclGrants([]byte(c.data), "a", c.who); got != c.want {
			t.Errorf("aclGrants(%q, %+v) = %v, want %v", c.data, c.who, got, c.want)
		}
	}
}

func TestCallerValidation(t *testing.T) {
	e := newEnv(t, Config{})
	e.fails(Caller{Principal: "root"}, &CreateTenant{Name: "a"}, api.Unauthenticated)
	e.fails(Caller{}, &CreateTenant{Name: "a"}, api.Unauthenticated)
	e.fails(Caller{Tenant: "a", Principal: "alice"}, &CreateTenant{Name: "a"}, api.Unauthenticated) // no tenant a yet
	e.tenant("a", api.TenantQuota{})
	e.fails(alice, &CreateTenant{Name: "b"}, api.PermissionDenied)
	e.fails(admin, &CreateTenant{Name: "a"}, api.AlreadyExists)
	e.fails(admin, &CreateTenant{Name: "bad/name"}, api.InvalidArgument)
	e.fails(admin, &UpdateTenant{Name: "nope"}, api.NotFound)
	if _, err := e.s.ListTenants(alice); !isCode(err, api.PermissionDenied) {
		t.Fatal(err)
	}
	ts, err := e.s.ListTenants(admin)
	if err != nil || len(ts) != 1 || ts[0].Name != "a" {
		t.Fatalf("%+v %v", ts, err)
	}
}

// TestRefusalHidesExistence: to a caller that may not read a node's parent,
// every refusal about an existing node reads exactly like the one about a
// missing node beside it — code and message — whatever the operation.
func TestRefusalHidesExistence(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.tenant("b", api.TenantQuota{})
	e.create(alice, 0, "/a/d", true, "")
	e.create(alice, 0, "/a/d/secret", false, "s")
	holder := e.session(alice)
	g := e.ok(alice, &Acquire{Session: holder, Path: "/a/d/secret", Mode: api.LockExclusive}).(*Granted)
	sid := e.session(carol)
	ops := map[string]func(path string) Op{
		"set-contents": func(p string) Op { return &SetContents{Path: p, Contents: []byte("x")} },
		"delete":       func(p string) Op { return &Delete{Path: p} },
		"set-acl":      func(p string) Op { return &SetACL{Path: p} },
		"acquire":      func(p string) Op { return &Acquire{Session: sid, Path: p, Mode: api.LockShared} },
		"release":      func(p string) Op { return &Release{Session: sid, Path: p, Generation: g.Generation} },
		"open":         func(p string) Op { return &OpenNode{Path: p} },
	}
	for name, op := range ops {
		there := e.fails(carol, op("/a/d/secret"), api.PermissionDenied)
		gone := e.fails(carol, op("/a/d/nothing"), api.PermissionDenied)
		if there.Msg != strings.ReplaceAll(gone.Msg, "/a/d/nothing", "/a/d/secret") {
			t.Errorf("%s: existing node refused with %q, missing one with %q", name, there.Msg, gone.Msg)
		}
	}
	_, there := e.s.Stat(carol, "/a/d/secret")
	_, gone := e.s.Stat(carol, "/a/d/nothing")
	if there == nil || gone == nil || there.Error() != strings.ReplaceAll(gone.Error(), "/a/d/nothing", "/a/d/secret") {
		t.Errorf("Stat: existing node %v, missing one %v", there, gone)
	}
}
