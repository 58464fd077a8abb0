package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DriverFactory makes one system's Driver from command-line flags.
type DriverFactory struct {
	// Name is the system's name as --systems spells it.
	Name string
	// Flags registers the driver's own flags (may be nil).
	Flags func(fs *flag.FlagSet)
	// Open starts or connects to the system. stop releases everything Open
	// started (processes included); it is called even after a failed run.
	Open func(ctx context.Context, log *slog.Logger, oc OpenConfig) (d Driver, stop func(), err error)
}

// OpenConfig is what every system's Open is told, from the command's
// common flags.
type OpenConfig struct {
	// Replicas is the size of the cluster to start (--replicas): 3, 5 or
	// 7. A system that connects to a cluster it did not start is told it
	// too, and should be given a cluster of that size.
	Replicas int
}

// LockcellFactory is the lockcell DriverFactory. Flags: --lockcell-cell
// (proc: one `lockcelld serve` process per replica; inproc:
// cell.StartLocal in this process), --lockcelld (the binary),
// --lockcell-dir, --lockcell-log-level, --lockcell-base-port and
// --lockcell-http-port (fixed ports for the replicas of a cell of
// processes), --lockcell-fault-injection (on by itself when
// failover-partition runs), --client-log and --client-log-level (the
// client library's logs, dropped unless a file is named).
func LockcellFactory() DriverFactory {
	var mode, bin, dir, level, clientLog, clientLevel string
	var faults bool
	var udpBase, httpBase int
	return DriverFactory{
		Name: "lockcell",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&mode, "lockcell-cell", "proc", "lockcell cell: proc (lockcelld init + one lockcelld serve per replica) or inproc (in this process)")
			fs.StringVar(&bin, "lockcelld", "bin/lockcelld", "lockcelld binary for --lockcell-cell=proc (make build)")
			fs.StringVar(&dir, "lockcell-dir", filepath.Join(os.TempDir(), "lockcell-bench", "cell"), "directory for the cell (emptied first)")
			fs.StringVar(&level, "lockcell-log-level", "warn", "replica log level (logs in the cell directory)")
			fs.IntVar(&udpBase, "lockcell-base-port", 0, "--lockcell-cell=proc: replica i listens on UDP 127.0.0.1:port+i-1 (0: free ports)")
			fs.IntVar(&httpBase, "lockcell-http-port", 0, "--lockcell-cell=proc: replica i serves HTTP on TCP 127.0.0.1:port+i-1 (0: free ports)")
			fs.StringVar(&clientLog, "client-log", "", "append the lockcell client library's logs to this file (empty: drop them)")
			fs.StringVar(&clientLevel, "client-log-level", "info", "level of --client-log: debug, info, warn or error")
			fs.BoolVar(&faults, FaultInjectionFlag, false, "serve /debug/faults on the replicas (failover-partition needs it, and turns it on unless this flag is given)")
		},
		Open: func(ctx context.Context, log *slog.Logger, oc OpenConfig) (Driver, func(), error) {
			var (
				target LockcellTarget
				stop   func()
			)
			switch mode {
			case "proc":
				if _, err := os.Stat(bin); err != nil {
					return nil, func() {}, fmt.Errorf("%w: lockcelld binary %q: %w (run make build, or pass --lockcelld)", ErrInvalidConfig, bin, err)
				}
				pc, err := StartProcCell(ctx, ProcCellConfig{Binary: bin, Dir: dir, LogLevel: level, FaultInjection: faults, Replicas: oc.Replicas,
					BasePort: udpBase, HTTPPort: httpBase})
				if err != nil {
					return nil, func() {}, err
				}
				stop = pc.StopAll
				if target, err = pc.Target(); err != nil {
					return nil, stop, err
				}
				log.Info("lockcell cell of processes started", "dir", dir, "replicas", oc.Replicas, "pids", pc.PIDs())
			case "inproc":
				if err := os.RemoveAll(dir); err != nil {
					return nil, func() {}, err
				}
				ic, err := StartInProcCell(ctx, dir, oc.Replicas, nil)
				if err != nil {
					return nil, func() {}, err
				}
				stop = ic.Stop
				if target, err = ic.Target(); err != nil {
					return nil, stop, err
				}
			default:
				return nil, func() {}, fmt.Errorf("%w: --lockcell-cell %q (proc or inproc)", ErrInvalidConfig, mode)
			}
			closeLog := func() {}
			if clientLog != "" {
				var lv slog.Level
				if err := lv.UnmarshalText([]byte(clientLevel)); err != nil {
					return nil, stop, fmt.Errorf("%w: --client-log-level %q: %w", ErrInvalidConfig, clientLevel, err)
				}
				f, err := os.OpenFile(clientLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
				if err != nil {
					return nil, stop, fmt.Errorf("%w: --client-log: %w", ErrInvalidConfig, err)
				}
				w := bufio.NewWriterSize(f, 1<<20)
				var wmu sync.Mutex
				target.Logger = slog.New(slog.NewTextHandler(lockedWriter{&wmu, w}, &slog.HandlerOptions{Level: lv}))
				closeLog = func() {
					wmu.Lock()
					_ = w.Flush()
					wmu.Unlock()
					_ = f.Close()
				}
			}
			d, err := NewLockcellDriver(target)
			if err != nil {
				closeLog()
				return nil, stop, err
			}
			return d, func() { _ = d.Close(); stop(); closeLog() }, nil
		},
	}
}

// lockedWriter serializes writes to w: the client logs of many
// connections go to one buffered file.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// FaultInjectionFlag is the lockcell flag that turns fault injection on
// in a cell of processes.
const FaultInjectionFlag = "lockcell-fault-injection"

// faultsNote marks the lockcell results of a run whose cell had fault
// injection on: each replica's socket is then wrapped (for client-traffic
// cuts), which hides the UDP socket's batch and offload paths from QUIC.
const faultsNote = "cell ran with fault injection on (socket wrapper; measure throughput without failover-partition)"

// faultsOn reports whether the lockcell fault-injection flag is set.
func faultsOn(fs *flag.FlagSet) bool {
	f := fs.Lookup(FaultInjectionFlag)
	return f != nil && f.Value.String() == "true"
}

// Machine describes this machine for the results: "2-core x86_64 (CPU
// model)".
func Machine() string {
	s := fmt.Sprintf("%d-core %s", runtime.NumCPU(), runtime.GOARCH)
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "model name"); ok {
				s += " (" + strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":")) + ")"
				break
			}
		}
	}
	return s
}

// Main is the benchmark command: it parses args, runs the chosen
// workloads on the chosen systems, and writes JSON lines, the table and
// the plot. It returns the exit code: 0, 1 on a failure or a safety
// violation, 2 on bad usage.
func Main(args []string, stdout, stderr io.Writer, factories []DriverFactory) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var names []string
	for _, f := range factories {
		names = append(names, f.Name)
	}
	systems := fs.String("systems", strings.Join(names, ","), "systems to run, comma-separated")
	workloads := fs.String("workloads", joinWorkloads(AllWorkloads), "workloads to run, comma-separated (also, only when named: "+joinWorkloads(OptInWorkloads)+")")
	clients := fs.String("clients", "64", "client counts for uncontended, contended, readheavy and noisy, comma-separated (e.g. 1,64)")
	duration := fs.Duration("duration", 5*time.Second, "measured time of each run")
	warmup := fs.Duration("warmup", time.Second, "unmeasured warm-up of each run")
	seed := fs.Uint64("seed", 1, "seed of every random choice")
	sessions := fs.Int("sessions", 1000, "sessions held by the sessions and sessions-failover workloads")
	sessDisrupt := fs.String("sessions-failover", "kill", "sessions-failover (opt-in workload): what happens to the master while the sessions are held: "+
		"kill (SIGKILL, as failover-kill) or stepdown (SIGTERM, a hand-over, as failover-stepdown)")
	files := fs.Int("files", 16, "files of the readheavy workloads")
	writeFrac := fs.Float64("write-fraction", 0.01, "share of readheavy operations that write")
	quietClients := fs.Int("quiet-clients", 4, "noisy: clients of the quiet tenant")
	quietRate := fs.Float64("quiet-rate", 100, "noisy: acquire+release pairs per second of the quiet tenant")
	foClients := fs.Int("failover-clients", 8, "clients looping during fail-over")
	foDuration := fs.Duration("failover-duration", 15*time.Second, "measured time of a fail-over run (the leader stops a third of the way in; failover-rolling: the time before and after the restarts)")
	pauseFor := fs.Duration("pause", DefaultPauseFor, "failover-pause: how long the master stays stopped")
	replicas := fs.Int("replicas", DefaultReplicas, "members of every system's cluster: 3, 5 or 7")
	hold := fs.Duration("hold", 0, "contended: how long each holder keeps the lock")
	opTimeout := fs.Duration("op-timeout", 15*time.Second, "bound on each operation")
	maxTime := fs.Duration("max-time", 20*time.Minute, "bound on the whole command")
	jsonOut := fs.String("json", "-", "where to append one JSON line per run (- for stdout)")
	svgOut := fs.String("svg", "", "write an SVG plot of throughput and latency percentiles here")
	from := fs.String("from", "", "do not run: read JSON lines from this file and write the table (and --svg)")
	title := fs.String("title", "lockcell benchmark", "plot title")
	progress := fs.String("progress", "auto", "live progress line on stderr: auto (if a terminal), on, off")
	verbose := fs.Bool("v", false, "log the harness's steps to stderr")
	for _, f := range factories {
		if f.Flags != nil {
			f.Flags(fs)
		}
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fs.Args())
		return 2
	}
	usage := func(err error) int { fmt.Fprintln(stderr, "bench:", err); return 2 }
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	if *from != "" {
		f, err := os.Open(*from)
		if err != nil {
			return usage(err)
		}
		rs, err := ReadJSONLines(f)
		f.Close()
		if err != nil {
			return usage(err)
		}
		return report(stdout, stderr, rs, *svgOut, *title)
	}

	var chosen []DriverFactory
	for _, s := range splitList(*systems) {
		i := slices.IndexFunc(factories, func(f DriverFactory) bool { return f.Name == s })
		if i < 0 {
			return usage(fmt.Errorf("%w: unknown system %q (known: %s)", ErrInvalidConfig, s, strings.Join(names, ",")))
		}
		chosen = append(chosen, factories[i])
	}
	var wls []Workload
	for _, s := range splitList(*workloads) {
		w, err := ParseWorkload(s)
		if err != nil {
			return usage(err)
		}
		wls = append(wls, w)
	}
	var counts []int
	for _, s := range splitList(*clients) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxClients {
			return usage(fmt.Errorf("%w: client count %q", ErrInvalidConfig, s))
		}
		counts = append(counts, n)
	}
	if *maxTime <= 0 || *maxTime > 24*time.Hour {
		return usage(fmt.Errorf("%w: --max-time %v", ErrInvalidConfig, *maxTime))
	}
	base := Config{Duration: *duration, Warmup: *warmup, Seed: *seed, Sessions: *sessions, Files: *files,
		WriteFraction: *writeFrac, QuietClients: *quietClients, QuietRate: *quietRate, OpTimeout: *opTimeout, Hold: *hold,
		PauseFor: *pauseFor, Replicas: *replicas, SessionsDisrupt: Workload(*sessDisrupt)}
	switch *sessDisrupt {
	case "kill":
		base.SessionsDisrupt = FailoverKill
	case "stepdown":
		base.SessionsDisrupt = FailoverStepDown
	}
	if *warmup == 0 {
		base.Warmup = -1
	}
	if *writeFrac == 0 {
		base.WriteFraction = -1
	}
	// Validate once up front so that a bad flag fails before any cluster
	// starts.
	for _, w := range wls {
		c := base
		c.Workload, c.Clients = w, counts[0]
		if _, err := c.populate(); err != nil {
			return usage(err)
		}
	}

	// A partition needs the replicas' fault injection; turn it on unless
	// the flag was given.
	if slices.Contains(wls, FailoverPartition) && fs.Lookup(FaultInjectionFlag) != nil {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == FaultInjectionFlag })
		if !given {
			_ = fs.Set(FaultInjectionFlag, "true")
		}
	}

	var jsonW io.Writer = stdout
	if *jsonOut != "-" {
		f, err := os.OpenFile(*jsonOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return usage(err)
		}
		defer f.Close()
		jsonW = f
	}
	ctx, cancel := context.WithTimeout(context.Background(), *maxTime)
	defer cancel()
	ctx, stopSig := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSig()

	live := &Live{}
	var stopProgress func()
	stderrF, isFile := stderr.(*os.File)
	if *progress == "on" || (*progress == "auto" && isFile && IsTerminal(stderrF)) {
		stopProgress = Progress(stderr, live, 250*time.Millisecond)
	} else {
		stopProgress = func() {}
	}
	machine := Machine()
	var results []Result
	failed := false
	for _, f := range chosen {
		live.SetPhase(f.Name + ": starting")
		d, stop, err := f.Open(ctx, log, OpenConfig{Replicas: base.Replicas})
		if err != nil {
			stop()
			stopProgress()
			fmt.Fprintf(stderr, "bench: %s: %v\n", f.Name, err)
			return 1
		}
		for _, w := range wls {
			ns := counts
			switch w {
			case Sessions, SessionsFailover:
				// One run; Config.Sessions says how many sessions it holds
				// (its Result reports them as its clients).
				ns = []int{1}
			case FailoverKill, FailoverStepDown, FailoverPause, FailoverPartition, FailoverRolling:
				ns = []int{*foClients}
			}
			for _, n := range ns {
				c := base
				c.Workload, c.Clients, c.Live = w, n, live
				if slices.Contains(FailoverWorkloads, w) {
					c.Duration = *foDuration
				}
				log.Info("run", "system", f.Name, "workload", w, "clients", n)
				r, err := Run(ctx, d, c)
				r.Machine = machine
				if err != nil {
					failed = true
					fmt.Fprintf(stderr, "\r\033[Kbench: %s %s: %v\n", f.Name, w, err)
					if r.System == "" {
						continue
					}
					if r.Note == "" {
						r.Note = "error: " + truncate(err.Error(), 200)
					}
				}
				if faultsOn(fs) && f.Name == "lockcell" && w != FailoverPartition && r.Skipped == "" {
					r.Note = strings.TrimPrefix(r.Note+"; "+faultsNote, "; ")
				}
				results = append(results, r)
				if err := WriteJSONLine(jsonW, r); err != nil {
					fmt.Fprintln(stderr, "bench:", err)
				}
				if ctx.Err() != nil {
					break
				}
			}
			if ctx.Err() != nil {
				break
			}
		}
		live.SetPhase(f.Name + ": stopping")
		stop()
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "\r\033[Kbench: stopped early: %v\n", context.Cause(ctx))
			failed = true
			break
		}
	}
	stopProgress()
	if code := report(stdout, stderr, results, *svgOut, *title); code != 0 {
		return code
	}
	if failed {
		return 1
	}
	return 0
}

func report(stdout, stderr io.Writer, rs []Result, svgPath, title string) int {
	fmt.Fprintln(stdout)
	if err := WriteTable(stdout, rs); err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if svgPath != "" {
		f, err := os.Create(svgPath)
		if err == nil {
			err = errors.Join(WriteSVG(f, rs, title), f.Close())
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
