package namespace

import (
	"bytes"
	"fmt"
	"slices"
)

// stateCache is the Store's write-through cache of committed values.
//
// # Why
//
// Every write the apply path makes reads the key's old value first (the
// incremental checksum subtracts the old pair's share; an unchanged value is
// not written again), and every command reads a few records (tenant,
// session, node). Before this cache those reads were Pebble point reads
// through the slot's indexed batch, which merge the batch with the memtables
// and every level: about 60% of apply CPU in a lock-heavy profile.
//
// The cache is exact, not a hint, because the Store is the only writer of
// its keys ('n', keys.go) and one goroutine applies: an entry is what Pebble
// holds for the key as of the last committed slot. It is
//
//   - filled by the applier with every value it read or wrote in a slot, and
//     updated only after that slot's batch committed, under the write lock
//     (so readers, under the read lock, see the cache and Pebble at the same
//     slot);
//   - never filled by readers (they may run concurrently with the applier,
//     which reads the map without a lock);
//   - emptied by InstallSnapshot, and empty after Open (reopen);
//   - bounded by cacheBudget: past it, arbitrary entries are dropped, which
//     costs a later Pebble read and nothing else.
//
// Absent keys are cached too (the lock index of a free lock, the held-lock
// key of a session that does not hold it). A value longer than cacheFullMax
// (file contents) is cached only by its checksum share: enough for a write's
// checksum update, while a read of its bytes goes to Pebble.
//
// Under invariants builds ApplySlot checks after every slot that the entries
// the slot touched agree with Pebble, and a sample of cacheCheckSample other
// entries (checkCache), so every entry is checked again and again while the
// cost per slot stays bounded; after one slot in a hundred it checks the byte
// accounting, a walk of the map without Pebble reads. It once checked every entry after one slot in
// twenty: a cost per slot that grew with the cache, so that in a long-running
// replica of a busy cell (a cache of tens of thousands of entries, a loaded
// machine) applying a slot took tens of milliseconds. The master's clients
// wait for its apply, so the cell's pace followed the master, while the
// follower whose process ran longest (the biggest cache) applied more
// slowly than the master chose: once it fell behind (a pause, a partition)
// it never caught up, and looked like a replica that had stopped learning.
//
// Tried and dropped: caching decoded records (nodeRec and friends). With the
// binary record encoding (reccodec.go) decoding costs less than the copy a
// decoded cache must hand out to keep callers from mutating shared records.
type stateCache struct {
	m      map[string]centry
	bytes  int // approximate memory held: keys, values, per-entry overhead
	budget int // cacheBudget; smaller in tests
}

// centry is one cached key.
type centry struct {
	// val is the value when present and full; nil otherwise.
	val []byte
	// hash is kvHash(key, value) when present.
	hash uint64
	// present is false for a key that is absent.
	present bool
	// full is true when val holds the value. Only a present value longer
	// than cacheFullMax is cached without it.
	full bool
}

const (
	// cacheCheckSample is how many cache entries, besides the slot's own,
	// invariants builds compare with Pebble after each applied slot. Go's
	// map iteration starts at a random entry, so the sample moves.
	cacheCheckSample = 32
	// cacheFullMax is the longest value cached whole.
	cacheFullMax = 1 << 10
	// cacheBudget bounds the cache's memory, roughly.
	cacheBudget = 64 << 20
	// cacheEntryOverhead approximates a map entry's own cost in bytes.
	cacheEntryOverhead = 80
)

func newStateCache() *stateCache {
	return &stateCache{m: make(map[string]centry), budget: cacheBudget}
}

func entrySize(k string, e centry) int { return len(k) + len(e.val) + cacheEntryOverhead }

// lookup returns the cached entry for k. ok is false on a miss.
func (c *stateCache) lookup(k []byte) (e centry, ok bool) {
	e, ok = c.m[string(k)]
	return e, ok
}

// promote records the values a committed slot read or wrote.
// REQUIRES: s.mu held for writing, the slot committed.
func (c *stateCache) promote(slot map[string]sentry) {
	for k, se := range slot {
		e := se.centry
		if e.present && len(e.val) > cacheFullMax {
			e.val, e.full = nil, false
		}
		if old, ok := c.m[k]; ok {
			c.bytes -= entrySize(k, old)
		}
		c.m[k] = e
		c.bytes += entrySize(k, e)
	}
	if c.bytes > c.budget {
		c.shrink(c.budget * 3 / 4)
	}
}

// shrink drops entries (which ones does not matter: map order) until the
// cache holds at most target bytes.
func (c *stateCache) shrink(target int) {
	for k, e := range c.m {
		if c.bytes <= target {
			return
		}
		c.bytes -= entrySize(k, e)
		delete(c.m, k)
	}
}

// sentry is a key's entry in a slot's overlay: its value as the slot sees
// it. dirty marks a key the slot wrote; was records whether the key was
// present before the slot. INVARIANT: a present sentry is full.
type sentry struct {
	centry
	dirty bool
	was   bool
}

// checkCacheBytes checks the cache's byte accounting, walking every entry
// (no Pebble reads). REQUIRES: s.applyMu held.
func (s *Store) checkCacheBytes() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.checkCacheBytesLocked()
}

// REQUIRES: s.mu held.
func (s *Store) checkCacheBytesLocked() error {
	total := 0
	for k, e := range s.cache.m {
		total += entrySize(k, e)
	}
	if total != s.cache.bytes {
		return fmt.Errorf("%w: cache accounts %d bytes, holds %d", ErrCorrupt, s.cache.bytes, total)
	}
	return nil
}

// checkCache compares cache entries with Pebble: those for keys (nil: every
// entry) and up to sample others. It returns how many entries it compared,
// and an error wrapping ErrCorrupt on the first disagreement.
// REQUIRES: s.applyMu held (no slot is being applied).
func (s *Store) checkCache(keys []string, sample int) (checked int, err error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if keys == nil {
		keys = make([]string, 0, len(s.cache.m))
		for k := range s.cache.m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if err := s.checkCacheBytesLocked(); err != nil {
			return 0, err
		}
	} else {
		n := 0
		for k := range s.cache.m {
			if n == sample {
				break
			}
			keys = append(keys, k)
			n++
		}
	}
	v := s.view(s.db)
	for _, k := range keys {
		e, ok := s.cache.m[k]
		if !ok {
			continue
		}
		checked++
		val, present, err := v.load([]byte(k))
		if err != nil {
			return checked, err
		}
		switch {
		case present != e.present:
			return checked, fmt.Errorf("%w: cache says %q present=%v, Pebble %v", ErrCorrupt, k, e.present, present)
		case !present:
		case e.hash != kvHash([]byte(k), val):
			return checked, fmt.Errorf("%w: cached hash of %q is stale", ErrCorrupt, k)
		case e.full != (len(val) <= cacheFullMax):
			return checked, fmt.Errorf("%w: cache entry of %q (%d bytes) full=%v", ErrCorrupt, k, len(val), e.full)
		case e.full && !bytes.Equal(e.val, val):
			return checked, fmt.Errorf("%w: cached value of %q is stale", ErrCorrupt, k)
		}
	}
	return checked, nil
}
