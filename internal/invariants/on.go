//go:build invariants || race

package invariants

// Enabled is true when the binary was built with -tags invariants or -race.
const Enabled = true
