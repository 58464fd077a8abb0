package namespace

import (
	"bytes"
	"testing"

	"github.com/lockcell/lockcell/api"
)

// Restart ends every session (shared and exclusive holds released without
// lock-delay, ephemeral nodes deleted), raises the counters by the gap,
// keeps files and the clock, and reaches the same state from the same
// snapshot every time.
func TestRestart(t *testing.T) {
	e := newEnv(t, Config{AdminPrincipal: "admin"})
	e.tenant("a", api.TenantQuota{})
	s1, s2 := e.session(alice), e.session(bob)
	e.create(alice, s1, "/a/file", false, "kept")
	e.create(alice, s1, "/a/x", false, "")
	e.ok(alice, &OpenNode{Session: s1, Path: "/a/eph", Create: true, Ephemeral: true})
	shared1 := e.ok(alice, &Acquire{Session: s1, Path: "/a/file", Mode: api.LockShared}).(*Granted)
	e.ok(bob, &Acquire{Session: s2, Path: "/a/file", Mode: api.LockShared})
	excl := e.ok(alice, &Acquire{Session: s1, Path: "/a/x", Mode: api.LockExclusive}).(*Granted)
	clock, _, _ := e.s.Clock()

	var snap bytes.Buffer
	slot, err := e.s.Snapshot(&snap)
	if err != nil {
		t.Fatal(err)
	}
	restart := func() (*env, RestartSummary) {
		r := newEnv(t, Config{AdminPrincipal: "admin"})
		if err := r.s.InstallSnapshot(bytes.NewReader(snap.Bytes())); err != nil {
			t.Fatal(err)
		}
		sum, err := r.s.Restart(0)
		if err != nil {
			t.Fatal(err)
		}
		r.slot = r.s.AppliedSlot()
		return r, sum
	}
	r, sum := restart()
	if sum.Slot != slot+1 || r.s.AppliedSlot() != slot+1 || sum.Checksum != r.s.Checksum() {
		t.Fatalf("restart summary %+v, applied %d, checksum %016x", sum, r.s.AppliedSlot(), r.s.Checksum())
	}
	if sum.Sessions != 2 || sum.LocksReleased != 3 || sum.EphemeralDeleted != 1 {
		t.Fatalf("restart ended %d sessions, %d holds, %d ephemeral nodes; want 2, 3, 1", sum.Sessions, sum.LocksReleased, sum.EphemeralDeleted)
	}
	if err := r.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
	if ss, err := r.s.ListSessions(admin, ""); err != nil || len(ss) != 0 {
		t.Fatalf("sessions after restart: %v %v", ss, err)
	}
	if ls, err := r.s.ListLocks(admin, "a"); err != nil || len(ls) != 0 {
		t.Fatalf("locks after restart: %v %v", ls, err)
	}
	if now, _, _ := r.s.Clock(); now != clock {
		t.Fatalf("restart moved the clock from %d to %d", clock, now)
	}
	if _, _, err := r.s.GetContentsAndStat(alice, "/a/eph"); !isCode(err, api.NotFound) {
		t.Fatalf("the ephemeral node after restart: %v", err)
	}
	if b, _, err := r.s.GetContentsAndStat(alice, "/a/file"); err != nil || string(b) != "kept" {
		t.Fatalf("/a/file after restart: %q %v", b, err)
	}
	// The old session IDs name nothing; new ones and new grants lie above
	// the gap; a lock the old sessions held is free at once (no lock-delay).
	r.fails(alice, &Acquire{Session: s1, Path: "/a/x", Mode: api.LockExclusive}, api.SessionExpired)
	ns := r.session(alice)
	if ns <= s2+RestoreGap {
		t.Fatalf("new session %d, want above %d", ns, s2+RestoreGap)
	}
	g := r.ok(alice, &Acquire{Session: ns, Path: "/a/x", Mode: api.LockExclusive}).(*Granted)
	if g.Generation <= max(excl.Generation, shared1.Generation)+RestoreGap {
		t.Fatalf("generation %d after restart, want above %d", g.Generation, excl.Generation+RestoreGap)
	}
	r2, sum2 := restart()
	if sum2.Checksum != sum.Checksum || r2.s.AppliedSlot() != sum.Slot {
		t.Fatalf("two restarts of one snapshot differ: %016x and %016x", sum.Checksum, sum2.Checksum)
	}
}
