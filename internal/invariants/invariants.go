// Package invariants gates expensive internal consistency checks.
//
// The checks run when the binary is built with -tags invariants or with the
// race detector; release builds pay nothing because Enabled is a constant and
// the compiler removes the dead branches. `make test` builds with the tag.
package invariants

import "sync/atomic"

// Sometimes returns true for roughly pct percent of calls when invariant
// checking is enabled, and never otherwise. It lets tests exercise rare paths
// (for example forcing an extra snapshot) without a test-only flag. It uses a
// counter rather than a random source, so a single-goroutine caller sees the
// same sequence on every run.
func Sometimes(pct int) bool {
	if !Enabled || pct <= 0 {
		return false
	}
	n := sometimesCounter.Add(1)
	return int(n%100) < pct
}

var sometimesCounter atomic.Uint64
