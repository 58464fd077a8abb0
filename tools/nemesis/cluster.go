package nemesis

import (
	"context"
	"crypto/ed25519"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/proccell"
)

// Tenant and principal of the workers.
const (
	Tenant    = "nem"
	Principal = "worker"
)

// Errors of the cluster, those of internal/proccell.
var (
	// ErrNoMaster reports that no serving master was found in time.
	ErrNoMaster = proccell.ErrNoMaster
	// ErrNotRunning reports an action on a process that is not running.
	ErrNotRunning = proccell.ErrNotRunning
)

// MasterSample is what a replica's status page says about its master
// role at the moment it answered.
type MasterSample = proccell.MasterSample

// ClusterConfig describes the cell of a run.
type ClusterConfig struct {
	// Dir holds the cell (in cell/) and the logs (in logs/).
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

// Cluster is a cell of lockcelld processes on loopback with fault
// injection (internal/proccell), plus the workers' tenant.
type Cluster struct {
	*proccell.Cell
	cfg ClusterConfig
	// ClientFile is the workers' client settings (tenant certificate).
	ClientFile string
	// PublicKey is the cell's sequencer-signing key.
	PublicKey ed25519.PublicKey
	// Name is the cell's name.
	Name string
}

// BuildLockcelld builds cmd/lockcelld into dir, with its invariant checks
// on (-tags invariants), and returns the binary's path. It runs `go build`
// in the module that holds the current directory.
func BuildLockcelld(ctx context.Context, dir string) (string, error) {
	return proccell.BuildLockcelld(ctx, dir, "invariants")
}

// BuildWorker builds the nemesis command (whose "worker" mode runs a
// worker) into dir with the given build tags, and returns the binary's
// path.
func BuildWorker(ctx context.Context, dir, tags string) (string, error) {
	return proccell.Build(ctx, dir, "nemesis-worker", tags, "github.com/lockcell/lockcell/tools/nemesis/cmd/nemesis")
}

// StartCluster writes a cell with `lockcelld init` and starts every
// replica. It returns once a master serves and the workers' tenant exists.
// On error every process it started is killed.
func StartCluster(ctx context.Context, cfg ClusterConfig) (_ *Cluster, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	logs := filepath.Join(cfg.Dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	pc, err := proccell.Start(sctx, proccell.Config{Binary: cfg.Lockcelld, Dir: filepath.Join(cfg.Dir, "cell"), LogDir: logs,
		Name: "nemesis", Replicas: cfg.Replicas, FaultInjection: true, SessionLease: cfg.SessionLease, Logger: cfg.Logger,
		Knobs: proccell.Knobs{LogLevel: "warn", UnsafeNoFsync: cfg.UnsafeNoFsync}})
	if err != nil {
		return nil, err
	}
	c := &Cluster{Cell: pc, cfg: cfg, Name: pc.Name()}
	defer func() {
		if err != nil {
			c.KillAll()
		}
	}()
	if c.PublicKey, err = pc.PublicKey(); err != nil {
		return nil, err
	}
	if c.ClientFile, err = pc.WriteClientFile(Tenant, Principal); err != nil {
		return nil, err
	}
	if err := pc.CreateTenant(sctx, Tenant); err != nil {
		return nil, err
	}
	return c, nil
}

// knobs are the replicas' knobs with clock scale (0 or 1: none), fsync
// delay and election timeout (0: the default).
func (c *Cluster) knobs(clockScale float64, syncDelay time.Duration, electionTicks int) proccell.Knobs {
	return proccell.Knobs{LogLevel: "warn", UnsafeNoFsync: c.cfg.UnsafeNoFsync,
		ClockScale: clockScale, SyncDelay: syncDelay, ElectionTicks: electionTicks}
}

// Start starts replica id if it is not running.
func (c *Cluster) Start(id uint64) error { return c.StartReplica(id) }

// Restart kills replica id and starts it with the given clock scale (0 or 1:
// none) and fsync delay.
func (c *Cluster) Restart(id uint64, clockScale float64, syncDelay time.Duration) error {
	return c.Cell.Restart(id, c.knobs(clockScale, syncDelay, 0))
}

// RestartEager is Restart with a clock scale and an election timeout of
// electionTicks of the replica's own ticks: a replica whose clock runs slow
// but that campaigns before the others.
func (c *Cluster) RestartEager(id uint64, clockScale float64, electionTicks int) error {
	return c.Cell.Restart(id, c.knobs(clockScale, 0, electionTicks))
}

// Skewed reports replica id's clock scale and fsync delay.
func (c *Cluster) Skewed(id uint64) (float64, time.Duration) {
	k := c.Knobs(id)
	return k.ClockScale, k.SyncDelay
}

// WorkerClient dials the cell as the workers' tenant.
func (c *Cluster) WorkerClient(ctx context.Context, grace time.Duration) (*client.Client, error) {
	cfg, err := client.LoadConfigFile(c.ClientFile)
	if err != nil {
		return nil, err
	}
	cfg.Logger = c.cfg.Logger
	cfg.GracePeriod = grace
	cfg.ReconnectMax = 300 * time.Millisecond
	return client.Dial(ctx, cfg)
}
