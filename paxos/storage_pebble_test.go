package paxos

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/vmihailenco/msgpack/v5"
)

var (
	pebbleSeedFlag  = flag.Uint64("pebble.seed", 0, "run TestPebbleModel and TestPebbleCrashConsistency with only this seed (0: seeds 1..-pebble.seeds)")
	pebbleSeedsFlag = flag.Int("pebble.seeds", 20, "number of seeds for TestPebbleModel and TestPebbleCrashConsistency")
	pebbleStepsFlag = flag.Int("pebble.steps", 150, "operations per seed in TestPebbleModel")
)

// pebbleTestSeeds returns the seeds the randomized tests run.
func pebbleTestSeeds() []uint64 {
	if *pebbleSeedFlag != 0 {
		return []uint64{*pebbleSeedFlag}
	}
	seeds := make([]uint64, *pebbleSeedsFlag)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds
}

// pebbleTestOpen opens a PebbleStorage on a fresh in-memory FS.
func pebbleTestOpen(t testing.TB) (*PebbleStorage, *pebble.DB) {
	t.Helper()
	db, err := pebble.Open("db", &pebble.Options{FS: vfs.NewMem(), Logger: pebbleTestQuietLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := NewPebbleStorage(db)
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// pebbleTestState is everything a Storage shows, for comparisons.
type pebbleTestState struct {
	hs      HardState
	snap    Snapshot
	last    Slot
	entries []Entry
}

func pebbleTestDump(t *testing.T, s Storage) pebbleTestState {
	t.Helper()
	var st pebbleTestState
	var err error
	if st.hs, err = s.InitialState(); err != nil {
		t.Fatalf("InitialState: %v", err)
	}
	if st.snap, err = s.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if st.last, err = s.LastSlot(); err != nil {
		t.Fatalf("LastSlot: %v", err)
	}
	if st.snap.Slot == ^Slot(0) {
		return st // every slot is compacted
	}
	if st.entries, err = s.Entries(st.snap.Slot+1, ^Slot(0)); err != nil {
		t.Fatalf("Entries: %v", err)
	}
	return st
}

func (a pebbleTestState) equal(b pebbleTestState) bool {
	return a.hs == b.hs && a.snap.Slot == b.snap.Slot && bytes.Equal(a.snap.Data, b.snap.Data) &&
		a.last == b.last && storageTestEqualEntries(a.entries, b.entries)
}

func (a pebbleTestState) String() string {
	return fmt.Sprintf("hs=%+v snap=%d(%d bytes) last=%d entries=%s", a.hs, a.snap.Slot, len(a.snap.Data), a.last, storageTestDescribe(a.entries))
}

// pebbleTestGen generates random operations over a small slot window.
type pebbleTestGen struct {
	rng  *rand.Rand
	snap Slot // highest snapshot slot generated so far
	top  Slot // highest entry slot generated so far
}

func (g *pebbleTestGen) hardState() HardState {
	if g.rng.IntN(3) == 0 {
		return HardState{}
	}
	return HardState{
		Promised:   MakeBallot(uint64(g.rng.IntN(20)), ID(1+g.rng.IntN(5))),
		Chosen:     Slot(g.rng.IntN(int(g.top) + 2)),
		Rebuilding: g.rng.IntN(4) == 0,
	}
}

func (g *pebbleTestGen) entries(maxData int) []Entry {
	n := g.rng.IntN(5)
	var ents []Entry
	for range n {
		lo := max(1, int(g.snap)-3)
		slot := Slot(lo + g.rng.IntN(int(g.top)+6-lo))
		g.top = max(g.top, slot)
		b := MakeBallot(uint64(g.rng.IntN(20)), ID(1+g.rng.IntN(5)))
		e := Entry{Slot: slot, Ballot: b}
		for j := range g.rng.IntN(4) {
			var data []byte
			if k := g.rng.IntN(maxData + 1); k > 0 || g.rng.IntN(2) == 0 {
				data = make([]byte, k)
				for i := range data {
					data[i] = byte(g.rng.Uint32())
				}
			}
			e.Value.Cmds = append(e.Value.Cmds, Command{ID: ProposalID{Ballot: b, Seq: uint64(j)}, Data: data})
		}
		ents = append(ents, e)
	}
	return ents
}

func (g *pebbleTestGen) snapshot() Snapshot {
	lo := max(1, int(g.snap)-4)
	slot := Slot(lo + g.rng.IntN(int(g.top)+8-lo))
	g.snap = max(g.snap, slot)
	g.top = max(g.top, slot)
	data := make([]byte, g.rng.IntN(300))
	for i := range data {
		data[i] = byte(g.rng.Uint32())
	}
	return Snapshot{Slot: slot, Data: data}
}

// TestPebbleModel applies random sequences of Save, SaveSnapshot, clean
// restarts and crashes (losing unsynced writes) to a PebbleStorage and to the
// reference MemoryStorage, and after every step asserts that every read
// agrees. A failure prints the seed; replay it with -pebble.seed=N.
func TestPebbleModel(t *testing.T) {
	for _, seed := range pebbleTestSeeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test ./paxos -run 'TestPebbleModel' -pebble.seed=%d -pebble.steps=%d -v", seed, *pebbleStepsFlag)
				}
			}()
			pebbleTestModelRun(t, seed, *pebbleStepsFlag)
		})
	}
}

func pebbleTestModelRun(t *testing.T, seed uint64, steps int) {
	g := &pebbleTestGen{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	model, real := storageTestNewMemory(t), storageTestNewPebble(t, 64)
	for step := range steps {
		var what string
		switch p := g.rng.IntN(100); {
		case p < 70:
			hs, ents, sync := g.hardState(), g.entries(40), g.rng.IntN(3) == 0
			what = fmt.Sprintf("Save(%+v, %s, sync=%v)", hs, storageTestDescribe(ents), sync)
			errM, errR := model.s.Save(hs, ents, sync), real.s.Save(hs, ents, sync)
			if errM != nil || errR != nil {
				t.Fatalf("step %d %s: memory %v, pebble %v", step, what, errM, errR)
			}
		case p < 80:
			snap := g.snapshot()
			what = fmt.Sprintf("SaveSnapshot(slot %d, %d bytes)", snap.Slot, len(snap.Data))
			errM, errR := model.s.SaveSnapshot(snap), real.s.SaveSnapshot(snap)
			if errM != nil || errR != nil {
				t.Fatalf("step %d %s: memory %v, pebble %v", step, what, errM, errR)
			}
		case p < 90:
			what = "restart"
			model.restart(t)
			real.restart(t)
		default:
			what = "crash"
			model.crash(t)
			real.crash(t)
		}
		pebbleTestCompare(t, g.rng, step, what, model.s, real.s)
	}
}

// pebbleTestCompare asserts that every read of got agrees with want: the
// whole state, and a few random Entries ranges (including compacted ones).
func pebbleTestCompare(t *testing.T, rng *rand.Rand, step int, what string, want, got Storage) {
	t.Helper()
	w, g := pebbleTestDump(t, want), pebbleTestDump(t, got)
	if !w.equal(g) {
		t.Fatalf("step %d, after %s:\n memory: %v\n pebble: %v", step, what, w, g)
	}
	for range 3 {
		lo := Slot(rng.IntN(int(w.last) + 4))
		hi := Slot(rng.IntN(int(w.last) + 4))
		we, werr := want.Entries(lo, hi)
		ge, gerr := got.Entries(lo, hi)
		if !errors.Is(gerr, werr) || !storageTestEqualEntries(we, ge) {
			t.Fatalf("step %d, after %s: Entries(%d, %d): memory %s, %v; pebble %s, %v", step, what, lo, hi,
				storageTestDescribe(we), werr, storageTestDescribe(ge), gerr)
		}
	}
}

// TestPebbleCrashConsistency crashes a PebbleStorage on Pebble's crashable
// in-memory FS, keeping a random share of the unsynced blocks, and asserts
// that the reopened store shows exactly the state after some prefix of the
// Saves: never less than the last synced one (invariants 2 and 5: a promise
// or accepted value made durable is never lost), and never half of a Save (a
// Save is one atomic batch). Each Save changes the hard state and writes
// entries at a ballot of its own, so a half-applied Save matches no prefix.
func TestPebbleCrashConsistency(t *testing.T) {
	var lostUnsynced, keptUnsynced int
	for _, seed := range pebbleTestSeeds() {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			defer func() {
				if t.Failed() {
					t.Logf("replay: go test ./paxos -run 'TestPebbleCrashConsistency' -pebble.seed=%d -v", seed)
				}
			}()
			lost, kept := pebbleTestCrashRun(t, seed)
			lostUnsynced += lost
			keptUnsynced += kept
		})
	}
	t.Logf("crashes that lost unsynced Saves: %d; that kept some: %d", lostUnsynced, keptUnsynced)
	if *pebbleSeedFlag == 0 && !t.Failed() && (lostUnsynced == 0 || keptUnsynced == 0) {
		t.Errorf("the crashes never (lost=%d, kept=%d) dropped or kept an unsynced Save: the test explores too little", lostUnsynced, keptUnsynced)
	}
}

func pebbleTestCrashRun(t *testing.T, seed uint64) (lost, kept int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	fs := vfs.NewCrashableMem()
	open := func() (*pebble.DB, *PebbleStorage) {
		db, err := pebble.Open("db", &pebble.Options{FS: fs, Logger: pebbleTestQuietLogger{}})
		if err != nil {
			t.Fatalf("pebble.Open after crash: %v", err)
		}
		s, err := NewPebbleStorage(db)
		if err != nil {
			_ = db.Close()
			t.Fatalf("NewPebbleStorage after crash: %v", err)
		}
		return db, s
	}
	db, s := open()
	defer func() { _ = db.Close() }()
	round := uint64(0)
	for crash := range 4 {
		// states[k] is the state after the first k Saves of this life.
		states := []pebbleTestState{pebbleTestDump(t, s)}
		durable := 0 // states[durable:] are the allowed outcomes of a crash
		// The model starts from what the store shows.
		model := NewMemoryStorage()
		storageTestSaveSnapshot(t, model, states[0].snap)
		storageTestSave(t, model, states[0].hs, true, states[0].entries...)
		if m := pebbleTestDump(t, model); !m.equal(states[0]) {
			t.Fatalf("model rebuilt as %v, store shows %v", m, states[0])
		}
		for range 12 + rng.IntN(12) {
			round++
			if rng.IntN(10) == 0 {
				// Always above the stored snapshot, so it is saved (and synced).
				cur := states[len(states)-1]
				slot := cur.snap.Slot + 1 + Slot(rng.IntN(int(cur.last-cur.snap.Slot)+2))
				snap := Snapshot{Slot: slot, Data: bytes.Repeat([]byte{byte(round)}, rng.IntN(5000))}
				storageTestSaveSnapshot(t, s, snap)
				storageTestSaveSnapshot(t, model, snap)
				states = append(states, pebbleTestDump(t, model))
				durable = len(states) - 1
				continue
			}
			b := MakeBallot(round, 1)
			hs := HardState{Promised: b, Chosen: Slot(rng.IntN(10))}
			var ents []Entry
			for range 1 + rng.IntN(3) {
				// Values of up to 12 KiB so Saves straddle the crash FS's 4 KiB
				// blocks and fill the WAL's 32 KiB blocks (Pebble writes an
				// unsynced record to the file only once its block is full).
				data := make([]byte, rng.IntN(12000))
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
				slot := states[len(states)-1].snap.Slot + 1 + Slot(rng.IntN(30))
				ents = append(ents, Entry{Slot: slot, Ballot: b, Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: b, Seq: round}, Data: data}}}})
			}
			sync := rng.IntN(6) == 0
			storageTestSave(t, s, hs, sync, ents...)
			storageTestSave(t, model, hs, sync, ents...)
			states = append(states, pebbleTestDump(t, model))
			if sync {
				durable = len(states) - 1
			}
		}
		// Keep all, or most, of the unsynced blocks: a torn WAL tail is the
		// interesting case, and with few blocks kept every crash looks alike.
		pct := 100
		if rng.IntN(4) != 0 {
			pct = 50 + rng.IntN(50)
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, uint64(crash)))})
		if err := db.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		fs = crashed
		db, s = open()
		got := pebbleTestDump(t, s)
		match := -1
		for k := len(states) - 1; k >= durable; k-- {
			if states[k].equal(got) {
				match = k
				break
			}
		}
		if match < 0 {
			for k := range states {
				if states[k].equal(got) {
					t.Fatalf("crash %d (keeping %d%% of unsynced blocks): recovered the state after Save %d, but Save %d was synced", crash, pct, k, durable)
				}
			}
			t.Fatalf("crash %d (keeping %d%% of unsynced blocks): recovered state matches no prefix of the Saves (a half-applied batch?):\n got %v\n last synced %v", crash, pct, got, states[durable])
		}
		if match < len(states)-1 {
			lost++
		}
		if match > durable {
			kept++
		}
	}
	return lost, kept
}

// pebbleTestIsSync reports whether op makes file data durable.
func pebbleTestIsSync(op errorfs.Op) bool {
	return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData || op.Kind == errorfs.OpFileSyncTo
}

// pebbleTestLogger records Pebble's log lines; its Fatalf records and
// returns, unlike Pebble's default logger (which exits the process).
type pebbleTestLogger struct {
	mu     sync.Mutex
	fatals []string
}

func (l *pebbleTestLogger) Infof(string, ...any)  {}
func (l *pebbleTestLogger) Errorf(string, ...any) {}
func (l *pebbleTestLogger) Fatalf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.fatals = append(l.fatals, fmt.Sprintf(format, args...))
}

func (l *pebbleTestLogger) fatalLines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.fatals...)
}

// pebbleTestFailingSyncDB opens a DB whose WAL fsyncs fail once the returned
// switch is on.
func pebbleTestFailingSyncDB(t *testing.T, logger pebble.Logger) (*pebble.DB, *atomic.Bool) {
	t.Helper()
	var failing atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if failing.Load() && pebbleTestIsSync(op) && strings.HasSuffix(op.Path, ".log") {
			return errorfs.ErrInjected
		}
		return nil
	})
	db, err := pebble.Open("db", &pebble.Options{FS: errorfs.Wrap(vfs.NewMem(), inj), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return db, &failing
}

// TestPebbleSyncFailure fails the WAL fsync under a synced Save and asserts
// that Save reports it (so the replica stops rather than answering), that the
// store then refuses everything, and pins the Pebble behaviour that the
// design of PebbleStorage.commitLocked rests on.
func TestPebbleSyncFailure(t *testing.T) {
	t.Run("Save", func(t *testing.T) {
		logger := &pebbleTestLogger{}
		db, failing := pebbleTestFailingSyncDB(t, logger)
		// NB: the DB is not closed: its WAL writer has failed, and Close
		// would report (or, for a later write, panic on) that failure.
		s, err := NewPebbleStorage(db)
		if err != nil {
			t.Fatal(err)
		}
		hs1 := HardState{Promised: MakeBallot(1, 1)}
		storageTestSave(t, s, hs1, true, storageTestEntry(1, MakeBallot(1, 1), "ok"))

		failing.Store(true)
		hs2 := HardState{Promised: MakeBallot(2, 1)}
		err = s.Save(hs2, []Entry{storageTestEntry(2, MakeBallot(2, 1), "lost")}, true)
		if !errors.Is(err, ErrPebbleFailed) || !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("Save with a failing fsync = %v; want an error wrapping ErrPebbleFailed and the injected error", err)
		}
		if f := logger.fatalLines(); len(f) != 0 {
			t.Fatalf("Pebble called Logger.Fatalf on the ApplyNoSyncWait path: %q", f)
		}
		// The failure is sticky: nothing read or written is trusted now, even
		// after the disk recovers.
		failing.Store(false)
		if _, err := s.InitialState(); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("InitialState after the failure: %v; want ErrPebbleFailed", err)
		}
		if _, err := s.Entries(1, 10); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("Entries after the failure: %v; want ErrPebbleFailed", err)
		}
		if _, err := s.LastSlot(); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("LastSlot after the failure: %v; want ErrPebbleFailed", err)
		}
		if _, err := s.Snapshot(); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("Snapshot after the failure: %v; want ErrPebbleFailed", err)
		}
		if err := s.Save(hs2, nil, false); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("Save after the failure: %v; want ErrPebbleFailed", err)
		}
		if err := s.SaveSnapshot(Snapshot{Slot: 9}); !errors.Is(err, ErrPebbleFailed) {
			t.Errorf("SaveSnapshot after the failure: %v; want ErrPebbleFailed", err)
		}
		// Pebble after the failure, as the namespace (sharing the DB) sees
		// it: an unsynced write still "succeeds" (it is not durable and never
		// will be), and a synced one goes to Logger.Fatalf, which by default
		// exits the process. Hence: stop the replica on our error.
		if err := db.Set([]byte("n/after"), []byte("x"), pebble.NoSync); err != nil {
			t.Errorf("unsynced write after the failed fsync: %v (Pebble's behaviour changed)", err)
		}
		if err := db.Set([]byte("n/after"), []byte("y"), pebble.Sync); err != nil {
			t.Errorf("synced write after the failed fsync returned %v (Pebble's behaviour changed)", err)
		}
		if f := logger.fatalLines(); len(f) != 1 || !strings.Contains(f[0], "injected error") {
			t.Errorf("synced write after the failed fsync: Fatalf lines %q; want one reporting the injected error", f)
		}
	})

	t.Run("SaveSnapshot", func(t *testing.T) {
		db, failing := pebbleTestFailingSyncDB(t, &pebbleTestLogger{})
		s, err := NewPebbleStorage(db)
		if err != nil {
			t.Fatal(err)
		}
		failing.Store(true)
		if err := s.SaveSnapshot(Snapshot{Slot: 3, Data: []byte("snap")}); !errors.Is(err, ErrPebbleFailed) || !errors.Is(err, errorfs.ErrInjected) {
			t.Fatalf("SaveSnapshot with a failing fsync = %v; want ErrPebbleFailed wrapping the injected error", err)
		}
	})

	// Why commitLocked does not use Batch.Commit(pebble.Sync): on that path
	// Pebble v2 hands the fsync error to Logger.Fatalf and, if Fatalf returns,
	// reports success. With the default logger Fatalf exits the process (safe
	// but abrupt); with a logger that returns, a lost promise would be
	// acknowledged. If a Pebble upgrade changes this, this test says so.
	t.Run("pebble Commit path", func(t *testing.T) {
		logger := &pebbleTestLogger{}
		db, failing := pebbleTestFailingSyncDB(t, logger)
		failing.Store(true)
		b := db.NewBatch()
		_ = b.Set([]byte("p-test"), []byte("x"), nil)
		err := b.Commit(pebble.Sync)
		f := logger.fatalLines()
		if err != nil || len(f) != 1 || !strings.Contains(f[0], "fatal commit error") || !strings.Contains(f[0], "injected error") {
			t.Fatalf("Batch.Commit with a failing fsync: err %v, Fatalf lines %q; Pebble's behaviour changed, revisit PebbleStorage.commitLocked", err, f)
		}
	})
}

// TestPebbleCorruptValues writes damaged values under paxos keys and asserts
// that every read reports ErrPebbleCorrupt and nothing panics.
func TestPebbleCorruptValues(t *testing.T) {
	garbage := [][]byte{nil, {0}, {pebbleFormatVersion}, []byte("definitely not a value"), bytes.Repeat([]byte{0xff}, 40)}
	wantCorrupt := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrPebbleCorrupt) {
			t.Fatalf("%s: %v; want ErrPebbleCorrupt", what, err)
		}
	}
	openCorrupt := func(t *testing.T, db *pebble.DB, what string) {
		t.Helper()
		s, err := NewPebbleStorage(db)
		if err == nil {
			t.Fatalf("%s: NewPebbleStorage succeeded (%+v)", what, s.mu.hs)
		}
		wantCorrupt(t, what, err)
	}

	t.Run("hard state and snapshot descriptor", func(t *testing.T) {
		for _, key := range [][]byte{keyHardState, keySnapshot} {
			for _, g := range garbage {
				_, db := pebbleTestOpen(t)
				if err := db.Set(key, g, pebble.NoSync); err != nil {
					t.Fatal(err)
				}
				openCorrupt(t, db, fmt.Sprintf("%x under %q", g, key))
			}
		}
		// A valid value of the wrong kind.
		_, db := pebbleTestOpen(t)
		_ = db.Set(keyHardState, pebbleEncodeSnapshotDesc(nil, pebbleSnapshotDesc{slot: 1}), pebble.NoSync)
		openCorrupt(t, db, "a snapshot descriptor under the hard state key")
	})

	t.Run("entries", func(t *testing.T) {
		s, db := pebbleTestOpen(t)
		var ents []Entry
		for slot := Slot(1); slot <= 8; slot++ {
			ents = append(ents, storageTestEntry(slot, MakeBallot(1, 1), "data"))
		}
		storageTestSave(t, s, HardState{}, true, ents...)
		for _, g := range garbage {
			_ = db.Set(keyEntry(5), g, pebble.NoSync)
			_, err := s.Entries(1, 9)
			wantCorrupt(t, fmt.Sprintf("Entries over %x", g), err)
			// Ranges that avoid the damage still read.
			storageTestWantEntries(t, s, 6, 9, ents[5:]...)
		}
		// A valid entry under another slot's key.
		e6 := ents[5]
		_ = db.Set(keyEntry(5), pebbleEncodeEntry(nil, &e6), pebble.NoSync)
		_, err := s.Entries(5, 6)
		wantCorrupt(t, "entry 6 under key 5", err)
		// A hard state under an entry key.
		_ = db.Set(keyEntry(5), pebbleEncodeHardState(nil, HardState{Promised: 1}), pebble.NoSync)
		_, err = s.Entries(5, 6)
		wantCorrupt(t, "hard state under an entry key", err)
		// A malformed key inside the entry span.
		_ = db.Set(keyEntry(5), pebbleEncodeEntry(nil, &ents[4]), pebble.NoSync)
		_ = db.Set(append(keyEntry(5), 0), pebbleEncodeEntry(nil, &ents[4]), pebble.NoSync)
		_, err = s.Entries(1, 9)
		wantCorrupt(t, "malformed entry key", err)
	})

	t.Run("entry below the snapshot", func(t *testing.T) {
		s, db := pebbleTestOpen(t)
		storageTestSave(t, s, HardState{}, true, storageTestEntry(9, MakeBallot(1, 1), "x"))
		storageTestSaveSnapshot(t, s, Snapshot{Slot: 5, Data: []byte("s")})
		e := storageTestEntry(4, MakeBallot(1, 1), "zombie")
		_ = db.Set(keyEntry(4), pebbleEncodeEntry(nil, &e), pebble.NoSync)
		openCorrupt(t, db, "an entry below the snapshot")
	})

	t.Run("snapshot chunks", func(t *testing.T) {
		data := make([]byte, 1000)
		for i := range data {
			data[i] = byte(i * 7)
		}
		for _, damage := range []struct {
			name string
			do   func(db *pebble.DB)
		}{
			{"flipped byte", func(db *pebble.DB) {
				v := pebbleEncodeChunk(nil, data[100:200])
				v[10] ^= 1
				_ = db.Set(keySnapshotChunk(7, 1), v, pebble.NoSync)
			}},
			{"missing chunk", func(db *pebble.DB) { _ = db.Delete(keySnapshotChunk(7, 4), pebble.NoSync) }},
			{"missing last chunk", func(db *pebble.DB) { _ = db.Delete(keySnapshotChunk(7, 9), pebble.NoSync) }},
			{"extra chunk", func(db *pebble.DB) {
				_ = db.Set(keySnapshotChunk(7, 10), pebbleEncodeChunk(nil, []byte("more")), pebble.NoSync)
			}},
			{"swapped chunks", func(db *pebble.DB) {
				_ = db.Set(keySnapshotChunk(7, 2), pebbleEncodeChunk(nil, data[300:400]), pebble.NoSync)
				_ = db.Set(keySnapshotChunk(7, 3), pebbleEncodeChunk(nil, data[200:300]), pebble.NoSync)
			}},
			{"empty chunk", func(db *pebble.DB) { _ = db.Set(keySnapshotChunk(7, 2), pebbleEncodeChunk(nil, nil), pebble.NoSync) }},
			{"malformed chunk key", func(db *pebble.DB) {
				lo, _ := keySnapshotChunksOf(7)
				_ = db.Set(append(lo[:len(lo):len(lo)], 1), pebbleEncodeChunk(nil, []byte("x")), pebble.NoSync)
			}},
		} {
			t.Run(damage.name, func(t *testing.T) {
				s, db := pebbleTestOpen(t)
				s.chunkSize = 100
				storageTestSaveSnapshot(t, s, Snapshot{Slot: 7, Data: data})
				storageTestWantSnapshot(t, s, Snapshot{Slot: 7, Data: data})
				damage.do(db)
				_, err := s.Snapshot()
				wantCorrupt(t, "Snapshot", err)
			})
		}
	})
}

// TestPebbleDecodersRejectDamage damages valid encodings one byte at a time
// and by truncation: the checksum must catch every case, and random bytes
// must never decode or panic.
func TestPebbleDecodersRejectDamage(t *testing.T) {
	e := storageTestEntry(1<<40, MakeBallot(77, 3), "alpha", "", "gamma")
	values := map[string][]byte{
		"hard state": pebbleEncodeHardState(nil, HardState{Promised: MakeBallot(5, 2), Chosen: 300}),
		"rebuilding": pebbleEncodeHardState(nil, HardState{Promised: MakeBallot(5, 2), Chosen: 300, Rebuilding: true}),
		"entry":      pebbleEncodeEntry(nil, &e),
		"snapshot":   pebbleEncodeSnapshotDesc(nil, pebbleSnapshotDesc{slot: 9, size: 10, chunks: 1, crc: 0xdeadbeef}),
		"chunk":      pebbleEncodeChunk(nil, []byte("chunk of data")),
	}
	decode := func(kind string, v []byte) error {
		var err error
		switch kind {
		case "hard state", "rebuilding":
			_, err = pebbleDecodeHardState(v)
		case "entry":
			_, err = pebbleDecodeEntry(v)
		case "snapshot":
			_, err = pebbleDecodeSnapshotDesc(v)
		case "chunk":
			_, err = pebbleDecodeChunk(v)
		}
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for kind, v := range values {
		if err := decode(kind, v); err != nil {
			t.Fatalf("%s: valid value does not decode: %v", kind, err)
		}
		for i := range v {
			for _, x := range []byte{1, 0x80, 0xff} {
				d := bytes.Clone(v)
				d[i] ^= x
				if err := decode(kind, d); !errors.Is(err, ErrPebbleCorrupt) {
					t.Errorf("%s with byte %d ^ %#x: %v; want ErrPebbleCorrupt", kind, i, x, err)
				}
			}
		}
		for n := range len(v) {
			if err := decode(kind, v[:n]); !errors.Is(err, ErrPebbleCorrupt) {
				t.Errorf("%s truncated to %d bytes: %v; want ErrPebbleCorrupt", kind, n, err)
			}
		}
		if err := decode(kind, append(bytes.Clone(v), 0)); !errors.Is(err, ErrPebbleCorrupt) {
			t.Errorf("%s with a trailing byte: %v; want ErrPebbleCorrupt", kind, err)
		}
		for range 2000 {
			g := make([]byte, rng.IntN(64))
			for i := range g {
				g[i] = byte(rng.Uint32())
			}
			if err := decode(kind, g); !errors.Is(err, ErrPebbleCorrupt) {
				t.Fatalf("%s: random bytes %x: %v; want ErrPebbleCorrupt", kind, g, err)
			}
		}
	}
}

// TestPebbleHardStateFlags: a hard state without flags keeps the encoding it
// had before flags existed; the Rebuilding flag round-trips; a flags field
// stored as zero or with an unknown bit is corrupt.
func TestPebbleHardStateFlags(t *testing.T) {
	hs := HardState{Promised: MakeBallot(5, 2), Chosen: 300}
	plain := pebbleEncodeHardState(nil, hs)
	var legacy []byte
	legacy = pebbleSealStart(legacy, keyTagHardState)
	legacy = binary.AppendUvarint(legacy, uint64(hs.Promised))
	legacy = binary.AppendUvarint(legacy, uint64(hs.Chosen))
	legacy = pebbleSealEnd(legacy, 0)
	if !bytes.Equal(plain, legacy) {
		t.Fatalf("hard state without flags encodes as %x, before flags it was %x", plain, legacy)
	}
	rb := hs
	rb.Rebuilding = true
	got, err := pebbleDecodeHardState(pebbleEncodeHardState(nil, rb))
	if err != nil || got != rb {
		t.Fatalf("rebuilding hard state round-trips to %+v, %v", got, err)
	}
	for _, flags := range []uint64{0, 2, 1 << 40} {
		v := pebbleSealStart(nil, keyTagHardState)
		v = binary.AppendUvarint(v, uint64(hs.Promised))
		v = binary.AppendUvarint(v, uint64(hs.Chosen))
		v = binary.AppendUvarint(v, flags)
		v = pebbleSealEnd(v, 0)
		if _, err := pebbleDecodeHardState(v); !errors.Is(err, ErrPebbleCorrupt) {
			t.Errorf("flags %#x: %v; want ErrPebbleCorrupt", flags, err)
		}
	}
}

// FuzzPebbleDecode feeds arbitrary payloads (behind a valid header and
// checksum, so the fuzzer reaches the field decoders) to every decoder: each
// either reports ErrPebbleCorrupt or returns a value that re-encodes to the
// same bytes.
func FuzzPebbleDecode(f *testing.F) {
	payload := func(v []byte) []byte { return v[pebbleHeaderLen : len(v)-pebbleTrailerLen] }
	e := storageTestEntry(12, MakeBallot(3, 1), "x", "", "yz")
	f.Add(byte(keyTagEntry), payload(pebbleEncodeEntry(nil, &e)))
	f.Add(byte(keyTagEntry), payload(pebbleEncodeEntry(nil, &Entry{Slot: 1})))
	f.Add(byte(keyTagHardState), payload(pebbleEncodeHardState(nil, HardState{Promised: 99, Chosen: 4})))
	f.Add(byte(keyTagHardState), payload(pebbleEncodeHardState(nil, HardState{Promised: 99, Chosen: 4, Rebuilding: true})))
	f.Add(byte(keyTagSnapshot), payload(pebbleEncodeSnapshotDesc(nil, pebbleSnapshotDesc{slot: 5, size: 3, chunks: 1, crc: 7})))
	f.Add(byte(keyTagSnapshotChunk), []byte("abc"))
	f.Fuzz(func(t *testing.T, kind byte, p []byte) {
		v := pebbleSealStart(nil, kind)
		v = append(v, p...)
		v = pebbleSealEnd(v, 0)
		var re []byte
		var err error
		switch kind {
		case keyTagEntry:
			var e Entry
			if e, err = pebbleDecodeEntry(v); err == nil {
				re = pebbleEncodeEntry(nil, &e)
				if len(re) != pebbleEntryLen(&e) {
					t.Fatalf("pebbleEntryLen %d, encoding %d bytes", pebbleEntryLen(&e), len(re))
				}
			}
		case keyTagHardState:
			var hs HardState
			if hs, err = pebbleDecodeHardState(v); err == nil {
				re = pebbleEncodeHardState(nil, hs)
			}
		case keyTagSnapshot:
			var d pebbleSnapshotDesc
			if d, err = pebbleDecodeSnapshotDesc(v); err == nil {
				re = pebbleEncodeSnapshotDesc(nil, d)
			}
		case keyTagSnapshotChunk:
			var c []byte
			if c, err = pebbleDecodeChunk(v); err == nil {
				re = pebbleEncodeChunk(nil, c)
			}
		default:
			// A value of unknown kind decodes as nothing.
			_, err1 := pebbleDecodeEntry(v)
			_, err2 := pebbleDecodeHardState(v)
			_, err3 := pebbleDecodeSnapshotDesc(v)
			_, err4 := pebbleDecodeChunk(v)
			for _, err := range []error{err1, err2, err3, err4} {
				if !errors.Is(err, ErrPebbleCorrupt) {
					t.Fatalf("value of kind %q: %v; want ErrPebbleCorrupt", kind, err)
				}
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrPebbleCorrupt) {
				t.Fatalf("decode error %v does not wrap ErrPebbleCorrupt", err)
			}
			return
		}
		if !bytes.Equal(re, v) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", v, re)
		}
	})
}

// TestPebbleSharedDB asserts that the store touches only keys beginning with
// 'p': namespace keys and any other owner's keys survive every operation,
// including the range deletions of SaveSnapshot at the largest slot.
func TestPebbleSharedDB(t *testing.T) {
	inst := storageTestNewPebble(t, 16)
	ps := inst.s.(*PebbleStorage)
	foreign := map[string]string{
		"n":                 "namespace root",
		"n/a/b":             "namespace node",
		"n\xff\xff\xff\xff": "namespace tail",
		"o":                 "between n and p",
		"q":                 "after p",
		"\x00":              "first",
		"\xff\xff":          "last",
	}
	for k, v := range foreign {
		if err := ps.db.Set([]byte(k), []byte(v), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	storageTestSave(t, inst.s, HardState{Promised: MakeBallot(1, 1)}, true, storageTestEntry(3, MakeBallot(1, 1), "a"), storageTestEntry(^Slot(0), MakeBallot(1, 1), "max"))
	storageTestSaveSnapshot(t, inst.s, Snapshot{Slot: 10, Data: bytes.Repeat([]byte("s"), 100)})
	storageTestSaveSnapshot(t, inst.s, Snapshot{Slot: ^Slot(0), Data: bytes.Repeat([]byte("t"), 100)})
	storageTestWantLastSlot(t, inst.s, ^Slot(0))
	storageTestWantCompacted(t, inst.s, ^Slot(0)-1, ^Slot(0))
	inst.restart(t)
	ps = inst.s.(*PebbleStorage)
	storageTestWantSnapshot(t, inst.s, Snapshot{Slot: ^Slot(0), Data: bytes.Repeat([]byte("t"), 100)})

	it, err := ps.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	seen := map[string]bool{}
	for valid := it.First(); valid; valid = it.Next() {
		k := string(it.Key())
		if want, ok := foreign[k]; ok {
			seen[k] = true
			if string(it.Value()) != want {
				t.Errorf("foreign key %q = %q, want %q", k, it.Value(), want)
			}
			continue
		}
		if k[0] != keyPrefix {
			t.Errorf("paxos wrote key %q outside its 'p' span", k)
		}
	}
	for k := range foreign {
		if !seen[k] {
			t.Errorf("foreign key %q was deleted", k)
		}
	}
}

func TestPebbleInvalidInput(t *testing.T) {
	if _, err := NewPebbleStorage(nil); !errors.Is(err, ErrPebbleInvalid) {
		t.Fatalf("NewPebbleStorage(nil) = %v; want ErrPebbleInvalid", err)
	}
	s, _ := pebbleTestOpen(t)
	hs := HardState{Promised: MakeBallot(1, 1)}
	storageTestSave(t, s, hs, true, storageTestEntry(1, MakeBallot(1, 1), "a"))
	err := s.Save(HardState{Promised: MakeBallot(2, 1)}, []Entry{storageTestEntry(2, MakeBallot(2, 1), "b"), {Slot: 0}}, true)
	if !errors.Is(err, ErrPebbleInvalid) {
		t.Fatalf("Save with a slot-0 entry = %v; want ErrPebbleInvalid", err)
	}
	// Nothing changed, and the store is still usable.
	storageTestWantHardState(t, s, hs)
	storageTestWantEntries(t, s, 1, 10, storageTestEntry(1, MakeBallot(1, 1), "a"))
	storageTestWantLastSlot(t, s, 1)
	storageTestSave(t, s, HardState{}, true, storageTestEntry(2, MakeBallot(2, 1), "b"))
	storageTestWantLastSlot(t, s, 2)
}

// TestPebbleOwnership asserts that Save copies its arguments and that every
// read returns values the caller may keep.
func TestPebbleOwnership(t *testing.T) {
	s, _ := pebbleTestOpen(t)
	data := []byte("original")
	ents := []Entry{{Slot: 1, Ballot: 1, Value: Value{Cmds: []Command{{Data: data}}}}}
	storageTestSave(t, s, HardState{}, true, ents...)
	snapData := []byte("snapshot original")
	s.chunkSize = 4
	storageTestSaveSnapshot(t, s, Snapshot{Slot: 5, Data: snapData})
	storageTestSave(t, s, HardState{}, true, Entry{Slot: 6, Ballot: 1, Value: Value{Cmds: []Command{{Data: data}}}})
	copy(data, "XXXXXXXX")
	copy(snapData, "XXXXXXXXXXXXXXXXX")
	ents[0].Value.Cmds[0].Data = nil

	got1, err := s.Entries(6, 7)
	if err != nil {
		t.Fatal(err)
	}
	if string(got1[0].Value.Cmds[0].Data) != "original" {
		t.Fatalf("stored entry changed with the caller's buffer: %q", got1[0].Value.Cmds[0].Data)
	}
	copy(got1[0].Value.Cmds[0].Data, "mutated!")
	storageTestWantEntries(t, s, 6, 7, Entry{Slot: 6, Ballot: 1, Value: Value{Cmds: []Command{{Data: []byte("original")}}}})
	snap1, _ := s.Snapshot()
	copy(snap1.Data, "YYYY")
	storageTestWantSnapshot(t, s, Snapshot{Slot: 5, Data: []byte("snapshot original")})
}

// TestPebbleConcurrentReaders runs readers against a writer that saves slots
// 1, 2, 3... and now and then compacts below the newest: every read must see
// whole writes, so the entries above a snapshot a reader saw are either
// compacted by a newer one or exactly the contiguous run from the snapshot
// slot up. Most useful under -race.
func TestPebbleConcurrentReaders(t *testing.T) {
	s, _ := pebbleTestOpen(t)
	s.chunkSize = 8
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 4)
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				snap, err := s.Snapshot()
				if err != nil {
					errc <- err
					return
				}
				if len(snap.Data) != int(snap.Slot)%50 {
					errc <- fmt.Errorf("snapshot at %d has %d bytes", snap.Slot, len(snap.Data))
					return
				}
				ents, err := s.Entries(snap.Slot+1, ^Slot(0))
				if errors.Is(err, ErrCompacted) {
					continue // a newer snapshot arrived in between
				}
				if err != nil {
					errc <- err
					return
				}
				for k, e := range ents {
					if e.Slot != snap.Slot+1+Slot(k) {
						errc <- fmt.Errorf("above snapshot %d, entry %d is for slot %d", snap.Slot, k, e.Slot)
						return
					}
				}
			}
		})
	}
	for i := Slot(1); i <= 200; i++ {
		storageTestSave(t, s, HardState{Promised: Ballot(i)}, false, storageTestEntry(i, Ballot(i), "x"))
		if i%10 == 0 {
			storageTestSaveSnapshot(t, s, Snapshot{Slot: i - 5, Data: make([]byte, int(i-5)%50)})
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

// BenchmarkPebbleSave saves one entry of 1, 16 or 256 commands of 64 bytes
// plus a hard state per Save, on the real disk (b.TempDir), with and without
// fsync.
func BenchmarkPebbleSave(b *testing.B) {
	for _, sync := range []bool{true, false} {
		for _, n := range []int{1, 16, 256} {
			name := fmt.Sprintf("sync=%v/cmds=%d", sync, n)
			b.Run(name, func(b *testing.B) {
				db, err := pebble.Open(b.TempDir(), &pebble.Options{Logger: pebbleTestQuietLogger{}})
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				s, err := NewPebbleStorage(db)
				if err != nil {
					b.Fatal(err)
				}
				ballot := MakeBallot(1, 1)
				cmds := make([]Command, n)
				for i := range cmds {
					cmds[i] = Command{ID: ProposalID{Ballot: ballot, Seq: uint64(i)}, Data: bytes.Repeat([]byte{byte(i)}, 64)}
				}
				ents := []Entry{{Ballot: ballot, Value: Value{Cmds: cmds}}}
				b.SetBytes(int64(n * 64))
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					ents[0].Slot = Slot(i + 1)
					if err := s.Save(HardState{Promised: ballot, Chosen: Slot(i)}, ents, sync); err != nil {
						b.Fatal(err)
					}
				}
				secs := b.Elapsed().Seconds()
				b.ReportMetric(float64(b.N)/secs, "saves/s")
				b.ReportMetric(float64(b.N*n)/secs, "cmds/s")
			})
		}
	}
}

// pebbleTestQuietLogger drops Pebble's informational lines; its Fatalf
// never returns (it panics, where Pebble's default exits the process).
type pebbleTestQuietLogger struct{}

func (pebbleTestQuietLogger) Infof(string, ...any)  {}
func (pebbleTestQuietLogger) Errorf(string, ...any) {}
func (pebbleTestQuietLogger) Fatalf(format string, args ...any) {
	panic("pebble fatal: " + fmt.Sprintf(format, args...))
}

// BenchmarkPebbleEncodeEntry compares the store's value encoding with
// msgpack for an entry of 16 commands of 64 bytes (encode, then decode).
func BenchmarkPebbleEncodeEntry(b *testing.B) {
	ballot := MakeBallot(1, 1)
	e := Entry{Slot: 123456, Ballot: ballot}
	for i := range 16 {
		e.Value.Cmds = append(e.Value.Cmds, Command{ID: ProposalID{Ballot: ballot, Seq: uint64(i)}, Data: bytes.Repeat([]byte{byte(i)}, 64)})
	}
	b.Run("pebble", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, pebbleEntryLen(&e))
		for range b.N {
			v := pebbleEncodeEntry(buf[:0], &e)
			if _, err := pebbleDecodeEntry(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("msgpack", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			v, err := msgpack.Marshal(&e)
			if err != nil {
				b.Fatal(err)
			}
			var d Entry
			if err := msgpack.Unmarshal(v, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
}
