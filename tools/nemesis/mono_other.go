//go:build !linux

package nemesis

import "time"

// MonoNow stands in for the host's monotonic clock where the suite cannot
// read CLOCK_MONOTONIC: the wall clock in nanoseconds, which every process
// shares but which may step. The suite runs on Linux; this keeps the
// package building elsewhere.
func MonoNow() int64 { return time.Now().UnixNano() }
