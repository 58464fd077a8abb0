package nemesis

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/proccell"
	"github.com/lockcell/lockcell/transport"
)

// Weakenings of a run that the checkers must catch.
const (
	// WeakenNoFence switches the resource's sequencer check off.
	WeakenNoFence = "nofence"
	// WeakenNoFsync runs every replica with unsafe_no_fsync and kills
	// them all, again and again (lost acknowledged writes must be
	// detected).
	WeakenNoFsync = "nofsync"
	// WeakenLockCtx runs the workers built with the
	// lockcell_weaken_lockctx tag, whose lock contexts ignore the lease
	// deadline (zombies resuming with an intact context, and overlapping
	// holds, must be detected).
	WeakenLockCtx = "lockctx"
	// WeakenSkew runs one replica's clock at twice the tick length (far
	// beyond the 1% drift bound) and isolates it whenever it is master.
	WeakenSkew = "skew"
)

// Options configures a run.
type Options struct {
	// Duration is how long faults are injected.
	Duration time.Duration
	// Seed seeds the fault schedule and the workers.
	Seed uint64
	// Workers is K, the number of worker processes (at least 4: fenced,
	// zombie, register, ack-set). If zero, 7: two fenced, two zombies,
	// two registers, one ack-set.
	Workers int
	// Dir, if set, holds the run's files and is kept; otherwise a temporary
	// directory is used and removed unless the run fails.
	Dir string
	// Lockcelld is the lockcelld binary; if empty it is built.
	Lockcelld string
	// WorkerArgv returns the command line of a worker process given its
	// config file. If nil, this executable with arguments "worker FILE".
	WorkerArgv func(configFile string) []string
	// Weaken is "" or one of the Weaken* constants: a weakened run, which
	// must be caught by its target checker (TargetChecker).
	Weaken string
	// SessionLease is the cell's session lease. If zero, 12 s (the cell's
	// default, Chubby's). Zombie workers are stopped for longer than it.
	SessionLease time.Duration
	// RecoveryBound is how long the cell may take to serve a write after
	// the faults stop. If zero, 30 s.
	RecoveryBound time.Duration
	// Logger receives progress logs. If nil, nothing is logged.
	Logger *slog.Logger
}

// targets maps each weakening to the checker that must catch it.
var targets = map[string]string{
	WeakenNoFence: CheckerFencing,
	WeakenSkew:    CheckerOverlap,
	WeakenNoFsync: CheckerAckSet,
	WeakenLockCtx: CheckerMutex,
}

// TargetChecker names the checker that must catch weakening w ("" for none).
func TargetChecker(w string) string { return targets[w] }

// Weakenings lists the weakenings.
func Weakenings() []string { return []string{WeakenNoFence, WeakenSkew, WeakenNoFsync, WeakenLockCtx} }

// MasterLease is the master lease of the cell's default timings (80 ticks
// of 10 ms).
const MasterLease = 800 * time.Millisecond

// DriftBound is the cell's default clock-rate drift bound (1%).
const DriftBound = 0.01

// Result is the outcome of a run.
type Result struct {
	Seed   uint64
	Weaken string
	// Target is the checker that must catch the weakening ("" for a
	// normal run).
	Target     string
	Duration   time.Duration
	Dir        string
	Violations []Violation
	// Operations counts completed worker operations by kind ("get", "set",
	// "cas", "create", "fenced") and outcome.
	Operations map[string]map[string]int
	// Faults counts the schedule's faults applied, by kind (the zombies'
	// pauses are in Mutex, not here).
	Faults map[string]int
	// Failovers counts changes of the serving master seen by the sampler.
	Failovers int
	// ResourceAccepted and ResourceRejected count the resource's writes.
	ResourceAccepted, ResourceRejected int
	// AckedCreates counts acknowledged creates checked at the end.
	AckedCreates int
	// RegisterOps is the number of register operations checked; Decided
	// is false if porcupine timed out.
	RegisterOps int
	Decided     bool
	// Recovery is how long the cell took to serve a write after the faults
	// stopped.
	Recovery time.Duration
	// Judged counts, per checker (and per floor key, see FloorsFor), what
	// it judged; Floors are the floors the run was held to.
	Judged, Floors map[string]int
	// Mutex is the mutual-exclusion checker's report: holds judged, and
	// each zombie with its outcome.
	Mutex MutexReport
	// Stale is what fencing prevented.
	Stale StaleReport
	// FaultErrors lists the faults that could not be applied.
	FaultErrors []string
	// Notes lists things worth knowing that are not violations (faults that
	// could not be injected, for example).
	Notes []string
	// HistoryFile is the history written for a failed run ("" if none).
	HistoryFile string
}

// OK reports a run without violations.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// Detected reports a weakened run caught by its target checker.
func (r *Result) Detected() bool { return r.Target != "" && hasChecker(r.Violations, r.Target) }

// Passed reports the run's verdict: a normal run passes without
// violations, a weakened one when its target checker caught it.
func (r *Result) Passed() bool {
	if r.Weaken != "" {
		return r.Detected()
	}
	return r.OK()
}

// run is the state of one run.
type run struct {
	opts Options
	log  *slog.Logger
	rng  *rand.Rand // the schedule's
	// rng2 draws the zombie pauses. REQUIRES: mu held.
	rng2 *rand.Rand
	dir  string
	c    *Cluster
	res  *resource

	mu      sync.Mutex
	history []Entry
	samples []Sample
	faults  map[string]int
	notes   []string
	// faultErrors lists the faults that could not be applied.
	faultErrors []string

	// zombies counts the zombie pauses in progress; stopping, closed when
	// the workers are about to stop, ends them early. A pause starts (Add)
	// and stopping closes under mu.
	zombies  sync.WaitGroup
	stopping chan struct{}
}

const prefix = "/" + Tenant

func (r *run) record(e Entry) {
	if e.Time == 0 {
		e.Time = time.Now().UnixNano()
	}
	r.mu.Lock()
	r.history = append(r.history, e)
	r.mu.Unlock()
}

func (r *run) note(format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	r.log.Info(text)
	r.record(Entry{Source: "nemesis", Type: TypeNote, Text: text})
	r.mu.Lock()
	r.notes = append(r.notes, text)
	r.mu.Unlock()
}

// Run runs one nemesis schedule and its checks. Every process it starts is
// gone when it returns. The error reports a run that could not be carried
// out (the cell never started, say); violations are in the Result.
func Run(ctx context.Context, opts Options) (*Result, error) {
	if opts.Duration <= 0 {
		return nil, errors.New("nemesis: Duration must be positive")
	}
	if opts.Workers == 0 {
		opts.Workers = 7
	}
	if opts.Workers < 4 {
		return nil, errors.New("nemesis: at least 4 workers")
	}
	if _, ok := targets[opts.Weaken]; !ok && opts.Weaken != "" {
		return nil, fmt.Errorf("nemesis: unknown weakening %q", opts.Weaken)
	}
	if opts.SessionLease == 0 {
		opts.SessionLease = 12 * time.Second
	}
	if opts.RecoveryBound == 0 {
		opts.RecoveryBound = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.WorkerArgv == nil {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		opts.WorkerArgv = func(f string) []string { return []string{exe, "worker", f} }
	}
	dir := opts.Dir
	keep := dir != ""
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "nemesis-"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &run{opts: opts, log: opts.Logger, rng: rand.New(rand.NewPCG(opts.Seed, 0x6e656d)), rng2: rand.New(rand.NewPCG(opts.Seed, 0x7a6f6d)), dir: dir, faults: map[string]int{}, stopping: make(chan struct{})}
	result, err := r.run(ctx)
	if result != nil {
		result.Dir = dir
	}
	if !keep && err == nil && result.Passed() {
		_ = os.RemoveAll(dir)
		result.Dir = ""
	}
	return result, err
}

func (r *run) run(ctx context.Context) (*Result, error) {
	if r.opts.Lockcelld == "" {
		bin, err := BuildLockcelld(ctx, r.dir)
		if err != nil {
			return nil, err
		}
		r.opts.Lockcelld = bin
	}
	if r.opts.Weaken == WeakenLockCtx {
		bin, err := BuildWorker(ctx, r.dir, "lockcell_weaken_lockctx")
		if err != nil {
			return nil, err
		}
		r.opts.WorkerArgv = func(f string) []string { return []string{bin, "worker", f} }
	}
	c, err := StartCluster(ctx, ClusterConfig{Dir: r.dir, Lockcelld: r.opts.Lockcelld, SessionLease: r.opts.SessionLease, Logger: r.log,
		UnsafeNoFsync: r.opts.Weaken == WeakenNoFsync})
	if err != nil {
		return nil, err
	}
	r.c = c
	defer c.KillAll()
	if err := r.checkFaultsAvailable(ctx); err != nil {
		return nil, err
	}
	if err := r.setupNamespace(ctx); err != nil {
		return nil, err
	}
	res, err := startResource(c.PublicKey, c.Name, prefix, r.opts.Weaken != WeakenNoFence)
	if err != nil {
		return nil, err
	}
	r.res = res
	defer res.close()

	sctx, stopSampler := context.WithCancel(ctx)
	var samplerDone sync.WaitGroup
	samplerDone.Add(1)
	go func() { defer samplerDone.Done(); r.sample(sctx) }()
	defer func() { stopSampler(); samplerDone.Wait() }()

	workers, err := r.startWorkers()
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, w := range workers {
			w.p.Kill()
		}
	}()

	start := time.Now()
	fctx, cancel := context.WithTimeout(ctx, r.opts.Duration)
	switch r.opts.Weaken {
	case WeakenSkew:
		r.skewSchedule(fctx)
	case WeakenNoFsync:
		r.killAllSchedule(fctx)
	case WeakenNoFence, WeakenLockCtx:
		// The zombies are the fault: nothing else, so that a short run
		// gives them many holds.
		<-fctx.Done()
	default:
		r.schedule(ctx) // it keeps its own end: every kind once, Duration at least
	}
	cancel()
	elapsed := time.Since(start)

	// The faults stop: heal, restart and continue every replica.
	hctx, hcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer hcancel()
	healStart := time.Now()
	r.healEverything(hctx)
	recovery, rerr := r.awaitWrite(hctx, healStart)
	// Let the workers run a little on the healed cell, then stop them.
	sleepCtx(ctx, 2*time.Second)
	r.stopWorkers(workers)
	stopSampler()
	samplerDone.Wait()

	result := &Result{Seed: r.opts.Seed, Weaken: r.opts.Weaken, Target: TargetChecker(r.opts.Weaken), Duration: elapsed, Recovery: recovery, Faults: r.faults, Judged: map[string]int{}}
	if rerr != nil {
		result.Violations = append(result.Violations, Violation{CheckerRecovery, rerr.Error()})
	} else if recovery > r.opts.RecoveryBound {
		result.Violations = append(result.Violations, Violation{CheckerRecovery, fmt.Sprintf("the cell took %v to serve a write after the faults stopped (bound %v)", recovery.Round(time.Millisecond), r.opts.RecoveryBound)})
	}
	r.finalChecks(result)
	result.Floors = FloorsFor(r.opts)
	if !r.hasZombies() {
		delete(result.Floors, FloorZombies)
		delete(result.Floors, FloorStaleAttempted)
		delete(result.Floors, FloorStaleRefused)
	}
	result.Violations = append(result.Violations, CheckFloors(result, result.Floors)...)
	if r.opts.Dir != "" {
		if err := r.writeSamples(filepath.Join(r.dir, "samples.jsonl")); err != nil {
			r.note("writing the samples: %v", err)
		}
	}
	if !result.OK() || !result.Passed() {
		result.HistoryFile = filepath.Join(r.dir, "history.jsonl")
		if err := r.writeHistory(result.HistoryFile); err != nil {
			r.note("writing the history: %v", err)
		}
	}
	r.mu.Lock()
	result.Notes = append(result.Notes, r.notes...)
	r.mu.Unlock()
	return result, nil
}

// ErrFaultsUnavailable reports a cell whose replicas do not serve
// /debug/faults: the partition faults could not be applied, so the run
// cannot be carried out.
var ErrFaultsUnavailable = errors.New("nemesis: /debug/faults does not answer")

// checkFaultsAvailable asks every replica's /debug/faults, for up to 10 s
// each (a replica may still be starting).
func (r *run) checkFaultsAvailable(ctx context.Context) error {
	for _, id := range r.c.IDs() {
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		var err error
		for {
			if err = r.c.FaultsAvailable(fctx, id); err == nil || fctx.Err() != nil {
				break
			}
			sleepCtx(fctx, 100*time.Millisecond)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("%w on replica %d: %w", ErrFaultsUnavailable, id, err)
		}
	}
	return nil
}

// setupNamespace creates the workloads' files: lock nodes
// (no lock-delay, so that a zombie's successor comes at once) and the
// ack-set directory.
func (r *run) setupNamespace(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := r.c.WorkerClient(sctx, 10*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := cl.NewSession(sctx)
	if err != nil {
		return err
	}
	defer s.Close(sctx)
	type node struct {
		path string
		opts client.OpenOptions
	}
	nodes := []node{{AckDir(prefix), client.OpenOptions{Create: true, Dir: true}}, {prefix + "/probe", client.OpenOptions{Create: true}}}
	for i := range fencedLocks {
		nodes = append(nodes, node{LockPath(prefix, i), client.OpenOptions{Create: true, LockDelay: -1}})
	}
	for _, n := range nodes {
		h, err := s.Open(sctx, n.path, n.opts)
		if err != nil {
			return fmt.Errorf("nemesis: creating %s: %w", n.path, err)
		}
		_ = h.Close(sctx)
	}
	return nil
}

const (
	registerKeys = 3
	// fencedLocks is how many locks the fenced workers use; the zombies
	// use the first zombieLocks of them, so that a zombie always has
	// fenced workers to race while the others leave locks free for
	// progress (a zombie holds its lock through a pause of twice the
	// session lease).
	fencedLocks = 4
	zombieLocks = 2
)

type workerProc struct {
	id    int
	role  string
	p     *proccell.Process
	stdin io.WriteCloser
	mu    sync.Mutex // serializes writes to stdin
	done  chan struct{}
	// marker is a zombie's stop marker file ("" for other roles).
	marker string
}

func (r *run) roles() []string {
	if r.opts.Weaken == WeakenLockCtx {
		// NB: a zombie of this run resumes with its context intact only
		// if its look comes before the client's KeepAlive goroutine runs
		// (about every second to fourth time on a loaded machine): many
		// zombies make a miss unlikely.
		roles := []string{RoleFenced, RoleZombie, RoleRegister, RoleAckSet}
		for len(roles) < r.opts.Workers {
			roles = append(roles, RoleZombie)
		}
		return roles
	}
	roles := []string{RoleFenced, RoleZombie, RoleRegister, RoleAckSet}
	extra := []string{RoleRegister, RoleFenced, RoleZombie, RoleRegister, RoleAckSet}
	for i := 0; len(roles) < r.opts.Workers; i++ {
		roles = append(roles, extra[i%len(extra)])
	}
	return roles
}

func (r *run) startWorkers() ([]*workerProc, error) {
	var out []*workerProc
	for id, role := range r.roles() {
		cfg := WorkerConfig{
			ID: id, Role: role, ClientFile: r.c.ClientFile, ResourceURL: r.res.url(), Prefix: prefix,
			Seed: r.opts.Seed ^ uint64(id+1)*0x9e3779b97f4a7c15, RegisterKeys: registerKeys, Locks: fencedLocks,
			GracePeriod: 10 * time.Second,
		}
		var env []string
		if role == RoleZombie {
			cfg.Locks = zombieLocks
			cfg.MarkerFile = filepath.Join(r.dir, fmt.Sprintf("worker-%d.marker", id))
			if err := os.WriteFile(cfg.MarkerFile, make([]byte, 4), 0o600); err != nil {
				return out, err
			}
			// NB: see spinUntilStopped: the zombie's spin must not be
			// preempted, so that its look after SIGCONT comes first.
			env = append(env, "GODEBUG=asyncpreemptoff=1")
		}
		b, _ := json.Marshal(cfg)
		file := filepath.Join(r.dir, fmt.Sprintf("worker-%d.json", id))
		if err := os.WriteFile(file, b, 0o600); err != nil {
			return out, err
		}
		stdinR, stdinW, err := os.Pipe()
		if err != nil {
			return out, err
		}
		stdoutR, stdoutW, err := os.Pipe()
		if err != nil {
			return out, err
		}
		p, err := proccell.StartProcess(proccell.ProcessSpec{Name: fmt.Sprintf("worker %d", id), Argv: r.opts.WorkerArgv(file),
			LogFile: filepath.Join(r.dir, "logs", fmt.Sprintf("worker-%d.log", id)), Stdin: stdinR, Stdout: stdoutW, Env: env})
		stdinR.Close()
		stdoutW.Close()
		if err != nil {
			stdinW.Close()
			stdoutR.Close()
			return out, err
		}
		w := &workerProc{id: id, role: role, p: p, stdin: stdinW, done: make(chan struct{}), marker: cfg.MarkerFile}
		out = append(out, w)
		go r.readWorker(w, stdoutR)
	}
	return out, nil
}

// readWorker collects a worker's history and serves its pause requests.
func (r *run) readWorker(w *workerProc, out io.ReadCloser) {
	defer close(w.done)
	defer out.Close()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue
		}
		r.record(e)
		if e.Type == TypePause && w.role == RoleZombie {
			r.mu.Lock()
			select {
			case <-r.stopping:
			default:
				r.zombies.Add(1)
				go func() { defer r.zombies.Done(); r.pauseZombie(w) }()
			}
			r.mu.Unlock()
		}
	}
}

// zombiePause is how long the nemesis stops a zombie: past twice the
// session lease by a margin (at least 2 s), drawn from the run's seed.
// Past one lease the holder's own lease has run out, so it must find its
// lock lost; past two the master has expired its session too (a KeepAlive
// it sent just before the stop may be answered, extending the lease at the
// master, up to a lease later) and granted the lock to another worker, so
// that the zombie really races someone.
func (r *run) zombiePause() time.Duration {
	lease := r.opts.SessionLease
	r.mu.Lock()
	defer r.mu.Unlock()
	return 2*lease + max(2*time.Second, lease/4) + uniform(r.rng2, 0, lease/4)
}

// setMarker sets a zombie's marker word, in place (the zombie has the
// file mapped).
func setMarker(file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt([]byte{1, 0, 0, 0}, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// pauseZombie stops a zombie worker that announced it holds its lock and
// waits (spinning) to be stopped: after a short random delay, SIGSTOP; after
// zombiePause, SIGCONT. Both instants are taken on the host's monotonic
// clock and recorded, for the mutual-exclusion checker.
func (r *run) pauseZombie(w *workerProc) {
	r.mu.Lock()
	delay := uniform(r.rng2, 0, 100*time.Millisecond)
	r.mu.Unlock()
	d := r.zombiePause()
	select {
	case <-time.After(delay): // NB: when to stop the holder is the fault itself.
	case <-r.stopping:
		return
	}
	stop := MonoNow()
	if err := w.p.Signal(syscall.SIGSTOP); err != nil {
		r.note("stopping zombie worker %d: %v", w.id, err)
		return
	}
	select {
	case <-time.After(d): // NB: the pause itself is the fault; nothing to wait for.
	case <-r.stopping:
		// The run ends: continue the worker now (the pause, recorded as
		// it really was, may then be too short to make a zombie).
	}
	if w.marker != "" {
		if err := setMarker(w.marker); err != nil {
			r.note("setting zombie worker %d's marker: %v", w.id, err)
		}
	}
	cont := MonoNow()
	if err := w.p.Signal(syscall.SIGCONT); err != nil {
		r.note("continuing zombie worker %d: %v", w.id, err)
	}
	r.record(Entry{Source: "nemesis", Type: TypeStopped, Worker: w.id, Start: stop, End: cont})
}

// stopWorkers closes the workers' stdin (their signal to stop) and kills
// those that do not exit in time.
func (r *run) stopWorkers(ws []*workerProc) {
	r.mu.Lock()
	close(r.stopping)
	r.mu.Unlock()
	r.zombies.Wait()
	for _, w := range ws {
		_ = w.p.Signal(syscall.SIGCONT)
		w.mu.Lock()
		w.stdin.Close()
		w.mu.Unlock()
	}
	deadline := time.After(15 * time.Second)
	for _, w := range ws {
		select {
		case <-w.p.Done():
		case <-deadline:
		}
		w.p.Kill()
		<-w.done
	}
}

// sample polls every replica's status page every 50 ms.
func (r *run) sample(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range r.c.IDs() {
			run, inc := r.c.Running(id)
			if !run || r.c.Paused(id) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				mctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
				defer cancel()
				sent := time.Now().UnixNano()
				ms, err := r.c.MasterOf(mctx, id)
				recv := time.Now().UnixNano()
				if _, inc2 := r.c.Running(id); err != nil || inc2 != inc {
					return
				}
				r.mu.Lock()
				r.samples = append(r.samples, Sample{ID: id, Incarnation: inc, Sent: sent, Recv: recv, MasterSample: ms})
				r.mu.Unlock()
			}()
		}
	}
}

// healEverything ends every fault: rules healed, paused replicas continued,
// stopped ones started, skewed ones restarted with normal clocks and disks.
func (r *run) healEverything(ctx context.Context) {
	for _, id := range r.c.IDs() {
		if r.c.Paused(id) {
			_ = r.c.Resume(id)
		}
		if scale, delay := r.c.Skewed(id); scale != 0 || delay != 0 {
			if err := r.c.Restart(id, 0, 0); err != nil {
				r.note("restarting replica %d: %v", id, err)
			}
		}
		if run, _ := r.c.Running(id); !run {
			if err := r.c.Start(id); err != nil {
				r.note("starting replica %d: %v", id, err)
			}
		}
	}
	if err := r.c.HealAll(ctx); err != nil {
		r.faultFailed("heal", err)
	}
	r.record(Entry{Source: "nemesis", Type: TypeHeal, Text: "all faults healed"})
}

// awaitWrite measures how long the cell takes to serve a write.
func (r *run) awaitWrite(ctx context.Context, since time.Time) (time.Duration, error) {
	for {
		err := r.probeWrite(ctx)
		if err == nil {
			return time.Since(since), nil
		}
		if ctx.Err() != nil {
			return time.Since(since), fmt.Errorf("the cell served no write within %v after the faults stopped: %w", time.Since(since).Round(time.Millisecond), err)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

func (r *run) probeWrite(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cl, err := r.c.WorkerClient(pctx, 5*time.Second)
	if err != nil {
		return err
	}
	defer cl.Close()
	s, err := cl.NewSession(pctx)
	if err != nil {
		return err
	}
	defer s.Close(pctx)
	h, err := s.Open(pctx, prefix+"/probe", client.OpenOptions{Create: true})
	if err != nil {
		return err
	}
	_, err = h.SetContents(pctx, []byte(time.Now().String()))
	return err
}

// faultViolations: every fault that could not be applied fails the run.
func faultViolations(errs []string) []Violation {
	var out []Violation
	for _, e := range errs {
		out = append(out, Violation{CheckerFaults, "not applied: " + e})
	}
	return out
}

func (r *run) hasZombies() bool {
	for _, role := range r.roles() {
		if role == RoleZombie {
			return true
		}
	}
	return false
}

func (r *run) finalChecks(res *Result) {
	r.mu.Lock()
	history := append([]Entry(nil), r.history...)
	samples := append([]Sample(nil), r.samples...)
	res.FaultErrors = append([]string(nil), r.faultErrors...)
	r.mu.Unlock()
	sort.SliceStable(history, func(i, j int) bool { return history[i].Time < history[j].Time })
	res.Violations = append(res.Violations, faultViolations(res.FaultErrors)...)

	res.Operations = map[string]map[string]int{}
	for _, e := range history {
		if e.Op == "" || e.Type == TypeInvoke || e.Source == "nemesis" {
			continue
		}
		if res.Operations[e.Op] == nil {
			res.Operations[e.Op] = map[string]int{}
		}
		res.Operations[e.Op][e.Type]++
	}
	// The resource.
	recs := r.res.records()
	counters := 0
	for _, rec := range recs {
		if rec.Accepted {
			res.ResourceAccepted++
			if strings.HasPrefix(rec.Key, "counter-") {
				counters++
			}
		} else {
			res.ResourceRejected++
		}
	}
	res.Judged[CheckerFencing] = res.ResourceAccepted
	res.Judged[CheckerInterleaving] = res.ResourceAccepted
	res.Judged[CheckerLostUpdate] = counters
	res.Violations = append(res.Violations, CheckResource(recs, lockOfKey(prefix))...)
	res.Stale = ComputeStale(history, recs, r.res.openRecords())
	res.Judged[FloorStaleAttempted] = res.Stale.Attempted
	res.Judged[FloorStaleRefused] = res.Stale.Refused
	// Mutual exclusion.
	holds, pauses := HoldsAndPauses(history)
	var vs []Violation
	res.Mutex, vs = CheckMutex(holds, pauses, r.opts.SessionLease)
	res.Violations = append(res.Violations, vs...)
	res.Judged[CheckerMutex] = res.Mutex.Holds
	res.Judged[FloorZombies] = len(res.Mutex.Zombies)
	// The ack set.
	present, err := r.listAcks()
	if err != nil {
		res.Violations = append(res.Violations, Violation{CheckerAckSet, "cannot list the ack-set directory at the end: " + err.Error()})
	} else {
		res.AckedCreates, vs = CheckAckSet(history, present)
		res.Violations = append(res.Violations, vs...)
		res.Judged[CheckerAckSet] = res.AckedCreates
	}
	// Registers.
	res.RegisterOps, res.Decided, vs = CheckRegisters(history, time.Minute)
	res.Violations = append(res.Violations, vs...)
	if res.Decided {
		res.Judged[CheckerLinearizable] = res.RegisterOps
	}
	// Masters.
	for _, s := range samples {
		if s.Master {
			res.Judged[CheckerOverlap]++
		}
	}
	res.Violations = append(res.Violations, CheckOverlap(samples)...)
	res.Failovers = countFailovers(samples)
	// Checksums.
	if n, v := r.checkChecksums(); v != nil {
		res.Violations = append(res.Violations, *v)
	} else {
		res.Judged[CheckerChecksums] = n
	}
	res.Judged[CheckerRecovery] = 1
}

func countFailovers(samples []Sample) int {
	sort.Slice(samples, func(i, j int) bool { return samples[i].Sent < samples[j].Sent })
	var last uint64
	n := 0
	for _, s := range samples {
		if !s.Master {
			continue
		}
		if last != 0 && s.ID != last {
			n++
		}
		last = s.ID
	}
	return n
}

func (r *run) listAcks() (map[string]bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := r.c.WorkerClient(ctx, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	s, err := cl.NewSession(ctx)
	if err != nil {
		return nil, err
	}
	defer s.Close(ctx)
	h, err := s.Open(ctx, AckDir(prefix), client.OpenOptions{})
	if err != nil {
		return nil, err
	}
	ents, err := h.ReadDir(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[AckDir(prefix)+"/"+e.Name] = true
	}
	return out, nil
}

// checkChecksums waits until every replica has applied the same slot and
// compares their state checksums; it returns how many it compared.
func (r *run) checkChecksums() (int, *Violation) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last string
	for {
		sts := map[uint64]*api.CellStatusResponse{}
		for _, id := range r.c.IDs() {
			st, err := r.c.Status(ctx, id)
			if err != nil {
				last = fmt.Sprintf("replica %d: %v", id, err)
				break
			}
			sts[id] = st
		}
		if len(sts) == len(r.c.IDs()) {
			same := true
			var ref *api.CellStatusResponse
			for _, id := range r.c.IDs() {
				st := sts[id]
				if ref == nil {
					ref = st
					continue
				}
				if st.Applied != ref.Applied {
					same = false
					break
				}
				if st.Checksum != ref.Checksum {
					return 0, &Violation{CheckerChecksums, fmt.Sprintf("replicas %d and %d applied slot %d with checksums %s and %s", ref.Replica, st.Replica, st.Applied, ref.Checksum, st.Checksum)}
				}
			}
			if same && ref.Applied > 0 {
				return len(sts), nil
			}
			var parts []string
			for _, id := range r.c.IDs() {
				st := sts[id]
				// Who each believes is master, in which epoch, and its
				// role: what a diagnosis of a replica that stopped
				// learning needs.
				parts = append(parts, fmt.Sprintf("%d@%d (chosen %d, %s, master %d, epoch %v)", id, st.Applied, st.Chosen, st.Role, st.Master, st.Epoch))
			}
			last = "applied slots differ: " + strings.Join(parts, " ")
		}
		select {
		case <-ctx.Done():
			return 0, &Violation{CheckerChecksums, "replicas did not converge within 30s: " + last}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *run) writeHistory(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	r.mu.Lock()
	h := append([]Entry(nil), r.history...)
	r.mu.Unlock()
	sort.SliceStable(h, func(i, j int) bool { return h[i].Time < h[j].Time })
	for _, e := range h {
		_ = enc.Encode(e)
	}
	for _, rec := range r.res.records() {
		_ = enc.Encode(map[string]any{"src": "resource", "seq": rec.Seq, "key": rec.Key, "v": string(rec.Value),
			"gen": rec.Sequencer.Generation, "instance": rec.Sequencer.Instance, "accepted": rec.Accepted, "reason": rec.Reason})
	}
	return bw.Flush()
}

// writeSamples writes the sampler's polls (kept runs only, for diagnosis).
func (r *run) writeSamples(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	enc := json.NewEncoder(bw)
	r.mu.Lock()
	ss := append([]Sample(nil), r.samples...)
	r.mu.Unlock()
	sort.Slice(ss, func(i, j int) bool { return ss[i].Sent < ss[j].Sent })
	for _, s := range ss {
		_ = enc.Encode(s)
	}
	return bw.Flush()
}

// faultRules helpers.

func partitionRules(a, b []uint64) transport.FaultState {
	var st transport.FaultState
	for _, x := range a {
		for _, y := range b {
			st.Rules = append(st.Rules, transport.Rule{From: x, To: y, Partition: true}, transport.Rule{From: y, To: x, Partition: true})
		}
	}
	return st
}

// setEverywhere installs st on every running replica. A replica that is
// not running is skipped (it has no rules when it starts); any other
// failure is returned: the fault was not applied as drawn.
func (r *run) setEverywhere(ctx context.Context, st transport.FaultState) error {
	var errs []error
	for _, id := range r.c.IDs() {
		if err := r.c.SetFaultsRunning(ctx, id, st); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, fmt.Errorf("faults on replica %d: %w", id, err))
		}
	}
	return errors.Join(errs...)
}
