package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/proccell"
)

// InProcCell is a lockcell cell whose replicas run in this process
// (cell.StartLocal): the smoke test's cell. It has no server processes of
// its own, so the sessions workload measures no CPU on it; fail-over stops
// a replica (a crash) or steps it down first.
type InProcCell struct {
	LC *cell.LocalCell
	// n is the number of replicas.
	n int
}

// StartInProcCell starts an in-process cell of replicas replicas (0:
// DefaultReplicas) in dir.
func StartInProcCell(ctx context.Context, dir string, replicas int, log *slog.Logger) (*InProcCell, error) {
	if replicas == 0 {
		replicas = DefaultReplicas
	}
	if !ValidReplicas(replicas) {
		return nil, fmt.Errorf("%w: %d replicas: want 3, 5 or 7", ErrInvalidConfig, replicas)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: dir, Replicas: replicas, Cell: "bench", Logger: log})
	if err != nil {
		return nil, err
	}
	return &InProcCell{LC: lc, n: replicas}, nil
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

// HandOver asks member, the master, to step down and waits until another
// replica is master.
func (c *InProcCell) HandOver(ctx context.Context, member int) error {
	r := c.LC.Replica(uint64(member))
	if r == nil {
		return fmt.Errorf("bench: replica %d is not running", member)
	}
	if err := r.StepDown(ctx, 0); err != nil {
		return err
	}
	for {
		if m := c.LC.Master(); m != nil && m.ID() != uint64(member) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: no master other than replica %d after its step-down: %w", member, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Restart starts member again.
func (c *InProcCell) Restart(ctx context.Context, member int) error {
	return c.LC.Start(ctx, uint64(member))
}

// Healthy waits until every replica runs and one is master.
func (c *InProcCell) Healthy(ctx context.Context) error {
	if n := len(c.LC.Running()); n != c.n {
		return fmt.Errorf("bench: %d of %d replicas running", n, c.n)
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
	// Replicas is the number of replicas. If zero, DefaultReplicas.
	Replicas int
}

// ProcCell is a cell of `lockcelld serve` processes (five by default) on
// loopback, set up as an operator would (`lockcelld init`, then one serve
// per replica config) by internal/proccell. It is the lockcell driver's
// Cluster: PIDs for CPU and memory, /status on each replica's HTTP
// listener for the master, signals for fail-over; and a Pauser,
// Partitioner (with fault injection) and HandOverer.
type ProcCell struct {
	// Cell runs the processes.
	Cell *proccell.Cell
}

// StartProcCell initialises and starts the cell and waits for a master.
func StartProcCell(ctx context.Context, cfg ProcCellConfig) (*ProcCell, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: ProcCellConfig needs Binary and Dir", ErrInvalidConfig)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = DefaultReplicas
	}
	if !ValidReplicas(cfg.Replicas) {
		return nil, fmt.Errorf("%w: %d replicas: want 3, 5 or 7", ErrInvalidConfig, cfg.Replicas)
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c, err := proccell.Start(hctx, proccell.Config{Binary: cfg.Binary, Dir: cfg.Dir, Name: "bench", Replicas: cfg.Replicas,
		UDPBase: cfg.BasePort, HTTPBase: cfg.HTTPPort, FaultInjection: cfg.FaultInjection, Extra: cfg.Extra,
		Knobs: proccell.Knobs{LogLevel: cfg.LogLevel}})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	p := &ProcCell{Cell: c}
	if err := c.Healthy(hctx); err != nil {
		c.KillAll()
		return nil, err
	}
	return p, nil
}

// Target returns how to reach the cell.
func (p *ProcCell) Target() (LockcellTarget, error) {
	admin, err := p.Cell.Issue(cell.AdminTenant, cell.DefaultAdminPrincipal)
	if err != nil {
		return LockcellTarget{}, err
	}
	pool, err := p.Cell.CAPool()
	if err != nil {
		return LockcellTarget{}, err
	}
	return LockcellTarget{Addrs: p.Cell.Addrs(), CA: pool, Issue: p.Cell.Issue, Admin: admin, Cluster: p}, nil
}

// Leader returns the replica that serves as master, waiting for one until
// ctx ends.
func (p *ProcCell) Leader(ctx context.Context) (int, error) {
	id, err := p.Cell.WaitMaster(ctx)
	return int(id), err
}

// Signal sends sig to replica member and waits (up to 15 s) for it to exit.
func (p *ProcCell) Signal(ctx context.Context, member int, sig syscall.Signal) error {
	sctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return p.Cell.Stop(sctx, uint64(member), sig)
}

// Restart starts a stopped replica on its data.
func (p *ProcCell) Restart(ctx context.Context, member int) error {
	return p.Cell.StartReplica(uint64(member))
}

// PIDs returns the running replicas' process ids.
func (p *ProcCell) PIDs() []int { return p.Cell.PIDs() }

// Healthy waits until every replica runs and answers /status and one of
// them is master.
func (p *ProcCell) Healthy(ctx context.Context) error { return p.Cell.Healthy(ctx) }

// Pause stops replica member (SIGSTOP to its process group).
func (p *ProcCell) Pause(ctx context.Context, member int) error { return p.Cell.Pause(uint64(member)) }

// Resume continues replica member.
func (p *ProcCell) Resume(ctx context.Context, member int) error {
	return p.Cell.Resume(uint64(member))
}

// Partition cuts the replicas in side off from the others through every
// replica's /debug/faults. Without fault injection it fails with
// ErrUnsupported.
func (p *ProcCell) Partition(ctx context.Context, side []int) error {
	if err := p.Cell.FaultsAvailable(ctx, 1); err != nil {
		return fmt.Errorf("%w: n/a: the cell runs without fault injection (--lockcell-fault-injection): %w", ErrUnsupported, err)
	}
	ids := make([]uint64, len(side))
	for i, m := range side {
		ids[i] = uint64(m)
	}
	return p.Cell.Partition(ctx, ids)
}

// Heal removes every fault rule.
func (p *ProcCell) Heal(ctx context.Context) error { return p.Cell.HealAll(ctx) }

// HandOver asks the master, member, to step down (the StepDown RPC, as
// `lockctl cell stepdown` sends it) and waits until another replica
// serves as master.
func (p *ProcCell) HandOver(ctx context.Context, member int) error {
	admin, err := p.Cell.AdminClient(ctx)
	if err != nil {
		return err
	}
	defer admin.Close()
	if err := operator.New(admin).StepDown(ctx, 0); err != nil {
		return err
	}
	for {
		if m, err := p.Cell.FindMaster(ctx); err == nil && m != uint64(member) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: no master other than replica %d after its step-down: %w", member, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// StopAll stops every replica: SIGTERM, then SIGKILL after 5 s.
func (p *ProcCell) StopAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.Cell.StopAll(ctx)
}
