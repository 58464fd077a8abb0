package paxos

import "sort"

// MemoryStorage is an in-memory LogStore for tests and the simulator. It
// models a disk with a volatile write cache: writes saved without sync are
// visible at once but are lost by Crash, unless a later synced write made them
// durable (as a write-ahead log would). It is not safe for concurrent use.
type MemoryStorage struct {
	durable  memState // what survives Crash
	volatile memState // what readers see

	// syncs counts the writes made durable. The simulator keeps the
	// durable states of the last keep of them (oldest first) to model a
	// damaged log that lost its most recent synced writes.
	syncs   uint64
	keep    int
	history []memSynced
}

// memSynced is the durable state after sync number seq.
type memSynced struct {
	seq   uint64
	state memState
}

type memState struct {
	hs      HardState
	snap    Snapshot
	entries map[Slot]Entry
}

func (s memState) clone() memState {
	c := memState{hs: s.hs, snap: s.snap, entries: make(map[Slot]Entry, len(s.entries))}
	for k, v := range s.entries {
		c.entries[k] = v
	}
	return c
}

// NewMemoryStorage returns an empty MemoryStorage.
func NewMemoryStorage() *MemoryStorage {
	return &MemoryStorage{
		durable:  memState{entries: map[Slot]Entry{}},
		volatile: memState{entries: map[Slot]Entry{}},
	}
}

// InitialState implements Storage.
func (m *MemoryStorage) InitialState() (HardState, error) { return m.volatile.hs, nil }

// Snapshot implements Storage.
func (m *MemoryStorage) Snapshot() (Snapshot, error) { return m.volatile.snap, nil }

// Entries implements Storage.
func (m *MemoryStorage) Entries(lo, hi Slot) ([]Entry, error) {
	if !m.volatile.snap.IsEmpty() && lo <= m.volatile.snap.Slot {
		return nil, ErrCompacted
	}
	var out []Entry
	for slot, e := range m.volatile.entries {
		if slot >= lo && slot < hi {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Slot < out[j].Slot })
	return out, nil
}

// LastSlot implements Storage.
func (m *MemoryStorage) LastSlot() (Slot, error) {
	last := m.volatile.snap.Slot
	for slot := range m.volatile.entries {
		if slot > last {
			last = slot
		}
	}
	return last, nil
}

// Save implements Saver. Entries are stored as given; callers must not
// modify them afterwards.
func (m *MemoryStorage) Save(hs HardState, ents []Entry, sync bool) error {
	if !hs.IsEmpty() {
		m.volatile.hs = hs
	}
	for _, e := range ents {
		if e.Slot > m.volatile.snap.Slot {
			m.volatile.entries[e.Slot] = e
		}
	}
	if sync {
		// Like a WAL fsync: everything written so far becomes durable.
		m.synced()
	}
	return nil
}

// synced makes everything written so far durable.
func (m *MemoryStorage) synced() {
	m.durable = m.volatile.clone()
	m.syncs++
	if m.keep > 0 {
		// The durable state is never modified once made (each sync makes a
		// fresh copy), so the history may share it.
		if len(m.history) == m.keep {
			copy(m.history, m.history[1:])
			m.history = m.history[:m.keep-1]
		}
		m.history = append(m.history, memSynced{seq: m.syncs, state: m.durable})
	}
}

// SaveSnapshot implements Saver.
func (m *MemoryStorage) SaveSnapshot(snap Snapshot) error {
	if snap.Slot <= m.volatile.snap.Slot {
		return nil
	}
	m.volatile.snap = snap
	for slot := range m.volatile.entries {
		if slot <= snap.Slot {
			delete(m.volatile.entries, slot)
		}
	}
	if m.volatile.hs.Chosen < snap.Slot {
		m.volatile.hs.Chosen = snap.Slot
	}
	m.synced()
	return nil
}

// Crash simulates a power failure: every write not made durable by a sync
// is lost.
func (m *MemoryStorage) Crash() {
	m.volatile = m.durable.clone()
}
