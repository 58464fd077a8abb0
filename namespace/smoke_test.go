package namespace

import (
	"testing"

	"github.com/lockcell/lockcell/api"
)

func TestSmoke(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	sid := e.session(alice)
	e.create(alice, sid, "/a/dir", true, "")
	st := e.create(alice, sid, "/a/dir/f", false, "hello")
	g := e.ok(alice, &Acquire{Session: sid, Path: "/a/dir/f", Mode: api.LockExclusive}).(*Granted)
	if g.Generation == 0 || g.Instance != st.Instance {
		t.Fatalf("grant %+v", g)
	}
	data, st2, err := e.s.GetContentsAndStat(alice, "/a/dir/f")
	if err != nil || string(data) != "hello" || st2.LockHolders != 1 {
		t.Fatalf("%q %+v %v", data, st2, err)
	}
	page, err := e.s.ReadDir(alice, "/a/dir", "", 0)
	if err != nil || len(page.Entries) != 1 || page.Entries[0].Name != "f" {
		t.Fatalf("%+v %v", page, err)
	}
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
	e.ok(admin, &ExpireSession{Session: sid})
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
}
