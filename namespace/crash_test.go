package namespace

import (
	"bytes"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/lockcell/lockcell/api"
)

// bigSlots adds to random slots some slots with large contents, so that a
// slot's batch spans several WAL blocks and a crash can tear it.
func bigSlots(t testing.TB, seed uint64, n int, start int64) [][][]byte {
	slots := randomSlots(t, seed, n, start)
	r := rand.New(rand.NewPCG(seed, 99))
	for i := 3; i < len(slots); i += 4 {
		var cmds [][]byte
		for j := 0; j < 1+r.IntN(3); j++ {
			body := bytes.Repeat([]byte{byte('a' + r.IntN(26))}, 20<<10+r.IntN(40<<10))
			cmds = append(cmds, encode(t, Command{Time: start + int64(i), Caller: alice,
				Op: &OpenNode{Path: "/a/big" + string(rune('a'+j)), Create: true, Contents: body}}))
			cmds = append(cmds, encode(t, Command{Time: start + int64(i), Caller: alice,
				Op: &SetContents{Path: "/a/big" + string(rune('a'+j)), Contents: body[:len(body)/2+r.IntN(len(body)/2)]}}))
		}
		slots[i] = append(slots[i], cmds...)
	}
	return slots
}

// crashCheck reopens a crash clone and checks that it holds the exact state
// after some whole slot k ≤ applied, at least minSlot: its recomputed
// checksum equals the checksum recorded when slot k was applied.
func crashCheck(t *testing.T, fs *vfs.MemFS, sums map[uint64]uint64, minSlot, applied uint64) uint64 {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: quietLogger{}})
	if err != nil {
		t.Fatalf("reopen after crash: %v", err)
	}
	defer db.Close()
	s, err := Open(db, crashConfig)
	if err != nil {
		t.Fatalf("namespace open after crash: %v", err)
	}
	k := s.AppliedSlot()
	if k < minSlot || k > applied {
		t.Fatalf("after crash: slot %d, want %d..%d", k, minSlot, applied)
	}
	if s.Checksum() != sums[k] {
		t.Fatalf("after crash at slot %d: checksum %016x, recorded %016x", k, s.Checksum(), sums[k])
	}
	if err := s.VerifyChecksum(); err != nil {
		t.Fatalf("after crash at slot %d: %v (a slot was applied in part)", k, err)
	}
	return k
}

// unsyncedShare picks how much unsynced data a crash keeps: none, all, or
// a random share (which tears the WAL at a random block).
func unsyncedShare(r *rand.Rand) int {
	switch r.IntN(3) {
	case 0:
		return 0
	case 1:
		return 100
	}
	return r.IntN(101)
}

var crashConfig = Config{MaxContents: 64 << 10, MaxPathLen: modelConfig.MaxPathLen, MaxDepth: modelConfig.MaxDepth,
	ReadDirLimit: modelConfig.ReadDirLimit, DefaultLockDelay: modelConfig.DefaultLockDelay, MaxLockDelay: modelConfig.MaxLockDelay}

// TestCrashAtomicity crashes (pebble's CrashClone, keeping a random share of
// unsynced blocks) between and during slot commits; every crash must reopen
// at a whole slot.
func TestCrashAtomicity(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		fs := vfs.NewCrashableMem()
		db := memDB(t, fs)
		s, err := Open(db, crashConfig)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 5))
		sums := map[uint64]uint64{0: 0}
		slots := bigSlots(t, seed, 32, 1)
		var reopened []uint64
		for i, raw := range slots {
			slot := uint64(i + 1)
			if _, err := s.ApplySlot(slot, raw); err != nil {
				t.Fatal(err)
			}
			sums[slot] = s.Checksum()
			if r.IntN(4) == 0 {
				clone := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedShare(r), RNG: r})
				reopened = append(reopened, crashCheck(t, clone, sums, 0, slot))
			}
		}
		_ = db.Close()
		t.Logf("seed %d: crashes reopened at slots %v", seed, reopened)
	}
}

// TestCrashDuringApply takes crash clones from another goroutine while slots
// commit, so some crashes land inside a commit.
func TestCrashDuringApply(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := memDB(t, fs)
	defer db.Close()
	s, err := Open(db, crashConfig)
	if err != nil {
		t.Fatal(err)
	}
	slots := bigSlots(t, 11, 40, 1)
	var mu sync.Mutex
	sums := map[uint64]uint64{0: 0}
	clones := make(chan *vfs.MemFS, len(slots))
	kick := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		// Each kick arrives as a slot starts to apply; the clone races with
		// that slot's commit.
		defer wg.Done()
		defer close(clones)
		r := rand.New(rand.NewPCG(3, 4))
		for range kick {
			clones <- fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: unsyncedShare(r), RNG: r})
		}
	}()
	for i, raw := range slots {
		select {
		case kick <- struct{}{}:
		default:
		}
		if _, err := s.ApplySlot(uint64(i+1), raw); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		sums[uint64(i+1)] = s.Checksum()
		mu.Unlock()
	}
	close(kick)
	wg.Wait()
	n := 0
	var reopened []uint64
	for clone := range clones {
		reopened = append(reopened, crashCheck(t, clone, sums, 0, uint64(len(slots))))
		n++
	}
	t.Logf("crashes reopened at slots %v", reopened)
	if n == 0 {
		t.Fatal("no crash clones taken")
	}
}

// TestSyncedSlotSurvivesCrash: with Config.Sync, a slot ApplySlot returned
// survives a crash that keeps no unsynced data at all.
func TestSyncedSlotSurvivesCrash(t *testing.T) {
	fs := vfs.NewCrashableMem()
	db := memDB(t, fs)
	defer db.Close()
	cfg := crashConfig
	cfg.Sync = true
	s, err := Open(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sums := map[uint64]uint64{0: 0}
	for i, raw := range bigSlots(t, 3, 12, 1) {
		slot := uint64(i + 1)
		if _, err := s.ApplySlot(slot, raw); err != nil {
			t.Fatal(err)
		}
		sums[slot] = s.Checksum()
		crashCheck(t, fs.CrashClone(vfs.CrashCloneCfg{}), sums, slot, slot)
	}
	// The snapshot install is synced too.
	var snap bytes.Buffer
	if _, err := s.Snapshot(&snap); err != nil {
		t.Fatal(err)
	}
	fs2 := vfs.NewCrashableMem()
	db2 := memDB(t, fs2)
	defer db2.Close()
	s2, err := Open(db2, crashConfig)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.InstallSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	crashCheck(t, fs2.CrashClone(vfs.CrashCloneCfg{}), sums, s.AppliedSlot(), s.AppliedSlot())
	if _, err := s2.Tenant(admin, "a"); err != nil {
		t.Fatal(api.CodeOf(err), err)
	}
}
