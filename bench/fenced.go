package bench

import (
	"fmt"
	"sync"
)

// FencedCounter is the protected resource of the contended workload: an
// in-process counter that lock holders increment, which records every
// safety violation it can see. A holder calls Enter with its grant's
// fencing token once it holds the lock and Exit before it releases it.
//
// Two violations are counted: an overlap (Enter while another holder is
// inside) and a stale token (a non-zero token below one already seen, which
// a fenced server would reject). A token of 0 means "none" and is not
// checked for order.
type FencedCounter struct {
	mu      sync.Mutex
	inside  int
	value   uint64
	last    uint64
	overlap uint64
	stale   uint64
	first   string
}

// Enter records a holder entering with token.
func (f *FencedCounter) Enter(token uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inside++
	if f.inside > 1 {
		f.overlap++
		f.note(fmt.Sprintf("overlap: %d holders inside (token %d)", f.inside, token))
	}
	if token != 0 {
		if token < f.last {
			f.stale++
			f.note(fmt.Sprintf("stale token %d after %d", token, f.last))
		} else {
			f.last = token
		}
	}
	f.value++
}

// Exit records a holder leaving.
func (f *FencedCounter) Exit() {
	f.mu.Lock()
	f.inside--
	f.mu.Unlock()
}

func (f *FencedCounter) note(s string) {
	if f.first == "" {
		f.first = s
	}
}

// Value returns how many times holders entered.
func (f *FencedCounter) Value() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.value
}

// Violations returns the overlaps and stale tokens seen, and the first
// violation in words ("" if none).
func (f *FencedCounter) Violations() (overlaps, stale uint64, first string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.overlap, f.stale, f.first
}
