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
	for _, k := range sortedKeys(r.Faults) {
		nf += r.Faults[k]
		fs = append(fs, fmt.Sprintf("%s %d", k, r.Faults[k]))
	}
	fmt.Fprintf(tw, "faults injected\t%d: %s\n", nf, strings.Join(fs, ", "))
	fmt.Fprintf(tw, "failovers\t%d\n", r.Failovers)
	fmt.Fprintf(tw, "resource writes\t%d accepted, %d rejected\n", r.ResourceAccepted, r.ResourceRejected)
	fmt.Fprintf(tw, "acked creates\t%d\n", r.AckedCreates)
	dec := "linearizable"
	switch {
	case !r.Decided:
		dec = "undecided (porcupine timed out)"
	case hasChecker(r.Violations, CheckerLinearizable):
		dec = "NOT linearizable"
	}
	fmt.Fprintf(tw, "register ops\t%d, %s\n", r.RegisterOps, dec)
	fmt.Fprintf(tw, "recovery\t%v\n", r.Recovery.Round(time.Millisecond))
	fmt.Fprintf(tw, "violations\t%d\n", len(r.Violations))
	tw.Flush()
	const maxShown = 20
	for i, v := range r.Violations {
		if i == maxShown {
			fmt.Fprintf(w, "  ... and %d more\n", len(r.Violations)-maxShown)
			break
		}
		fmt.Fprintln(w, "  violation:", v)
	}
	for _, n := range r.Notes {
		fmt.Fprintln(w, "  note:", n)
	}
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
