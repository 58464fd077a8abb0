package cell

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
)

// clockFixture drives a cellClock with a manual monotonic clock, a wall
// clock skewed from "real" time, and a fake applied state.
type clockFixture struct {
	t        *testing.T
	mono     *monotime.Manual
	real     time.Time // the true time
	skew     time.Duration
	applied  int64 // the state's clock
	delayEnd int64 // the state's latest lock-delay end
	c        *cellClock
}

func newClockFixture(t *testing.T, skew time.Duration) *clockFixture {
	f := &clockFixture{t: t, mono: monotime.NewManual(monotime.Now()), real: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), skew: skew}
	f.c = newCellClock(func() time.Time { return f.real.Add(f.skew) }, f.mono,
		func() (int64, int64, error) { return f.applied, f.delayEnd, nil })
	return f
}

// delayFixture is a master term that begins while a lock-delay has 10 s to
// run: the state's clock is start, its latest lock-delay end start+10s.
func delayFixture(t *testing.T, skew time.Duration) (*clockFixture, time.Time) {
	f := newClockFixture(t, skew)
	start := f.real
	f.applied, f.delayEnd = start.UnixNano(), start.Add(10*time.Second).UnixNano()
	f.rebase()
	return f, start
}

func (f *clockFixture) advance(d time.Duration) {
	f.mono.Advance(d)
	f.real = f.real.Add(d)
}

func (f *clockFixture) rebase() {
	f.t.Helper()
	if err := f.c.rebase(); err != nil {
		f.t.Fatal(err)
	}
}

// stamp stamps an ordinary command (or an ExpireSession) and "applies" it.
func (f *clockFixture) stamp(op namespace.Op) (int64, func()) {
	f.t.Helper()
	s, settle, err := f.c.stamp(op)
	if err != nil {
		f.t.Fatal(err)
	}
	return s, settle
}

func (f *clockFixture) plain() int64 {
	f.t.Helper()
	s, settle := f.stamp(&namespace.Acquire{})
	settle()
	f.applied = max(f.applied, s)
	return s
}

func (f *clockFixture) want(what string, got int64, want time.Time) {
	f.t.Helper()
	if got != want.UnixNano() {
		f.t.Fatalf("%s: stamp %v, want %v (off by %v)", what, time.Unix(0, got).UTC(), want.UTC(), time.Duration(got-want.UnixNano()))
	}
}

// A new cell starts at the master's wall clock.
func TestCellClockNewCell(t *testing.T) {
	f := newClockFixture(t, 0)
	f.rebase()
	f.want("first stamp", f.plain(), f.real)
	f.advance(time.Second)
	f.want("one second later", f.plain(), f.real)
}

// A master whose wall clock is minutes ahead takes over while a lock-delay
// runs: its stamps follow its monotonic clock until the delay's end, and
// only then its wall clock.
func TestCellClockAheadWaitsOutLockDelay(t *testing.T) {
	f, start := delayFixture(t, 5*time.Minute)
	f.advance(3 * time.Second)
	f.want("3 s into the delay", f.plain(), start.Add(3*time.Second))
	f.advance(6 * time.Second)
	f.want("9 s into the delay", f.plain(), start.Add(9*time.Second))
	f.advance(time.Second)
	// The stamp that reaches the delay's end may take the wall clock.
	f.want("at the delay's end", f.plain(), f.real.Add(5*time.Minute))
}

// A master whose wall clock is minutes behind neither goes back nor stands
// still while a lock-delay runs; after it, it holds the time until its wall
// clock catches up.
func TestCellClockBehindNeverGoesBack(t *testing.T) {
	f, start := delayFixture(t, -5*time.Minute)
	f.advance(4 * time.Second)
	f.want("4 s into the delay", f.plain(), start.Add(4*time.Second))
	f.advance(6 * time.Second)
	held := f.plain()
	f.want("at the delay's end", held, start.Add(10*time.Second))
	f.advance(time.Minute)
	f.want("a minute later, wall clock still behind", f.plain(), start.Add(10*time.Second))
	f.advance(5 * time.Minute)
	f.want("once the wall clock caught up", f.plain(), f.real.Add(-5*time.Minute))
}

// An ExpireSession in flight (stamped, not yet applied) may start a
// lock-delay the state does not show yet: until it settles, no stamp jumps
// to the wall clock.
func TestCellClockExpiryInFlightBlocksJumps(t *testing.T) {
	f := newClockFixture(t, 0)
	f.rebase()
	f.plain()
	f.skew = 5 * time.Minute // the wall clock steps forward
	expire, settle := f.stamp(&namespace.ExpireSession{Session: 1})
	f.want("the expiry itself", expire, f.real.Add(5*time.Minute))
	f.skew = 10 * time.Minute // and steps again
	f.advance(2 * time.Second)
	f.want("while the expiry is in flight", f.plain(), time.Unix(0, expire).Add(2*time.Second))
	// Applied: the state records the delay's end; then it settles.
	f.applied, f.delayEnd = max(f.applied, expire), expire+int64(10*time.Second)
	settle()
	settle() // idempotent
	f.advance(2 * time.Second)
	f.want("while the delay runs", f.plain(), time.Unix(0, expire).Add(4*time.Second))
	f.advance(6 * time.Second)
	f.want("at the delay's end", f.plain(), f.real.Add(10*time.Minute))
}

// Each master term counts the monotonic clock from its own start: a master
// that stamped before another one stamped must not count the time in
// between, or a lock-delay the other started would end early.
func TestCellClockRebaseCountsFromTheTerm(t *testing.T) {
	f := newClockFixture(t, 0)
	f.rebase()
	first := f.plain()
	// Another master (whose clock was behind ours) takes over six seconds
	// later, stamps an expiry at our last stamp, and hands back at once.
	f.advance(6 * time.Second)
	f.applied, f.delayEnd = first, first+int64(10*time.Second)
	f.rebase()
	f.want("first stamp of the new term", f.plain(), time.Unix(0, first))
	f.advance(9 * time.Second)
	f.want("9 s into the other master's delay", f.plain(), time.Unix(0, first).Add(9*time.Second))
}

// Stamps never fall below the state's clock, whoever advanced it.
func TestCellClockNeverBelowTheState(t *testing.T) {
	f := newClockFixture(t, -time.Hour)
	f.rebase()
	if s := f.plain(); s != f.real.Add(-time.Hour).UnixNano() {
		t.Fatalf("first stamp %d", s)
	}
	f.applied = f.real.UnixNano() // another master's command, an hour later
	if s := f.plain(); s < f.applied {
		t.Fatalf("stamp %d below the state's clock %d", s, f.applied)
	}
}

// With a wall clock behind and a stamp every half second, the cell's time
// still reaches a lock-delay's end exactly when the monotonic clock does:
// holding still never restarts the count.
func TestCellClockBehindFrequentStampsEndTheDelay(t *testing.T) {
	f, start := delayFixture(t, -5*time.Minute)
	for i := 1; i <= 30; i++ {
		f.advance(500 * time.Millisecond)
		s := f.plain()
		if elapsed := time.Duration(i) * 500 * time.Millisecond; elapsed >= 10*time.Second && s < f.delayEnd {
			t.Fatalf("%v after the term began the stamp %v is still below the delay's end %v",
				elapsed, time.Unix(0, s).UTC(), time.Unix(0, f.delayEnd).UTC())
		} else if s > start.Add(elapsed).UnixNano() {
			t.Fatalf("%v after the term began the stamp %v ran ahead of the monotonic clock", elapsed, time.Unix(0, s).UTC())
		}
	}
}
