package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// Workload names a workload.
type Workload string

// The workloads; see the package doc.
const (
	Uncontended      Workload = "uncontended"
	Contended        Workload = "contended"
	ReadHeavy        Workload = "readheavy"
	ReadHeavyCache   Workload = "readheavy-cache"
	Sessions         Workload = "sessions"
	FailoverKill     Workload = "failover-kill"
	FailoverStepDown Workload = "failover-stepdown"
	// FailoverPause SIGSTOPs the master for Config.PauseFor, then
	// continues it.
	FailoverPause Workload = "failover-pause"
	// FailoverPartition cuts a minority holding the master off from the
	// rest for the middle third of the run.
	FailoverPartition Workload = "failover-partition"
	// FailoverRolling restarts every member in turn, the master last
	// (handed over first where the system can).
	FailoverRolling Workload = "failover-rolling"
	Noisy           Workload = "noisy"
	// SessionsFailover opens and holds Config.Sessions sessions, then
	// kills the master (or asks it to hand over: Config.SessionsDisrupt)
	// and measures how long until every session is safe with the new
	// master, and how many were lost. Not run unless named: at 100,000
	// sessions it is a run of its own.
	SessionsFailover Workload = "sessions-failover"
)

// OptInWorkloads are the workloads run only when --workloads names them.
var OptInWorkloads = []Workload{SessionsFailover}

// FailoverWorkloads are the workloads that disrupt the cluster while
// Config.Clients loop on lock cycles.
var FailoverWorkloads = []Workload{FailoverStepDown, FailoverKill, FailoverPause, FailoverPartition, FailoverRolling}

// AllWorkloads lists every workload in the order Main runs them.
var AllWorkloads = []Workload{Uncontended, Contended, ReadHeavy, ReadHeavyCache, Noisy, Sessions,
	FailoverStepDown, FailoverKill, FailoverPause, FailoverPartition, FailoverRolling}

// ParseWorkload returns the workload named s.
func ParseWorkload(s string) (Workload, error) {
	for _, w := range append(AllWorkloads[:len(AllWorkloads):len(AllWorkloads)], OptInWorkloads...) {
		if string(w) == s {
			return w, nil
		}
	}
	return "", fmt.Errorf("%w: unknown workload %q (known: %s; opt-in: %s)", ErrInvalidConfig, s, joinWorkloads(AllWorkloads), joinWorkloads(OptInWorkloads))
}

func joinWorkloads(ws []Workload) string {
	s := make([]string, len(ws))
	for i, w := range ws {
		s[i] = string(w)
	}
	return strings.Join(s, ",")
}

// Limits on a run, so that a typo cannot start a day-long benchmark.
const (
	MaxClients  = 4096
	MaxSessions = 1_000_000
	MaxDuration = 30 * time.Minute
)

// Config configures one run of one workload. Zero values select the
// documented defaults.
type Config struct {
	Workload Workload
	// Clients is the number of concurrent clients (uncontended, contended,
	// readheavy, failover: the loopers; noisy: the flooding tenant's). If
	// zero, 8.
	Clients int
	// Duration is the measured time (after Warmup). If zero, 5 s.
	Duration time.Duration
	// Warmup runs the workload unmeasured first. If zero, 1 s; negative
	// means none.
	Warmup time.Duration
	// Seed seeds every random choice (which file to read, when to write).
	Seed uint64
	// Sessions is how many sessions the sessions workload holds. If zero,
	// 1000.
	Sessions int
	// Files is the number of files of the readheavy workloads. If zero, 16.
	Files int
	// WriteFraction is the share of readheavy operations that write. If
	// zero, 0.01; negative means none.
	WriteFraction float64
	// QuietClients and QuietRate are the paced tenant of the noisy
	// workload: that many clients making QuietRate acquire+release pairs
	// per second in all. If zero, 4 and 100.
	QuietClients int
	QuietRate    float64
	// Hold is how long a contended holder keeps the lock (inside the
	// FencedCounter). If zero, it only yields the processor once.
	Hold time.Duration
	// OpTimeout bounds each operation. If zero, 15 s.
	OpTimeout time.Duration
	// PauseFor is how long failover-pause keeps the master stopped. If
	// zero, DefaultPauseFor (twice lockcell's master lease).
	PauseFor time.Duration
	// SessionsDisrupt is what sessions-failover does to the master:
	// FailoverKill (SIGKILL) or FailoverStepDown (SIGTERM: a hand-over
	// where the system does one). If empty, FailoverKill.
	SessionsDisrupt Workload
	// Replicas is the number of members of the system's cluster (the
	// fail-over workloads pick members by it; Result.Replicas records it).
	// If zero, DefaultReplicas.
	Replicas int
	// Live, if set, receives progress counters for a progress line.
	Live *Live
}

func (c Config) populate() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	if c.Clients == 0 {
		c.Clients = 8
	}
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Warmup == 0 {
		c.Warmup = time.Second
	} else if c.Warmup < 0 {
		c.Warmup = 0
	}
	if c.Sessions == 0 {
		c.Sessions = 1000
	}
	if c.Files == 0 {
		c.Files = 16
	}
	if c.WriteFraction == 0 {
		c.WriteFraction = 0.01
	} else if c.WriteFraction < 0 {
		c.WriteFraction = 0
	}
	if c.QuietClients == 0 {
		c.QuietClients = 4
	}
	if c.QuietRate == 0 {
		c.QuietRate = 100
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 15 * time.Second
	}
	if c.PauseFor == 0 {
		c.PauseFor = DefaultPauseFor
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.SessionsDisrupt == "" {
		c.SessionsDisrupt = FailoverKill
	}
	switch {
	case c.SessionsDisrupt != FailoverKill && c.SessionsDisrupt != FailoverStepDown:
		return bad("sessions-failover disruption %q: want %s or %s", c.SessionsDisrupt, FailoverKill, FailoverStepDown)
	case !ValidReplicas(c.Replicas):
		return bad("replicas %d: want 3, 5 or 7", c.Replicas)
	case c.Clients < 1 || c.Clients > MaxClients:
		return bad("clients %d outside [1, %d]", c.Clients, MaxClients)
	case c.Duration < 0 || c.Duration > MaxDuration:
		return bad("duration %v outside (0, %v]", c.Duration, MaxDuration)
	case c.Warmup > MaxDuration:
		return bad("warmup %v over %v", c.Warmup, MaxDuration)
	case c.Sessions < 1 || c.Sessions > MaxSessions:
		return bad("sessions %d outside [1, %d]", c.Sessions, MaxSessions)
	case c.Files < 1 || c.Files > 100_000:
		return bad("files %d outside [1, 100000]", c.Files)
	case c.WriteFraction > 1:
		return bad("write fraction %v over 1", c.WriteFraction)
	case c.QuietClients < 1 || c.QuietClients > MaxClients:
		return bad("quiet clients %d outside [1, %d]", c.QuietClients, MaxClients)
	case c.QuietRate <= 0 || c.QuietRate > 1e6:
		return bad("quiet rate %v outside (0, 1e6]", c.QuietRate)
	case c.OpTimeout < 0:
		return bad("negative op timeout")
	case c.Hold < 0 || c.Hold > time.Minute:
		return bad("hold %v outside [0, 1m]", c.Hold)
	case c.PauseFor < 0 || c.PauseFor > time.Minute:
		return bad("pause %v outside (0, 1m]", c.PauseFor)
	}
	if _, err := ParseWorkload(string(c.Workload)); err != nil {
		return c, err
	}
	return c, nil
}

// Result is the outcome of one run: one JSON line.
type Result struct {
	System   string   `json:"system"`
	Workload Workload `json:"workload"`
	Clients  int      `json:"clients"`
	Seed     uint64   `json:"seed"`
	// Replicas is the size of the system's cluster; 0 in results written
	// before it was recorded, when it was always DefaultReplicas.
	Replicas int       `json:"replicas,omitempty"`
	Start    time.Time `json:"start"`
	// Seconds is the measured time.
	Seconds float64 `json:"seconds"`
	// Ops counts measured operations (Unit says what one is); Errors the
	// operations that failed.
	Ops    uint64 `json:"ops"`
	Errors uint64 `json:"errors"`
	// Throughput is Ops per second.
	Throughput float64        `json:"ops_per_s"`
	Unit       string         `json:"unit"`
	Latency    LatencySummary `json:"latency"`
	// Metrics holds the workload's own figures (see the Metric* names).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Violation describes a safety violation ("" if none).
	Violation string `json:"violation,omitempty"`
	// Skipped says why the workload did not run ("" if it ran).
	Skipped string `json:"skipped,omitempty"`
	Note    string `json:"note,omitempty"`
	Machine string `json:"machine,omitempty"`
}

// Label names the system and, unless it ran DefaultReplicas members, the
// size of its cluster ("lockcell/3"): the table and the plot show runs at
// 3 and 5 replicas side by side.
func (r Result) Label() string {
	if r.Replicas == 0 || r.Replicas == DefaultReplicas {
		return r.System
	}
	return fmt.Sprintf("%s/%d", r.System, r.Replicas)
}

// Metric names in Result.Metrics.
const (
	MetricOverlaps         = "overlaps"
	MetricStaleTokens      = "stale_tokens"
	MetricWriteP99         = "write_p99_ms"
	MetricCPUPerSessionSec = "server_cpu_ms_per_session_s"
	MetricCPUNetPerSession = "server_cpu_net_ms_per_session_s"
	MetricIdleCPU          = "server_idle_cpu_ms_per_s"
	MetricRSS              = "server_rss_mb"
	MetricRSSPerSession    = "server_rss_kb_per_session"
	MetricSessionsHeld     = "sessions_held"
	MetricSessionsLost     = "sessions_lost"
	// MetricSessionsSafe is the time from a sessions-failover's disruption
	// until every session that did not end was safe and had heard from a
	// master of a later term; MetricSessionsBehind is how many had not
	// when the run gave up waiting (absent if none), and
	// MetricSessionsUnsafeMax the most that were not safe at one sample.
	MetricSessionsSafe      = "sessions_safe_ms"
	MetricSessionsBehind    = "sessions_behind"
	MetricSessionsUnsafeMax = "sessions_unsafe_max"
	MetricRecovery          = "recovery_ms"
	MetricLongestGap        = "longest_gap_ms"
	MetricLeader            = "leader"
	// Per-client outage: for each client, the longest gap between its
	// successful lock cycles that overlaps the disruption; p50, p99 and
	// max over the clients.
	MetricOutageP50 = "outage_p50_ms"
	MetricOutageP99 = "outage_p99_ms"
	MetricOutageMax = "outage_max_ms"
	// MetricMasterChanges counts the changes of leader seen by polling
	// the cluster (lockcell: the replicas' /status) during the run.
	MetricMasterChanges = "master_changes"
	// MetricRestarts counts the members failover-rolling restarted.
	MetricRestarts          = "restarts"
	MetricQuietAloneP50     = "quiet_alone_p50_ms"
	MetricQuietAloneP99     = "quiet_alone_p99_ms"
	MetricQuietFloodP50     = "quiet_flood_p50_ms"
	MetricQuietFloodP99     = "quiet_flood_p99_ms"
	MetricNoisyOpsPerSecond = "noisy_ops_per_s"
	MetricCPUPerOp          = "server_cpu_ms_per_op"
)

// Live holds counters that a progress line reads while a run goes on.
type Live struct {
	Ops, Errors atomic.Uint64
	phase       atomic.Pointer[string]
	started     atomic.Int64 // UnixNano of the phase's start
}

// SetPhase names what the run is doing and restarts the counters.
func (l *Live) SetPhase(s string) {
	if l == nil {
		return
	}
	l.phase.Store(&s)
	l.Ops.Store(0)
	l.Errors.Store(0)
	l.started.Store(time.Now().UnixNano())
}

// Line returns the progress line.
func (l *Live) Line() string {
	p := l.phase.Load()
	if p == nil {
		return ""
	}
	el := time.Since(time.Unix(0, l.started.Load()))
	ops := l.Ops.Load()
	rate := 0.0
	if el > 0 {
		rate = float64(ops) / el.Seconds()
	}
	return fmt.Sprintf("%s  %5.1fs  ops %d  %.0f/s  errors %d", *p, el.Seconds(), ops, rate, l.Errors.Load())
}

func (l *Live) op(err error) {
	if l == nil {
		return
	}
	if err != nil {
		l.Errors.Add(1)
	} else {
		l.Ops.Add(1)
	}
}

// Run runs one workload against d. A safety violation is reported in the
// Result (and as an error wrapping ErrViolation); a workload d cannot run
// comes back with Skipped set and a nil error.
func Run(ctx context.Context, d Driver, cfg Config) (Result, error) {
	cfg, err := cfg.populate()
	if err != nil {
		return Result{}, err
	}
	r := Result{System: d.Name(), Workload: cfg.Workload, Clients: cfg.Clients, Seed: cfg.Seed,
		Replicas: cfg.Replicas, Start: time.Now().UTC(), Metrics: map[string]float64{}}
	switch cfg.Workload {
	case Uncontended:
		err = runUncontended(ctx, d, cfg, &r)
	case Contended:
		err = runContended(ctx, d, cfg, &r)
	case ReadHeavy, ReadHeavyCache:
		err = runReadHeavy(ctx, d, cfg, &r)
	case Sessions:
		err = runSessions(ctx, d, cfg, &r)
	case SessionsFailover:
		err = runSessionsFailover(ctx, d, cfg, &r)
	case FailoverKill, FailoverStepDown, FailoverPause, FailoverPartition, FailoverRolling:
		err = runFailover(ctx, d, cfg, &r)
	case Noisy:
		err = runNoisy(ctx, d, cfg, &r)
	}
	if errors.Is(err, ErrUnsupported) {
		r.Skipped = err.Error()
		return r, nil
	}
	if err == nil && r.Violation != "" {
		err = fmt.Errorf("%w: %s %s: %s", ErrViolation, r.System, r.Workload, r.Violation)
	}
	return r, err
}

// connect opens n clients in parallel (a few at a time).
func connect(ctx context.Context, d Driver, n int, opts ClientOptions) ([]Client, error) {
	out := make([]Client, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range out {
		g.Go(func() error {
			o := opts
			o.ID = i
			c, err := d.Connect(gctx, o)
			if err != nil {
				return fmt.Errorf("bench: connecting client %d: %w", i, err)
			}
			out[i] = c
			return nil
		})
	}
	err := g.Wait()
	if err != nil {
		closeAll(out)
		return nil, err
	}
	return out, nil
}

// mutexes returns one Mutex per client: cs[i]'s on the name name(i).
func mutexes(cs []Client, name func(i int) string) []Mutex {
	mus := make([]Mutex, len(cs))
	for i, c := range cs {
		mus[i] = c.Mutex(name(i))
	}
	return mus
}

// closeAll closes clients in parallel, each within a few seconds.
func closeAll(cs []Client) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, c := range cs {
		if c == nil {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = c.Close(ctx)
		}()
	}
	wg.Wait()
}

// worker is one looping client's state.
type worker struct {
	id   int
	rng  *rand.Rand
	hist Histogram
	ops  uint64
	errs uint64
	// lastErr is the last error seen, for the result's note.
	lastErr error
}

// window is a run's measured interval.
type window struct{ start, end time.Time }

func (w window) contains(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// loop runs op on n workers from now until win.end, measuring the ops that
// start inside win. op gets a context bounded by the op timeout and the
// end of the run.
func loop(ctx context.Context, cfg Config, n int, win window, op func(ctx context.Context, w *worker) error) []*worker {
	ws := make([]*worker, n)
	runCtx, cancel := context.WithDeadline(ctx, win.end)
	defer cancel()
	var wg sync.WaitGroup
	for i := range ws {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		ws[i] = w
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				t0 := time.Now()
				opCtx, opCancel := context.WithTimeout(runCtx, cfg.OpTimeout)
				err := op(opCtx, w)
				opCancel()
				t1 := time.Now()
				if runCtx.Err() != nil && err != nil {
					return // cut off by the end of the run
				}
				if !win.contains(t0) || t1.After(win.end) {
					continue
				}
				cfg.Live.op(err)
				if err != nil {
					w.errs++
					w.lastErr = err
					pause(runCtx, 10*time.Millisecond)
					continue
				}
				w.ops++
				w.hist.Record(t1.Sub(t0))
			}
		}()
	}
	wg.Wait()
	return ws
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// finish fills r from the workers.
func finish(r *Result, ws []*worker, win window, unit string) {
	var h Histogram
	var last error
	for _, w := range ws {
		h.Merge(&w.hist)
		r.Ops += w.ops
		r.Errors += w.errs
		if w.lastErr != nil {
			last = w.lastErr
		}
	}
	r.Seconds = win.end.Sub(win.start).Seconds()
	if r.Seconds > 0 {
		r.Throughput = float64(r.Ops) / r.Seconds
	}
	r.Unit = unit
	r.Latency = h.Summary()
	if last != nil && r.Note == "" {
		r.Note = "last error: " + truncate(last.Error(), 160)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func newWindow(cfg Config) window {
	start := time.Now().Add(cfg.Warmup)
	return window{start: start, end: start.Add(cfg.Duration)}
}

func phase(cfg Config, d Driver, w Workload) {
	cfg.Live.SetPhase(fmt.Sprintf("%s %s c=%d", d.Name(), w, cfg.Clients))
}

func runUncontended(ctx context.Context, d Driver, cfg Config, r *Result) error {
	cs, err := connect(ctx, d, cfg.Clients, ClientOptions{Tenant: "bench"})
	if err != nil {
		return err
	}
	defer closeAll(cs)
	mus := mutexes(cs, func(i int) string { return fmt.Sprintf("u%d", i) })
	phase(cfg, d, Uncontended)
	win := newWindow(cfg)
	cpu := meterCPU(ctx, d, win)
	ws := loop(ctx, cfg, len(cs), win, func(ctx context.Context, w *worker) error {
		if _, err := mus[w.id].Lock(ctx); err != nil {
			return err
		}
		return mus[w.id].Unlock(ctx)
	})
	finish(r, ws, win, "acquire+release/s")
	cpu.report(r)
	return nil
}

func runContended(ctx context.Context, d Driver, cfg Config, r *Result) error {
	cs, err := connect(ctx, d, cfg.Clients, ClientOptions{Tenant: "bench"})
	if err != nil {
		return err
	}
	defer closeAll(cs)
	mus := mutexes(cs, func(int) string { return "hot" })
	var fc FencedCounter
	phase(cfg, d, Contended)
	win := newWindow(cfg)
	cpu := meterCPU(ctx, d, win)
	ws := loop(ctx, cfg, len(cs), win, func(ctx context.Context, w *worker) error {
		tok, err := mus[w.id].Lock(ctx)
		if err != nil {
			return err
		}
		fc.Enter(tok)
		if cfg.Hold > 0 {
			time.Sleep(cfg.Hold)
		} else {
			runtime.Gosched()
		}
		fc.Exit()
		// The release must not be cut short by the end of the run, or the
		// next holder would wait for the session to end.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.OpTimeout)
		defer cancel()
		return mus[w.id].Unlock(uctx)
	})
	finish(r, ws, win, "hand-overs/s")
	cpu.report(r)
	ov, st, first := fc.Violations()
	r.Metrics[MetricOverlaps] = float64(ov)
	r.Metrics[MetricStaleTokens] = float64(st)
	if ov+st > 0 {
		r.Violation = fmt.Sprintf("%d overlapping holders, %d stale tokens; first: %s", ov, st, first)
	}
	return nil
}

func runReadHeavy(ctx context.Context, d Driver, cfg Config, r *Result) error {
	cache := cfg.Workload == ReadHeavyCache
	cs, err := connect(ctx, d, cfg.Clients, ClientOptions{Tenant: "bench", Cache: cache})
	if err != nil {
		return err
	}
	defer closeAll(cs)
	files := make([]string, cfg.Files)
	payload := []byte(strings.Repeat("x", 64))
	for i := range files {
		files[i] = fmt.Sprintf("f%d", i)
		wctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		err := cs[0].Write(wctx, files[i], payload)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: creating %s: %w", files[i], err)
		}
	}
	writes := make([]Histogram, len(cs))
	phase(cfg, d, cfg.Workload)
	win := newWindow(cfg)
	ws := loop(ctx, cfg, len(cs), win, func(ctx context.Context, w *worker) error {
		f := files[w.rng.IntN(len(files))]
		if w.rng.Float64() < cfg.WriteFraction {
			t0 := time.Now()
			err := cs[w.id].Write(ctx, f, payload)
			if err == nil && win.contains(t0) {
				writes[w.id].Record(time.Since(t0))
			}
			return err
		}
		b, err := cs[w.id].Read(ctx, f)
		if err == nil && len(b) != len(payload) {
			return fmt.Errorf("bench: read %s: %d bytes, want %d", f, len(b), len(payload))
		}
		return err
	})
	finish(r, ws, win, "ops/s (reads+writes)")
	var wh Histogram
	for i := range writes {
		wh.Merge(&writes[i])
	}
	r.Metrics[MetricWriteP99] = ms(wh.Quantile(0.99))
	r.Metrics["writes"] = float64(wh.Count())
	return nil
}

func runSessions(ctx context.Context, d Driver, cfg Config, r *Result) error {
	r.Clients = cfg.Sessions
	cl := d.Cluster()
	var pids []int
	if cl != nil {
		pids = cl.PIDs()
	}
	var idleRate float64 // CPU ms per wall second
	if len(pids) > 0 {
		idle := min(cfg.Duration/3, 3*time.Second)
		u0, err := ReadProcUsage(pids)
		if err != nil {
			return err
		}
		t0 := time.Now()
		pause(ctx, idle)
		u1, err := ReadProcUsage(pids)
		if err != nil {
			return err
		}
		idleRate = float64(u1.CPU-u0.CPU) / 1e6 / time.Since(t0).Seconds()
		r.Metrics[MetricIdleCPU] = round3(idleRate)
	}
	base, _ := ReadProcUsage(pids)
	set, closeSet, err := openSessions(ctx, d, cfg, r, "sessions")
	if err != nil {
		return err
	}
	defer closeSet()
	// Let the opening burst settle before measuring the steady state.
	pause(ctx, min(cfg.Warmup*2, 5*time.Second))
	cfg.Live.SetPhase(fmt.Sprintf("%s sessions: holding %d", d.Name(), cfg.Sessions))
	u2, err := ReadProcUsage(pids)
	if err != nil {
		return err
	}
	h0 := time.Now()
	pause(ctx, cfg.Duration)
	held := time.Since(h0)
	u3, err := ReadProcUsage(pids)
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.Seconds = held.Seconds()
	lost := set.Lost()
	r.Metrics[MetricSessionsHeld] = float64(cfg.Sessions - lost)
	r.Metrics[MetricSessionsLost] = float64(lost)
	if len(pids) == 0 {
		r.Note = "server CPU and memory not measured: the servers are not separate processes"
		return nil
	}
	ss := float64(cfg.Sessions) * held.Seconds()
	cpu := float64(u3.CPU-u2.CPU) / 1e6
	r.Metrics[MetricCPUPerSessionSec] = round4(cpu / ss)
	r.Metrics[MetricCPUNetPerSession] = round4((cpu - idleRate*held.Seconds()) / ss)
	r.Metrics[MetricRSS] = round3(float64(u3.RSS) / (1 << 20))
	r.Metrics[MetricRSSPerSession] = round3(float64(u3.RSS-base.RSS) / 1024 / float64(cfg.Sessions))
	return nil
}

// cpuMeter measures the servers' CPU time over a run's measured window.
type cpuMeter struct {
	done chan struct{}
	cpu  time.Duration
	err  error // why nothing was measured
}

// meterCPU starts measuring the CPU time of d's server processes from
// win.start to win.end. A system whose servers are not processes of their
// own is not measured (report then adds nothing).
func meterCPU(ctx context.Context, d Driver, win window) *cpuMeter {
	m := &cpuMeter{done: make(chan struct{})}
	cl := d.Cluster()
	var pids []int
	if cl != nil {
		pids = cl.PIDs()
	}
	if len(pids) == 0 {
		m.err = errors.New("the servers are not separate processes")
		close(m.done)
		return m
	}
	go func() {
		defer close(m.done)
		pause(ctx, time.Until(win.start))
		u0, err := ReadProcUsage(pids)
		if err != nil {
			m.err = err
			return
		}
		pause(ctx, time.Until(win.end))
		u1, err := ReadProcUsage(pids)
		if err != nil {
			m.err = err
			return
		}
		m.cpu = u1.CPU - u0.CPU
	}()
	return m
}

// report waits for the measurement and adds the servers' CPU milliseconds
// per measured operation to r.
func (m *cpuMeter) report(r *Result) {
	<-m.done
	if m.err != nil || r.Ops == 0 {
		return
	}
	r.Metrics[MetricCPUPerOp] = round4(float64(m.cpu) / 1e6 / float64(r.Ops))
}

func round3(v float64) float64 { return float64(int64(v*1000+0.5)) / 1000 }
func round4(v float64) float64 { return float64(int64(v*10000+0.5)) / 10000 }

func runNoisy(ctx context.Context, d Driver, cfg Config, r *Result) error {
	quiet, err := connect(ctx, d, cfg.QuietClients, ClientOptions{Tenant: "quiet"})
	if err != nil {
		return err
	}
	defer closeAll(quiet)
	noisy, err := connect(ctx, d, cfg.Clients, ClientOptions{Tenant: "noisy"})
	if err != nil {
		return err
	}
	defer closeAll(noisy)
	qm := mutexes(quiet, func(i int) string { return fmt.Sprintf("q%d", i) })
	nm := mutexes(noisy, func(i int) string { return fmt.Sprintf("n%d", i) })
	half := cfg.Duration / 2
	start := time.Now().Add(cfg.Warmup)
	alone := window{start, start.Add(half)}
	flood := window{alone.end, alone.end.Add(half)}
	cfg.Live.SetPhase(fmt.Sprintf("%s noisy: quiet tenant alone", d.Name()))
	var aloneH, floodH Histogram
	var qerrs uint64
	var mu sync.Mutex
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) * float64(len(quiet)) / cfg.QuietRate)
	for i := range quiet {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var a, f Histogram
			var errs uint64
			// Paced: op k is due at first+k·interval, and its latency counts
			// from when it was due, so a slow op is not hidden by the ops it
			// delayed (coordinated omission).
			first := time.Now().Add(time.Duration(i) * interval / time.Duration(len(quiet)))
			for k := 0; ; k++ {
				due := first.Add(time.Duration(k) * interval)
				if !due.Before(flood.end) {
					break
				}
				pause(ctx, time.Until(due))
				if ctx.Err() != nil {
					break
				}
				opCtx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
				_, err := qm[i].Lock(opCtx)
				if err == nil {
					err = qm[i].Unlock(opCtx)
				}
				cancel()
				lat := time.Since(due)
				switch {
				case err != nil:
					errs++
				case alone.contains(due):
					a.Record(lat)
				case flood.contains(due):
					f.Record(lat)
				}
			}
			mu.Lock()
			aloneH.Merge(&a)
			floodH.Merge(&f)
			qerrs += errs
			mu.Unlock()
		}()
	}
	// The flood: from the end of the quiet-alone window, every noisy client
	// alternates a write of its own file and an acquire+release.
	pause(ctx, time.Until(flood.start))
	cfg.Live.SetPhase(fmt.Sprintf("%s noisy: flood of %d clients", d.Name(), len(noisy)))
	payload := []byte(strings.Repeat("n", 1024))
	fcfg := cfg
	fcfg.Warmup = 0
	nws := loop(ctx, fcfg, len(noisy), flood, func(ctx context.Context, w *worker) error {
		if w.ops%2 == 0 {
			return noisy[w.id].Write(ctx, fmt.Sprintf("nf%d", w.id), payload)
		}
		if _, err := nm[w.id].Lock(ctx); err != nil {
			return err
		}
		return nm[w.id].Unlock(ctx)
	})
	wg.Wait()
	var nops uint64
	for _, w := range nws {
		nops += w.ops
	}
	r.Clients = cfg.Clients
	r.Seconds = half.Seconds()
	r.Ops = floodH.Count()
	r.Errors = qerrs
	r.Throughput = float64(floodH.Count()) / half.Seconds()
	r.Unit = "quiet acquire+release/s under flood"
	r.Latency = floodH.Summary()
	r.Metrics[MetricQuietAloneP50] = ms(aloneH.Quantile(0.5))
	r.Metrics[MetricQuietAloneP99] = ms(aloneH.Quantile(0.99))
	r.Metrics[MetricQuietFloodP50] = ms(floodH.Quantile(0.5))
	r.Metrics[MetricQuietFloodP99] = ms(floodH.Quantile(0.99))
	r.Metrics[MetricNoisyOpsPerSecond] = round3(float64(nops) / half.Seconds())
	return nil
}

// openSessions opens cfg.Sessions sessions for the workload named w (its
// live phase says so), records the open rate in r, and returns the set
// with the function that closes it.
func openSessions(ctx context.Context, d Driver, cfg Config, r *Result, w string) (SessionSet, func(), error) {
	cfg.Live.SetPhase(fmt.Sprintf("%s %s: opening %d", d.Name(), w, cfg.Sessions))
	t0 := time.Now()
	set, err := d.OpenSessions(ctx, "bench", cfg.Sessions, func(n int) {
		if cfg.Live != nil {
			cfg.Live.Ops.Store(uint64(n))
		}
	})
	if err != nil {
		return nil, nil, err
	}
	openTime := time.Since(t0)
	r.Ops = uint64(cfg.Sessions)
	r.Unit = "sessions opened/s"
	r.Throughput = float64(cfg.Sessions) / openTime.Seconds()
	return set, func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		_ = set.Close(cctx)
	}, nil
}
