package cell

import (
	"sync"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
)

// cellClock stamps the commands this replica proposes with the cell's time,
// the only time the namespace ever uses (creation and modification stamps,
// lock-delay). The rule, which doc.go states for users:
//
//  1. A stamp is never below the state's clock (namespace.Store.Clock, the
//     time of the last command applied) nor below the previous stamp this
//     replica handed out, so time in the state never goes backwards across
//     masters (DESIGN.md invariant 9). Apply enforces the same with
//     max(clock, stamp); the master keeps its stamps honest so that apply
//     never has to.
//  2. While a lock-delay may be running — the state's clock has not reached
//     the latest lock-delay end the state records, or this replica has
//     stamped a command that may start one (ExpireSession) and has not yet
//     seen it applied or refused — the cell's time advances exactly as this
//     replica's monotonic clock does since its previous stamp, and since
//     it became master for its first one. No wall clock moves it then, so
//     no wall clock can cut a lock-delay short (a master whose clock is
//     minutes ahead) or stretch it (one minutes behind): a lock-delay of d
//     lasts d of real time, as the masters' monotonic clocks measure it
//     (with the same rate assumption the master lease makes).
//  3. Otherwise the stamp is this replica's wall clock, held at the previous
//     stamp (or the end of the last lock-delay, if later) if the wall clock
//     is behind it. With no lock-delay running
//     nothing times anything, so catching up with the wall clock (after a
//     fail-over gap, or a previous master whose clock was behind) cuts
//     nothing short, and holding still while the wall clock catches up
//     (after a master whose clock was ahead) stretches nothing.
//
// Tried first: max(the state's clock, the master's wall clock), which keeps
// time from going backwards but not from jumping: a new master whose clock
// is minutes ahead ends every running lock-delay on its first command, and
// after it a master with a good clock holds the cell's time still for those
// minutes, stretching every lock-delay started meanwhile by as much. Also
// considered: stamps that follow the monotonic clock alone. They are safe,
// but lose the wall clock for good: every fail-over gap (and every idle
// stretch before one, since the state's clock stands still while nothing
// is applied) would put the cell's time further behind the real one, and
// with it every creation and modification stamp users read.
//
// Methods are safe for concurrent use.
type cellClock struct {
	wall func() time.Time
	mono monotime.Clock
	// state reads the applied state's clock and latest lock-delay end.
	state func() (now, delayEnd int64, err error)

	mu struct {
		sync.Mutex
		// last is the latest stamp handed out (or the state's clock when
		// that was higher), at monotonic instant lastAt.
		last   int64
		lastAt monotime.Time
		// delaying counts stamped commands that may start a lock-delay and
		// are not yet applied or refused.
		delaying int
	}
}

func newCellClock(wall func() time.Time, mono monotime.Clock, state func() (int64, int64, error)) *cellClock {
	if wall == nil {
		wall = time.Now
	}
	c := &cellClock{wall: wall, mono: mono, state: state}
	c.mu.lastAt = mono.Now()
	return c
}

// rebase starts a master term: the first stamp of the term counts the
// monotonic clock from now, never from a stamp made before another master
// may have stamped (its commands may carry times up to ours, made later in
// real time). REQUIRES: the state holds everything chosen before the term.
func (c *cellClock) rebase() error {
	applied, _, err := c.state()
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mu.last = max(c.mu.last, applied)
	if c.mu.last == 0 {
		// A new cell: nothing was ever stamped, so nothing can be cut short.
		c.mu.last = c.wall().UnixNano()
	}
	c.mu.lastAt = c.mono.Now()
	return nil
}

// next computes the stamp for now and the state it leaves.
// REQUIRES: c.mu held.
func (c *cellClock) nextLocked() (stamp int64, at monotime.Time, err error) {
	// Read the state under c.mu: a command that started a lock-delay is
	// either applied before this read (its end is in delayEnd) or settled
	// after this stamp (delaying still counts it).
	applied, delayEnd, err := c.state()
	if err != nil {
		return 0, 0, err
	}
	at = c.mono.Now()
	last, lastAt := c.mu.last, c.mu.lastAt
	if applied > last {
		// Another master's commands were applied since our last stamp.
		last, lastAt = applied, at
	}
	base := last + int64(max(at.Sub(lastAt), 0))
	if c.mu.delaying > 0 || base < delayEnd {
		return base, at, nil
	}
	// Every lock-delay has ended by base. Holding still below its end
	// would start it again (the next stamp counts from the held one), so
	// the hold is at the end at the least.
	return max(last, delayEnd, c.wall().UnixNano()), at, nil
}

// stamp returns the time to stamp op with and a function to call exactly
// once when op's outcome is known (applied or refused).
func (c *cellClock) stamp(op namespace.Op) (int64, func(), error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, at, err := c.nextLocked()
	if err != nil {
		return 0, nil, err
	}
	c.mu.last, c.mu.lastAt = s, at
	if _, ok := op.(*namespace.ExpireSession); !ok {
		return s, func() {}, nil
	}
	c.mu.delaying++
	var once sync.Once
	return s, func() {
		once.Do(func() {
			c.mu.Lock()
			c.mu.delaying--
			c.mu.Unlock()
		})
	}, nil
}

// now returns the cell's time as a stamp taken now would carry it, without
// handing one out (for timers that wait for a lock-delay to end).
func (c *cellClock) now() (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, _, err := c.nextLocked()
	return s, err
}
