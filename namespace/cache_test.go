package namespace

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
)

// applyChecked applies one slot and checks every cache entry against Pebble
// (invariants builds check after every slot too; this runs in every build).
func (e *env) applyChecked(raw [][]byte) []Result {
	e.t.Helper()
	e.slot++
	rs, err := e.s.ApplySlot(e.slot, raw)
	if err != nil {
		e.t.Fatalf("slot %d: %v", e.slot, err)
	}
	if _, err := e.s.checkCache(nil, 0); err != nil {
		e.t.Fatalf("slot %d: %v", e.slot, err)
	}
	return rs
}

// TestCacheAgreesWithPebble runs the random workload of the determinism
// test, with big contents, and checks after every slot that every cached
// entry is what Pebble holds, and the checksum.
func TestCacheAgreesWithPebble(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		e := newEnv(t, crashConfig)
		for _, raw := range bigSlots(t, seed, 60, e.now) {
			e.applyChecked(raw)
		}
		if len(e.s.cache.m) == 0 {
			t.Fatal("nothing was cached")
		}
		if err := e.s.VerifyChecksum(); err != nil {
			t.Fatal(err)
		}
		e.close()
	}
}

// TestCacheWithinSlot: writes and deletes of one key within one slot, and
// scans that must see the slot's own writes (a session that acquires and
// then closes in the same slot; a directory emptied and deleted in the same
// slot).
func TestCacheWithinSlot(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	sid := e.session(alice)
	cmd := func(op Op) []byte { return encode(t, Command{Time: e.now, Caller: alice, Op: op}) }
	rs := e.applyChecked([][]byte{
		cmd(&OpenNode{Path: "/a/d", Create: true, Dir: true}),
		cmd(&OpenNode{Path: "/a/d/f", Create: true, Contents: []byte("one")}),
		cmd(&SetContents{Path: "/a/d/f", Contents: []byte("two")}),
		cmd(&Acquire{Session: sid, Path: "/a/d/f", Mode: api.LockExclusive}),
		cmd(&OpenNode{Session: sid, Path: "/a/d/e", Create: true, Ephemeral: true}),
		cmd(&Delete{Path: "/a/d"}),                   // not empty: f and e
		cmd(&CloseSession{Session: sid}),             // releases f, deletes e: both seen by the scan
		cmd(&Delete{Path: "/a/d/f"}),                 // free now
		cmd(&Delete{Path: "/a/d"}),                   // empty now
		cmd(&OpenNode{Path: "/a/d/f", Create: true}), // parent gone
	})
	want := []api.Code{0, 0, 0, 0, 0, api.FailedPrecondition, 0, 0, 0, api.NotFound}
	for i, r := range rs {
		if (r.Err == nil) != (want[i] == 0) || r.Err != nil && r.Err.Code != want[i] {
			t.Fatalf("command %d: %v, want %v", i, r.Err, want[i])
		}
	}
	if len(rs[6].Reply.(*SessionEnded).Released) != 1 || len(rs[6].Reply.(*SessionEnded).DeletedEphemerals) != 1 {
		t.Fatalf("close in the slot that acquired: %+v", rs[6].Reply)
	}
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Stat(alice, "/a/d"); !isCode(err, api.NotFound) {
		t.Fatalf("stat of deleted dir: %v", err)
	}
}

// TestCacheClearedByInstallSnapshot: a replica that applied one history and
// then installs another's snapshot must not answer from values cached
// before the install, in applies or in reads.
func TestCacheClearedByInstallSnapshot(t *testing.T) {
	src := newEnv(t, Config{})
	dst := newEnv(t, Config{})
	// Both know tenant "a" and node /a/f, with different contents and
	// lock states; dst has cached all of it.
	for _, e := range []*env{src, dst} {
		e.tenant("a", api.TenantQuota{})
		e.create(alice, 0, "/a/f", false, "v-"+fmt.Sprint(e == src))
	}
	sid := dst.session(alice)
	dst.ok(alice, &Acquire{Session: sid, Path: "/a/f", Mode: api.LockExclusive})
	if _, _, err := dst.s.GetContentsAndStat(alice, "/a/f"); err != nil {
		t.Fatal(err)
	}
	for src.slot < dst.slot+3 {
		src.ok(alice, &SetContents{Path: "/a/f", Contents: []byte(fmt.Sprint("src ", src.slot))})
	}
	var snap bytes.Buffer
	if _, err := src.s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	if err := dst.s.InstallSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	dst.slot = src.slot
	if _, err := dst.s.checkCache(nil, 0); err != nil {
		t.Fatal(err)
	}
	data, st, err := dst.s.GetContentsAndStat(alice, "/a/f")
	if err != nil || st.LockHolders != 0 || !bytes.HasPrefix(data, []byte("src ")) {
		t.Fatalf("read after install: %q %+v %v", data, st, err)
	}
	// The same slots applied to both keep them equal.
	for i := 0; i < 5; i++ {
		for _, e := range []*env{src, dst} {
			e.applyChecked([][]byte{
				encode(t, Command{Time: e.now, Caller: alice, Op: &SetContents{Path: "/a/f", Contents: []byte(fmt.Sprint(i))}}),
				encode(t, Command{Time: e.now, Caller: alice, Op: &CreateSession{}}),
			})
		}
		if src.s.Checksum() != dst.s.Checksum() {
			t.Fatalf("slot %d after install: checksums differ", src.slot)
		}
	}
	for _, e := range []*env{src, dst} {
		if err := e.s.VerifyChecksum(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCacheBounded: past its budget the cache drops entries and keeps its
// accounting; a Store whose cache is tiny stays exact.
func TestCacheBounded(t *testing.T) {
	c := newStateCache()
	c.budget = 1 << 20
	slot := map[string]sentry{}
	for i := 0; i < 3*c.budget/(cacheFullMax+cacheEntryOverhead); i++ {
		slot[fmt.Sprintf("k%08d", i)] = sentry{centry: centry{val: make([]byte, cacheFullMax), present: true, full: true}}
		if len(slot) == 100 {
			c.promote(slot)
			slot = map[string]sentry{}
		}
	}
	c.promote(slot)
	if c.bytes > c.budget {
		t.Fatalf("cache holds %d bytes, budget %d", c.bytes, c.budget)
	}
	total := 0
	for k, e := range c.m {
		total += entrySize(k, e)
	}
	if total != c.bytes || len(c.m) == 0 {
		t.Fatalf("accounting: %d vs %d, %d entries", total, c.bytes, len(c.m))
	}
	e := newEnv(t, crashConfig)
	e.s.cache.budget = 4 << 10
	for _, raw := range bigSlots(t, 5, 40, e.now) {
		e.applyChecked(raw)
		if e.s.cache.bytes > e.s.cache.budget {
			t.Fatalf("store cache %d bytes over budget", e.s.cache.bytes)
		}
	}
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
}

// TestOpenRefusesOtherFormats: a format-1 meta record (16 bytes) or an
// unknown format byte is refused with ErrFormat, a garbled one as corrupt.
func TestOpenRefusesOtherFormats(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	orig, closer, err := e.db.Get(keyMeta)
	if err != nil {
		t.Fatal(err)
	}
	meta := bytes.Clone(orig)
	_ = closer.Close()
	for _, c := range []struct {
		val  []byte
		want error
	}{
		{meta[1:], ErrFormat},
		{append([]byte{1}, meta[1:]...), ErrFormat},
		{append([]byte{storeFormat + 1}, meta[1:]...), ErrFormat},
		{meta[:5], ErrCorrupt},
	} {
		if err := e.db.Set(keyMeta, c.val, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(e.db, Config{}); !errors.Is(err, c.want) {
			t.Fatalf("meta %x: %v, want %v", c.val, err, c.want)
		}
	}
	if err := e.db.Set(keyMeta, meta, nil); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(e.db, Config{}); err != nil || s.AppliedSlot() != e.s.AppliedSlot() || s.Checksum() != e.s.Checksum() {
		t.Fatalf("good meta: %v", err)
	}
}

// TestCacheCheckCostBounded: the invariant check after each applied slot
// (invariants builds) compares the slot's own entries and a bounded sample
// of the others with Pebble, so its cost per slot does not grow with the
// cache. A check whose cost grows with the cache makes a long-running
// replica of a busy cell apply more slowly than the cell chooses, so that
// once it falls behind it never catches up. The test counts the entries
// compared (no timing): with a cache of thousands of entries, 200 slots of
// one create each may compare at most their own keys plus the sample per
// slot, and must compare at least the sample (the check still judges).
func TestCacheCheckCostBounded(t *testing.T) {
	if !invariants.Enabled {
		t.Skip("the per-slot cache check runs only in invariants builds")
	}
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	sid := e.session(alice)
	for i := range 3000 {
		e.create(alice, sid, fmt.Sprintf("/a/old-%d", i), false, "x")
	}
	if n := len(e.s.cache.m); n < 10*cacheCheckSample {
		t.Fatalf("the cache holds %d entries; the test needs many more than the sample", n)
	}
	const slots = 200
	before := e.s.cacheChecked
	var own uint64
	for i := range slots {
		keys := len(e.s.cache.m)
		e.create(alice, sid, fmt.Sprintf("/a/new-%d", i), false, "y")
		// A create touches a handful of keys; count them generously as
		// the entries the slot added plus the ones it rewrote (≤ 8).
		own += uint64(len(e.s.cache.m)-keys) + 8
	}
	checked := e.s.cacheChecked - before
	t.Logf("%d slots with a cache of %d entries: %d entries compared (%.1f per slot)", slots, len(e.s.cache.m), checked, float64(checked)/slots)
	if limit := own + slots*cacheCheckSample; checked > limit {
		t.Errorf("the check compared %d entries over %d slots, more than the slots' own keys and the sample (%d): its cost grows with the cache", checked, slots, limit)
	}
	if floor := uint64(slots * cacheCheckSample); checked < floor {
		t.Errorf("the check compared only %d entries over %d slots, below the sample's %d", checked, slots, floor)
	}
	if _, err := e.s.checkCache(nil, 0); err != nil {
		t.Fatal(err)
	}
}
