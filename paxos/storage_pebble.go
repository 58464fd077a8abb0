package paxos

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/internal/wire"
)

// Errors returned by PebbleStorage, besides ErrCompacted.
var (
	// ErrPebbleCorrupt means a value under a paxos key could not be decoded:
	// wrong length, bad checksum, unknown format version, or a value that
	// disagrees with its key. The replica must stop; its disk needs repair
	// (or the replica must be rebuilt from its peers).
	ErrPebbleCorrupt = errors.New("paxos: corrupt value in pebble storage")
	// ErrPebbleFailed means a write to Pebble failed (for example the WAL
	// fsync). The PebbleStorage refuses every later call with an error that
	// wraps both ErrPebbleFailed and the original error: what was written may
	// be visible in memory without being durable, so nothing read from the
	// store can be trusted any more. The replica must stop and restart from
	// disk.
	ErrPebbleFailed = errors.New("paxos: pebble storage failed")
	// ErrPebbleInvalid means an argument was malformed (a nil database, an
	// entry for slot 0, a snapshot too large to chunk). Nothing was written;
	// the store stays usable.
	ErrPebbleInvalid = errors.New("paxos: invalid argument to pebble storage")
)

// pebbleSnapshotChunkSize is the most snapshot data stored under one key.
const pebbleSnapshotChunkSize = 1 << 20

// PebbleStorage is the durable LogStore of a replica: the acceptor's hard
// state, its accepted entries and the latest snapshot, kept in a Pebble
// database that the replica shares with the namespace state machine. It uses
// only the keys declared in keys.go (those beginning with 'p').
//
// # Durability and atomicity
//
// Every Save and SaveSnapshot is ONE pebble.Batch, so a crash leaves either
// all of it or none of it. Save with sync, and every SaveSnapshot, returns
// only after Pebble has fsynced its write-ahead log; without sync the batch
// reaches the WAL but may be lost by a crash (never half of it).
//
// # Errors
//
// Methods return ErrCompacted (Entries only), ErrPebbleInvalid (bad
// arguments; nothing changed), ErrPebbleCorrupt (undecodable value),
// ErrPebbleFailed (a failed write; sticky) or Pebble's own read error,
// wrapped. Anything but ErrCompacted and ErrPebbleInvalid means the replica
// must stop and never guess (see Storage).
//
// Pebble itself is fail-stop on WAL trouble, and the caller opening the DB
// must keep it so:
//
//   - A failed WAL fsync under a synced Save is reported by Save as an error
//     (wrapping ErrPebbleFailed and Pebble's error). This store commits synced
//     batches with DB.ApplyNoSyncWait and waits with Batch.SyncWait because
//     that is the path on which Pebble returns the fsync error: with plain
//     DB.Apply (Batch.Commit), Pebble v2 passes it to Options.Logger.Fatalf
//     ("pebble: fatal commit error") and then reports SUCCESS if Fatalf
//     returns. TestPebbleSyncFailure pins both behaviours.
//   - Once its WAL writer has failed, Pebble (as seen by anyone sharing the
//     DB, such as the namespace) still accepts unsynced writes that will
//     never be durable, hands the failure of the next synced write to
//     Logger.Fatalf, and panics once the failure reaches its record writer.
//     Pebble's default Logger.Fatalf exits the process.
//
// So the caller must: open the DB with the default Logger, or one whose
// Fatalf never returns (exit or panic); not recover panics raised by Pebble;
// and on any error from this store other than ErrCompacted/ErrPebbleInvalid
// stop the replica without sending anything more, then restart it from disk.
// Retrying an fsync is never safe (the kernel may have dropped the dirty
// pages it failed to write).
//
// # Ownership
//
// Save and SaveSnapshot copy what they need; the caller may reuse the
// arguments when they return. Every read returns freshly allocated values
// that PebbleStorage never touches again; per the Storage contract the core
// still treats them as read-only.
//
// # Concurrency and life cycle
//
// A PebbleStorage is safe for concurrent use; writes are serialised and
// reads never see half of a write. It caches the hard state, the snapshot
// descriptor and the last slot (loaded by NewPebbleStorage, updated after
// each successful commit); the DB remains the truth, which is why at most one
// PebbleStorage may use a DB at a time. It does not own the DB: the caller
// closes the DB after its last use of the store, and PebbleStorage has no
// Close method.
type PebbleStorage struct {
	db *pebble.DB
	// chunkSize is the snapshot chunk size; tests lower it.
	chunkSize int

	mu struct {
		sync.RWMutex
		// failed is the sticky error of a failed write, or nil.
		failed error
		hs     HardState
		snap   pebbleSnapshotDesc
		// last is LastSlot: the highest entry slot, or snap.slot if higher.
		last Slot
	}
}

var _ LogStore = (*PebbleStorage)(nil)

// NewPebbleStorage returns a LogStore backed by db, loading the hard state,
// the snapshot descriptor and the last slot from it. An empty db gives an
// empty store. It returns ErrPebbleInvalid for a nil db, ErrPebbleCorrupt if
// the stored state does not decode or is inconsistent (an entry at or below
// the snapshot slot), or Pebble's read error.
func NewPebbleStorage(db *pebble.DB) (*PebbleStorage, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil *pebble.DB", ErrPebbleInvalid)
	}
	s := &PebbleStorage{db: db, chunkSize: pebbleSnapshotChunkSize}

	if err := pebbleGet(db, keyHardState, func(v []byte) error {
		hs, err := pebbleDecodeHardState(v)
		s.mu.hs = hs
		return err
	}); err != nil {
		return nil, err
	}
	if err := pebbleGet(db, keySnapshot, func(v []byte) error {
		d, err := pebbleDecodeSnapshotDesc(v)
		s.mu.snap = d
		return err
	}); err != nil {
		return nil, err
	}

	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keyEntriesStart, UpperBound: keyEntriesEnd})
	if err != nil {
		return nil, fmt.Errorf("paxos: pebble storage: open: %w", err)
	}
	defer it.Close()
	s.mu.last = s.mu.snap.slot
	if it.First() {
		first, ok := keyDecodeEntry(it.Key())
		if !ok {
			return nil, fmt.Errorf("%w: malformed entry key %x", ErrPebbleCorrupt, it.Key())
		}
		if first <= s.mu.snap.slot {
			return nil, fmt.Errorf("%w: entry for slot %d survives the snapshot at slot %d", ErrPebbleCorrupt, first, s.mu.snap.slot)
		}
		if !it.Last() {
			return nil, fmt.Errorf("paxos: pebble storage: open: %w", it.Error())
		}
		last, ok := keyDecodeEntry(it.Key())
		if !ok {
			return nil, fmt.Errorf("%w: malformed entry key %x", ErrPebbleCorrupt, it.Key())
		}
		s.mu.last = max(s.mu.last, last)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("paxos: pebble storage: open: %w", err)
	}
	return s, nil
}

// pebbleGet calls fn with the value stored under key, or does nothing if the
// key is absent. The value is valid only during fn.
func pebbleGet(db *pebble.DB, key []byte, fn func([]byte) error) error {
	v, closer, err := db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("paxos: pebble storage: read %x: %w", key, err)
	}
	defer closer.Close()
	return fn(v)
}

// InitialState implements Storage.
func (s *PebbleStorage) InitialState() (HardState, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.failed != nil {
		return HardState{}, s.mu.failed
	}
	return s.mu.hs, nil
}

// LastSlot implements Storage.
func (s *PebbleStorage) LastSlot() (Slot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.failed != nil {
		return 0, s.mu.failed
	}
	return s.mu.last, nil
}

// Entries implements Storage. Each call reads Pebble and returns freshly
// decoded entries; it returns ErrPebbleCorrupt if one does not decode.
func (s *PebbleStorage) Entries(lo, hi Slot) ([]Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.failed != nil {
		return nil, s.mu.failed
	}
	if s.mu.snap.slot != 0 && lo <= s.mu.snap.slot {
		return nil, ErrCompacted
	}
	if lo >= hi {
		return nil, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: keyEntry(lo), UpperBound: keyEntryUpper(hi)})
	if err != nil {
		return nil, fmt.Errorf("paxos: pebble storage: read entries: %w", err)
	}
	var out []Entry
	for valid := it.First(); valid; valid = it.Next() {
		slot, ok := keyDecodeEntry(it.Key())
		if !ok {
			_ = it.Close()
			return nil, fmt.Errorf("%w: malformed entry key %x", ErrPebbleCorrupt, it.Key())
		}
		v, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("paxos: pebble storage: read entry %d: %w", slot, err)
		}
		e, err := pebbleDecodeEntry(v)
		if err != nil {
			_ = it.Close()
			return nil, fmt.Errorf("slot %d: %w", slot, err)
		}
		if e.Slot != slot {
			_ = it.Close()
			return nil, fmt.Errorf("%w: entry for slot %d stored under slot %d", ErrPebbleCorrupt, e.Slot, slot)
		}
		out = append(out, e)
	}
	if err := it.Close(); err != nil {
		return nil, fmt.Errorf("paxos: pebble storage: read entries: %w", err)
	}
	return out, nil
}

// Snapshot implements Storage. It reads and reassembles the snapshot's
// chunks, checking each chunk's checksum and the whole data's, and returns
// ErrPebbleCorrupt if any check fails.
func (s *PebbleStorage) Snapshot() (Snapshot, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.failed != nil {
		return Snapshot{}, s.mu.failed
	}
	d := s.mu.snap
	if d.slot == 0 {
		return Snapshot{}, nil
	}
	lo, hi := keySnapshotChunksOf(d.slot)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return Snapshot{}, fmt.Errorf("paxos: pebble storage: read snapshot: %w", err)
	}
	defer it.Close()
	var data []byte
	if d.size > 0 {
		data = make([]byte, 0, d.size)
	}
	next := uint32(0)
	for valid := it.First(); valid; valid = it.Next() {
		_, i, ok := keyDecodeSnapshotChunk(it.Key())
		if !ok || i != next || uint64(i) >= d.chunks {
			return Snapshot{}, fmt.Errorf("%w: snapshot at slot %d: unexpected chunk key %x (want chunk %d of %d)", ErrPebbleCorrupt, d.slot, it.Key(), next, d.chunks)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			return Snapshot{}, fmt.Errorf("paxos: pebble storage: read snapshot chunk %d: %w", i, err)
		}
		chunk, err := pebbleDecodeChunk(v)
		if err != nil {
			return Snapshot{}, fmt.Errorf("snapshot at slot %d, chunk %d: %w", d.slot, i, err)
		}
		if uint64(len(data))+uint64(len(chunk)) > d.size {
			return Snapshot{}, fmt.Errorf("%w: snapshot at slot %d is longer than its recorded %d bytes", ErrPebbleCorrupt, d.slot, d.size)
		}
		data = append(data, chunk...)
		next++
	}
	if err := it.Error(); err != nil {
		return Snapshot{}, fmt.Errorf("paxos: pebble storage: read snapshot: %w", err)
	}
	if uint64(next) != d.chunks || uint64(len(data)) != d.size {
		return Snapshot{}, fmt.Errorf("%w: snapshot at slot %d: %d chunks, %d bytes; recorded %d chunks, %d bytes", ErrPebbleCorrupt, d.slot, next, len(data), d.chunks, d.size)
	}
	if crc32.Checksum(data, pebbleCRCTable) != d.crc {
		return Snapshot{}, fmt.Errorf("%w: snapshot at slot %d: data checksum mismatch", ErrPebbleCorrupt, d.slot)
	}
	return Snapshot{Slot: d.slot, Data: data, Members: d.members}, nil
}

// Save implements Saver: hs (unless empty) and ents go into one batch,
// committed with pebble.Sync if sync is set and pebble.NoSync otherwise.
// Entries at or below the snapshot slot are skipped (those slots are
// compacted), as MemoryStorage does. A synced Save with nothing to write
// still syncs the WAL, making earlier unsynced Saves durable.
//
// It returns ErrPebbleInvalid for an entry with slot 0 (nothing is written),
// and an error wrapping ErrPebbleFailed if the commit or its fsync failed.
func (s *PebbleStorage) Save(hs HardState, ents []Entry, sync bool) error {
	for i := range ents {
		if ents[i].Slot == 0 {
			return fmt.Errorf("%w: entry %d of %d has slot 0", ErrPebbleInvalid, i, len(ents))
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.failed != nil {
		return s.mu.failed
	}

	size := 0
	if !hs.IsEmpty() {
		size += len(keyHardState) + pebbleHardStateMaxLen + 8
	}
	for i := range ents {
		size += keyEntryLen + pebbleEntryLen(&ents[i]) + 8
	}
	b := s.db.NewBatchWithSize(size)
	if !hs.IsEmpty() {
		if err := b.Set(keyHardState, pebbleEncodeHardState(nil, hs), nil); err != nil {
			return s.abortLocked(b, err)
		}
	}
	last := s.mu.last
	for i := range ents {
		e := &ents[i]
		if e.Slot <= s.mu.snap.slot {
			continue
		}
		op := b.SetDeferred(keyEntryLen, pebbleEntryLen(e))
		keyAppendEntry(op.Key[:0], e.Slot)
		// INVARIANT: pebbleEntryLen is exact, so the encoding fills op.Value
		// in place (append reallocates only beyond cap >= len(op.Value)).
		if n := len(pebbleEncodeEntry(op.Value[:0], e)); n != len(op.Value) {
			panic(fmt.Sprintf("paxos: pebbleEntryLen says %d bytes, pebbleEncodeEntry wrote %d", len(op.Value), n))
		}
		if err := op.Finish(); err != nil {
			return s.abortLocked(b, err)
		}
		last = max(last, e.Slot)
	}
	if b.Empty() {
		if !sync {
			_ = b.Close()
			return nil
		}
		// Nothing to write, but the caller asked for everything written so
		// far to be durable: a WAL-only record makes the commit sync the WAL.
		if err := b.LogData(nil, nil); err != nil {
			return s.abortLocked(b, err)
		}
	}
	if err := s.commitLocked(b, sync); err != nil {
		return err
	}
	if !hs.IsEmpty() {
		s.mu.hs = hs
	}
	s.mu.last = last
	return nil
}

// SaveSnapshot implements Saver. In one synced batch it drops every entry
// with Slot <= snap.Slot and every chunk of the previous snapshot, writes
// snap's data in chunks and its descriptor, and raises the stored
// HardState.Chosen to snap.Slot if it is lower (as MemoryStorage does). A
// snapshot whose slot is not above the stored one (including an empty one)
// is ignored.
//
// It returns ErrPebbleInvalid if the data needs 2^32-1 chunks or more, and an
// error wrapping ErrPebbleFailed if the commit or its fsync failed.
func (s *PebbleStorage) SaveSnapshot(snap Snapshot) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.failed != nil {
		return s.mu.failed
	}
	if snap.Slot <= s.mu.snap.slot {
		return nil
	}
	cs := s.chunkSize
	chunks := (uint64(len(snap.Data)) + uint64(cs) - 1) / uint64(cs)
	if chunks >= 1<<32-1 {
		return fmt.Errorf("%w: snapshot of %d bytes needs %d chunks", ErrPebbleInvalid, len(snap.Data), chunks)
	}
	d := pebbleSnapshotDesc{
		slot:   snap.Slot,
		size:   uint64(len(snap.Data)),
		chunks: chunks,
		crc:    crc32.Checksum(snap.Data, pebbleCRCTable),
	}
	if snap.Members != nil {
		if err := snap.Members.validate(); err != nil {
			return fmt.Errorf("%w: snapshot membership: %v", ErrPebbleInvalid, err)
		}
		m := snap.Members.clone()
		d.members = &m
	}
	hs := s.mu.hs
	hs.Chosen = max(hs.Chosen, snap.Slot)

	b := s.db.NewBatchWithSize(len(snap.Data) + int(chunks)*(keySnapshotChunkLen+16) + 256)
	// Every entry in a slot the snapshot covers, and every chunk of older
	// snapshots (their slots are all below snap.Slot).
	if err := b.DeleteRange(keyEntriesStart, keyEntryThrough(snap.Slot), nil); err != nil {
		return s.abortLocked(b, err)
	}
	if err := b.DeleteRange(keySnapshotChunksStart, keySnapshotChunk(snap.Slot, 0), nil); err != nil {
		return s.abortLocked(b, err)
	}
	for i := uint64(0); i < chunks; i++ {
		part := snap.Data[i*uint64(cs) : min((i+1)*uint64(cs), uint64(len(snap.Data)))]
		op := b.SetDeferred(keySnapshotChunkLen, pebbleChunkLen(part))
		copy(op.Key, keySnapshotChunk(snap.Slot, uint32(i)))
		if n := len(pebbleEncodeChunk(op.Value[:0], part)); n != len(op.Value) {
			panic(fmt.Sprintf("paxos: pebbleChunkLen says %d bytes, pebbleEncodeChunk wrote %d", len(op.Value), n))
		}
		if err := op.Finish(); err != nil {
			return s.abortLocked(b, err)
		}
	}
	if err := b.Set(keySnapshot, pebbleEncodeSnapshotDesc(nil, d), nil); err != nil {
		return s.abortLocked(b, err)
	}
	if hs != s.mu.hs {
		if err := b.Set(keyHardState, pebbleEncodeHardState(nil, hs), nil); err != nil {
			return s.abortLocked(b, err)
		}
	}
	if err := s.commitLocked(b, true); err != nil {
		return err
	}
	s.mu.snap = d
	s.mu.hs = hs
	s.mu.last = max(s.mu.last, snap.Slot)
	return nil
}

// commitLocked commits b (synced if sync) and closes it. On failure it makes
// the store fail every later call.
// REQUIRES: s.mu held for writing.
func (s *PebbleStorage) commitLocked(b *pebble.Batch, sync bool) error {
	var err error
	if sync {
		// NB: not b.Commit(pebble.Sync): on that path Pebble hands a failed
		// fsync to Logger.Fatalf and returns nil if Fatalf returns. Here the
		// error comes back from SyncWait. See the type's doc.
		err = s.db.ApplyNoSyncWait(b, pebble.Sync)
		if err == nil {
			err = b.SyncWait()
		}
	} else {
		err = s.db.Apply(b, pebble.NoSync)
	}
	if err != nil {
		return s.abortLocked(b, err)
	}
	_ = b.Close()
	return nil
}

// abortLocked closes b, records err as the store's sticky failure and returns
// it.
// REQUIRES: s.mu held for writing.
func (s *PebbleStorage) abortLocked(b *pebble.Batch, err error) error {
	_ = b.Close()
	s.mu.failed = fmt.Errorf("%w: %w", ErrPebbleFailed, err)
	return s.mu.failed
}

// Value formats.
//
// Every value paxos stores is
//
//	version:1 kind:1 payload crc:4
//
// where version is pebbleFormatVersion, kind repeats the key's tag byte (so a
// value copied under the wrong kind of key is caught), and crc is the
// big-endian CRC-32C (Castagnoli) of everything before it. Payloads are
// written and read with internal/wire, integers as canonical (minimal)
// uvarints:
//
//	hard state      promised chosen [flags]
//	entry           slot ballot ncmds { cmd.ballot cmd.seq len data }* [conf]
//	snapshot desc   slot size chunks crc32c(data):4 [conf]
//	conf            1 index nvoters { voter }* nlearners { learner }*
//	snapshot chunk  the raw bytes of the chunk
//
// The hard state's flags (bit 0: HardState.Rebuilding) are written only when
// not zero, so a hard state without flags has the same bytes as before flags
// existed; a stored zero or an unknown bit is corrupt. Likewise an entry
// or snapshot descriptor carries a membership (Value.Conf, Snapshot.Members)
// only when it has one, after everything else, introduced by the marker 1:
// values without one have the same bytes as before memberships existed, and
// this code reads those. (An older build would refuse the new values as
// corrupt, so a replica once upgraded must not be downgraded after the
// first membership change.)
//
// A hand-rolled format rather than msgpack: it is the hot path of every Save
// (BenchmarkPebbleEncodeEntry compares the two), the decoder is strict (exact
// length, canonical integers, no unknown fields, checksummed, bounded
// allocation), and the on-disk bytes do not depend on struct tags that the
// wire protocol may evolve.
const (
	pebbleFormatVersion byte = 1
	pebbleHeaderLen          = 2
	pebbleTrailerLen         = 4
	// pebbleHardStateMaxLen bounds an encoded hard state.
	pebbleHardStateMaxLen = pebbleHeaderLen + 3*binary.MaxVarintLen64 + pebbleTrailerLen

	// pebbleHardStateRebuilding is the flag bit of HardState.Rebuilding.
	pebbleHardStateRebuilding = 1 << 0
	// pebbleHardStateFlags are the flag bits a hard state may carry.
	pebbleHardStateFlags = pebbleHardStateRebuilding
)

// errPebbleValue is the cause of a payload that decodes but holds a value
// the format forbids (a zero flags field, a snapshot at slot 0).
var errPebbleValue = errors.New("value out of range")

// pebbleCRCTable is the Castagnoli table (hardware-accelerated on amd64 and
// arm64).
var pebbleCRCTable = crc32.MakeTable(crc32.Castagnoli)

// pebbleSnapshotDesc describes the stored snapshot. The zero value means no
// snapshot.
type pebbleSnapshotDesc struct {
	slot   Slot
	size   uint64 // bytes of data
	chunks uint64 // number of chunk keys
	crc    uint32 // CRC-32C of the whole data
	// members is the snapshot's membership, nil if none.
	members *Membership
}

// pebbleConfMarker introduces an encoded membership.
const pebbleConfMarker = 1

// pebbleConfLen returns the encoded length of m (0 for nil).
func pebbleConfLen(m *Membership) int {
	if m == nil {
		return 0
	}
	n := wire.UvarintLen(pebbleConfMarker) + wire.UvarintLen(uint64(m.Index)) +
		wire.UvarintLen(uint64(len(m.Voters))) + wire.UvarintLen(uint64(len(m.Learners)))
	for _, id := range m.Voters {
		n += wire.UvarintLen(uint64(id))
	}
	for _, id := range m.Learners {
		n += wire.UvarintLen(uint64(id))
	}
	return n
}

// pebbleWriteConf writes the encoding of m (nothing for nil).
func pebbleWriteConf(w *wire.Writer, m *Membership) {
	if m == nil {
		return
	}
	w.Uvarint(pebbleConfMarker)
	w.Uvarint(uint64(m.Index))
	for _, list := range [][]ID{m.Voters, m.Learners} {
		w.Uvarint(uint64(len(list)))
		for _, id := range list {
			w.Uvarint(uint64(id))
		}
	}
}

// pebbleReadConf decodes a membership if any bytes are left, else returns
// nil.
func pebbleReadConf(r *wire.Reader) *Membership {
	if r.Err() != nil || r.Len() == 0 {
		return nil
	}
	pos := r.Pos()
	if mark := r.Uvarint("membership marker"); r.Err() == nil && mark != pebbleConfMarker {
		r.Fail(pos, "membership marker", errPebbleValue, "unknown membership marker %d", mark)
		return nil
	}
	m := &Membership{Index: Slot(r.Uvarint("membership index"))}
	for _, list := range []*[]ID{&m.Voters, &m.Learners} {
		k := r.Count(MaxReplicas, 1, "member count")
		for range k {
			*list = append(*list, ID(r.Uvarint("member ID")))
		}
	}
	if r.Err() != nil {
		return nil
	}
	if err := m.validate(); err != nil {
		r.Fail(pos, "membership", errPebbleValue, "%v", err)
		return nil
	}
	return m
}

// pebbleSealStart appends a value header of the given kind to dst. The value
// starts at len(dst) before the call.
func pebbleSealStart(dst []byte, kind byte) []byte {
	return append(dst, pebbleFormatVersion, kind)
}

// pebbleSealEnd appends the checksum of dst[start:] to dst.
func pebbleSealEnd(dst []byte, start int) []byte {
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst[start:], pebbleCRCTable))
}

// pebbleOpen checks v's version, kind and checksum and returns its payload.
func pebbleOpen(v []byte, kind byte) ([]byte, error) {
	if len(v) < pebbleHeaderLen+pebbleTrailerLen {
		return nil, fmt.Errorf("%w: value of %d bytes is too short", ErrPebbleCorrupt, len(v))
	}
	body, sum := v[:len(v)-pebbleTrailerLen], binary.BigEndian.Uint32(v[len(v)-pebbleTrailerLen:])
	if crc32.Checksum(body, pebbleCRCTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrPebbleCorrupt)
	}
	if body[0] != pebbleFormatVersion {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrPebbleCorrupt, body[0])
	}
	if body[1] != kind {
		return nil, fmt.Errorf("%w: value of kind %q where %q was expected", ErrPebbleCorrupt, body[1], kind)
	}
	return body[pebbleHeaderLen:], nil
}

// pebbleCorrupt wraps a payload decoding error (a *wire.Error, which names
// the field and its offset in the payload) in ErrPebbleCorrupt.
func pebbleCorrupt(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrPebbleCorrupt, err)
}

func pebbleEncodeHardState(dst []byte, hs HardState) []byte {
	start := len(dst)
	w := wire.NewWriter(pebbleSealStart(dst, keyTagHardState))
	w.Uvarint(uint64(hs.Promised))
	w.Uvarint(uint64(hs.Chosen))
	if hs.Rebuilding {
		w.Uvarint(pebbleHardStateRebuilding)
	}
	return pebbleSealEnd(w.Bytes(), start)
}

func pebbleDecodeHardState(v []byte) (HardState, error) {
	p, err := pebbleOpen(v, keyTagHardState)
	if err != nil {
		return HardState{}, fmt.Errorf("hard state: %w", err)
	}
	hs, err := pebbleDecodeHardStatePayload(p)
	if err != nil {
		return HardState{}, fmt.Errorf("hard state: %w", err)
	}
	return hs, nil
}

func pebbleDecodeHardStatePayload(p []byte) (HardState, error) {
	r := wire.NewReader(p)
	hs := HardState{Promised: Ballot(r.Uvarint("promised ballot")), Chosen: Slot(r.Uvarint("chosen slot"))}
	if r.Len() > 0 {
		pos := r.Pos()
		switch flags := r.Uvarint("flags"); {
		case r.Err() != nil:
		case flags == 0:
			r.Fail(pos, "flags", errPebbleValue, "hard state flags stored as zero")
		case flags&^pebbleHardStateFlags != 0:
			r.Fail(pos, "flags", errPebbleValue, "unknown hard state flags %#x", flags)
		default:
			hs.Rebuilding = flags&pebbleHardStateRebuilding != 0
		}
	}
	if err := r.Done(); err != nil {
		return HardState{}, pebbleCorrupt(err)
	}
	return hs, nil
}

// pebbleEntryLen returns the encoded length of e.
func pebbleEntryLen(e *Entry) int {
	n := pebbleHeaderLen + pebbleTrailerLen +
		wire.UvarintLen(uint64(e.Slot)) + wire.UvarintLen(uint64(e.Ballot)) +
		wire.UvarintLen(uint64(len(e.Value.Cmds)))
	for i := range e.Value.Cmds {
		c := &e.Value.Cmds[i]
		n += wire.UvarintLen(uint64(c.ID.Ballot)) + wire.UvarintLen(c.ID.Seq) +
			wire.UvarintLen(uint64(len(c.Data))) + len(c.Data)
	}
	return n + pebbleConfLen(e.Value.Conf)
}

// pebbleEncodeEntry appends the encoding of e (pebbleEntryLen(e) bytes) to
// dst.
func pebbleEncodeEntry(dst []byte, e *Entry) []byte {
	start := len(dst)
	w := wire.NewWriter(pebbleSealStart(dst, keyTagEntry))
	w.Uvarint(uint64(e.Slot))
	w.Uvarint(uint64(e.Ballot))
	w.Uvarint(uint64(len(e.Value.Cmds)))
	for i := range e.Value.Cmds {
		c := &e.Value.Cmds[i]
		w.Uvarint(uint64(c.ID.Ballot))
		w.Uvarint(c.ID.Seq)
		w.LenBytes(c.Data)
	}
	pebbleWriteConf(&w, e.Value.Conf)
	return pebbleSealEnd(w.Bytes(), start)
}

// pebbleDecodeEntry decodes an entry value. The result does not alias v.
func pebbleDecodeEntry(v []byte) (Entry, error) {
	p, err := pebbleOpen(v, keyTagEntry)
	if err != nil {
		return Entry{}, fmt.Errorf("entry: %w", err)
	}
	// One copy of the payload backs every command's Data.
	e, err := pebbleDecodeEntryPayload(append([]byte(nil), p...))
	if err != nil {
		return Entry{}, fmt.Errorf("entry: %w", err)
	}
	return e, nil
}

// pebbleDecodeEntryPayload decodes an entry payload; Data slices alias p.
func pebbleDecodeEntryPayload(p []byte) (Entry, error) {
	r := wire.NewReader(p)
	e := Entry{Slot: Slot(r.Uvarint("slot")), Ballot: Ballot(r.Uvarint("ballot"))}
	// Each command takes at least 3 bytes: bound the allocation by the input.
	n := r.Count(math.MaxUint64, 3, "command count")
	if n > 0 {
		e.Value.Cmds = make([]Command, n)
		for i := range e.Value.Cmds {
			c := &e.Value.Cmds[i]
			c.ID.Ballot = Ballot(r.Uvarint("command ballot"))
			c.ID.Seq = r.Uvarint("command sequence")
			if data := r.LenBytes(math.MaxUint64, "command data"); len(data) > 0 {
				c.Data = data
			}
		}
	}
	e.Value.Conf = pebbleReadConf(&r)
	if err := r.Done(); err != nil {
		return Entry{}, pebbleCorrupt(err)
	}
	return e, nil
}

func pebbleEncodeSnapshotDesc(dst []byte, d pebbleSnapshotDesc) []byte {
	start := len(dst)
	w := wire.NewWriter(pebbleSealStart(dst, keyTagSnapshot))
	w.Uvarint(uint64(d.slot))
	w.Uvarint(d.size)
	w.Uvarint(d.chunks)
	w.Uint32(d.crc)
	pebbleWriteConf(&w, d.members)
	return pebbleSealEnd(w.Bytes(), start)
}

func pebbleDecodeSnapshotDesc(v []byte) (pebbleSnapshotDesc, error) {
	p, err := pebbleOpen(v, keyTagSnapshot)
	if err != nil {
		return pebbleSnapshotDesc{}, fmt.Errorf("snapshot descriptor: %w", err)
	}
	d, err := pebbleDecodeSnapshotDescPayload(p)
	if err != nil {
		return pebbleSnapshotDesc{}, fmt.Errorf("snapshot descriptor: %w", err)
	}
	return d, nil
}

func pebbleDecodeSnapshotDescPayload(p []byte) (pebbleSnapshotDesc, error) {
	r := wire.NewReader(p)
	d := pebbleSnapshotDesc{slot: Slot(r.Uvarint("slot")), size: r.Uvarint("size"), chunks: r.Uvarint("chunk count")}
	d.crc = r.Uint32("checksum")
	d.members = pebbleReadConf(&r)
	switch {
	case r.Err() != nil:
	case d.slot == 0:
		r.Fail(0, "slot", errPebbleValue, "snapshot at slot 0")
	case (d.size == 0) != (d.chunks == 0) || d.chunks > d.size || d.chunks >= 1<<32-1:
		r.Fail(0, "size", errPebbleValue, "%d bytes in %d chunks", d.size, d.chunks)
	}
	if err := r.Done(); err != nil {
		return pebbleSnapshotDesc{}, pebbleCorrupt(err)
	}
	return d, nil
}

func pebbleChunkLen(part []byte) int { return pebbleHeaderLen + len(part) + pebbleTrailerLen }

func pebbleEncodeChunk(dst, part []byte) []byte {
	start := len(dst)
	dst = pebbleSealStart(dst, keyTagSnapshotChunk)
	dst = append(dst, part...)
	return pebbleSealEnd(dst, start)
}

// pebbleDecodeChunk returns the chunk's data, aliasing v.
func pebbleDecodeChunk(v []byte) ([]byte, error) {
	p, err := pebbleOpen(v, keyTagSnapshotChunk)
	if err != nil {
		return nil, err
	}
	if len(p) == 0 {
		return nil, fmt.Errorf("%w: empty snapshot chunk", ErrPebbleCorrupt)
	}
	return p, nil
}
