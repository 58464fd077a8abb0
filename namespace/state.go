package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"
	"slices"
	"strings"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
)

// view reads the namespace state from a Pebble reader: the DB (reads), a
// snapshot (snapshot export) or, during apply, the DB under the slot's
// overlay (tx).
type view struct {
	r   pebble.Reader
	cfg *Config
	// tx, during apply, is the slot's txn: get then sees the slot's own
	// writes. nil otherwise.
	tx *txn
	// cc, for reads of the committed state under the read lock, is the
	// Store's cache, consulted (never filled) before Pebble. nil otherwise.
	cc *stateCache
}

// get returns the value at k, which the caller must not modify; ok is false
// if absent.
func (v *view) get(k []byte) (val []byte, ok bool, err error) {
	if v.tx != nil {
		e, err := v.tx.entry(k, true)
		return e.val, e.present, err
	}
	if v.cc != nil {
		if e, hit := v.cc.lookup(k); hit && (e.full || !e.present) {
			return e.val, e.present, nil
		}
	}
	return v.load(k)
}

// load reads k from Pebble and returns a copy of its value.
func (v *view) load(k []byte) (val []byte, ok bool, err error) {
	b, closer, err := v.r.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: get %q: %w", ErrStorage, k, err)
	}
	val = bytes.Clone(b)
	if val == nil {
		val = []byte{}
	}
	if err := closer.Close(); err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return val, true, nil
}

func (v *view) getRec(k []byte, rec any) (bool, error) {
	b, ok, err := v.get(k)
	if err != nil || !ok {
		return false, err
	}
	return true, decodeRec(k, b, rec)
}

func (v *view) node(p Path) (*nodeRec, error) {
	var n nodeRec
	ok, err := v.getRec(nodeKey(p), &n)
	if err != nil || !ok {
		return nil, err
	}
	return &n, nil
}

func (v *view) tenant(name string) (*tenantRec, error) {
	var t tenantRec
	ok, err := v.getRec(tenantKey(name), &t)
	if err != nil || !ok {
		return nil, err
	}
	return &t, nil
}

func (v *view) session(sid uint64) (*sessionRec, error) {
	var s sessionRec
	ok, err := v.getRec(sessionKey(sid), &s)
	if err != nil || !ok {
		return nil, err
	}
	return &s, nil
}

func (v *view) contents(p Path) ([]byte, error) {
	b, _, err := v.get(dataKey(p))
	return b, err
}

func (v *view) counters() (counters, error) {
	var c counters
	_, err := v.getRec(keyCounters, &c)
	return c, err
}

// scan calls fn for each key with the given prefix at or above from (nil:
// the prefix start), in order, until fn returns false. k and val are valid
// only during the call.
func (v *view) scan(prefix, from []byte, fn func(k, val []byte) (bool, error)) error {
	it, err := v.r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	var valid bool
	if from != nil {
		valid = it.SeekGE(from)
	} else {
		valid = it.First()
	}
	for ; valid; valid = it.Next() {
		val, err := it.ValueAndErr()
		if err != nil {
			_ = it.Close()
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
		more, err := fn(it.Key(), val)
		if err != nil {
			_ = it.Close()
			return err
		}
		if !more {
			break
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	return nil
}

func (v *view) hasChildren(dir Path) (bool, error) {
	found := false
	err := v.scan(childPrefix(dir), nil, func(_, _ []byte) (bool, error) {
		found = true
		return false, nil
	})
	return found, err
}

// keysWithPrefix returns copies of the keys with the given prefix, in order.
func (v *view) keysWithPrefix(prefix []byte) ([][]byte, error) {
	var out [][]byte
	err := v.scan(prefix, nil, func(k, _ []byte) (bool, error) {
		out = append(out, bytes.Clone(k))
		return true, nil
	})
	return out, err
}

// txn is the write side of one slot's apply: an overlay of every value the
// slot read or wrote, the running state checksum, and at the end the slot's
// batch (a plain, write-only Pebble batch).
//
// Reads see the slot's own writes through the overlay, then the Store's
// committed-value cache, then the DB (which holds the previous slot's state:
// the Store is the only writer of its keys). Prefix scans merge the DB with
// the overlay (keysWithPrefix, hasChildren); nothing in the apply path scans
// otherwise. An indexed batch would do this merging for us, but makes every
// point read merge the batch with the whole LSM; the overlay answers most
// reads from memory.
//
// Writes go to the overlay only; flush puts each written key into the batch
// once, with its final value, in key order. A slot of 100 acquires on one
// tenant thus writes the tenant record once, and a key set and deleted
// within the slot not at all. Memtable inserts were a fifth of apply CPU
// once the reads were cached.
//
// INVARIANT: sum is the checksum of the logical state as the slot would
// leave it: the DB's state plus every write made through set and del, which
// the overlay holds.
// keysPerCommand is about how many keys a lock or session command reads or
// writes (an Acquire: its node, the locked and held markers, the tenant,
// the session); it sizes a slot's overlay.
const keysPerCommand = 6

type txn struct {
	view
	cache  *stateCache
	slot   map[string]sentry
	sum    uint64
	writes int // number of set/del calls, to catch a failing command that wrote
	ctr    counters
}

// newTxn starts a slot's overlay for about cmds commands: the overlay map is
// sized for the handful of keys a command touches, so that it does not grow
// (and rehash) command by command.
func (s *Store) newTxn(sum uint64, cmds int) *txn {
	t := &txn{view: s.view(s.db), cache: s.cache, slot: make(map[string]sentry, keysPerCommand*cmds), sum: sum}
	t.tx = t
	return t
}

// entry returns k as the slot sees it. With needVal a present entry is full;
// without, it may carry only the hash.
func (t *txn) entry(k []byte, needVal bool) (centry, error) {
	se, err := t.sentry(k, needVal)
	return se.centry, err
}

func (t *txn) sentry(k []byte, needVal bool) (sentry, error) {
	if e, ok := t.slot[string(k)]; ok {
		return e, nil
	}
	if e, ok := t.cache.lookup(k); ok && (e.full || !e.present || !needVal) {
		return sentry{centry: e, was: e.present}, nil
	}
	val, ok, err := t.load(k)
	if err != nil {
		return sentry{}, err
	}
	e := sentry{centry: centry{present: ok, full: ok, val: val}, was: ok}
	if ok {
		e.hash = kvHash(k, val)
	}
	t.slot[string(k)] = e
	return e, nil
}

// set writes val at k. REQUIRES: nobody modifies val afterwards (the
// overlay, the batch until it commits, and the cache keep it).
func (t *txn) set(k, val []byte) error {
	old, err := t.sentry(k, false)
	if err != nil {
		return err
	}
	if val == nil {
		val = []byte{}
	}
	if old.present {
		if old.full && bytes.Equal(old.val, val) {
			return nil
		}
		t.sum -= old.hash
	}
	h := kvHash(k, val)
	t.sum += h
	t.writes++
	t.slot[string(k)] = sentry{centry: centry{val: val, hash: h, present: true, full: true}, dirty: true, was: old.was}
	return nil
}

// create writes val at k, a key that cannot exist yet because its name
// is new by construction (a session's keys: session IDs come from a counter
// and are never reused). It skips the read of the old value that set makes:
// for a session's creation those reads were two Pebble point reads that
// found nothing, more than half of the command's apply. Invariants builds
// read the key anyway and panic if it exists. REQUIRES: as set.
func (t *txn) create(k, val []byte) error {
	if invariants.Enabled {
		if old, err := t.sentry(k, false); err != nil {
			return err
		} else if old.present {
			panic(fmt.Sprintf("namespace: invariant broken: created key %q exists", k))
		}
	}
	if val == nil {
		val = []byte{}
	}
	h := kvHash(k, val)
	t.sum += h
	t.writes++
	t.slot[string(k)] = sentry{centry: centry{val: val, hash: h, present: true, full: true}, dirty: true}
	return nil
}

func (t *txn) del(k []byte) error {
	old, err := t.sentry(k, false)
	if err != nil || !old.present {
		return err
	}
	t.sum -= old.hash
	t.writes++
	t.slot[string(k)] = sentry{dirty: true, was: old.was}
	return nil
}

// flush writes the slot's net changes into b, one operation per changed
// key, in key order.
func (t *txn) flush(b *pebble.Batch) error {
	keys := make([]string, 0, len(t.slot))
	for k, e := range t.slot {
		if e.dirty && (e.present || e.was) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		e := t.slot[k]
		var err error
		if e.present {
			err = b.Set(unsafeBytes(k), e.val, nil)
		} else {
			err = b.Delete(unsafeBytes(k), nil)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrStorage, err)
		}
	}
	return nil
}

// unsafeBytes returns s's bytes without a copy, for Pebble calls that copy
// them and never write to them.
func unsafeBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// keysWithPrefix returns copies of the keys with the given prefix as the
// slot sees them, in order.
func (t *txn) keysWithPrefix(prefix []byte) ([][]byte, error) {
	var out [][]byte
	seen := map[string]bool{}
	err := t.scan(prefix, nil, func(k, _ []byte) (bool, error) {
		if e, ok := t.slot[string(k)]; ok && !e.present {
			return true, nil
		}
		seen[string(k)] = true
		out = append(out, bytes.Clone(k))
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	added := false
	for k, e := range t.slot {
		if e.present && strings.HasPrefix(k, string(prefix)) && !seen[k] {
			out = append(out, []byte(k))
			added = true
		}
	}
	if added {
		slices.SortFunc(out, bytes.Compare)
	}
	return out, nil
}

// hasChildren reports whether dir has a child as the slot sees it.
func (t *txn) hasChildren(dir Path) (bool, error) {
	prefix := childPrefix(dir)
	found := false
	err := t.scan(prefix, nil, func(k, _ []byte) (bool, error) {
		if e, ok := t.slot[string(k)]; ok && !e.present {
			return true, nil
		}
		found = true
		return false, nil
	})
	if err != nil || found {
		return found, err
	}
	for k, e := range t.slot {
		if e.present && strings.HasPrefix(k, string(prefix)) {
			return true, nil
		}
	}
	return false, nil
}

func (t *txn) putNode(p Path, n *nodeRec) error { return t.set(nodeKey(p), encodeRec(n)) }
func (t *txn) putTenant(name string, r *tenantRec) error {
	return t.set(tenantKey(name), encodeRec(r))
}

// mustNode reads a node that an index or invariant says exists.
func (t *txn) mustNode(p Path) (*nodeRec, error) {
	n, err := t.node(p)
	if err == nil && n == nil {
		err = fmt.Errorf("%w: node %s missing", ErrCorrupt, p)
	}
	return n, err
}

// mustTenant reads a tenant that an existing node or session says exists.
func (t *txn) mustTenant(name string) (*tenantRec, error) {
	r, err := t.tenant(name)
	if err == nil && r == nil {
		err = fmt.Errorf("%w: tenant %q missing", ErrCorrupt, name)
	}
	return r, err
}

var crcTable = crc64.MakeTable(crc64.ECMA)

// contentSum is a node's content checksum (CRC-64/ECMA).
func contentSum(b []byte) uint64 { return crc64.Checksum(b, crcTable) }

// kvHash is one key/value pair's share of the state checksum: CRC-64 of the
// length-prefixed key and the value, passed through a 64-bit finalizer so the
// shares do not add up linearly. The state checksum is the sum (mod 2^64) of
// the shares of every logical key, so a write updates it in O(1): subtract
// the old pair's share, add the new one.
func kvHash(k, v []byte) uint64 {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(k)))
	h := crc64.Update(0, crcTable, n[:])
	h = crc64.Update(h, crcTable, k)
	h = crc64.Update(h, crcTable, v)
	return mix64(h ^ uint64(len(v)))
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// quotaCheck returns a ResourceExhausted error if adding add to used would
// pass limit (0: unlimited).
func quotaCheck(tenant, quota string, limit, used, add uint64) *api.Error {
	if limit != 0 && add > 0 && used+add > limit {
		return api.QuotaError(tenant, quota, limit)
	}
	return nil
}
