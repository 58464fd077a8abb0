package namespace

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
)

// RestoreGap is how far Restart raises each sequence of the counters
// record (session IDs, node instances, lock generations) above the value
// the restored state holds. The old cell may have handed out values after
// its snapshot was taken; 2^32 of them is more than any cell issues between
// two backups, so the restored cell's values never repeat one the old cell
// issued (DESIGN.md invariant 4, across a restore).
const RestoreGap uint64 = 1 << 32

// RestartSummary says what Restart changed.
type RestartSummary struct {
	// Slot is the slot the restart occupies (the restored slot + 1).
	Slot uint64
	// Sessions is the number of sessions ended.
	Sessions int
	// LocksReleased counts the lock holds the ended sessions gave up.
	LocksReleased int
	// EphemeralDeleted counts the ephemeral nodes deleted with them.
	EphemeralDeleted int
	// Session, Instance and LockGen are the counters' new values: the
	// restored cell's next session ID, node instance and lock generation
	// lie above them.
	Session, Instance, LockGen uint64
	// Checksum is the state checksum after the restart.
	Checksum uint64
}

// Restart turns the state of a restored snapshot into the first state of a
// new cell, as the next slot (AppliedSlot()+1), committed synced: every
// session ends as if its owner had closed it (its locks are released without
// lock-delay and its ephemeral nodes deleted, exactly as CloseSession does),
// and each sequence of the counters record is raised by gap (RestoreGap if
// zero). Files, directories, contents, ACLs, tenants, tokens and each node's
// lock generation are kept. The cell's clock is not moved.
//
// It is deterministic: every replica of a restored cell runs it on the same
// snapshot and reaches the same state and checksum. Use it offline, before
// the replica starts; it must not run concurrently with ApplySlot. Errors
// are as for ApplySlot.
func (s *Store) Restart(gap uint64) (RestartSummary, error) {
	if gap == 0 {
		gap = RestoreGap
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.RLock()
	applied, sum, failed := s.mu.applied, s.mu.sum, s.mu.failed
	s.mu.RUnlock()
	if failed != nil {
		return RestartSummary{}, fmt.Errorf("%w: %w", ErrFailed, failed)
	}
	sessions, err := s.ListSessions(Caller{Principal: s.cfg.AdminPrincipal}, "")
	if err != nil {
		return RestartSummary{}, err
	}
	t := s.newTxn(sum, len(sessions))
	ctr, err := t.counters()
	if err != nil {
		return RestartSummary{}, err
	}
	t.ctr = ctr
	sum0 := RestartSummary{Slot: applied + 1}
	for _, si := range sessions {
		var res Result
		a := &applier{txn: t, now: t.ctr.Clock, c: Caller{Principal: s.cfg.AdminPrincipal}, res: &res}
		reply, aerr, err := a.endSession(si.ID, false)
		if err != nil {
			return RestartSummary{}, s.fail(fmt.Errorf("restart: ending session %d: %w", si.ID, err))
		}
		if aerr != nil {
			return RestartSummary{}, fmt.Errorf("%w: restart: ending session %d: %v", ErrCorrupt, si.ID, aerr)
		}
		ended := reply.(*SessionEnded)
		sum0.Sessions++
		sum0.LocksReleased += len(ended.Released)
		for _, c := range res.Changes {
			if c.Kind == ChangeDeleted {
				sum0.EphemeralDeleted++
			}
		}
	}
	for _, v := range []*uint64{&t.ctr.Session, &t.ctr.Instance, &t.ctr.LockGen} {
		if *v > ^uint64(0)-gap {
			return RestartSummary{}, api.Errorf(api.InvalidArgument, "restart: a counter at %d cannot rise by %d", *v, gap)
		}
		*v += gap
	}
	if err := t.set(keyCounters, encodeRec(&t.ctr)); err != nil {
		return RestartSummary{}, err
	}
	b := s.db.NewBatch()
	defer b.Close()
	if err := t.flush(b); err != nil {
		return RestartSummary{}, s.fail(fmt.Errorf("restart: %w", err))
	}
	if err := b.Set(keyMeta, metaValue(applied+1, t.sum), nil); err != nil {
		return RestartSummary{}, s.fail(fmt.Errorf("%w: restart: %w", ErrStorage, err))
	}
	s.mu.Lock()
	err = b.Commit(pebble.Sync)
	if err == nil {
		s.mu.applied, s.mu.sum = applied+1, t.sum
		s.cache = newStateCache()
	}
	s.mu.Unlock()
	if err != nil {
		return RestartSummary{}, s.fail(fmt.Errorf("%w: restart: %w", ErrStorage, err))
	}
	sum0.Session, sum0.Instance, sum0.LockGen, sum0.Checksum = t.ctr.Session, t.ctr.Instance, t.ctr.LockGen, t.sum
	return sum0, nil
}

// VerifySnapshot reads a snapshot stream (as Snapshot writes it) to its end
// and verifies it as InstallSnapshot does (framing, key order, trailer CRC,
// and that the records hash to the header's checksum), without installing
// it. It returns the stream's slot and checksum; a bad stream gives an
// error wrapping ErrBadSnapshot.
func VerifySnapshot(r io.Reader) (slot, sum uint64, err error) {
	return readSnapshot(r, nil)
}

// SnapshotHeader reads the header of a snapshot stream: the slot the state
// is at and its checksum. It verifies nothing else (VerifySnapshot does).
func SnapshotHeader(r io.Reader) (slot, sum uint64, err error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil {
		return 0, 0, badSnap("truncated")
	}
	if string(magic) != snapshotMagic && string(magic) != snapshotMagicMigrated {
		return 0, 0, badSnap("bad magic %q", magic)
	}
	if slot, err = binary.ReadUvarint(br); err != nil {
		return 0, 0, badSnap("truncated")
	}
	var b [8]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		return 0, 0, badSnap("truncated")
	}
	return slot, binary.BigEndian.Uint64(b[:]), nil
}
