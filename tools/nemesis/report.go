package nemesis

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Verdict is the one-line verdict of a run.
func (r *Result) Verdict() string {
	w := ""
	if r.Weaken != "" {
		w = " weaken=" + r.Weaken
	}
	if r.Weaken != "" {
		if r.Detected() {
			return fmt.Sprintf("nemesis: DETECTED seed=%d duration=%v%s: the target checker %s fired (%d violations: %s); history %s", r.Seed, r.Duration.Round(time.Second), w, r.Target, len(r.Violations), strings.Join(r.ViolatedCheckers(), ", "), r.HistoryFile)
		}
		return fmt.Sprintf("nemesis: NOT DETECTED seed=%d duration=%v%s: the target checker %s did not fire (%d violations: %s)", r.Seed, r.Duration.Round(time.Second), w, r.Target, len(r.Violations), strings.Join(r.ViolatedCheckers(), ", "))
	}
	if r.OK() {
		return fmt.Sprintf("nemesis: PASS seed=%d duration=%v%s: 0 violations", r.Seed, r.Duration.Round(time.Second), w)
	}
	return fmt.Sprintf("nemesis: FAIL seed=%d duration=%v%s: %d violations (%s); history %s", r.Seed, r.Duration.Round(time.Second), w, len(r.Violations), strings.Join(r.ViolatedCheckers(), ", "), r.HistoryFile)
}

// ViolatedCheckers lists the checkers that found a violation.
func (r *Result) ViolatedCheckers() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range r.Violations {
		if !seen[v.Checker] {
			seen[v.Checker] = true
			out = append(out, v.Checker)
		}
	}
	sort.Strings(out)
	return out
}

// WriteReport writes the verdict, the summary table and the violations.
func (r *Result) WriteReport(w io.Writer) {
	fmt.Fprintln(w, r.Verdict())
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "seed\t%d\n", r.Seed)
	var ops []string
	total := 0
	for _, op := range sortedKeys(r.Operations) {
		m := r.Operations[op]
		var parts []string
		for _, t := range sortedKeys(m) {
			parts = append(parts, fmt.Sprintf("%s %d", t, m[t]))
			total += m[t]
		}
		ops = append(ops, fmt.Sprintf("%s(%s)", op, strings.Join(parts, ", ")))
	}
	fmt.Fprintf(tw, "operations\t%d: %s\n", total, strings.Join(ops, " "))
	nf := 0
	var fs []string
	kinds := map[string]bool{}
	for _, k := range sortedKeys(r.Faults) {
		kinds[k] = true
	}
	for k := range r.Floors {
		if kind, ok := strings.CutPrefix(k, floorFaultPrefix); ok {
			kinds[kind] = true
		}
	}
	for _, k := range sortedKeys(kinds) {
		nf += r.Faults[k]
		fs = append(fs, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	fmt.Fprintf(tw, "faults applied\t%d: %s\n", nf, strings.Join(fs, ", "))
	if len(r.FaultErrors) > 0 {
		fmt.Fprintf(tw, "faults NOT applied\t%d\n", len(r.FaultErrors))
	}
	fmt.Fprintf(tw, "failovers\t%d\n", r.Failovers)
	fmt.Fprintf(tw, "resource writes\t%d accepted, %d rejected\n", r.ResourceAccepted, r.ResourceRejected)
	fmt.Fprintf(tw, "zombie pauses\t%d past the session lease: %d lost their lock at the first look, %d INTACT\n", len(r.Mutex.Zombies), len(r.Mutex.Zombies)-r.intactZombies(), r.intactZombies())
	fmt.Fprintf(tw, "stale writes\t%d attempted by zombies: %d refused by fencing, %d accepted (no later claim yet), %d lost in transit\n",
		r.Stale.Attempted, r.Stale.Refused, r.Stale.Accepted, r.Stale.Attempted-r.Stale.Refused-r.Stale.Accepted)
	fmt.Fprintf(tw, "unfenced register\t%d stale writes taken; %d writes undid %d increments (what fencing prevented)\n", r.Stale.OpenTaken, r.Stale.OpenLostWrites, r.Stale.OpenLostIncrements)
	dec := "linearizable"
	switch {
	case !r.Decided:
		dec = "UNDECIDED (porcupine timed out)"
	case hasChecker(r.Violations, CheckerLinearizable):
		dec = "NOT linearizable"
	}
	fmt.Fprintf(tw, "register ops\t%d, %s\n", r.RegisterOps, dec)
	fmt.Fprintf(tw, "recovery\t%v\n", r.Recovery.Round(time.Millisecond))
	fmt.Fprintf(tw, "violations\t%d\n", len(r.Violations))
	tw.Flush()
	r.writeCheckers(w)
	const maxShown = 20
	for i, v := range r.Violations {
		if i == maxShown {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Violations)-maxShown)
			break
		}
		fmt.Fprintln(w, "  violation:", v)
	}
	for _, z := range r.Mutex.Zombies {
		fmt.Fprintln(w, "  zombie:", z.Outcome())
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
}

// checkerNames lists every checker, in report order.
var checkerNames = []string{CheckerFencing, CheckerInterleaving, CheckerLostUpdate, CheckerMutex, CheckerAckSet,
	CheckerLinearizable, CheckerOverlap, CheckerChecksums, CheckerRecovery, CheckerFaults, CheckerFloor}

// writeCheckers writes, per checker, what it judged, its floor and its
// violations.
func (r *Result) writeCheckers(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "checker\tjudged\tfloor\tviolations\n")
	count := map[string]int{}
	for _, v := range r.Violations {
		count[v.Checker]++
	}
	row := func(name string, judged, floor string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", name, judged, floor, count[name])
	}
	for _, c := range checkerNames {
		judged, floor := "-", "-"
		if n, ok := r.Judged[c]; ok {
			judged = fmt.Sprint(n)
		}
		if f, ok := r.Floors[c]; ok {
			floor = fmt.Sprint(f)
		}
		row(c, judged, floor)
	}
	for _, k := range []string{FloorZombies, FloorStaleAttempted, FloorStaleRefused} {
		if f, ok := r.Floors[k]; ok {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t\n", k, r.Judged[k], f)
		}
	}
	tw.Flush()
}

func (r *Result) intactZombies() int {
	n := 0
	for _, z := range r.Mutex.Zombies {
		if z.Intact {
			n++
		}
	}
	return n
}

func hasChecker(vs []Violation, c string) bool {
	for _, v := range vs {
		if v.Checker == c {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
