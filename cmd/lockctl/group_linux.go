package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER from <linux/prctl.h>.
const prSetChildSubreaper = 36

// becomeSubreaper makes lockctl a child subreaper: a descendant orphaned
// by its parent's death is re-parented to lockctl instead of to init, so
// that lock can stop descendants that left the command's process group.
func becomeSubreaper() {
	_, _, _ = syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0)
}

// adoptedChildren returns the process ids whose parent is self: the
// command and, lockctl being a subreaper, the orphans it adopted.
func adoptedChildren(self int) []int {
	var pids []int
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
	found := false
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		found = true
		for _, s := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(s); err == nil {
				pids = append(pids, pid)
			}
		}
	}
	if found {
		return pids
	}
	// A kernel without /proc/PID/task/TID/children: scan every process.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
