package namespace

import (
	"bytes"
	"testing"

	"github.com/lockcell/lockcell/api"
)

func testHash(b byte) []byte { return bytes.Repeat([]byte{b}, TokenHashLen) }

// TestTokens: the administrator issues and revokes tokens; records survive
// reopen and a snapshot; only the hash is stored; bad input changes
// nothing.
func TestTokens(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	id := "0123456789abcdef"
	ti := e.ok(admin, &IssueToken{ID: id, Tenant: "a", Principal: "robot", Hash: testHash(7)}).(*TokenIssued)
	if ti.Info != (api.TokenInfo{ID: id, Tenant: "a", Principal: "robot", Created: e.now}) {
		t.Fatalf("issued %+v", ti.Info)
	}
	e.fails(alice, &IssueToken{ID: "1123456789abcdef", Tenant: "a", Principal: "x", Hash: testHash(1)}, api.PermissionDenied)
	e.fails(admin, &IssueToken{ID: id, Tenant: "a", Principal: "x", Hash: testHash(1)}, api.AlreadyExists)
	e.fails(admin, &IssueToken{ID: "1123456789abcdef", Tenant: "nosuch", Principal: "x", Hash: testHash(1)}, api.NotFound)
	for _, bad := range []*IssueToken{
		{ID: "short", Tenant: "a", Principal: "x", Hash: testHash(1)},
		{ID: "0123456789ABCDEF", Tenant: "a", Principal: "x", Hash: testHash(1)},
		{ID: "1123456789abcdef", Tenant: "a", Principal: "", Hash: testHash(1)},
		{ID: "1123456789abcdef", Tenant: "a", Principal: "x", Hash: []byte{1, 2}},
		{ID: "1123456789abcdef", Tenant: "", Principal: "x", Hash: testHash(1)},
	} {
		e.fails(admin, bad, api.InvalidArgument)
	}
	rec, found, err := e.s.TokenByID(id)
	if err != nil || !found || rec.Tenant != "a" || rec.Principal != "robot" || !bytes.Equal(rec.Hash, testHash(7)) {
		t.Fatalf("TokenByID: %+v %v %v", rec, found, err)
	}
	if _, found, _ := e.s.TokenByID("ffffffffffffffff"); found {
		t.Fatal("found a token never issued")
	}
	if _, found, _ := e.s.TokenByID("../x"); found {
		t.Fatal("found a malformed token id")
	}
	ls, err := e.s.ListTokens(admin, "a")
	if err != nil || len(ls) != 1 || ls[0].ID != id {
		t.Fatalf("ListTokens: %+v %v", ls, err)
	}
	if _, err := e.s.ListTokens(alice, "a"); !isCode(err, api.PermissionDenied) {
		t.Fatalf("ListTokens by a tenant principal: %v", err)
	}

	// Snapshot and install elsewhere: the token comes along.
	var buf bytes.Buffer
	if _, err := e.s.Snapshot(&buf); err != nil {
		t.Fatal(err)
	}
	e2 := newEnv(t, Config{})
	if err := e2.s.InstallSnapshot(bytes.NewReader(buf.Bytes())); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := e2.s.TokenByID(id); !found || e2.s.Checksum() != e.s.Checksum() {
		t.Fatalf("after snapshot install: found=%v, checksums %x vs %x", found, e2.s.Checksum(), e.s.Checksum())
	}

	e.fails(admin, &RevokeToken{Tenant: "b", ID: id}, api.NotFound)
	e.fails(alice, &RevokeToken{Tenant: "a", ID: id}, api.PermissionDenied)
	tr := e.ok(admin, &RevokeToken{Tenant: "a", ID: id}).(*TokenRevoked)
	if tr.Info.Principal != "robot" {
		t.Fatalf("revoked %+v", tr.Info)
	}
	if _, found, _ := e.s.TokenByID(id); found {
		t.Fatal("a revoked token is still found")
	}
	e.fails(admin, &RevokeToken{Tenant: "a", ID: id}, api.NotFound)
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
}

// TestTenantLimitsStoredAndContentsQuota: every quota field survives the
// store (the master-side limits are read back from it after a fail-over),
// and MaxContents bounds each file.
func TestTenantLimitsStoredAndContentsQuota(t *testing.T) {
	e := newEnv(t, Config{})
	q := api.TenantQuota{MaxNodes: 1, MaxBytes: 2, MaxSessions: 3, MaxLocks: 4, MaxWaiters: 5, MaxContents: 6, OpsPerSecond: 7, KeepAlivesPerSecond: 8, Weight: 9}
	e.tenant("a", q)
	info, err := e.s.Tenant(admin, "a")
	if err != nil || info.Quota != q {
		t.Fatalf("stored quota %+v (%v); want %+v", info.Quota, err, q)
	}
	e.ok(admin, &UpdateTenant{Name: "a", Quota: api.TenantQuota{MaxContents: 4}})
	e.create(alice, 0, "/a/f", false, "1234")
	err2 := e.fails(alice, &OpenNode{Path: "/a/g", Create: true, Contents: []byte("12345")}, api.ResourceExhausted)
	if err2.Msg != `tenant "a": quota max_contents (4) exceeded` {
		t.Fatalf("message %q", err2.Msg)
	}
	e.fails(alice, &SetContents{Path: "/a/f", Contents: []byte("12345")}, api.ResourceExhausted)
	e.ok(alice, &SetContents{Path: "/a/f", Contents: []byte("4321")})
}
