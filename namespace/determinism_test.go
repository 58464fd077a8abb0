package namespace

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/lockcell/lockcell/api"
)

// randomSlots generates n slots of random commands (valid encodings) with
// the model-test generator, tracking the model so the commands stay
// meaningful.
func randomSlots(t testing.TB, seed uint64, n int, start int64) [][][]byte {
	m := newModel(modelConfig)
	g := &gen{r: rand.New(rand.NewPCG(seed, seed+1)), m: m, now: start}
	var slots [][][]byte
	add := func(cmds ...Command) {
		var raw [][]byte
		for _, c := range cmds {
			r := m.apply(c)
			if s, ok := r.Reply.(*SessionCreated); ok {
				g.sids = append(g.sids, s.Session)
			}
			raw = append(raw, encode(t, c))
		}
		slots = append(slots, raw)
	}
	add(Command{Time: start, Caller: admin, Op: &CreateTenant{Name: "a"}}, Command{Time: start, Caller: admin, Op: &CreateTenant{Name: "b"}})
	for len(slots) < n {
		k := g.r.IntN(5)
		cmds := make([]Command, k)
		for i := range cmds {
			cmds[i] = g.command()
		}
		add(cmds...)
	}
	return slots
}

func TestDeterminismAndSnapshotRoundTrip(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		a := newEnv(t, modelConfig)
		b := newEnv(t, Config{Sync: true, MaxContents: modelConfig.MaxContents, MaxPathLen: modelConfig.MaxPathLen,
			MaxDepth: modelConfig.MaxDepth, ReadDirLimit: modelConfig.ReadDirLimit,
			DefaultLockDelay: modelConfig.DefaultLockDelay, MaxLockDelay: modelConfig.MaxLockDelay})
		c := newEnv(t, modelConfig)
		slots := randomSlots(t, seed, 80, a.now)
		var snap bytes.Buffer
		seen := map[uint64]bool{}
		for i, raw := range slots {
			slot := uint64(i + 1)
			ra, err := a.s.ApplySlot(slot, raw)
			if err != nil {
				t.Fatal(err)
			}
			rb, err := b.s.ApplySlot(slot, raw)
			if err != nil {
				t.Fatal(err)
			}
			if a.s.Checksum() != b.s.Checksum() {
				t.Fatalf("seed %d slot %d: checksums differ: %016x vs %016x", seed, slot, a.s.Checksum(), b.s.Checksum())
			}
			for j := range ra {
				if d := sameResult(ra[j], rb[j]); d != "" {
					t.Fatalf("seed %d slot %d: results differ: %s", seed, slot, d)
				}
			}
			seen[a.s.Checksum()] = true
			if slot == 40 {
				got, err := a.s.Snapshot(&snap)
				if err != nil || got != 40 {
					t.Fatalf("snapshot: %d %v", got, err)
				}
				if err := c.s.InstallSnapshot(bytes.NewReader(snap.Bytes())); err != nil {
					t.Fatal(err)
				}
				if c.s.AppliedSlot() != 40 || c.s.Checksum() != a.s.Checksum() {
					t.Fatalf("installed: slot %d sum %016x, want 40 %016x", c.s.AppliedSlot(), c.s.Checksum(), a.s.Checksum())
				}
				// Round trip is exact: the installed store streams the same bytes.
				var again bytes.Buffer
				if _, err := c.s.Snapshot(&again); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(again.Bytes(), snap.Bytes()) {
					t.Fatalf("snapshot of installed state differs (%d vs %d bytes)", again.Len(), snap.Len())
				}
			}
			if slot > 40 {
				if _, err := c.s.ApplySlot(slot, raw); err != nil {
					t.Fatal(err)
				}
				if c.s.Checksum() != a.s.Checksum() {
					t.Fatalf("seed %d slot %d: installed replica diverged", seed, slot)
				}
			}
		}
		if len(seen) < 10 {
			t.Fatalf("seed %d: only %d distinct checksums over %d slots; the checksum does not track the state", seed, len(seen), len(slots))
		}
		for _, e := range []*env{a, b, c} {
			if err := e.s.VerifyChecksum(); err != nil {
				t.Fatal(err)
			}
		}
		da, _ := dumpStore(a.s)
		dc, _ := dumpStore(c.s)
		if !equalDumps(da, dc) {
			t.Fatalf("seed %d: installed replica's state differs", seed)
		}
		a.close()
		b.close()
		c.close()
	}
}

func equalDumps(a, b storeDump) bool {
	var x, y bytes.Buffer
	for _, d := range []struct {
		d storeDump
		w *bytes.Buffer
	}{{a, &x}, {b, &y}} {
		d.w.WriteString(fmtAny(d.d.nodes) + fmtAny(d.d.data) + fmtAny(d.d.holders) + fmtAny(d.d.sessions) + fmtAny(d.d.tenants) + fmtAny(d.d.ctr))
	}
	return x.String() == y.String()
}

func TestApplySlotOrder(t *testing.T) {
	e := newEnv(t, Config{})
	if _, err := e.s.ApplySlot(2, nil); !errors.Is(err, ErrSlotGap) {
		t.Fatalf("gap: %v", err)
	}
	if _, err := e.s.ApplySlot(0, nil); !errors.Is(err, ErrAlreadyApplied) {
		t.Fatalf("slot 0: %v", err)
	}
	rs, err := e.s.ApplySlot(1, nil) // a no-op slot
	if err != nil || len(rs) != 0 || e.s.AppliedSlot() != 1 {
		t.Fatalf("noop: %v %v %d", rs, err, e.s.AppliedSlot())
	}
	sum := e.s.Checksum()
	if _, err := e.s.ApplySlot(1, [][]byte{encode(t, Command{Caller: admin, Op: &CreateTenant{Name: "a"}})}); !errors.Is(err, ErrAlreadyApplied) {
		t.Fatalf("replay: %v", err)
	}
	if e.s.Checksum() != sum || e.s.AppliedSlot() != 1 {
		t.Fatal("a refused slot changed the state")
	}
	// Garbage and oversize commands fail alone; the slot's others apply.
	big := make([]byte, DefaultMaxContents+commandOverhead+1)
	rs, err = e.s.ApplySlot(2, [][]byte{[]byte("garbage"), encode(t, Command{Caller: admin, Op: &CreateTenant{Name: "a"}}), big, nil})
	if err != nil {
		t.Fatal(err)
	}
	if rs[0].Err.Code != api.InvalidArgument || rs[1].Err != nil || rs[2].Err.Code != api.TooLarge || rs[3].Err.Code != api.InvalidArgument {
		t.Fatalf("results %+v", rs)
	}
	// Reopening recovers the applied slot and checksum.
	s2, err := Open(e.db, Config{})
	if err != nil || s2.AppliedSlot() != 2 || s2.Checksum() != e.s.Checksum() {
		t.Fatalf("reopen: %v slot %d", err, s2.AppliedSlot())
	}
}

func TestInstallSnapshotRejectsBadStreams(t *testing.T) {
	src := newEnv(t, Config{})
	for i, raw := range randomSlots(t, 7, 30, src.now) {
		if _, err := src.s.ApplySlot(uint64(i+1), raw); err != nil {
			t.Fatal(err)
		}
	}
	var snap bytes.Buffer
	if _, err := src.s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	good := snap.Bytes()

	dst := newEnv(t, Config{})
	dst.tenant("z", api.TenantQuota{})
	slot, sum := dst.s.AppliedSlot(), dst.s.Checksum()
	r := rand.New(rand.NewPCG(1, 2))
	try := func(name string, b []byte) {
		t.Helper()
		err := dst.s.InstallSnapshot(bytes.NewReader(b))
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: %v, want ErrBadSnapshot", name, err)
		}
		if dst.s.AppliedSlot() != slot || dst.s.Checksum() != sum {
			t.Fatalf("%s: a rejected snapshot changed the state", name)
		}
	}
	for i := 0; i < 60; i++ {
		try("truncated", good[:r.IntN(len(good))])
	}
	for i := 0; i < 60; i++ {
		b := bytes.Clone(good)
		b[r.IntN(len(b))] ^= byte(1 + r.IntN(255))
		try("flipped", b)
	}
	try("empty", nil)
	try("bad magic", append([]byte("XXXXXXXX"), good[8:]...))
	if err := dst.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.s.Tenant(admin, "z"); err != nil {
		t.Fatalf("old state lost: %v", err)
	}
	// And the good stream installs.
	if err := dst.s.InstallSnapshot(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	if dst.s.Checksum() != src.s.Checksum() || dst.s.AppliedSlot() != src.s.AppliedSlot() {
		t.Fatal("installed state differs")
	}
	if _, err := dst.s.Tenant(admin, "z"); !isCode(err, api.NotFound) {
		t.Fatalf("old tenant survived install: %v", err)
	}
}

func TestVerifyChecksumDetectsTampering(t *testing.T) {
	e := newEnv(t, Config{})
	e.tenant("a", api.TenantQuota{})
	if err := e.s.VerifyChecksum(); err != nil {
		t.Fatal(err)
	}
	if err := e.db.Set(dataKey("/a/x"), []byte("stray"), nil); err != nil {
		t.Fatal(err)
	}
	if err := e.s.VerifyChecksum(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered state: %v", err)
	}
}
