//go:build ignore

// Command testtime measures where the test suite spends its time: it
// builds each package's test binary as make test does (-tags invariants),
// runs the binaries one after another from their package directories, and
// reports per package and per top-level test the elapsed (wall) time and
// the CPU time (user+sys, including the child processes a test started and
// reaped). Wall time on a loaded machine is noisy; CPU time is much less
// so, which is why both are reported.
//
// A test's CPU time is read from /proc at each of the test binary's
// "=== RUN", "=== PAUSE", "=== CONT" and "--- PASS/FAIL/SKIP" lines and
// charged to the top-level tests running between two such lines, split
// evenly when tests run in parallel (so parallel tests' shares are
// estimates). Linux only.
//
// Usage (make test-time runs it):
//
//	go run scripts/testtime/main.go [-out DIR] [-top 20] [-run REGEXP] [packages]
//
// Each package's full -v output is kept in DIR/<package>.log and the
// per-test records in DIR/tests.jsonl.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var (
	out     = flag.String("out", "", "directory for the logs and tests.jsonl (default: a new temporary directory)")
	top     = flag.Int("top", 20, "how many tests to list by elapsed and by CPU time")
	runRe   = flag.String("run", "", "passed to each test binary as -test.run")
	timeout = flag.Duration("timeout", 9*time.Minute, "passed to each test binary as -test.timeout")
	tags    = flag.String("tags", "invariants", "build tags of the test binaries")
)

// record is one top-level test's (or, with Test empty, one package's)
// measurement.
type record struct {
	Pkg     string  `json:"pkg"`
	Test    string  `json:"test,omitempty"`
	Result  string  `json:"result,omitempty"`
	Elapsed float64 `json:"elapsed"`
	CPU     float64 `json:"cpu"`
}

var (
	eventRe = regexp.MustCompile(`^=== (RUN|PAUSE|CONT)\s+(\S+)`)
	doneRe  = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): (\S+) \(([0-9.]+)s\)`)
)

func main() {
	flag.Parse()
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	dir := *out
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "testtime-"); err != nil {
			fatal(err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		fatal(err)
	}
	list, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{.Dir}} {{len .TestGoFiles}} {{len .XTestGoFiles}}"}, pkgs...)...).Output()
	if err != nil {
		fatal(fmt.Errorf("go list: %w", err))
	}
	jsonl, err := os.Create(filepath.Join(dir, "tests.jsonl"))
	if err != nil {
		fatal(err)
	}
	defer jsonl.Close()
	enc := json.NewEncoder(jsonl)
	var pkgRecs, testRecs []record
	failed := false
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 || (f[2] == "0" && f[3] == "0") {
			continue
		}
		pkg, pdir := f[0], f[1]
		name := strings.ReplaceAll(pkg, "/", "_")
		bin := filepath.Join(dir, name+".test")
		if b, err := exec.Command("go", "test", "-tags", *tags, "-c", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "testtime: building %s: %v\n%s", pkg, err, b)
			failed = true
			continue
		}
		p, tests, err := measure(pkg, pdir, bin, filepath.Join(dir, name+".log"))
		if err != nil {
			fmt.Fprintf(os.Stderr, "testtime: %s: %v (log %s)\n", pkg, err, filepath.Join(dir, name+".log"))
			failed = true
		}
		fmt.Fprintf(os.Stderr, "%-50s %7.1fs wall %7.1fs CPU\n", pkg, p.Elapsed, p.CPU)
		pkgRecs = append(pkgRecs, p)
		testRecs = append(testRecs, tests...)
		_ = enc.Encode(p)
		for _, t := range tests {
			_ = enc.Encode(t)
		}
		_ = os.Remove(bin)
	}
	report(os.Stdout, pkgRecs, testRecs)
	fmt.Printf("\nlogs and tests.jsonl in %s\n", dir)
	if failed {
		os.Exit(1)
	}
}

// measure runs one test binary and returns the package's record and its
// top-level tests' records.
func measure(pkg, dir, bin, logPath string) (record, []record, error) {
	args := []string{"-test.v", "-test.count=1", "-test.timeout=" + timeout.String()}
	if *runRe != "" {
		args = append(args, "-test.run="+*runRe)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	logf, err := os.Create(logPath)
	if err != nil {
		return record{Pkg: pkg}, nil, err
	}
	defer logf.Close()
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return record{Pkg: pkg}, nil, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return record{Pkg: pkg}, nil, err
	}
	pid := cmd.Process.Pid
	running := map[string]bool{}
	started := map[string]time.Time{}
	charged := map[string]float64{}
	last := 0.0
	charge := func() {
		c, ok := procCPU(pid)
		if !ok {
			return
		}
		d := c - last
		last = c
		for t := range running {
			charged[t] += d / float64(len(running))
		}
	}
	var tests []record
	sc := bufio.NewScanner(io.TeeReader(stdout, logf))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		line := sc.Text()
		if m := eventRe.FindStringSubmatch(line); m != nil && !strings.Contains(m[2], "/") {
			charge()
			if m[1] == "PAUSE" {
				delete(running, m[2])
			} else {
				running[m[2]] = true
			}
			if m[1] != "PAUSE" {
				started[m[2]] = time.Now() // a parallel test counts from its CONT
			}
		} else if m := doneRe.FindStringSubmatch(line); m != nil && !strings.Contains(m[2], "/") {
			charge()
			delete(running, m[2])
			// A parallel test whose subtests are parallel reports only its
			// own function's time; count until its subtests ended.
			e, _ := strconv.ParseFloat(m[3], 64)
			if t0, ok := started[m[2]]; ok {
				e = max(e, time.Since(t0).Seconds())
			}
			tests = append(tests, record{Pkg: pkg, Test: m[2], Result: m[1], Elapsed: e, CPU: charged[m[2]]})
		}
	}
	werr := cmd.Wait()
	p := record{Pkg: pkg, Elapsed: time.Since(start).Seconds()}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		p.CPU = tv(ru.Utime) + tv(ru.Stime)
	}
	return p, tests, werr
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// procCPU reads the user+sys time of pid and of its reaped children.
func procCPU(pid int) (float64, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return 0, false
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 15 {
		return 0, false
	}
	// After the command name: state is f[0], utime f[11], stime f[12],
	// cutime f[13], cstime f[14], in clock ticks (100 per second on Linux).
	var ticks float64
	for _, k := range []int{11, 12, 13, 14} {
		v, err := strconv.ParseFloat(f[k], 64)
		if err != nil {
			return 0, false
		}
		ticks += v
	}
	return ticks / 100, true
}

func report(w io.Writer, pkgs, tests []record) {
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].Elapsed > pkgs[j].Elapsed })
	var wall, cpu float64
	fmt.Fprintf(w, "%8s %8s  %s\n", "wall s", "CPU s", "package")
	for _, p := range pkgs {
		wall += p.Elapsed
		cpu += p.CPU
		fmt.Fprintf(w, "%8.1f %8.1f  %s\n", p.Elapsed, p.CPU, short(p.Pkg))
	}
	fmt.Fprintf(w, "%8.1f %8.1f  sum over %d packages\n", wall, cpu, len(pkgs))
	for _, by := range []string{"elapsed", "CPU"} {
		sorted := append([]record(nil), tests...)
		sort.SliceStable(sorted, func(i, j int) bool {
			if by == "CPU" {
				return sorted[i].CPU > sorted[j].CPU
			}
			return sorted[i].Elapsed > sorted[j].Elapsed
		})
		if len(sorted) > *top {
			sorted = sorted[:*top]
		}
		fmt.Fprintf(w, "\ntop %d tests by %s (wait = elapsed - CPU)\n", len(sorted), by)
		fmt.Fprintf(w, "%9s %8s %8s  %s\n", "elapsed s", "CPU s", "wait s", "test")
		for _, t := range sorted {
			fmt.Fprintf(w, "%9.1f %8.1f %8.1f  %s %s\n", t.Elapsed, t.CPU, t.Elapsed-t.CPU, short(t.Pkg), t.Test)
		}
	}
}

// short drops the module path from a package's import path.
func short(pkg string) string {
	if s := strings.TrimPrefix(pkg, "github.com/lockcell/lockcell/"); s != pkg {
		return s
	}
	return pkg
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "testtime:", err)
	os.Exit(1)
}
