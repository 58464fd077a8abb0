package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc64"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
)

// view reads the namespace state from a Pebble reader: the DB (reads), a
// snapshot (snapshot export) or the slot's indexed batch (apply, which must
// see its own writes).
type view struct {
	r   pebble.Reader
	cfg *Config
	// cache, during apply, holds every value read or written in the slot
	// (absent keys as nil entries with ok false), so repeated lookups of the
	// same records skip Pebble. INVARIANT: it agrees with the batch, because
	// every write goes through txn.set and txn.del, which update it.
	cache map[string]cached
}

type cached struct {
	val []byte
	ok  bool
}

// get returns the value at k, which the caller must not modify; ok is false
// if absent.
func (v *view) get(k []byte) (val []byte, ok bool, err error) {
	if v.cache != nil {
		if c, hit := v.cache[string(k)]; hit {
			return c.val, c.ok, nil
		}
		val, ok, err = v.load(k)
		if err == nil {
			v.cache[string(k)] = cached{val, ok}
		}
		return val, ok, err
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

// txn is the write side of one slot's apply: a view over the slot's indexed
// batch that keeps the state checksum current on every write.
//
// INVARIANT: sum is the checksum of the logical state as the batch would
// leave it: the DB's state plus every write made through set and del.
type txn struct {
	view
	b      *pebble.Batch
	sum    uint64
	writes int // number of set/del calls, to catch a failing command that wrote
	ctr    counters
}

func (t *txn) set(k, val []byte) error {
	old, ok, err := t.get(k)
	if err != nil {
		return err
	}
	if ok {
		if bytes.Equal(old, val) {
			return nil
		}
		t.sum -= kvHash(k, old)
	}
	t.sum += kvHash(k, val)
	t.writes++
	if err := t.b.Set(k, val, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	if val == nil {
		val = []byte{}
	}
	t.cache[string(k)] = cached{val: bytes.Clone(val), ok: true}
	return nil
}

func (t *txn) del(k []byte) error {
	old, ok, err := t.get(k)
	if err != nil || !ok {
		return err
	}
	t.sum -= kvHash(k, old)
	t.writes++
	if err := t.b.Delete(k, nil); err != nil {
		return fmt.Errorf("%w: %w", ErrStorage, err)
	}
	t.cache[string(k)] = cached{}
	return nil
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
