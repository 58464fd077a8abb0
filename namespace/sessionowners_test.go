package namespace

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/lockcell/lockcell/api"
)

// TestDecodeSessionOwnerAgrees: the take-over's narrow decoder accepts
// exactly the session records decodeRec accepts, with the same tenant and
// principal, and refuses with ErrCorrupt every truncation, trailing byte,
// other kind and damaged byte that decodeRec refuses.
func TestDecodeSessionOwnerAgrees(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	judged, refused := 0, 0
	agree := func(b []byte) {
		t.Helper()
		var want sessionRec
		werr := decodeRec([]byte("k"), b, &want)
		tenant, principal, err := decodeSessionOwner([]byte("k"), b)
		judged++
		switch {
		case (werr == nil) != (err == nil):
			t.Fatalf("record %x: decodeRec %v, decodeSessionOwner %v", b, werr, err)
		case err != nil && !errors.Is(err, ErrCorrupt):
			t.Fatalf("record %x: %v; want ErrCorrupt", b, err)
		case err != nil:
			refused++
		case string(tenant) != want.Tenant || string(principal) != want.Principal:
			t.Fatalf("record %x: %q %q; decodeRec %q %q", b, tenant, principal, want.Tenant, want.Principal)
		}
	}
	for _, rec := range randRecords(r, 400) {
		b := encodeRec(rec)
		agree(b)
		for n := 0; n < len(b); n += 1 + n/8 {
			agree(b[:n])
		}
		agree(append(bytes.Clone(b), 0))
		for range 4 {
			c := bytes.Clone(b)
			c[r.IntN(len(c))] ^= byte(1 + r.IntN(255))
			agree(c)
		}
	}
	if judged < 2000 || refused < judged/2 || refused == judged {
		t.Fatalf("judged %d records, %d refused: too few of one kind", judged, refused)
	}
}

// TestSessionOwners: SessionOwners lists what ListSessions(admin, "") lists,
// owner for owner, with repeated owners sharing their strings; only the
// administrator may ask.
func TestSessionOwners(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	e.tenant("b", api.TenantQuota{})
	for range 3 {
		e.session(alice)
		e.session(carol)
		e.session(bob)
		e.session(bob)
	}
	want, err := e.s.ListSessions(admin, "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.s.SessionOwners(admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) != 12 {
		t.Fatalf("SessionOwners: %d sessions, ListSessions %d; want 12", len(got), len(want))
	}
	first := map[Caller]Caller{}
	for i, w := range want {
		g := got[i]
		if g.ID != w.ID || g.Owner != (Caller{Tenant: w.Tenant, Principal: w.Principal}) {
			t.Fatalf("session %d: %+v; ListSessions %+v", i, g, w)
		}
		f, ok := first[g.Owner]
		if !ok {
			first[g.Owner] = g.Owner
			continue
		}
		if unsafe.StringData(f.Tenant) != unsafe.StringData(g.Owner.Tenant) ||
			unsafe.StringData(f.Principal) != unsafe.StringData(g.Owner.Principal) {
			t.Fatalf("session %d: owner %+v not shared with its first session's", g.ID, g.Owner)
		}
	}
	if _, err := e.s.SessionOwners(alice); !isCode(err, api.PermissionDenied) {
		t.Fatalf("SessionOwners as a tenant principal: %v; want PermissionDenied", err)
	}
}
