package cell

import "time"

// Test hooks for the package's external tests.

// SetWallClock makes the replica that c configures read its wall clock
// from wall instead of time.Now (a skewed clock). In-process tests only:
// nothing outside the package can set it.
func SetWallClock(c *Config, wall func() time.Time) { c.wallClock = wall }

// CellClock returns the replica's applied cell clock (namespace
// Store.Clock).
func (r *Replica) CellClock() (int64, error) {
	now, _, err := r.ns.Clock()
	return now, err
}
