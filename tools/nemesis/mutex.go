package nemesis

import (
	"fmt"
	"sort"
	"time"
)

// The mutual-exclusion checker judges lockcell's own promise, with no help
// from fencing: two holders never both believe they hold a lock.
//
// Every worker that takes a lock records the hold: when Acquire returned
// and when the hold ended (its last action under the lock), both on the
// host's CLOCK_MONOTONIC (MonoNow), which every process on the machine
// shares; the grant's generation; and whether the lock's context was still
// intact at the end (Lock.Context().Err() == nil, read after the end time,
// so intact means the holder believed it held the lock throughout). The
// nemesis records each SIGSTOP/SIGCONT it gives a worker on the same clock.
//
// A correct cell and client never let two intact holds of one lock overlap:
// the master grants the lock again only after the holder released it or
// its session expired at the master, and the holder's local lease (which
// its context consults) runs out before that. With lock-delay off (the
// suite's lock nodes) nothing else separates them, so a zombie — a holder
// stopped for longer than the session lease — that resumes believing it
// holds the lock overlaps the holders that came in between.

// Hold is one worker's hold of a lock.
type Hold struct {
	Worker int
	// Session is the holder's session. A session that still holds a grant
	// when it acquires the lock again (its Release was lost, say) gets the
	// same grant back: the same generation, which is no second grant.
	Session uint64
	Lock    string
	Gen     uint64
	// Start and End are host monotonic nanoseconds (MonoNow): when Acquire
	// returned and when the hold ended.
	Start, End int64
	// Intact reports Lock.Context().Err() == nil, looked at after End.
	Intact bool
	// Cause is why the context was not intact ("" if it was).
	Cause string
}

// Pause is a SIGSTOP .. SIGCONT of a worker by the nemesis, in host
// monotonic nanoseconds.
type Pause struct {
	Worker     int
	Stop, Cont int64
}

// Zombie is a hold during which its worker was stopped for longer than the
// session lease, and how it ended.
type Zombie struct {
	Hold
	// Paused is how long the worker was stopped.
	Paused time.Duration
	// LookAfter is how long after SIGCONT the hold ended (the holder's
	// first look).
	LookAfter time.Duration
}

// Outcome describes how the zombie ended its hold.
func (z Zombie) Outcome() string {
	if z.Intact {
		return fmt.Sprintf("worker %d, %s generation %d, stopped %v: INTACT at its look %v after SIGCONT", z.Worker, z.Lock, z.Gen, z.Paused.Round(time.Millisecond), z.LookAfter.Round(time.Microsecond))
	}
	return fmt.Sprintf("worker %d, %s generation %d, stopped %v: lost at its look %v after SIGCONT (%s)", z.Worker, z.Lock, z.Gen, z.Paused.Round(time.Millisecond), z.LookAfter.Round(time.Microsecond), z.Cause)
}

// MutexReport is what the mutual-exclusion checker judged.
type MutexReport struct {
	// Holds is the number of holds judged; Intact of them ended intact.
	Holds, Intact int
	// Zombies are the holds paused past the session lease.
	Zombies []Zombie
}

// CheckMutex judges holds and pauses (see above). It fails if two intact
// holds of one lock overlap in time, if a lock's generation is granted
// twice or goes backwards in the order of the intact holds, or if a zombie
// ends its hold with an intact context. lease is the session lease.
func CheckMutex(holds []Hold, pauses []Pause, lease time.Duration) (MutexReport, []Violation) {
	var rep MutexReport
	var out []Violation
	byWorker := map[int][]Pause{}
	for _, p := range pauses {
		byWorker[p.Worker] = append(byWorker[p.Worker], p)
	}
	byLock := map[string][]Hold{}
	for _, h := range holds {
		rep.Holds++
		if h.Intact {
			rep.Intact++
		}
		byLock[h.Lock] = append(byLock[h.Lock], h)
		for _, p := range byWorker[h.Worker] {
			if p.Stop >= h.Start && p.Cont <= h.End && time.Duration(p.Cont-p.Stop) > lease {
				z := Zombie{Hold: h, Paused: time.Duration(p.Cont - p.Stop), LookAfter: time.Duration(h.End - p.Cont)}
				rep.Zombies = append(rep.Zombies, z)
				if h.Intact {
					out = append(out, Violation{CheckerMutex, "zombie " + z.Outcome()})
				}
				break
			}
		}
	}
	locks := make([]string, 0, len(byLock))
	for l := range byLock {
		locks = append(locks, l)
	}
	sort.Strings(locks)
	for _, l := range locks {
		hs := byLock[l]
		sort.Slice(hs, func(i, j int) bool { return hs[i].Start < hs[j].Start })
		gens := map[uint64]Hold{}
		for _, h := range hs {
			if prev, dup := gens[h.Gen]; dup && !sameGrant(prev, h) {
				out = append(out, Violation{CheckerMutex, fmt.Sprintf("%s generation %d granted twice: to worker %d and to worker %d", l, h.Gen, prev.Worker, h.Worker)})
				continue
			}
			gens[h.Gen] = h
		}
		// Intact holds in order of their start: each must start after
		// every earlier one ended (reach is the one that ends last), with a
		// higher generation than the one before it.
		var prev, reach *Hold
		for i := range hs {
			h := &hs[i]
			if !h.Intact {
				continue
			}
			if reach != nil && h.Start < reach.End {
				out = append(out, Violation{CheckerMutex, fmt.Sprintf("%s: intact holds overlap for %v: worker %d (generation %d) and worker %d (generation %d)",
					l, time.Duration(min(reach.End, h.End)-h.Start).Round(time.Microsecond), reach.Worker, reach.Gen, h.Worker, h.Gen)})
			}
			if prev != nil && h.Gen <= prev.Gen && !sameGrant(*prev, *h) {
				out = append(out, Violation{CheckerMutex, fmt.Sprintf("%s: generation went backwards: worker %d held %d, then worker %d held %d", l, prev.Worker, prev.Gen, h.Worker, h.Gen)})
			}
			prev = h
			if reach == nil || h.End > reach.End {
				reach = h
			}
		}
	}
	sort.Slice(rep.Zombies, func(i, j int) bool { return rep.Zombies[i].Start < rep.Zombies[j].Start })
	return rep, out
}

// sameGrant reports two holds of one grant by one session.
func sameGrant(a, b Hold) bool {
	return a.Worker == b.Worker && a.Session == b.Session && a.Session != 0 && a.Gen == b.Gen && a.Lock == b.Lock
}

// HoldsAndPauses extracts the holds and the nemesis's worker pauses from a
// history.
func HoldsAndPauses(entries []Entry) ([]Hold, []Pause) {
	var hs []Hold
	var ps []Pause
	for _, e := range entries {
		switch e.Type {
		case TypeHold:
			hs = append(hs, Hold{Worker: e.Worker, Session: e.Session, Lock: e.Key, Gen: e.Gen, Start: e.Start, End: e.End, Intact: e.Intact, Cause: e.Err})
		case TypeStopped:
			ps = append(ps, Pause{Worker: e.Worker, Stop: e.Start, Cont: e.End})
		}
	}
	return hs, ps
}
