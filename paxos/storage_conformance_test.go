package paxos

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// The Storage/Saver contract, checked against every LogStore we have:
// MemoryStorage (the reference) and PebbleStorage. Each check runs on the
// live store and again after a clean restart.

// storageTestInstance is one LogStore under test, with the two ways its
// process can end.
type storageTestInstance struct {
	s LogStore
	// restart replaces s by a store reopened after a clean shutdown:
	// everything written survives.
	restart func(t *testing.T)
	// crash replaces s by a store reopened after a power failure: writes not
	// made durable by a sync are lost.
	crash func(t *testing.T)
}

// storageTestKinds lists the LogStore implementations under test.
var storageTestKinds = []struct {
	name string
	new  func(t *testing.T) *storageTestInstance
}{
	{"memory", storageTestNewMemory},
	{"pebble", func(t *testing.T) *storageTestInstance { return storageTestNewPebble(t, 64) }},
}

func storageTestNewMemory(t *testing.T) *storageTestInstance {
	m := NewMemoryStorage()
	return &storageTestInstance{
		s: m,
		// A clean shutdown makes every write durable (Pebble's Close syncs
		// its WAL); a synced empty Save does the same to a MemoryStorage.
		restart: func(t *testing.T) { storageTestSave(t, m, HardState{}, true) },
		crash:   func(*testing.T) { m.Crash() },
	}
}

// storageTestNewPebble opens a PebbleStorage on a crashable in-memory FS.
// chunkSize (if not zero) overrides the snapshot chunk size so that small
// snapshots span several chunks.
func storageTestNewPebble(t *testing.T, chunkSize int) *storageTestInstance {
	t.Helper()
	fs := vfs.NewCrashableMem()
	inst := &storageTestInstance{}
	var db *pebble.DB
	open := func(t *testing.T) {
		t.Helper()
		var err error
		db, err = pebble.Open("db", &pebble.Options{FS: fs, Logger: pebbleTestQuietLogger{}})
		if err != nil {
			t.Fatalf("pebble.Open: %v", err)
		}
		ps, err := NewPebbleStorage(db)
		if err != nil {
			t.Fatalf("NewPebbleStorage: %v", err)
		}
		if chunkSize != 0 {
			ps.chunkSize = chunkSize
		}
		inst.s = ps
	}
	open(t)
	inst.restart = func(t *testing.T) {
		t.Helper()
		if err := db.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		open(t)
	}
	inst.crash = func(t *testing.T) {
		t.Helper()
		crashed := fs.CrashClone(vfs.CrashCloneCfg{})
		if err := db.Close(); err != nil {
			t.Fatalf("close: %v", err)
		}
		fs = crashed
		open(t)
	}
	t.Cleanup(func() { _ = db.Close() })
	return inst
}

// storageTestEach runs fn as a subtest for every LogStore kind.
func storageTestEach(t *testing.T, fn func(t *testing.T, inst *storageTestInstance)) {
	for _, k := range storageTestKinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k.new(t)) })
	}
}

// storageTestCheckAndRestart runs check, restarts the store cleanly and runs
// check again.
func storageTestCheckAndRestart(t *testing.T, inst *storageTestInstance, check func(t *testing.T, s Storage)) {
	t.Helper()
	check(t, inst.s)
	inst.restart(t)
	check(t, inst.s)
}

func storageTestEntry(slot Slot, ballot Ballot, data ...string) Entry {
	e := Entry{Slot: slot, Ballot: ballot}
	for i, d := range data {
		e.Value.Cmds = append(e.Value.Cmds, Command{ID: ProposalID{Ballot: ballot, Seq: uint64(i)}, Data: []byte(d)})
	}
	return e
}

func storageTestSave(t *testing.T, s Saver, hs HardState, sync bool, ents ...Entry) {
	t.Helper()
	if err := s.Save(hs, ents, sync); err != nil {
		t.Fatalf("Save(%+v, %d entries, sync=%v): %v", hs, len(ents), sync, err)
	}
}

func storageTestSaveSnapshot(t *testing.T, s Saver, snap Snapshot) {
	t.Helper()
	if err := s.SaveSnapshot(snap); err != nil {
		t.Fatalf("SaveSnapshot(slot %d): %v", snap.Slot, err)
	}
}

// storageTestEqualEntries compares entry lists, treating nil and empty
// slices alike (the stores may differ there; the contract does not care).
func storageTestEqualEntries(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Slot != b[i].Slot || a[i].Ballot != b[i].Ballot || len(a[i].Value.Cmds) != len(b[i].Value.Cmds) {
			return false
		}
		for j := range a[i].Value.Cmds {
			ca, cb := a[i].Value.Cmds[j], b[i].Value.Cmds[j]
			if ca.ID != cb.ID || !bytes.Equal(ca.Data, cb.Data) {
				return false
			}
		}
	}
	return true
}

func storageTestDescribe(ents []Entry) string {
	var b bytes.Buffer
	b.WriteString("[")
	for i, e := range ents {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d@%s", e.Slot, e.Ballot)
		for _, c := range e.Value.Cmds {
			if len(c.Data) <= 16 {
				fmt.Fprintf(&b, ":%q", c.Data)
			} else {
				fmt.Fprintf(&b, ":%q...(%d bytes, crc %08x)", c.Data[:8], len(c.Data), crc32.ChecksumIEEE(c.Data))
			}
		}
	}
	b.WriteString("]")
	return b.String()
}

func storageTestWantEntries(t *testing.T, s Storage, lo, hi Slot, want ...Entry) {
	t.Helper()
	got, err := s.Entries(lo, hi)
	if err != nil {
		t.Fatalf("Entries(%d, %d): %v", lo, hi, err)
	}
	if !storageTestEqualEntries(got, want) {
		t.Fatalf("Entries(%d, %d) = %s, want %s", lo, hi, storageTestDescribe(got), storageTestDescribe(want))
	}
}

func storageTestWantCompacted(t *testing.T, s Storage, lo, hi Slot) {
	t.Helper()
	if got, err := s.Entries(lo, hi); !errors.Is(err, ErrCompacted) {
		t.Fatalf("Entries(%d, %d) = %s, %v; want ErrCompacted", lo, hi, storageTestDescribe(got), err)
	}
}

func storageTestWantHardState(t *testing.T, s Storage, want HardState) {
	t.Helper()
	got, err := s.InitialState()
	if err != nil || got != want {
		t.Fatalf("InitialState() = %+v, %v; want %+v", got, err, want)
	}
}

func storageTestWantLastSlot(t *testing.T, s Storage, want Slot) {
	t.Helper()
	got, err := s.LastSlot()
	if err != nil || got != want {
		t.Fatalf("LastSlot() = %d, %v; want %d", got, err, want)
	}
}

func storageTestWantSnapshot(t *testing.T, s Storage, want Snapshot) {
	t.Helper()
	got, err := s.Snapshot()
	if err != nil || got.Slot != want.Slot || !bytes.Equal(got.Data, want.Data) {
		t.Fatalf("Snapshot() = slot %d, %d bytes, %v; want slot %d, %d bytes", got.Slot, len(got.Data), err, want.Slot, len(want.Data))
	}
}

func TestStorageTestEmpty(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, HardState{})
			storageTestWantSnapshot(t, s, Snapshot{})
			storageTestWantLastSlot(t, s, 0)
			storageTestWantEntries(t, s, 0, 100)
			storageTestWantEntries(t, s, 1, ^Slot(0))
		})
	})
}

func TestStorageTestHardState(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		// Entries alone leave the hard state empty.
		storageTestSave(t, inst.s, HardState{}, true, storageTestEntry(1, MakeBallot(1, 1), "a"))
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, HardState{})
		})
		hs := HardState{Promised: MakeBallot(3, 2), Chosen: 1}
		storageTestSave(t, inst.s, hs, true)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, hs)
		})
		// An empty hard state in a later Save keeps the stored one.
		storageTestSave(t, inst.s, HardState{}, true, storageTestEntry(2, MakeBallot(3, 2), "b"))
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, hs)
		})
		// A new hard state replaces the old one, even if fields go down (the
		// store does not judge the core).
		hs2 := HardState{Promised: MakeBallot(4, 1), Chosen: 0}
		storageTestSave(t, inst.s, hs2, false)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, hs2)
		})
		// Large values round-trip.
		hs3 := HardState{Promised: MakeBallot(1<<48-1, MaxID), Chosen: ^Slot(0) - 1}
		storageTestSave(t, inst.s, hs3, true)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantHardState(t, s, hs3)
		})
	})
}

func TestStorageTestOrderingAndHoles(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		b := MakeBallot(1, 1)
		e := map[Slot]Entry{}
		for _, slot := range []Slot{5, 1, 300, 3, 10, 256, 7} {
			e[slot] = storageTestEntry(slot, b, fmt.Sprintf("v%d", slot), "", "x")
		}
		storageTestSave(t, inst.s, HardState{}, false, e[5], e[1], e[300])
		storageTestSave(t, inst.s, HardState{}, true, e[3], e[10], e[256], e[7])
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantEntries(t, s, 0, 1000, e[1], e[3], e[5], e[7], e[10], e[256], e[300])
			storageTestWantEntries(t, s, 1, 301, e[1], e[3], e[5], e[7], e[10], e[256], e[300])
			// hi is exclusive, lo inclusive; holes are absent.
			storageTestWantEntries(t, s, 3, 7, e[3], e[5])
			storageTestWantEntries(t, s, 4, 5)
			storageTestWantEntries(t, s, 11, 256)
			storageTestWantEntries(t, s, 255, 257, e[256])
			// An empty or inverted range is empty.
			storageTestWantEntries(t, s, 5, 5)
			storageTestWantEntries(t, s, 7, 3)
			storageTestWantEntries(t, s, 301, ^Slot(0))
			storageTestWantLastSlot(t, s, 300)
		})
	})
}

func TestStorageTestOverwrite(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		old := storageTestEntry(4, MakeBallot(1, 1), "old", "value")
		storageTestSave(t, inst.s, HardState{}, true, old, storageTestEntry(5, MakeBallot(1, 1), "five"))
		// A higher ballot's value replaces the entry in the same slot,
		// including one with fewer commands (a no-op).
		repl := storageTestEntry(4, MakeBallot(2, 3))
		storageTestSave(t, inst.s, HardState{Promised: MakeBallot(2, 3)}, true, repl)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantEntries(t, s, 4, 5, repl)
			storageTestWantEntries(t, s, 5, 6, storageTestEntry(5, MakeBallot(1, 1), "five"))
		})
		// Within one Save, the later entry for a slot wins.
		a, b := storageTestEntry(9, MakeBallot(3, 1), "first"), storageTestEntry(9, MakeBallot(3, 1), "second")
		storageTestSave(t, inst.s, HardState{}, true, a, b)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantEntries(t, s, 9, 10, b)
			storageTestWantLastSlot(t, s, 9)
		})
	})
}

func TestStorageTestSnapshotCompacts(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		var ents []Entry
		for slot := Slot(1); slot <= 10; slot++ {
			ents = append(ents, storageTestEntry(slot, MakeBallot(1, 2), fmt.Sprintf("cmd%d", slot)))
		}
		storageTestSave(t, inst.s, HardState{Promised: MakeBallot(1, 2), Chosen: 3}, true, ents...)
		data := bytes.Repeat([]byte("snapshot-data:"), 40) // several chunks in PebbleStorage
		snap := Snapshot{Slot: 5, Data: data}
		storageTestSaveSnapshot(t, inst.s, snap)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantSnapshot(t, s, snap)
			// Chosen rises to the snapshot slot.
			storageTestWantHardState(t, s, HardState{Promised: MakeBallot(1, 2), Chosen: 5})
			storageTestWantCompacted(t, s, 0, 20)
			storageTestWantCompacted(t, s, 1, 20)
			storageTestWantCompacted(t, s, 5, 6)
			storageTestWantCompacted(t, s, 5, 5)
			storageTestWantEntries(t, s, 6, 20, ents[5:]...)
			storageTestWantLastSlot(t, s, 10)
		})
		// An entry at or below the snapshot slot is no longer stored.
		storageTestSave(t, inst.s, HardState{}, true, storageTestEntry(4, MakeBallot(2, 2), "late"), storageTestEntry(5, MakeBallot(2, 2), "late"))
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantCompacted(t, s, 4, 6)
			storageTestWantEntries(t, s, 6, 20, ents[5:]...)
		})
		// A later snapshot replaces the earlier one and compacts further; a
		// hard state already past it keeps its Chosen.
		storageTestSave(t, inst.s, HardState{Promised: MakeBallot(1, 2), Chosen: 9}, true)
		snap2 := Snapshot{Slot: 8, Data: []byte("second")}
		storageTestSaveSnapshot(t, inst.s, snap2)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantSnapshot(t, s, snap2)
			storageTestWantHardState(t, s, HardState{Promised: MakeBallot(1, 2), Chosen: 9})
			storageTestWantCompacted(t, s, 8, 20)
			storageTestWantEntries(t, s, 9, 20, ents[8:]...)
		})
	})
}

func TestStorageTestOlderSnapshotIgnored(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		var ents []Entry
		for slot := Slot(1); slot <= 12; slot++ {
			ents = append(ents, storageTestEntry(slot, MakeBallot(1, 1), "c"))
		}
		storageTestSave(t, inst.s, HardState{Promised: MakeBallot(1, 1)}, true, ents...)
		snap := Snapshot{Slot: 8, Data: []byte("eight")}
		storageTestSaveSnapshot(t, inst.s, snap)
		// Older, equal and empty snapshots change nothing.
		storageTestSaveSnapshot(t, inst.s, Snapshot{Slot: 6, Data: []byte("six")})
		storageTestSaveSnapshot(t, inst.s, Snapshot{Slot: 8, Data: []byte("eight again")})
		storageTestSaveSnapshot(t, inst.s, Snapshot{})
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantSnapshot(t, s, snap)
			storageTestWantHardState(t, s, HardState{Promised: MakeBallot(1, 1), Chosen: 8})
			storageTestWantCompacted(t, s, 7, 20)
			storageTestWantEntries(t, s, 9, 20, ents[8:]...)
			storageTestWantLastSlot(t, s, 12)
		})
	})
}

func TestStorageTestSnapshotBeyondLog(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		storageTestSave(t, inst.s, HardState{}, true, storageTestEntry(1, MakeBallot(1, 1), "a"), storageTestEntry(3, MakeBallot(1, 1), "c"))
		// A snapshot received from a peer may lie beyond the local log; an
		// empty one is allowed too.
		snap := Snapshot{Slot: 40}
		storageTestSaveSnapshot(t, inst.s, snap)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantSnapshot(t, s, snap)
			storageTestWantLastSlot(t, s, 40)
			storageTestWantCompacted(t, s, 3, 50)
			storageTestWantEntries(t, s, 41, 50)
			storageTestWantHardState(t, s, HardState{Chosen: 40})
		})
		e := storageTestEntry(42, MakeBallot(2, 1), "after")
		storageTestSave(t, inst.s, HardState{}, true, e)
		storageTestCheckAndRestart(t, inst, func(t *testing.T, s Storage) {
			storageTestWantEntries(t, s, 41, 50, e)
			storageTestWantLastSlot(t, s, 42)
		})
	})
}

func TestStorageTestSyncedSurvivesCrash(t *testing.T) {
	storageTestEach(t, func(t *testing.T, inst *storageTestInstance) {
		hs1 := HardState{Promised: MakeBallot(1, 1)}
		e1 := storageTestEntry(1, MakeBallot(1, 1), "synced")
		storageTestSave(t, inst.s, hs1, true, e1)
		hs2 := HardState{Promised: MakeBallot(2, 1)}
		e2 := storageTestEntry(2, MakeBallot(2, 1), "unsynced")
		storageTestSave(t, inst.s, hs2, false, e2)
		inst.crash(t)
		// The synced Save survives; the unsynced one is all there or all gone.
		got, err := inst.s.InitialState()
		if err != nil {
			t.Fatal(err)
		}
		ents, err := inst.s.Entries(1, 10)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case got == hs1 && storageTestEqualEntries(ents, []Entry{e1}):
		case got == hs2 && storageTestEqualEntries(ents, []Entry{e1, e2}):
		default:
			t.Fatalf("after crash: hard state %+v, entries %s; want the first Save, or both", got, storageTestDescribe(ents))
		}

		// A synced Save with nothing in it still makes earlier unsynced
		// writes durable.
		hs3 := HardState{Promised: MakeBallot(3, 1)}
		e3 := storageTestEntry(3, MakeBallot(3, 1), "later synced")
		storageTestSave(t, inst.s, hs3, false, e3)
		storageTestSave(t, inst.s, HardState{}, true)
		inst.crash(t)
		storageTestWantHardState(t, inst.s, hs3)
		storageTestWantEntries(t, inst.s, 3, 4, e3)

		// A snapshot is durable at once.
		snap := Snapshot{Slot: 2, Data: []byte("snap")}
		storageTestSaveSnapshot(t, inst.s, snap)
		inst.crash(t)
		storageTestWantSnapshot(t, inst.s, snap)
		storageTestWantEntries(t, inst.s, 3, 4, e3)
	})
}
