package nemesis

import (
	"syscall"
	"unsafe"
)

// MonoNow reads the host's CLOCK_MONOTONIC in nanoseconds. Unlike a
// time.Time's monotonic reading, which is private to its process, this
// clock is shared by every process on the machine, so hold intervals that
// different worker processes record can be compared with each other and
// with the nemesis's pauses. It counts on while a process is stopped.
func MonoNow() int64 {
	var ts syscall.Timespec
	const clockMonotonic = 1
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, clockMonotonic, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		// NB: CLOCK_MONOTONIC exists on every Linux; failing to read it
		// is a broken invariant of the platform.
		panic("nemesis: clock_gettime(CLOCK_MONOTONIC): " + errno.Error())
	}
	return ts.Nano()
}
