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
// NB: a sorted structure was the alternative; a binary heap wins because the
// hot operation is a KeepAlive moving one session's deadline later (a sift
// down, O(log n)), and the expiry loop only ever needs the minimum and the
// prefix at or before now.
//
// INVARIANT: for every i, s := idx[i] has s.heapIdx == i, and s is not
// expiring; every live session of the Manager is in it exactly once.
type leaseIndex []*sess

func (h leaseIndex) Len() int { return len(h) }

func (h leaseIndex) Less(i, j int) bool { return earlier(h[i], h[j]) }

func (h leaseIndex) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

// Push and Pop are for container/heap only; use add and remove.
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

func (h *leaseIndex) add(s *sess) { heap.Push(h, s) }

// fix restores the order after s.leaseEnd changed.
func (h *leaseIndex) fix(s *sess) { heap.Fix(h, s.heapIdx) }

func (h *leaseIndex) remove(s *sess) { heap.Remove(h, s.heapIdx) }

// due returns the sessions whose lease ended at or before now, ordered by
// (lease end, ID). It does not change the index.
func (h leaseIndex) due(now monotime.Time) []*sess {
	var out []*sess
	// Walk the heap from the root, descending only below entries that are
	// due: a child is never earlier than its parent.
	var walk func(i int)
	walk = func(i int) {
		if i >= len(h) || h[i].leaseEnd.After(now) {
			return
		}
		out = append(out, h[i])
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
// ok is false when the index is empty.
func (h leaseIndex) next(now monotime.Time) (at monotime.Time, ok bool) {
	if len(h) == 0 {
		return 0, false
	}
	return max(h[0].leaseEnd, now), true
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
		if i > 0 && earlier(s, h[(i-1)/2]) {
			panic("session: invariant broken: leaseIndex heap order")
		}
	}
}
