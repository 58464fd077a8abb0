package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/<pid>/stat.
// It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// ProcUsage is the CPU time and resident memory of a set of processes.
type ProcUsage struct {
	CPU time.Duration // user + system
	RSS int64         // bytes
}

// ReadProcUsage sums the CPU time and RSS of pids from /proc. A pid that
// is gone is an error: the measurement would be wrong.
func ReadProcUsage(pids []int) (ProcUsage, error) {
	var u ProcUsage
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return u, fmt.Errorf("bench: reading process %d: %w", pid, err)
		}
		cpu, err := parseStatCPU(b)
		if err != nil {
			return u, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
		}
		u.CPU += cpu
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return u, fmt.Errorf("bench: reading process %d: %w", pid, err)
		}
		rss, err := parseStatusRSS(st)
		if err != nil {
			return u, fmt.Errorf("bench: /proc/%d/status: %w", pid, err)
		}
		u.RSS += rss
	}
	return u, nil
}

// parseStatCPU returns utime+stime from the text of /proc/<pid>/stat. The
// command name (field 2) may hold spaces and parentheses, so fields are
// counted from the last ')'.
func parseStatCPU(b []byte) (time.Duration, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' in stat line")
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state(3) ppid(4) ... utime(14) stime(15); f[0] is
	// field 3.
	if len(f) < 13 {
		return 0, fmt.Errorf("stat line has %d fields after the name", len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("bad utime/stime %q %q", f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// parseStatusRSS returns VmRSS from the text of /proc/<pid>/status.
func parseStatusRSS(b []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("bad VmRSS line %q", line)
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("bad VmRSS line %q", line)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS line")
}
