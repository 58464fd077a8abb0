package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/internal/proccell"
)

// InProcCell is a lockcell cell whose replicas run in this process
// (cell.StartLocal): the smoke test's cell. It has no server processes of
// its own, so the sessions workload measures no CPU on it; fail-over stops
// a replica (a crash) or steps it down first.
type InProcCell struct {
	LC *cell.LocalCell
}

// StartInProcCell starts a five-replica in-process cell in dir.
func StartInProcCell(ctx context.Context, dir string, log *slog.Logger) (*InProcCell, error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: dir, Replicas: 5, Cell: "bench", Logger: log})
	if err != nil {
		return nil, err
	}
	return &InProcCell{LC: lc}, nil
}

// Target returns how to reach the cell.
func (c *InProcCell) Target() (LockcellTarget, error) {
	admin, err := c.LC.AdminCertificate()
	if err != nil {
		return LockcellTarget{}, err
	}
	return LockcellTarget{Addrs: c.LC.Addrs(), CA: c.LC.CA.Pool(), Issue: c.LC.ClientCertificate, Admin: admin, Cluster: c}, nil
}

// Stop stops every replica.
func (c *InProcCell) Stop() { c.LC.Close() }

// PIDs returns nil: the replicas share this process.
func (c *InProcCell) PIDs() []int { return nil }

// Leader returns the master's id.
func (c *InProcCell) Leader(ctx context.Context) (int, error) {
	m, err := c.LC.WaitMaster(ctx)
	if err != nil {
		return 0, err
	}
	return int(m.ID()), nil
}

// Signal stops member: SIGKILL as a crash, SIGTERM after a step-down (what
// lockcelld serve does on SIGTERM).
func (c *InProcCell) Signal(ctx context.Context, member int, sig syscall.Signal) error {
	r := c.LC.Replica(uint64(member))
	if r == nil {
		return fmt.Errorf("bench: replica %d is not running", member)
	}
	if sig == syscall.SIGTERM && r.Status().Master {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_ = r.StepDown(sctx, 0)
		cancel()
	}
	c.LC.Stop(uint64(member))
	return nil
}

// Restart starts member again.
func (c *InProcCell) Restart(ctx context.Context, member int) error {
	return c.LC.Start(ctx, uint64(member))
}

// Healthy waits until five replicas run and one is master.
func (c *InProcCell) Healthy(ctx context.Context) error {
	if n := len(c.LC.Running()); n != 5 {
		return fmt.Errorf("bench: %d of 5 replicas running", n)
	}
	_, err := c.LC.WaitMaster(ctx)
	return err
}

// ProcCellConfig configures a cell of lockcelld processes.
type ProcCellConfig struct {
	// Binary is the lockcelld executable. Required.
	Binary string
	// Dir receives the cell's certificates, configs and data, and the
	// replicas' logs in logs/; it is emptied first. Required.
	Dir string
	// BasePort, if not zero, puts replica i on UDP 127.0.0.1:BasePort+i-1;
	// if zero, free ports are chosen.
	BasePort int
	// HTTPPort, if not zero, puts replica i's HTTP listener on TCP
	// 127.0.0.1:HTTPPort+i-1; if zero, free ports are chosen.
	HTTPPort int
	// LogLevel of the replicas. If empty, "warn".
	LogLevel string
	// FaultInjection serves /debug/faults on the replicas' HTTP listeners,
	// which the partition fail-over needs. Off by default: it wraps each
	// replica's socket, which the other workloads should not pay for.
	FaultInjection bool
	// Extra, if set, edits each replica's JSON config before it starts
	// (for example "session_lease").
	Extra map[string]any
}

// ProcCell is a five-replica cell of `lockcelld serve` processes on
// loopback, set up as an operator would (`lockcelld init`, then one serve
// per replica config) by internal/proccell. It is the lockcell driver's
// Cluster: PIDs for CPU and memory, /status on each replica's HTTP
// listener for the master, signals for fail-over.
type ProcCell struct {
	*proccell.Cell
}

const procReplicas = 5

// StartProcCell initialises and starts the cell and waits for a master.
func StartProcCell(ctx context.Context, cfg ProcCellConfig) (*ProcCell, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: ProcCellConfig needs Binary and Dir", ErrInvalidConfig)
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := proccell.Start(hctx, proccell.Config{Binary: cfg.Binary, Dir: cfg.Dir, Name: "bench", Replicas: procReplicas,
		UDPBase: cfg.BasePort, HTTPBase: cfg.HTTPPort, FaultInjection: cfg.FaultInjection, Extra: cfg.Extra,
		Knobs: proccell.Knobs{LogLevel: cfg.LogLevel}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	p := &ProcCell{Cell: c}
	if err := p.Healthy(hctx); err != nil {
		c.KillAll()
		return nil, err
	}
	return p, nil
}

// Target returns how to reach the cell.
func (p *ProcCell) Target() (LockcellTarget, error) {
	admin, err := p.Issue(cell.AdminTenant, cell.DefaultAdminPrincipal)
	if err != nil {
		return LockcellTarget{}, err
	}
	pool, err := p.CAPool()
	if err != nil {
		return LockcellTarget{}, err
	}
	return LockcellTarget{Addrs: p.Addrs(), CA: pool, Issue: p.Issue, Admin: admin, Cluster: p}, nil
}

// Leader returns the replica that serves as master, waiting for one until
// ctx ends.
func (p *ProcCell) Leader(ctx context.Context) (int, error) {
	id, err := p.WaitMaster(ctx)
	return int(id), err
}

// Signal sends sig to replica member and waits (up to 15 s) for it to exit.
func (p *ProcCell) Signal(ctx context.Context, member int, sig syscall.Signal) error {
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return p.Stop(sctx, uint64(member), sig)
}

// Restart starts a stopped replica on its data.
func (p *ProcCell) Restart(ctx context.Context, member int) error {
	return p.StartReplica(uint64(member))
}

// StopAll stops every replica: SIGTERM, then SIGKILL after 5 s.
func (p *ProcCell) StopAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.Cell.StopAll(ctx)
}
