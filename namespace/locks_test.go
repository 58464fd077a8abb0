package namespace

import (
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
)

func lockEnv(t *testing.T) (*env, uint64, uint64) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	s1, s2 := e.session(alice), e.session(bob)
	e.create(alice, 0, "/a/l", false, "")
	return e, s1, s2
}

func acquire(sid uint64, mode api.LockMode) *Acquire {
	return &Acquire{Session: sid, Path: "/a/l", Mode: mode}
}

func TestExclusiveExcludesEveryone(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	g := e.ok(alice, acquire(s1, api.LockExclusive)).(*Granted)
	if g.Mode != api.LockExclusive || g.Tenant != "a" || g.Path != "/a/l" || g.Generation == 0 || g.Instance == 0 {
		t.Fatalf("grant %+v", g)
	}
	e.fails(bob, acquire(s2, api.LockExclusive), api.Locked)
	e.fails(bob, acquire(s2, api.LockShared), api.Locked)
	e.fails(alice, acquire(s1, api.LockShared), api.FailedPrecondition) // already holds
	r := e.applyAs(alice, &Release{Session: s1, Path: "/a/l", Generation: g.Generation})
	if r.Err != nil || !r.Reply.(*Released).Freed || len(r.Freed) != 1 || r.Freed[0].Generation != g.Generation || r.Freed[0].DelayUntil != 0 {
		t.Fatalf("release: %+v", r)
	}
	e.ok(bob, acquire(s2, api.LockExclusive))
}

func TestSharedAdmitsSharedOnly(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	s3 := e.session(alice)
	g1 := e.ok(alice, acquire(s1, api.LockShared)).(*Granted)
	g2 := e.ok(bob, acquire(s2, api.LockShared)).(*Granted)
	if g1.Generation != g2.Generation {
		t.Fatalf("shared holders got generations %d and %d; joining a held lock must not bump it", g1.Generation, g2.Generation)
	}
	e.fails(alice, acquire(s3, api.LockExclusive), api.Locked)
	r := e.applyAs(alice, &Release{Session: s1, Path: "/a/l", Generation: g1.Generation})
	if r.Err != nil || r.Reply.(*Released).Freed || len(r.Freed) != 0 {
		t.Fatalf("first shared release: %+v", r)
	}
	e.fails(alice, acquire(s3, api.LockExclusive), api.Locked)
	r = e.applyAs(bob, &Release{Session: s2, Path: "/a/l", Generation: g2.Generation})
	if r.Err != nil || !r.Reply.(*Released).Freed {
		t.Fatalf("last shared release: %+v", r)
	}
	e.ok(alice, acquire(s3, api.LockExclusive))
}

func TestGenerationGrowsOnEveryGrantFromFree(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	var last uint64
	for i := 0; i < 5; i++ {
		sid, c := s1, alice
		if i%2 == 1 {
			sid, c = s2, bob
		}
		g := e.ok(c, acquire(sid, api.LockExclusive)).(*Granted)
		if g.Generation <= last {
			t.Fatalf("grant %d: generation %d after %d", i, g.Generation, last)
		}
		last = g.Generation
		st, err := e.s.Stat(alice, "/a/l")
		if err != nil || st.LockGeneration != g.Generation {
			t.Fatalf("stat: %+v %v", st, err)
		}
		e.ok(c, &Release{Session: sid, Path: "/a/l", Generation: g.Generation})
	}
	// Re-creating the node must not restart generations: lock generations
	// come from a cell-wide counter (invariant 4 across re-creation).
	inst := e.create(alice, 0, "/a/m", false, "").Instance
	e.ok(alice, &Delete{Path: "/a/m", IfInstance: inst})
	inst2 := e.create(alice, 0, "/a/m", false, "").Instance
	if inst2 <= inst {
		t.Fatalf("re-created node instance %d, old %d", inst2, inst)
	}
	g := e.ok(alice, &Acquire{Session: s1, Path: "/a/m", Mode: api.LockShared}).(*Granted)
	if g.Generation <= last {
		t.Fatalf("re-created node: generation %d, not above %d", g.Generation, last)
	}
}

func TestStaleReleaseRefused(t *testing.T) {
	e, s1, _ := lockEnv(t)
	g1 := e.ok(alice, acquire(s1, api.LockExclusive)).(*Granted)
	e.ok(alice, &Release{Session: s1, Path: "/a/l", Generation: g1.Generation})
	g2 := e.ok(alice, acquire(s1, api.LockExclusive)).(*Granted)
	// A delayed duplicate of the first release must not free the second grant.
	err := e.fails(alice, &Release{Session: s1, Path: "/a/l", Generation: g1.Generation}, api.FailedPrecondition)
	if !errors.Is(err, api.ErrFailedPrecondition) {
		t.Fatal(err)
	}
	e.fails(alice, &Release{Session: s1, Path: "/a/l", Generation: 0}, api.FailedPrecondition)
	ok, err2 := e.s.CheckSequencer(alice, seqOf(g2))
	if err2 != nil || !ok {
		t.Fatalf("current grant's sequencer: %v %v", ok, err2)
	}
	ok, err2 = e.s.CheckSequencer(alice, seqOf(g1))
	if err2 != nil || ok {
		t.Fatalf("stale grant's sequencer valid: %v %v", ok, err2)
	}
	e.ok(alice, &Release{Session: s1, Path: "/a/l", Generation: g2.Generation})
	ok, _ = e.s.CheckSequencer(alice, seqOf(g2))
	if ok {
		t.Fatal("released grant's sequencer still valid")
	}
}

func TestLockDelayAfterExpiryNotAfterRelease(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	// Normal release: no lock-delay.
	g := e.ok(alice, acquire(s1, api.LockExclusive)).(*Granted)
	e.ok(alice, &Release{Session: s1, Path: "/a/l", Generation: g.Generation})
	g = e.ok(bob, acquire(s2, api.LockExclusive)).(*Granted)
	// Close (not expiry): no lock-delay either.
	r := e.applyAs(bob, &CloseSession{Session: s2})
	if r.Err != nil || len(r.Freed) != 1 || r.Freed[0].DelayUntil != 0 {
		t.Fatalf("close: %+v", r)
	}
	e.ok(alice, acquire(s1, api.LockExclusive))
	// Expiry: the default 10 s lock-delay.
	r = e.applyAs(admin, &ExpireSession{Session: s1})
	wantUntil := e.now + int64(DefaultLockDelay)
	if r.Err != nil || len(r.Freed) != 1 || r.Freed[0].DelayUntil != wantUntil {
		t.Fatalf("expire: %+v", r)
	}
	s3 := e.session(bob)
	e.now += int64(9 * time.Second)
	err := e.fails(bob, acquire(s3, api.LockExclusive), api.LockDelay)
	if err.Until != wantUntil || !errors.Is(err, api.ErrLockDelay) {
		t.Fatalf("lock-delay error %+v, want until %d", err, wantUntil)
	}
	e.now = wantUntil
	e.ok(bob, acquire(s3, api.LockExclusive))
}

func TestLockDelayPerNode(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	e.ok(alice, &OpenNode{Path: "/a/none", Create: true, LockDelay: NoLockDelay})
	e.ok(alice, &OpenNode{Path: "/a/two", Create: true, LockDelay: int64(2 * time.Second)})
	e.fails(alice, &OpenNode{Path: "/a/long", Create: true, LockDelay: int64(61 * time.Second)}, api.InvalidArgument)
	e.ok(alice, &Acquire{Session: s1, Path: "/a/none", Mode: api.LockExclusive})
	e.ok(alice, &Acquire{Session: s1, Path: "/a/two", Mode: api.LockExclusive})
	e.ok(admin, &ExpireSession{Session: s1})
	e.ok(bob, &Acquire{Session: s2, Path: "/a/none", Mode: api.LockExclusive})
	e.fails(bob, &Acquire{Session: s2, Path: "/a/two", Mode: api.LockExclusive}, api.LockDelay)
	e.now += int64(2 * time.Second)
	e.ok(bob, &Acquire{Session: s2, Path: "/a/two", Mode: api.LockExclusive})
}

func TestEphemeralCleanupOnExpiry(t *testing.T) {
	e, s1, s2 := lockEnv(t)
	e.create(alice, 0, "/a/d", true, "")
	e.ok(alice, &OpenNode{Session: s1, Path: "/a/d/e1", Create: true, Ephemeral: true, Contents: []byte("x")})
	e.ok(alice, &OpenNode{Session: s1, Path: "/a/d/e2", Create: true, Ephemeral: true})
	e.ok(bob, &OpenNode{Session: s2, Path: "/a/d/other", Create: true, Ephemeral: true})
	e.fails(alice, &OpenNode{Path: "/a/d/e3", Create: true, Ephemeral: true}, api.InvalidArgument) // needs a session
	e.fails(alice, &OpenNode{Session: s1, Path: "/a/d/e4", Create: true, Ephemeral: true, Dir: true}, api.InvalidArgument)
	// bob locks alice's ephemeral node: its deletion must free bob's lock.
	g := e.ok(bob, &Acquire{Session: s2, Path: "/a/d/e2", Mode: api.LockShared}).(*Granted)
	before, _ := e.s.Tenant(alice, "a")
	r := e.applyAs(admin, &ExpireSession{Session: s1})
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	ended := r.Reply.(*SessionEnded)
	if len(ended.DeletedEphemerals) != 2 || ended.DeletedEphemerals[0] != "/a/d/e1" || ended.DeletedEphemerals[1] != "/a/d/e2" {
		t.Fatalf("deleted %v", ended.DeletedEphemerals)
	}
	if len(r.Freed) != 1 || r.Freed[0].Path != "/a/d/e2" || !r.Freed[0].NodeDeleted || r.Freed[0].Generation != g.Generation {
		t.Fatalf("freed %+v", r.Freed)
	}
	var deleted, removed int
	for _, c := range r.Changes {
		switch c.Kind {
		case ChangeDeleted:
			deleted++
		case ChangeChildRemoved:
			removed++
			if c.Path != "/a/d" {
				t.Fatalf("child removed from %s", c.Path)
			}
		}
	}
	if deleted != 2 || removed != 2 {
		t.Fatalf("changes %+v", r.Changes)
	}
	for _, p := range []string{"/a/d/e1", "/a/d/e2"} {
		if _, err := e.s.Stat(alice, p); !isCode(err, api.NotFound) {
			t.Fatalf("%s after expiry: %v", p, err)
		}
	}
	if _, err := e.s.Stat(alice, "/a/d/other"); err != nil {
		t.Fatalf("other session's ephemeral node: %v", err)
	}
	after, _ := e.s.Tenant(alice, "a")
	if after.Usage.Nodes != before.Usage.Nodes-2 || after.Usage.Bytes != before.Usage.Bytes-1 ||
		after.Usage.Sessions != before.Usage.Sessions-1 || after.Usage.Locks != before.Usage.Locks-1 {
		t.Fatalf("usage before %+v after %+v", before.Usage, after.Usage)
	}
	if locks, _ := e.s.ListLocks(bob, "a"); len(locks) != 0 {
		t.Fatalf("locks left: %+v", locks)
	}
	// The session is gone for good.
	e.fails(alice, &Acquire{Session: s1, Path: "/a/l", Mode: api.LockShared}, api.SessionExpired)
	e.fails(admin, &ExpireSession{Session: s1}, api.SessionExpired)
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
}

func TestQuotas(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{MaxNodes: 2, MaxBytes: 10, MaxSessions: 1, MaxLocks: 1})
	s1 := e.session(alice)
	err := e.fails(bob, &CreateSession{}, api.ResourceExhausted)
	if err.Msg != `tenant "a": quota max_sessions (1) exceeded` {
		t.Fatalf("message %q", err.Msg)
	}
	e.create(alice, 0, "/a/f", false, "12345678")
	err = e.fails(alice, &OpenNode{Path: "/a/g", Create: true, Contents: []byte("123")}, api.ResourceExhausted)
	if err.Msg != `tenant "a": quota max_bytes (10) exceeded` {
		t.Fatalf("message %q", err.Msg)
	}
	e.fails(alice, &SetContents{Path: "/a/f", Contents: []byte("12345678901")}, api.ResourceExhausted)
	e.ok(alice, &SetContents{Path: "/a/f", Contents: []byte("1234567890")})
	e.create(alice, 0, "/a/g", false, "")
	err = e.fails(alice, &OpenNode{Path: "/a/h", Create: true}, api.ResourceExhausted)
	if err.Msg != `tenant "a": quota max_nodes (2) exceeded` {
		t.Fatalf("message %q", err.Msg)
	}
	e.ok(alice, &Acquire{Session: s1, Path: "/a/f", Mode: api.LockShared})
	err = e.fails(alice, &Acquire{Session: s1, Path: "/a/g", Mode: api.LockShared}, api.ResourceExhausted)
	if err.Msg != `tenant "a": quota max_locks (1) exceeded` {
		t.Fatalf("message %q", err.Msg)
	}
	// Raising a quota lets growth resume; lowering below usage is accepted.
	e.ok(admin, &UpdateTenant{Name: "a", Quota: api.TenantQuota{MaxLocks: 2}})
	e.ok(alice, &Acquire{Session: s1, Path: "/a/g", Mode: api.LockShared})
	e.ok(admin, &UpdateTenant{Name: "a", Quota: api.TenantQuota{MaxNodes: 1}})
	e.fails(alice, &OpenNode{Path: "/a/h", Create: true}, api.ResourceExhausted)
	info, err2 := e.s.Tenant(admin, "a")
	if err2 != nil || info.Usage != (api.TenantUsage{Nodes: 2, Bytes: 10, Sessions: 1, Locks: 2}) {
		t.Fatalf("%+v %v", info, err2)
	}
}

func TestDeleteRules(t *testing.T) {
	e, s1, _ := lockEnv(t)
	e.create(alice, 0, "/a/d", true, "")
	e.create(alice, 0, "/a/d/f", false, "")
	e.fails(alice, &Delete{Path: "/a/d"}, api.FailedPrecondition) // not empty
	e.fails(alice, &Delete{Path: "/a"}, api.FailedPrecondition)   // tenant root
	g := e.ok(alice, &Acquire{Session: s1, Path: "/a/d/f", Mode: api.LockExclusive}).(*Granted)
	e.fails(alice, &Delete{Path: "/a/d/f"}, api.FailedPrecondition) // locked
	e.ok(alice, &Release{Session: s1, Path: "/a/d/f", Generation: g.Generation})
	e.fails(alice, &Delete{Path: "/a/d/f", IfInstance: 1}, api.FailedPrecondition)
	e.ok(alice, &Delete{Path: "/a/d/f"})
	e.ok(alice, &Delete{Path: "/a/d"})
	e.fails(alice, &Delete{Path: "/a/d"}, api.NotFound)
}

func TestCompareAndSet(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	st := e.create(alice, 0, "/a/f", false, "v1")
	if st.ContentGeneration != 1 || st.ACLGeneration != 1 {
		t.Fatalf("%+v", st)
	}
	w := e.ok(alice, &SetContents{Path: "/a/f", Contents: []byte("v2"), IfGeneration: 1}).(*Written)
	if w.Stat.ContentGeneration != 2 || w.Stat.Size != 2 || w.Stat.Checksum != contentSum([]byte("v2")) {
		t.Fatalf("%+v", w.Stat)
	}
	e.fails(alice, &SetContents{Path: "/a/f", Contents: []byte("v3"), IfGeneration: 1}, api.FailedPrecondition)
	e.ok(alice, &SetACL{Path: "/a/f", ACL: api.ACLNames{Write: "/a/f"}, IfGeneration: 1})
	e.fails(alice, &SetACL{Path: "/a/f", ACL: api.ACLNames{}, IfGeneration: 1}, api.FailedPrecondition)
	e.fails(alice, &SetContents{Path: "/a", Contents: []byte("x")}, api.FailedPrecondition) // directory
	e.fails(alice, &SetContents{Path: "/a/f", Contents: make([]byte, DefaultMaxContents+1)}, api.TooLarge)
}

func TestSessionRules(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.tenant("b", api.TenantQuota{})
	s1 := e.session(alice)
	s2 := e.session(alice)
	if s2 <= s1 {
		t.Fatalf("session IDs %d then %d", s1, s2)
	}
	e.fails(admin, &CreateSession{}, api.PermissionDenied)
	e.fails(Caller{Tenant: "zz", Principal: "x"}, &CreateSession{}, api.Unauthenticated)
	e.fails(Caller{Tenant: "a"}, &CreateSession{}, api.Unauthenticated)
	e.fails(bob, &CloseSession{Session: s1}, api.PermissionDenied)
	e.fails(alice, &ExpireSession{Session: s1}, api.PermissionDenied)
	e.fails(bob, &Acquire{Session: s1, Path: "/a", Mode: api.LockShared}, api.PermissionDenied)
	e.ok(alice, &CloseSession{Session: s1})
	e.fails(alice, &CloseSession{Session: s1}, api.SessionExpired)
	s3 := e.session(alice)
	if s3 <= s2 {
		t.Fatalf("session ID %d reused or went back (after %d)", s3, s2)
	}
	ss, err := e.s.ListSessions(admin, "")
	if err != nil || len(ss) != 2 || ss[0].ID != s2 || ss[1].ID != s3 {
		t.Fatalf("%+v %v", ss, err)
	}
	if _, err := e.s.ListSessions(carol, "a"); !isCode(err, api.PermissionDenied) {
		t.Fatalf("carol lists a's sessions: %v", err)
	}
}
