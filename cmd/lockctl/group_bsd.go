//go:build unix && !linux

package main

// becomeSubreaper does nothing here: only Linux has child subreapers, so
// a process that left the command's group is not stopped.
func becomeSubreaper() {}

// adoptedChildren returns nothing here: lockctl adopts no orphans.
func adoptedChildren(self int) []int { return nil }
