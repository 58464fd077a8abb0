package proccell

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
)

// ErrInvalidConfig reports a Config (or Knobs) that cannot work.
var ErrInvalidConfig = errors.New("proccell: invalid config")

// Config describes a cell of lockcelld processes. The zero value of each
// optional field is usable.
type Config struct {
	// Binary is the lockcelld executable (Build makes one). Required.
	Binary string
	// Dir receives the cell: `lockcelld init`'s output (certs/, data/,
	// replica-N.json, admin.json) and, unless LogDir says otherwise, the replicas' logs in logs/. It is
	// created if missing and must not hold a cell already. Required.
	Dir string
	// Name is the cell's name. If empty, "proccell".
	Name string
	// LogDir receives replica-N.log, each replica's output. If empty,
	// Dir/logs.
	LogDir string
	// Replicas is the number of replicas, 3 or 5. If zero, 5.
	Replicas int
	// UDPBase, if not zero, puts replica i on UDP 127.0.0.1:UDPBase+i-1;
	// if zero, free ports are chosen.
	UDPBase int
	// HTTPBase, if not zero, puts replica i's HTTP listener (status,
	// metrics, fault injection) on TCP 127.0.0.1:HTTPBase+i-1; if zero,
	// free ports are chosen.
	HTTPBase int
	// FaultInjection serves /debug/faults on every replica's HTTP listener
	// and allows the test-only Knobs.
	FaultInjection bool
	// SessionLease, if not zero, is the cell's session lease.
	SessionLease time.Duration
	// Extra sets further keys of every replica's JSON config
	// ("snapshot_every": 100); the harness's own keys win over it.
	Extra map[string]any
	// Knobs are every replica's settings at its first start (Restart
	// replaces one replica's).
	Knobs Knobs
	// Logger receives the harness's progress and is the Logger of the
	// client configs it returns. If nil, logs are discarded.
	Logger *slog.Logger
}

// Knobs are one replica's per-process settings. The test-only ones
// (ClockScale, SyncDelay, ElectionTicks, UnsafeNoFsync) need
// Config.FaultInjection: lockcelld refuses them otherwise.
type Knobs struct {
	// LogLevel of the replica's log (debug, info, warn, error). If empty,
	// "warn".
	LogLevel string
	// ClockScale skews the replica's tick rate; 0 and 1 mean none.
	ClockScale float64
	// SyncDelay delays every fsync of the replica's Paxos log.
	SyncDelay time.Duration
	// ElectionTicks, if not zero, overrides the replica's election timeout
	// in its own ticks (a small one makes it campaign before the others).
	ElectionTicks int
	// UnsafeNoFsync makes the replica's store lose its unsynced writes
	// when the process dies (a weakened run).
	UnsafeNoFsync bool
}

func (k Knobs) testOnly() bool {
	return (k.ClockScale != 0 && k.ClockScale != 1) || k.SyncDelay != 0 || k.ElectionTicks != 0 || k.UnsafeNoFsync
}

func (k Knobs) validate(faults bool) error {
	switch {
	case k.ClockScale < 0:
		return fmt.Errorf("%w: clock scale %v is negative", ErrInvalidConfig, k.ClockScale)
	case k.SyncDelay < 0:
		return fmt.Errorf("%w: sync delay %v is negative", ErrInvalidConfig, k.SyncDelay)
	case k.ElectionTicks < 0:
		return fmt.Errorf("%w: election ticks %d is negative", ErrInvalidConfig, k.ElectionTicks)
	case k.testOnly() && !faults:
		return fmt.Errorf("%w: clock scale, sync delay, election ticks and unsafe_no_fsync need FaultInjection", ErrInvalidConfig)
	}
	return nil
}

// Cell is a cell of `lockcelld serve` processes on loopback, one process
// group per replica. Init's replicas have ids 1 to Config.Replicas;
// JoinReplica adds others, Retire takes one out for good.
type Cell struct {
	cfg   Config
	log   *slog.Logger
	httpc *http.Client
	ca    *certs.CA
	// setRetry is how long SetFaultsRunning retries.
	setRetry time.Duration

	mu struct {
		sync.Mutex
		// reps are the replicas in the order they were written (Init's in
		// id order, then JoinReplica's), retired ones included.
		reps []*replica
	}
}

type replica struct {
	id       uint64
	addr     string
	httpAddr string
	cfgPath  string
	logFile  string
	// base is the config `lockcelld init` wrote; every start writes
	// base plus the harness's keys, so no knob outlives a restart by
	// accident.
	base map[string]any

	mu struct {
		sync.Mutex
		p *Process
		// incarnation counts the replica's lives: each start and each
		// SIGCONT begins a new one.
		incarnation int
		knobs       Knobs
		// retired: stopped for good by Retire; it never starts again.
		retired bool
	}
}

// Start writes the cell (Init), starts every replica, and waits until one
// serves as master. On error every process it started is killed.
func Start(ctx context.Context, cfg Config) (*Cell, error) {
	c, err := Init(ctx, cfg)
	if err != nil {
		return nil, err
	}
	for _, id := range c.IDs() {
		if err := c.StartReplica(id); err != nil {
			c.KillAll()
			return nil, err
		}
	}
	if _, err := c.WaitMaster(ctx); err != nil {
		c.KillAll()
		return nil, fmt.Errorf("%w (logs in %s)", err, c.cfg.LogDir)
	}
	return c, nil
}

// Init picks the ports and writes the cell with `lockcelld init`, but
// starts no replica (StartReplica does).
func Init(ctx context.Context, cfg Config) (*Cell, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: Config needs Binary and Dir", ErrInvalidConfig)
	}
	if cfg.Name == "" {
		cfg.Name = "proccell"
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 5
	}
	if cfg.Replicas != 3 && cfg.Replicas != 5 {
		return nil, fmt.Errorf("%w: %d replicas (3 or 5)", ErrInvalidConfig, cfg.Replicas)
	}
	if err := cfg.Knobs.validate(cfg.FaultInjection); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LogDir == "" {
		cfg.LogDir = filepath.Join(cfg.Dir, "logs")
	}
	c := &Cell{cfg: cfg, log: cfg.Logger, httpc: &http.Client{Timeout: 2 * time.Second}, setRetry: 5 * time.Second}
	udp, err := ports("udp", cfg.UDPBase, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	tcp, err := ports("tcp", cfg.HTTPBase, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, p := range udp {
		addrs = append(addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	}
	if err := os.MkdirAll(cfg.LogDir, 0o700); err != nil {
		return nil, err
	}
	args := []string{"init", "--dir", cfg.Dir, "--cell", cfg.Name, "--replicas", strings.Join(addrs, ","), "--http-port", "0"}
	if cfg.FaultInjection {
		args = append(args, "--fault-injection")
	}
	if out, err := exec.CommandContext(ctx, cfg.Binary, args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("proccell: lockcelld init: %w: %s", err, bytes.TrimSpace(out))
	}
	caPEM, err1 := os.ReadFile(filepath.Join(cfg.Dir, "certs", "ca.pem"))
	keyPEM, err2 := os.ReadFile(filepath.Join(cfg.Dir, "certs", "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("proccell: reading the cell CA: %w", err)
	}
	if c.ca, err = certs.LoadCA(caPEM, keyPEM); err != nil {
		return nil, fmt.Errorf("proccell: loading the cell CA: %w", err)
	}
	for i := range cfg.Replicas {
		id := uint64(i + 1)
		r := &replica{id: id, addr: addrs[i], httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp[i])),
			cfgPath: filepath.Join(cfg.Dir, fmt.Sprintf("replica-%d.json", id)),
			logFile: filepath.Join(cfg.LogDir, fmt.Sprintf("replica-%d.log", id))}
		b, err := os.ReadFile(r.cfgPath)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(b, &r.base); err != nil {
			return nil, fmt.Errorf("proccell: %s: %w", r.cfgPath, err)
		}
		r.mu.knobs = cfg.Knobs
		c.mu.reps = append(c.mu.reps, r)
	}
	return c, nil
}

// ports returns n loopback ports of network ("udp" or "tcp"): base..base+n-1
// if base is not zero (checked free), else n free ones. The ports are
// released before return, so another process could take one in between;
// on loopback in a test run that is unlikely.
func ports(network string, base, n int) ([]int, error) {
	var out []int
	var held []io.Closer
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := range n {
		port := 0
		if base != 0 {
			port = base + i
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if network == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				return nil, fmt.Errorf("proccell: UDP port for replica %d: %w", i+1, err)
			}
			held = append(held, pc)
			out = append(out, pc.LocalAddr().(*net.UDPAddr).Port)
			continue
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("proccell: TCP port for replica %d: %w", i+1, err)
		}
		held = append(held, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

func (c *Cell) rep(id uint64) (*replica, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.mu.reps {
		if r.id == id {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: no replica %d in this cell", ErrInvalidConfig, id)
}

// replicas returns the replicas not retired, in the order they were
// written.
func (c *Cell) replicas() []*replica {
	c.mu.Lock()
	reps := slices.Clone(c.mu.reps)
	c.mu.Unlock()
	return slices.DeleteFunc(reps, func(r *replica) bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.mu.retired
	})
}

// writeConfigLocked writes r's config: init's, plus the HTTP listener,
// the cell-wide settings and r's knobs.
// REQUIRES: r.mu held.
func (c *Cell) writeConfigLocked(r *replica) error {
	m := map[string]any{}
	for k, v := range c.cfg.Extra {
		m[k] = v
	}
	for k, v := range r.base {
		m[k] = v
	}
	m["http_addr"] = r.httpAddr
	m["fault_injection"] = c.cfg.FaultInjection
	if c.cfg.SessionLease != 0 {
		m["session_lease"] = c.cfg.SessionLease.String()
	}
	k := r.mu.knobs
	if k.ClockScale != 0 && k.ClockScale != 1 {
		m["clock_scale"] = k.ClockScale
	}
	if k.SyncDelay > 0 {
		m["sync_delay"] = k.SyncDelay.String()
	}
	if k.ElectionTicks != 0 {
		m["election_ticks"] = k.ElectionTicks
	}
	if k.UnsafeNoFsync {
		m["unsafe_no_fsync"] = true
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(r.cfgPath, b, 0o600)
}

// StartReplica starts replica id with its current knobs, unless its process
// runs already.
func (c *Cell) StartReplica(id uint64) error {
	r, err := c.rep(id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.p.Alive() {
		return nil
	}
	if r.mu.retired {
		return fmt.Errorf("%w: replica %d was retired: it never starts again", ErrInvalidConfig, id)
	}
	if r.base == nil {
		return fmt.Errorf("%w: replica %d was attached, not written by Init: it cannot be started", ErrInvalidConfig, id)
	}
	if err := c.writeConfigLocked(r); err != nil {
		return err
	}
	level := r.mu.knobs.LogLevel
	if level == "" {
		level = "warn"
	}
	p, err := StartProcess(ProcessSpec{Name: fmt.Sprintf("replica %d", id), LogFile: r.logFile,
		Argv: []string{c.cfg.Binary, "serve", "--config", r.cfgPath, "--log-level", level}})
	if err != nil {
		return err
	}
	r.mu.p = p
	r.mu.incarnation++
	c.log.Debug("replica started", "id", id, "pid", p.PID())
	return nil
}

// Restart kills replica id (if it runs) and starts it on its data with
// knobs k, which replace its previous ones.
func (c *Cell) Restart(id uint64, k Knobs) error {
	if err := k.validate(c.cfg.FaultInjection); err != nil {
		return err
	}
	r, err := c.rep(id)
	if err != nil {
		return err
	}
	c.Kill(id)
	r.mu.Lock()
	r.mu.knobs = k
	r.mu.Unlock()
	return c.StartReplica(id)
}

// Knobs returns replica id's current knobs (those of its running process,
// or of its next start).
func (c *Cell) Knobs(id uint64) Knobs {
	r, err := c.rep(id)
	if err != nil {
		return Knobs{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.knobs
}

// Process returns replica id's process (nil before its first start). It
// may have exited.
func (c *Cell) Process(id uint64) *Process {
	r, err := c.rep(id)
	if err != nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.p
}

// Signal sends sig to replica id's process group without waiting. It fails
// with ErrNotRunning if the replica is not running.
func (c *Cell) Signal(id uint64, sig syscall.Signal) error {
	p := c.Process(id)
	if !p.Alive() {
		return fmt.Errorf("%w: replica %d", ErrNotRunning, id)
	}
	return p.Signal(sig)
}

// Stop sends sig to replica id (SIGTERM: it steps down first if it is
// master, as `lockcelld serve` does) and waits for it to exit. If ctx ends
// first the replica is killed and the error says so.
func (c *Cell) Stop(ctx context.Context, id uint64, sig syscall.Signal) error {
	p := c.Process(id)
	if err := c.Signal(id, sig); err != nil {
		return err
	}
	if sig == syscall.SIGTERM || sig == syscall.SIGINT {
		// A stopped process would not act on it.
		_ = p.Signal(syscall.SIGCONT)
	}
	select {
	case <-p.Done():
		return nil
	case <-ctx.Done():
		p.Kill()
		return fmt.Errorf("proccell: replica %d did not exit after %v (killed): %w", id, sig, ctx.Err())
	}
}

// Kill SIGKILLs replica id's process group and waits for it to exit. It
// does nothing if the replica is not running.
func (c *Cell) Kill(id uint64) { c.Process(id).Kill() }

// Pause SIGSTOPs replica id.
func (c *Cell) Pause(id uint64) error { return c.Signal(id, syscall.SIGSTOP) }

// Resume SIGCONTs a paused replica id. It begins a new incarnation, so that
// no inference about the master role spans the pause.
func (c *Cell) Resume(id uint64) error {
	r, err := c.rep(id)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.mu.incarnation++
	r.mu.Unlock()
	return c.Signal(id, syscall.SIGCONT)
}

// Running reports whether replica id's process runs (paused or not), and
// its incarnation (1 for the first start; every restart and every Resume
// adds one).
func (c *Cell) Running(id uint64) (running bool, incarnation int) {
	r, err := c.rep(id)
	if err != nil {
		return false, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.p.Alive(), r.mu.incarnation
}

// Paused reports whether replica id runs and is SIGSTOPped.
func (c *Cell) Paused(id uint64) bool {
	p := c.Process(id)
	return p.Alive() && p.Stopped()
}

// PIDs returns the running replicas' process ids in id order.
func (c *Cell) PIDs() []int {
	var out []int
	for _, id := range c.IDs() {
		if p := c.Process(id); p.Alive() {
			out = append(out, p.PID())
		}
	}
	return out
}

// KillAll kills every replica.
func (c *Cell) KillAll() {
	c.mu.Lock()
	reps := slices.Clone(c.mu.reps)
	c.mu.Unlock()
	for _, r := range reps {
		c.Kill(r.id)
	}
}

// StopAll asks every running replica to stop (SIGTERM) and kills those
// that have not exited when ctx ends.
func (c *Cell) StopAll(ctx context.Context) {
	var wg sync.WaitGroup
	for _, id := range c.IDs() {
		if running, _ := c.Running(id); !running {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Stop(ctx, id, syscall.SIGTERM)
		}()
	}
	wg.Wait()
}

// IDs returns the ids of the replicas not retired, in increasing order: 1
// to Config.Replicas, then those JoinReplica added.
func (c *Cell) IDs() []uint64 {
	var ids []uint64
	for _, r := range c.replicas() {
		ids = append(ids, r.id)
	}
	slices.Sort(ids)
	return ids
}

// Addrs returns the UDP addresses of the replicas not retired, in id
// order.
func (c *Cell) Addrs() []string {
	var out []string
	for _, id := range c.IDs() {
		out = append(out, c.Addr(id))
	}
	return out
}

// Addr returns replica id's UDP address (host:port), or "" if there is no
// replica id.
func (c *Cell) Addr(id uint64) string {
	r, err := c.rep(id)
	if err != nil {
		return ""
	}
	return r.addr
}

// HTTPAddr returns replica id's HTTP listener (host:port).
func (c *Cell) HTTPAddr(id uint64) string {
	r, err := c.rep(id)
	if err != nil {
		return ""
	}
	return r.httpAddr
}

// Dir returns the cell's directory.
func (c *Cell) Dir() string { return c.cfg.Dir }

// Name returns the cell's name.
func (c *Cell) Name() string { return c.cfg.Name }

// ConfigFile returns replica id's config file (rewritten at each start).
func (c *Cell) ConfigFile(id uint64) string {
	return filepath.Join(c.cfg.Dir, fmt.Sprintf("replica-%d.json", id))
}

// DataDir returns replica id's data directory.
func (c *Cell) DataDir(id uint64) string {
	return filepath.Join(c.cfg.Dir, "data", fmt.Sprintf("replica-%d", id))
}

// LogFile returns the file replica id's output is appended to.
func (c *Cell) LogFile(id uint64) string {
	return filepath.Join(c.cfg.LogDir, fmt.Sprintf("replica-%d.log", id))
}

// Attached is a replica process started elsewhere, for Attach.
type Attached struct {
	// Process is the replica's process.
	Process *Process
	// HTTPAddr is its HTTP listener (host:port).
	HTTPAddr string
}

// Attach returns a Cell over replica processes started elsewhere (replica
// i+1 is reps[i]): it signals them, reads their pages and sets their
// faults, but has no cell directory, so it cannot start them again
// (StartReplica and Restart fail with ErrInvalidConfig) nor issue
// certificates.
func Attach(reps []Attached) *Cell {
	c := &Cell{log: slog.New(slog.DiscardHandler), httpc: &http.Client{Timeout: 2 * time.Second}, setRetry: 5 * time.Second}
	c.cfg.Logger = c.log
	for i, a := range reps {
		r := &replica{id: uint64(i + 1), httpAddr: a.HTTPAddr}
		r.mu.p = a.Process
		r.mu.incarnation = 1
		c.mu.reps = append(c.mu.reps, r)
	}
	c.cfg.Replicas = len(reps)
	return c
}

// JoinReplica prepares a new replica id that joins the running cell at a
// new address: it picks a free UDP port (Config.UDPBase+id-1 if UDPBase is
// set) and HTTP port, and runs `lockcelld init --join` with the current
// replicas (IDs) as its peers, which writes its certificate, its config
// and its empty data directory. It starts nothing (StartReplica does), and
// the cell makes the replica a member only when told to (lockctl cell
// add-replica or replace-replica). It returns the new replica's address.
// An id the cell has, or had, fails with ErrInvalidConfig; `lockcelld init
// --join`'s refusals come back as its error.
func (c *Cell) JoinReplica(ctx context.Context, id uint64) (string, error) {
	if c.cfg.Dir == "" {
		return "", fmt.Errorf("%w: an attached cell has no cell directory", ErrInvalidConfig)
	}
	if _, err := c.rep(id); err == nil || id == 0 {
		return "", fmt.Errorf("%w: replica %d exists or existed; ids are never reused", ErrInvalidConfig, id)
	}
	udpBase, httpBase := 0, 0
	if c.cfg.UDPBase != 0 {
		udpBase = c.cfg.UDPBase + int(id) - 1
	}
	if c.cfg.HTTPBase != 0 {
		httpBase = c.cfg.HTTPBase + int(id) - 1
	}
	udp, err := ports("udp", udpBase, 1)
	if err != nil {
		return "", err
	}
	tcp, err := ports("tcp", httpBase, 1)
	if err != nil {
		return "", err
	}
	var peers []string
	for _, pid := range c.IDs() {
		peers = append(peers, fmt.Sprintf("%d=%s", pid, c.Addr(pid)))
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(udp[0]))
	args := []string{"init", "--join", "--dir", c.cfg.Dir, "--id", strconv.FormatUint(id, 10), "--addr", addr,
		"--peers", strings.Join(peers, ","), "--http-port", "0"}
	if out, err := exec.CommandContext(ctx, c.cfg.Binary, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("proccell: lockcelld init --join: %w: %s", err, bytes.TrimSpace(out))
	}
	r := &replica{id: id, addr: addr, httpAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp[0])),
		cfgPath: c.ConfigFile(id), logFile: c.LogFile(id)}
	b, err := os.ReadFile(r.cfgPath)
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &r.base); err != nil {
		return "", fmt.Errorf("proccell: %s: %w", r.cfgPath, err)
	}
	// The election timeout is a per-replica knob here, not a cell setting
	// to inherit from the replica whose config init --join copied.
	delete(r.base, "election_ticks")
	r.mu.knobs = c.cfg.Knobs
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range c.mu.reps {
		if o.id == id {
			return "", fmt.Errorf("%w: replica %d was added meanwhile", ErrInvalidConfig, id)
		}
	}
	c.mu.reps = append(c.mu.reps, r)
	c.log.Debug("replica prepared", "id", id, "addr", addr)
	return addr, nil
}

// Retire stops replica id for good: it sends sig (SIGKILL kills at once;
// SIGTERM lets a master hand over), waits for the process to exit (killing
// it if ctx ends first), and removes its data directory. The replica then
// drops out of IDs, Addrs, FindMaster and Healthy and never starts again;
// its config, certificate and log stay, so its id is never issued again.
// Retiring a replica that is not running only removes its data.
func (c *Cell) Retire(ctx context.Context, id uint64, sig syscall.Signal) error {
	r, err := c.rep(id)
	if err != nil {
		return err
	}
	if r.base == nil {
		return fmt.Errorf("%w: replica %d was attached, not written by Init: it has no data directory here", ErrInvalidConfig, id)
	}
	if run, _ := c.Running(id); run {
		if err := c.Stop(ctx, id, sig); err != nil && !errors.Is(err, ErrNotRunning) {
			return err
		}
	}
	r.mu.Lock()
	r.mu.retired = true
	r.mu.Unlock()
	if err := os.RemoveAll(c.DataDir(id)); err != nil {
		return fmt.Errorf("proccell: removing replica %d's data: %w", id, err)
	}
	c.log.Debug("replica retired", "id", id)
	return nil
}
