package monotime

import (
	"sort"
	"sync"
	"time"
)

// Clock is a source of monotonic time that can also wait. Code that must wait
// for an instant (a session's lease end, the next keepalive answer) holds a
// Clock so that tests can substitute a Manual one; code that only decides
// takes `now Time` as an argument instead.
type Clock interface {
	// Now returns the clock's current instant.
	Now() Time
	// NewTimer returns an armed timer that fires once, d from now. A
	// non-positive d fires at once.
	NewTimer(d time.Duration) Timer
}

// Timer fires once after its duration, by making a value ready on C.
//
// A fire is a hint, not a promise: after Stop or Reset a fire from the old
// arming may still arrive if it raced with the call. Receivers therefore treat
// a fire as "look at Now again", and never as proof that a deadline passed.
type Timer interface {
	// C returns the channel on which the timer fires. It has a buffer of one,
	// and a fire that finds the buffer full is dropped.
	C() <-chan struct{}
	// Reset re-arms the timer to fire d from now, discarding a pending fire.
	Reset(d time.Duration)
	// Stop disarms the timer and discards a pending fire.
	Stop()
}

// Real returns the process's monotonic clock. Its timers are runtime timers,
// so inside a testing/synctest bubble they run on the bubble's fake clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() Time { return Now() }

func (realClock) NewTimer(d time.Duration) Timer {
	t := &realTimer{c: make(chan struct{}, 1)}
	t.t = time.AfterFunc(d, t.fire)
	return t
}

// realTimer adapts a runtime timer to Timer. NB: it uses AfterFunc rather than
// time.NewTimer because a time.Timer delivers a wall-clock time.Time, which is
// the type this package exists to keep out of lease code.
type realTimer struct {
	t *time.Timer
	c chan struct{}
}

func (t *realTimer) fire() {
	select {
	case t.c <- struct{}{}:
	default:
	}
}

func (t *realTimer) C() <-chan struct{} { return t.c }

func (t *realTimer) Reset(d time.Duration) {
	t.t.Stop()
	t.drain()
	t.t.Reset(d)
}

func (t *realTimer) Stop() {
	t.t.Stop()
	t.drain()
}

func (t *realTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// Manual is a Clock that moves only when told to, for tests. Its zero value is
// not usable; create one with NewManual. It is safe for concurrent use.
type Manual struct {
	mu     sync.Mutex
	now    Time
	timers map[*manualTimer]struct{} // armed timers
}

// NewManual returns a manual clock that reads start until advanced.
func NewManual(start Time) *Manual {
	return &Manual{now: start, timers: map[*manualTimer]struct{}{}}
}

// Now returns the manual clock's current instant.
func (m *Manual) Now() Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now
}

// NewTimer returns a timer that fires when the clock is advanced to d from
// now or beyond; a non-positive d fires at once.
func (m *Manual) NewTimer(d time.Duration) Timer {
	t := &manualTimer{m: m, c: make(chan struct{}, 1)}
	t.Reset(d)
	return t
}

// Advance moves the clock forward by d and fires, in deadline order, every
// armed timer whose deadline is at or before the new instant. It panics if d
// is negative: a monotonic clock never goes back, and a test that asks for it
// is broken.
func (m *Manual) Advance(d time.Duration) {
	if d < 0 {
		panic("monotime: Manual.Advance with a negative duration")
	}
	m.mu.Lock()
	m.now = m.now.Add(d)
	var due []*manualTimer
	for t := range m.timers {
		if !t.deadline.After(m.now) {
			due = append(due, t)
		}
	}
	sort.Slice(due, func(i, j int) bool { return due[i].deadline < due[j].deadline })
	for _, t := range due {
		delete(m.timers, t)
		t.fireLocked()
	}
	m.mu.Unlock()
}

// Armed returns how many timers are armed and not yet fired. Tests use it to
// learn that a goroutine has started waiting.
func (m *Manual) Armed() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timers)
}

type manualTimer struct {
	m        *Manual
	c        chan struct{}
	deadline Time // REQUIRES: m.mu held to read or write
}

func (t *manualTimer) C() <-chan struct{} { return t.c }

func (t *manualTimer) Reset(d time.Duration) {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	t.drain()
	t.deadline = t.m.now.Add(d)
	if d <= 0 {
		delete(t.m.timers, t)
		t.fireLocked()
		return
	}
	t.m.timers[t] = struct{}{}
}

func (t *manualTimer) Stop() {
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	delete(t.m.timers, t)
	t.drain()
}

// fireLocked makes a fire ready on the channel.
// REQUIRES: t.m.mu held.
func (t *manualTimer) fireLocked() {
	select {
	case t.c <- struct{}{}:
	default:
	}
}

func (t *manualTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}
