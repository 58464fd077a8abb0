package session

import (
	"container/heap"
	"slices"

	"github.com/lockcell/lockcell/internal/monotime"
)

// leaseIndex orders the sessions whose expiry is not yet decided by lease
// end, so that the next deadline is the root and the due sessions are found
// without visiting the others. Ties break on ID, which makes every answer
// deterministic.
//
// The index is lazy: each session is filed under heapKey, the lease end it
// had when it was last placed, which is never later than its real lease end.
// A renewal only moves s.leaseEnd (O(1), no heap operation); an entry whose
// key is stale is re-filed under its real lease end when it reaches the root
// at or before the moment it matters (popDue, next). Every renewal would
// otherwise cost a sift; this way a session that renews every round costs
// one sift per time its old deadline comes up.
//
// NB: a sorted structure was the alternative; a binary heap wins because
// the expiry loop only ever needs the minimum and the prefix at or before
// now.
//
// INVARIANT: for every i, s := idx[i] has s.heapIdx == i, s is not
// expiring, and s.heapKey <= s.leaseEnd; every live session of the Manager
// is in it exactly once.
type leaseIndex []*sess

func (h leaseIndex) Len() int { return len(h) }

func (h leaseIndex) Less(i, j int) bool { return filedEarlier(h[i], h[j]) }

func (h leaseIndex) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

// Push and Pop are for container/heap only; use add, remove and popDue.
func (h *leaseIndex) Push(x any) {
	s := x.(*sess)
	s.heapIdx = len(*h)
	*h = append(*h, s)
}

func (h *leaseIndex) Pop() any {
	old := *h
	s := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	s.heapIdx = -1
	return s
}

// earlier orders sessions by (lease end, ID).
func earlier(a, b *sess) bool {
	if a.leaseEnd != b.leaseEnd {
		return a.leaseEnd < b.leaseEnd
	}
	return a.id < b.id
}

// filedEarlier orders sessions by (heap key, ID): the heap's order.
func filedEarlier(a, b *sess) bool {
	if a.heapKey != b.heapKey {
		return a.heapKey < b.heapKey
	}
	return a.id < b.id
}

// add files s under its lease end.
func (h *leaseIndex) add(s *sess) {
	s.heapKey = s.leaseEnd
	heap.Push(h, s)
}

// remove takes s out of the index, wherever it is filed.
func (h *leaseIndex) remove(s *sess) { heap.Remove(h, s.heapIdx) }

// refileRoot re-files the root under its real lease end until the root's
// key is exact. The root is then the earliest session by (lease end, ID):
// every other session's real key is at or after its filed key, which is at
// or after the root's. Each step makes one stale entry exact, so it ends.
//
// Sessions created together and renewed together come up stale together;
// once a sixteenth of the index has been re-filed one by one, rebuilding
// the whole heap under exact keys (O(n)) is cheaper than sifting the rest
// (O(log n) each), and bounds the time spent under the Manager's lock.
func (h *leaseIndex) refileRoot() {
	budget := len(*h)/16 + 1
	for len(*h) > 0 && (*h)[0].heapKey != (*h)[0].leaseEnd {
		if budget == 0 {
			for _, s := range *h {
				s.heapKey = s.leaseEnd
			}
			heap.Init(h)
			return
		}
		budget--
		(*h)[0].heapKey = (*h)[0].leaseEnd
		heap.Fix(h, 0)
	}
}

// popDue takes out the sessions whose lease ended at or before now and
// returns them ordered by (lease end, ID). Stale entries it meets on the way
// are re-filed, not returned: a session leaves only when its real lease end
// has passed.
func (h *leaseIndex) popDue(now monotime.Time) []*sess {
	var out []*sess
	for {
		h.refileRoot()
		if len(*h) == 0 || (*h)[0].leaseEnd.After(now) {
			return out
		}
		out = append(out, heap.Pop(h).(*sess))
	}
}

// due returns the sessions whose lease ended at or before now, ordered by
// (lease end, ID). It does not change the index.
func (h leaseIndex) due(now monotime.Time) []*sess {
	var out []*sess
	// Walk the heap from the root, descending only below entries filed at
	// or before now: a child is never filed earlier than its parent, and a
	// session is never filed later than its real lease end, so no due
	// session lies below an entry filed after now.
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || h[i].heapKey.After(now) {
			return
		}
		if !h[i].leaseEnd.After(now) {
			out = append(out, h[i])
		}
		walk(2*i + 1)
		walk(2*i + 2)
	}
	walk(0)
	slices.SortFunc(out, func(a, b *sess) int {
		switch {
		case earlier(a, b):
			return -1
		case earlier(b, a):
			return 1
		}
		return 0
	})
	return out
}

// next returns the earliest lease end, clamped to now when it has passed;
// ok is false when the index is empty. It may re-file stale entries at the
// root, which changes no answer of the index.
func (h *leaseIndex) next(now monotime.Time) (at monotime.Time, ok bool) {
	h.refileRoot()
	if len(*h) == 0 {
		return 0, false
	}
	return max((*h)[0].leaseEnd, now), true
}

// check panics if the heap invariants are broken.
func (h leaseIndex) check() {
	for i, s := range h {
		if s.heapIdx != i {
			panic("session: invariant broken: leaseIndex position out of date")
		}
		if s.expiring {
			panic("session: invariant broken: expiring session still in leaseIndex")
		}
		if s.heapKey.After(s.leaseEnd) {
			panic("session: invariant broken: session filed in leaseIndex after its lease end")
		}
		if i > 0 && filedEarlier(s, h[(i-1)/2]) {
			panic("session: invariant broken: leaseIndex heap order")
		}
	}
}
