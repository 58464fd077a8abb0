package namespace

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
)

// Store is the namespace state machine over a Pebble DB shared with the
// Paxos log. Its key range is declared in keys.go.
//
// Concurrency: ApplySlot and InstallSnapshot must not run concurrently with
// each other (they serialize on an internal mutex anyway); every read method
// may run concurrently with them and with each other, and sees the state
// after some whole slot, never a part of one.
//
// Errors: ApplySlot and InstallSnapshot return ErrAlreadyApplied, ErrSlotGap
// and ErrBadSnapshot for bad calls (nothing changed), and errors wrapping
// ErrStorage or ErrCorrupt for storage failures, after which the Store is
// failed (ErrFailed) and the replica must stop. Reads return *api.Error
// values for the caller's mistakes and ErrStorage/ErrCorrupt errors for
// storage failures.
type Store struct {
	db  *pebble.DB
	cfg Config
	wo  *pebble.WriteOptions

	// applyMu serializes ApplySlot and InstallSnapshot.
	applyMu sync.Mutex

	mu struct {
		// The write lock is held only while a slot's batch commits, so a
		// read holding the read lock sees whole slots.
		sync.RWMutex
		applied uint64
		sum     uint64
		failed  error
	}

	// cache holds committed values (cache.go). The applier reads it
	// without a lock and changes it only with mu held for writing; readers
	// read it with mu held for reading. Replaced by InstallSnapshot.
	cache *stateCache
	// cacheChecked counts the cache entries invariants builds compared
	// with Pebble after applied slots (checkCache). Guarded by applyMu.
	cacheChecked uint64
}

// Open returns the Store over db's namespace keys, recovering the applied
// slot and checksum from the meta record (a DB without namespace keys is a
// fresh, empty state at slot 0). The caller keeps ownership of db and closes
// it after it stops using the Store. Errors wrap ErrConfig, ErrStorage or
// ErrCorrupt.
func Open(db *pebble.DB, cfg Config) (*Store, error) {
	cfg = cfg.populate()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Store{db: db, cfg: cfg, wo: pebble.NoSync, cache: newStateCache()}
	if cfg.Sync {
		s.wo = pebble.Sync
	}
	v := s.view(db)
	meta, ok, err := v.get(keyMeta)
	if err != nil {
		return nil, err
	}
	if ok {
		if s.mu.applied, s.mu.sum, err = parseMeta(meta); err != nil {
			return nil, err
		}
	} else {
		var any bool
		if err := v.scan(keyStart, nil, func(_, _ []byte) (bool, error) { any = true; return false, nil }); err != nil {
			return nil, err
		}
		if any {
			return nil, fmt.Errorf("%w: namespace keys without a meta record", ErrCorrupt)
		}
	}
	if invariants.Enabled {
		sum, err := s.recomputeChecksum(db)
		if err != nil {
			return nil, err
		}
		if sum != s.mu.sum {
			return nil, fmt.Errorf("%w: stored checksum %016x, state hashes to %016x", ErrCorrupt, s.mu.sum, sum)
		}
	}
	return s, nil
}

func (s *Store) view(r pebble.Reader) view { return view{r: r, cfg: &s.cfg} }

// AppliedSlot returns the last applied slot (0 before the first).
func (s *Store) AppliedSlot() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.applied
}

// Clock returns the cell's clock as of AppliedSlot, the time of the last
// command that succeeded (unix nanoseconds, 0 before the first; every
// command is applied at max(Clock, Command.Time), so it never goes
// backwards), and the
// latest lock-delay end any command has set on that clock (0 if none: once
// the clock reaches it, no lock is in lock-delay). A master stamps its
// commands no lower than Clock. Errors are storage failures.
func (s *Store) Clock() (now, delayEnd int64, err error) {
	err = s.reading(func(v *view) error {
		c, err := v.counters()
		now, delayEnd = c.Clock, c.DelayEnd
		return err
	})
	return now, delayEnd, err
}

// Checksum returns the checksum of the whole logical state as of
// AppliedSlot: the sum over every namespace key (but the meta record) of a
// 64-bit hash of the key and value. It is maintained incrementally and
// persisted with the applied slot, so it costs nothing to read; two replicas
// at the same slot must report the same value (Paxos Made Live's consistency
// check).
func (s *Store) Checksum() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.mu.sum
}

// ApplySlot applies the commands of one Paxos slot in order and commits all
// their effects, the new applied slot and the new checksum as one Pebble
// batch (pebble.Sync if Config.Sync, else pebble.NoSync). A no-op slot has no
// commands and only advances the applied slot.
//
// It returns one Result per command: a command that fails (bad encoding, bad
// arguments, permission, conflict, quota, ...) gets an *api.Error in its
// Result and changes nothing, while the slot's other commands still apply.
//
// Slots must come in order: slot ≤ AppliedSlot() returns ErrAlreadyApplied
// and slot > AppliedSlot()+1 returns ErrSlotGap, both changing nothing. Any
// other error is a storage failure: the slot was not applied, the Store is
// failed, and the replica must stop.
func (s *Store) ApplySlot(slot uint64, cmds [][]byte) ([]Result, error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.RLock()
	applied, sum, failed := s.mu.applied, s.mu.sum, s.mu.failed
	s.mu.RUnlock()
	switch {
	case failed != nil:
		return nil, fmt.Errorf("%w: %w", ErrFailed, failed)
	case slot <= applied:
		return nil, fmt.Errorf("%w: slot %d, applied %d", ErrAlreadyApplied, slot, applied)
	case slot != applied+1:
		return nil, fmt.Errorf("%w: slot %d after applied %d", ErrSlotGap, slot, applied)
	}
	t := s.newTxn(sum, len(cmds))
	results, sum, err := s.applyBatch(t, cmds)
	b := s.db.NewBatch()
	defer b.Close()
	if err == nil {
		err = t.flush(b)
	}
	if err == nil {
		err = b.Set(keyMeta, metaValue(slot, sum), nil)
	}
	if err == nil {
		s.mu.Lock()
		err = b.Commit(s.wo)
		if err == nil {
			s.mu.applied, s.mu.sum = slot, sum
			s.cache.promote(t.slot)
		}
		s.mu.Unlock()
	}
	if err != nil {
		return nil, s.fail(fmt.Errorf("applying slot %d: %w", slot, err))
	}
	if invariants.Enabled {
		// The slot's own keys and a bounded sample of the rest: a cost per
		// slot that does not grow with the cache (see cacheCheckSample).
		n, err := s.checkCache(slices.Collect(maps.Keys(t.slot)), cacheCheckSample)
		s.cacheChecked += uint64(n)
		if err == nil && invariants.Sometimes(1) {
			err = s.checkCacheBytes()
		}
		if err != nil {
			panic(fmt.Sprintf("namespace: BUG: after slot %d: %v", slot, err))
		}
	}
	return results, nil
}

func (s *Store) applyBatch(t *txn, cmds [][]byte) ([]Result, uint64, error) {
	ctr, err := t.counters()
	if err != nil {
		return nil, 0, err
	}
	t.ctr = ctr
	results := make([]Result, len(cmds))
	for i, raw := range cmds {
		if len(raw) > s.cfg.MaxCommandSize {
			results[i].Err = api.Errorf(api.TooLarge, "command of %d bytes, more than %d", len(raw), s.cfg.MaxCommandSize)
			continue
		}
		cmd, err := DecodeCommand(raw)
		if err != nil {
			results[i].Err = api.Errorf(api.InvalidArgument, "%v", err)
			continue
		}
		writes, before := t.writes, t.ctr
		r, err := t.apply(cmd)
		if err != nil {
			return nil, 0, err
		}
		if r.Err != nil && (t.writes != writes || t.ctr != before) {
			// INVARIANT: a failing command writes nothing (see applier).
			err := fmt.Errorf("%w: BUG: %s failed with %v after writing", ErrCorrupt, cmd.Op.Kind(), r.Err)
			if invariants.Enabled {
				panic(err)
			}
			return nil, 0, err
		}
		results[i] = r
	}
	if t.ctr != ctr {
		if err := t.set(keyCounters, encodeRec(&t.ctr)); err != nil {
			return nil, 0, err
		}
	}
	return results, t.sum, nil
}

// metaValue is the meta record: the store format, the applied slot and the
// state checksum.
func metaValue(slot, sum uint64) []byte {
	b := make([]byte, 0, metaLen)
	b = append(b, storeFormat)
	b = binary.BigEndian.AppendUint64(b, slot)
	return binary.BigEndian.AppendUint64(b, sum)
}

// parseMeta inverts metaValue. A store of another format gives ErrFormat.
func parseMeta(meta []byte) (slot, sum uint64, err error) {
	switch {
	case len(meta) == 16:
		// Format 1 had no format byte: slot and checksum only.
		return 0, 0, fmt.Errorf("%w: store format 1 (msgpack records); this build reads formats %d and %d", ErrFormat, storeFormatMigrated, storeFormat)
	case len(meta) != metaLen:
		return 0, 0, fmt.Errorf("%w: meta record of %d bytes", ErrCorrupt, len(meta))
	case meta[0] != storeFormat && meta[0] != storeFormatMigrated:
		return 0, 0, fmt.Errorf("%w: store format %d; this build reads formats %d and %d", ErrFormat, meta[0], storeFormatMigrated, storeFormat)
	}
	return binary.BigEndian.Uint64(meta[1:9]), binary.BigEndian.Uint64(meta[9:]), nil
}

// fail records a storage failure; later ApplySlot and InstallSnapshot calls
// return ErrFailed.
func (s *Store) fail(err error) error {
	s.cfg.Logger.Error("namespace: storage failure; the replica must stop", "err", err)
	s.mu.Lock()
	if s.mu.failed == nil {
		s.mu.failed = err
	}
	s.mu.Unlock()
	return err
}

// recomputeChecksum hashes the whole logical state from scratch.
func (s *Store) recomputeChecksum(r pebble.Reader) (uint64, error) {
	v := s.view(r)
	var sum uint64
	err := v.scan(keyStart, nil, func(k, val []byte) (bool, error) {
		if string(k) != string(keyMeta) {
			sum += kvHash(k, val)
		}
		return true, nil
	})
	return sum, err
}

// VerifyChecksum recomputes the checksum from the whole stored state and
// compares it with Checksum(); a mismatch returns an error wrapping
// ErrCorrupt. It reads everything: use it in tests and offline checks.
func (s *Store) VerifyChecksum() error {
	s.mu.RLock()
	snap := s.db.NewSnapshot()
	want := s.mu.sum
	s.mu.RUnlock()
	defer snap.Close()
	got, err := s.recomputeChecksum(snap)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: checksum %016x, state hashes to %016x", ErrCorrupt, want, got)
	}
	return nil
}
