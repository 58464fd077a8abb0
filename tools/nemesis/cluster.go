package nemesis

import (
	"bytes"
	"context"
	"crypto/ed25519"
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
	"github.com/lockcell/lockcell/transport"
)

// Tenant and principal of the workers.
const (
	Tenant    = "nem"
	Principal = "worker"
)

// ErrNoMaster reports that no serving master was found in time.
var ErrNoMaster = errors.New("nemesis: no master")

// ClusterConfig describes the cell of a run.
type ClusterConfig struct {
	// Dir holds the cell's certificates, configs, data and logs.
	Dir string
	// Lockcelld is the lockcelld binary.
	Lockcelld string
	// Replicas is the number of replicas (5).
	Replicas int
	// SessionLease is the session lease.
	SessionLease time.Duration
	// UnsafeNoFsync runs every replica with unsafe_no_fsync (a weakened
	// run: a SIGKILL loses acknowledged writes).
	UnsafeNoFsync bool
	// Logger receives progress logs.
	Logger *slog.Logger
}

// Cluster is a cell of lockcelld processes on loopback.
type Cluster struct {
	cfg     ClusterConfig
	cellDir string
	log     *slog.Logger
	httpc   *http.Client
	// ClientFile is the workers' client settings (tenant certificate).
	ClientFile string
	// PublicKey is the cell's sequencer-signing key.
	PublicKey ed25519.PublicKey
	Name      string

	reps []*replica // index id-1
	// setRetry is how long SetFaultsRunning retries.
	setRetry time.Duration
}

type replica struct {
	id       uint64
	cfgPath  string
	addr     string
	httpAddr string

	mu sync.Mutex
	p  *proc
	// incarnation counts the replica's lives: each start and each SIGCONT
	// begins a new one.
	incarnation int
	clockScale  float64
	syncDelay   time.Duration
	// electionTicks, if not zero, overrides the replica's election timeout
	// (in its own ticks).
	electionTicks int
}

// BuildLockcelld builds cmd/lockcelld into dir, with its invariant checks
// on (-tags invariants), and returns the binary's path. It runs `go build`
// in the module that holds the current directory.
func BuildLockcelld(ctx context.Context, dir string) (string, error) {
	return goBuild(ctx, filepath.Join(dir, "lockcelld"), "invariants", "github.com/lockcell/lockcell/cmd/lockcelld")
}

// BuildWorker builds the nemesis command (whose "worker" mode runs a
// worker) into dir with the given build tags, and returns the binary's
// path.
func BuildWorker(ctx context.Context, dir, tags string) (string, error) {
	return goBuild(ctx, filepath.Join(dir, "nemesis-worker"), tags, "github.com/lockcell/lockcell/tools/nemesis/cmd/nemesis")
}

func goBuild(ctx context.Context, out, tags, pkg string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", tags, "-o", out, pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("nemesis: go build -tags %s %s: %w: %s", tags, pkg, err, stderr.String())
	}
	return out, nil
}

// freePorts returns n distinct free loopback ports of network ("udp" or
// "tcp"). The ports are released before return, so another process could
// take one in between; on loopback in a test run that is unlikely.
func freePorts(network string, n int) ([]int, error) {
	var ports []int
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	for len(ports) < n {
		switch network {
		case "udp":
			c, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			closers = append(closers, c)
			ports = append(ports, c.LocalAddr().(*net.UDPAddr).Port)
		default:
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			closers = append(closers, l)
			ports = append(ports, l.Addr().(*net.TCPAddr).Port)
		}
	}
	return ports, nil
}

// StartCluster writes a cell with `lockcelld init` and starts every
// replica. It returns once a master serves and the workers' tenant exists.
// On error every process it started is killed.
func StartCluster(ctx context.Context, cfg ClusterConfig) (_ *Cluster, err error) {
	if cfg.Replicas == 0 {
		cfg.Replicas = 5
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c := &Cluster{cfg: cfg, cellDir: filepath.Join(cfg.Dir, "cell"), log: cfg.Logger, Name: "nemesis",
		httpc: &http.Client{Timeout: 2 * time.Second}, setRetry: 5 * time.Second}
	defer func() {
		if err != nil {
			c.KillAll()
		}
	}()
	udp, err := freePorts("udp", cfg.Replicas)
	if err != nil {
		return nil, err
	}
	tcp, err := freePorts("tcp", cfg.Replicas)
	if err != nil {
		return nil, err
	}
	var addrs []string
	for _, p := range udp {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(p))
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	initCmd := exec.CommandContext(ctx, cfg.Lockcelld, "init", "--dir", c.cellDir, "--cell", c.Name,
		"--replicas", strings.Join(addrs, ","), "--fault-injection")
	if out, err := initCmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("nemesis: lockcelld init: %w: %s", err, out)
	}
	for i := range cfg.Replicas {
		id := uint64(i + 1)
		r := &replica{id: id, addr: addrs[i], httpAddr: "127.0.0.1:" + strconv.Itoa(tcp[i]),
			cfgPath: filepath.Join(c.cellDir, fmt.Sprintf("replica-%d.json", id))}
		c.reps = append(c.reps, r)
		if err := c.start(r); err != nil {
			return nil, err
		}
	}
	key, err := cell.LoadOrCreateSigningKey(filepath.Join(c.cellDir, "certs", "signing-key.pem"))
	if err != nil {
		return nil, err
	}
	c.PublicKey = key.Public().(ed25519.PublicKey)
	if err := c.setupTenant(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// writeConfig rewrites r's config with the current test-only settings.
// REQUIRES: r.mu held.
func (c *Cluster) writeConfigLocked(r *replica) error {
	b, err := os.ReadFile(r.cfgPath)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("nemesis: %s: %w", r.cfgPath, err)
	}
	m["http_addr"] = r.httpAddr
	m["fault_injection"] = true
	m["session_lease"] = c.cfg.SessionLease.String()
	delete(m, "clock_scale")
	delete(m, "sync_delay")
	delete(m, "unsafe_no_fsync")
	if c.cfg.UnsafeNoFsync {
		m["unsafe_no_fsync"] = true
	}
	if r.clockScale != 0 && r.clockScale != 1 {
		m["clock_scale"] = r.clockScale
	}
	delete(m, "election_ticks")
	if r.electionTicks != 0 {
		m["election_ticks"] = r.electionTicks
	}
	if r.syncDelay > 0 {
		m["sync_delay"] = r.syncDelay.String()
	}
	out, _ := json.MarshalIndent(m, "", "  ")
	return os.WriteFile(r.cfgPath, out, 0o600)
}

func (c *Cluster) start(r *replica) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p != nil && r.p.alive() {
		return nil
	}
	if err := c.writeConfigLocked(r); err != nil {
		return err
	}
	logFile := filepath.Join(c.cfg.Dir, "logs", fmt.Sprintf("replica-%d.log", r.id))
	p, err := startProc(fmt.Sprintf("replica %d", r.id),
		[]string{c.cfg.Lockcelld, "serve", "--config", r.cfgPath, "--log-level", "warn"}, logFile, nil, nil)
	if err != nil {
		return err
	}
	r.p = p
	r.incarnation++
	return nil
}

func (c *Cluster) rep(id uint64) *replica { return c.reps[id-1] }

// IDs returns the replica ids.
func (c *Cluster) IDs() []uint64 {
	ids := make([]uint64, len(c.reps))
	for i := range c.reps {
		ids[i] = uint64(i + 1)
	}
	return ids
}

// Addrs returns the replicas' UDP addresses.
func (c *Cluster) Addrs() []string {
	var out []string
	for _, r := range c.reps {
		out = append(out, r.addr)
	}
	return out
}

// Kill SIGKILLs replica id.
func (c *Cluster) Kill(id uint64) {
	r := c.rep(id)
	r.mu.Lock()
	p := r.p
	r.mu.Unlock()
	p.kill()
}

// Start starts replica id if it is not running.
func (c *Cluster) Start(id uint64) error { return c.start(c.rep(id)) }

// Restart kills replica id and starts it with the given clock scale (0 or 1:
// none) and fsync delay.
func (c *Cluster) Restart(id uint64, clockScale float64, syncDelay time.Duration) error {
	r := c.rep(id)
	c.Kill(id)
	r.mu.Lock()
	r.clockScale, r.syncDelay, r.electionTicks = clockScale, syncDelay, 0
	r.mu.Unlock()
	return c.start(r)
}

// RestartEager is Restart with a clock scale and an election timeout of
// electionTicks of the replica's own ticks: a replica whose clock runs slow
// but that campaigns before the others.
func (c *Cluster) RestartEager(id uint64, clockScale float64, electionTicks int) error {
	r := c.rep(id)
	c.Kill(id)
	r.mu.Lock()
	r.clockScale, r.syncDelay, r.electionTicks = clockScale, 0, electionTicks
	r.mu.Unlock()
	return c.start(r)
}

// Skewed reports replica id's clock scale and fsync delay.
func (c *Cluster) Skewed(id uint64) (float64, time.Duration) {
	r := c.rep(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clockScale, r.syncDelay
}

// Pause SIGSTOPs replica id; Resume SIGCONTs it.
func (c *Cluster) Pause(id uint64) error { return c.proc(id).signal(syscall.SIGSTOP) }

// Resume continues a paused replica; it begins a new incarnation, so that
// no inference about the master role spans the pause.
func (c *Cluster) Resume(id uint64) error {
	r := c.rep(id)
	r.mu.Lock()
	r.incarnation++
	r.mu.Unlock()
	return c.proc(id).signal(syscall.SIGCONT)
}

func (c *Cluster) proc(id uint64) *proc {
	r := c.rep(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.p == nil {
		return &proc{done: closedChan}
	}
	return r.p
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Running reports whether replica id's process runs (paused or not), and
// its incarnation (1 for the first start; every restart and every SIGCONT
// adds one).
func (c *Cluster) Running(id uint64) (running bool, incarnation int) {
	r := c.rep(id)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.p != nil && r.p.alive(), r.incarnation
}

// Paused reports whether replica id is SIGSTOPped.
func (c *Cluster) Paused(id uint64) bool {
	p := c.proc(id)
	return p.alive() && p.isStopped()
}

// KillAll kills every replica.
func (c *Cluster) KillAll() {
	for _, r := range c.reps {
		r.mu.Lock()
		p := r.p
		r.mu.Unlock()
		p.kill()
	}
}

// Status fetches replica id's /status.
func (c *Cluster) Status(ctx context.Context, id uint64) (*api.CellStatusResponse, error) {
	var st api.CellStatusResponse
	if err := c.getJSON(ctx, "http://"+c.rep(id).httpAddr+"/status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (c *Cluster) getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nemesis: GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// MasterSample is what a replica's status page says about its master role
// at the moment it answered.
type MasterSample struct {
	// Master reports that the replica served as master: the page's role is
	// computed by the same check that admits client requests, at request
	// time (a gauge updated by the run loop could lag, as after a pause).
	Master bool
	// Epoch is the ballot of the master the replica knows ("round.id"); a
	// replica that becomes master anew does so in a new epoch.
	Epoch string
}

// MasterOf fetches replica id's /status and reads its role and epoch. The
// role there is computed by the same check that admits client requests, at
// request time (a gauge updated by the run loop could lag, as after a
// pause).
func (c *Cluster) MasterOf(ctx context.Context, id uint64) (MasterSample, error) {
	var ms MasterSample
	st, err := c.Status(ctx, id)
	if err != nil {
		return ms, err
	}
	if st.Replica != id {
		return ms, fmt.Errorf("nemesis: status of %d: answered by replica %d", id, st.Replica)
	}
	ms.Master, ms.Epoch = st.Role == api.RoleMaster, st.Epoch.String()
	return ms, nil
}

// FindMaster returns the replica whose status page says it serves as
// master.
func (c *Cluster) FindMaster(ctx context.Context) (uint64, error) {
	type res struct {
		id uint64
		ms MasterSample
		ok bool
	}
	ch := make(chan res, len(c.reps))
	for _, id := range c.IDs() {
		go func() {
			if c.Paused(id) {
				ch <- res{id: id}
				return
			}
			mctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ms, err := c.MasterOf(mctx, id)
			ch <- res{id, ms, err == nil}
		}()
	}
	var best uint64
	for range c.reps {
		r := <-ch
		if r.ok && r.ms.Master && (best == 0 || r.id < best) {
			best = r.id
		}
	}
	if best == 0 {
		return 0, ErrNoMaster
	}
	return best, nil
}

// WaitMaster polls until a replica serves as master or ctx ends.
func (c *Cluster) WaitMaster(ctx context.Context) (uint64, error) {
	for {
		id, err := c.FindMaster(ctx)
		if err == nil {
			return id, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: %w", ErrNoMaster, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// faultsURL is where replica id serves its fault injector.
func (c *Cluster) faultsURL(id uint64) string {
	return "http://" + c.rep(id).httpAddr + "/debug/faults"
}

// FaultsAvailable reports whether replica id's /debug/faults answers (an
// error says why not).
func (c *Cluster) FaultsAvailable(ctx context.Context, id uint64) error {
	var st transport.FaultState
	return c.getJSON(ctx, c.faultsURL(id)+"/", &st)
}

// SetFaults replaces replica id's fault rules.
func (c *Cluster) SetFaults(ctx context.Context, id uint64, st transport.FaultState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.faultsURL(id)+"/rules", bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("nemesis: faults of %d: %s: %s", id, resp.Status, body)
	}
	return nil
}

// SetFaultsRunning installs st on replica id, retrying for up to 5 s while
// its HTTP listener comes up (a replica restarted a moment ago). It fails
// with ErrNotRunning if the replica is not running (or is paused).
func (c *Cluster) SetFaultsRunning(ctx context.Context, id uint64, st transport.FaultState) error {
	deadline := time.Now().Add(c.setRetry)
	for {
		if run, _ := c.Running(id); !run || c.Paused(id) {
			return fmt.Errorf("%w: replica %d", ErrNotRunning, id)
		}
		err := c.SetFaults(ctx, id, st)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// HealAll removes every fault rule on every running replica. A replica
// that is down or paused is skipped: a restarted replica starts with no
// rules, and a paused one is healed when it is continued (Resume does not
// heal; the schedule heals after it). The error names the replicas that
// could not be healed.
func (c *Cluster) HealAll(ctx context.Context) error {
	var errs []error
	for _, id := range c.IDs() {
		if err := c.SetFaultsRunning(ctx, id, transport.FaultState{}); err != nil && !errors.Is(err, ErrNotRunning) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// AdminClient dials the cell as its administrator.
func (c *Cluster) AdminClient(ctx context.Context) (*client.Client, error) {
	f, err := client.ReadConfigFile(filepath.Join(c.cellDir, "admin.json"))
	if err != nil {
		return nil, err
	}
	cfg, err := f.Config(true)
	if err != nil {
		return nil, err
	}
	cfg.Logger = c.log
	cfg.ReconnectMax = 300 * time.Millisecond
	return client.Dial(ctx, cfg)
}

// WorkerClient dials the cell as the workers' tenant.
func (c *Cluster) WorkerClient(ctx context.Context, grace time.Duration) (*client.Client, error) {
	cfg, err := client.LoadConfigFile(c.ClientFile)
	if err != nil {
		return nil, err
	}
	cfg.Logger = c.log
	cfg.GracePeriod = grace
	cfg.ReconnectMax = 300 * time.Millisecond
	return client.Dial(ctx, cfg)
}

// setupTenant creates the workers' tenant and writes their certificate and
// client file.
func (c *Cluster) setupTenant(ctx context.Context) error {
	certDir := filepath.Join(c.cellDir, "certs")
	caPEM, err := os.ReadFile(filepath.Join(certDir, "ca.pem"))
	if err != nil {
		return err
	}
	caKey, err := os.ReadFile(filepath.Join(certDir, "ca-key.pem"))
	if err != nil {
		return err
	}
	ca, err := certs.LoadCA(caPEM, caKey)
	if err != nil {
		return err
	}
	tc, err := ca.IssueClient(certs.ClientID{Tenant: Tenant, Principal: Principal}, certs.Options{})
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := certs.EncodeKeyPair(tc)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(certDir, "worker.pem"), certPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(certDir, "worker-key.pem"), keyPEM, 0o600); err != nil {
		return err
	}
	cf := clientfile.File{Cell: c.Name, Addrs: c.Addrs(), CA: "certs/ca.pem",
		User: clientfile.Credential{Cert: "certs/worker.pem", Key: "certs/worker-key.pem"}}
	c.ClientFile = filepath.Join(c.cellDir, "worker-client.json")
	if err := os.WriteFile(c.ClientFile, cf.Marshal(), 0o600); err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := c.WaitMaster(sctx); err != nil {
		return err
	}
	admin, err := c.AdminClient(sctx)
	if err != nil {
		return err
	}
	defer admin.Close()
	for {
		_, err := operator.New(admin).CreateTenant(sctx, Tenant, api.TenantQuota{}, api.ACLNames{})
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			return nil
		}
		if sctx.Err() != nil {
			return fmt.Errorf("nemesis: creating tenant: %w", err)
		}
		sleepCtx(sctx, 100*time.Millisecond)
	}
}
