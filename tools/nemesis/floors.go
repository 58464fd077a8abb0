package nemesis

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockcell/lockcell/tools/fencedkv"
)

// A checker that judged nothing proves nothing: each reports how much it
// judged (Result.Judged), and a run fails (CheckerFloor) when one judged
// less than its floor. The floors, for a run of m minutes of faults (m at
// least 1), are:
//
//	fencing            20·m fenced writes accepted by the resource
//	lost-update        10·m counter writes accepted
//	mutual-exclusion   10·m lock holds
//	zombies            m holds stopped past the session lease (runs with zombie workers)
//	stale-attempted    ⌈m/2⌉ writes by zombies that found their lock lost
//	stale-refused      1 of them refused by fencing (fenced runs; while
//	                   fail-overs come every few seconds each new master
//	                   extends every session, so a stopped zombie's session
//	                   may outlive its pause and nobody races it)
//	ack-set            20·m acknowledged creates
//	linearizable       20·m register operations decided by porcupine
//	master-overlap     20·m status polls that saw a master
//	checksums          every replica's checksum compared (5)
//	fault:KIND         1 of each fault kind of the schedule (normal runs)
//
// An undecided porcupine check (it timed out) fails the run on its own
// (CheckerLinearizable), and so does a fault that could not be applied
// (CheckerFaults).

// Floor keys that are not checker names.
const (
	FloorZombies        = "zombies"
	FloorStaleAttempted = "stale-attempted"
	FloorStaleRefused   = "stale-refused"
	floorFaultPrefix    = "fault:"
)

// FloorsFor returns the floors of a run of opts (see above).
func FloorsFor(opts Options) map[string]int {
	m := max(1, int(opts.Duration/time.Minute))
	half := (m + 1) / 2
	f := map[string]int{
		CheckerFencing:      20 * m,
		CheckerLostUpdate:   10 * m,
		CheckerMutex:        10 * m,
		FloorZombies:        m,
		FloorStaleAttempted: half,
		FloorStaleRefused:   1,
		CheckerAckSet:       20 * m,
		CheckerLinearizable: 20 * m,
		CheckerOverlap:      20 * m,
		CheckerChecksums:    5,
	}
	switch opts.Weaken {
	case "":
		for _, k := range FaultKinds() {
			f[floorFaultPrefix+k] = 1
		}
	case WeakenNoFence:
		delete(f, FloorStaleRefused) // nothing refuses
	}
	return f
}

// CheckFloors compares what res judged with floors.
func CheckFloors(res *Result, floors map[string]int) []Violation {
	keys := make([]string, 0, len(floors))
	for k := range floors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []Violation
	for _, k := range keys {
		var got int
		what := "judged"
		if kind, ok := strings.CutPrefix(k, floorFaultPrefix); ok {
			got, what = res.Faults[kind], "applied"
		} else {
			got = res.Judged[k]
		}
		if got < floors[k] {
			out = append(out, Violation{CheckerFloor, fmt.Sprintf("%s %s %d, below its floor of %d", k, what, got, floors[k])})
		}
	}
	return out
}

// StaleReport is what fencing prevented: the writes zombies made after
// their own look found their lock lost.
type StaleReport struct {
	// Attempted counts the zombies' stale writes to the fenced store;
	// Refused of them it refused, Accepted it took (no later holder had
	// claimed the resource yet, so nothing was overwritten), and the rest
	// never reached it.
	Attempted, Refused, Accepted int
	// OpenTaken counts the same writes taken by the unfenced register.
	OpenTaken int
	// OpenLostWrites counts the unfenced register's counter writes that set
	// it at or below the value it held, and OpenLostIncrements the
	// increments they undid: what fencing prevented.
	OpenLostWrites, OpenLostIncrements int
}

// ComputeStale matches the zombies' stale writes in the history with the
// fenced store's records and the unfenced register's.
func ComputeStale(entries []Entry, fenced, open []fencedkv.Record) StaleReport {
	var rep StaleReport
	type kv struct{ key, value string }
	stale := map[kv]bool{}
	for _, e := range entries {
		if e.Op == "fenced" && e.Stale && (e.Type == TypeOK || e.Type == TypeFail) {
			rep.Attempted++
			stale[kv{e.Key, e.Value}] = true
		}
	}
	for _, r := range fenced {
		if stale[kv{r.Key, string(r.Value)}] {
			if r.Accepted {
				rep.Accepted++
			} else {
				rep.Refused++
			}
		}
	}
	counters := map[string]uint64{}
	for _, r := range open {
		if !strings.HasPrefix(r.Key, "counter-") {
			continue
		}
		n, tag, err := ParseCounter(string(r.Value))
		if err != nil {
			continue
		}
		// The open write carries the same tag as the fenced one; the
		// counter values of the two stores differ.
		for k := range stale {
			if k.key == r.Key && strings.HasSuffix(k.value, " "+tag) {
				rep.OpenTaken++
				break
			}
		}
		if cur := counters[r.Key]; n <= cur {
			rep.OpenLostWrites++
			rep.OpenLostIncrements += int(cur + 1 - n)
		}
		counters[r.Key] = n
	}
	return rep
}
