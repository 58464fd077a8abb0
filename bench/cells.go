package bench

import (
	"context"
	"crypto/tls"
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
	"github.com/lockcell/lockcell/internal/certs"
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
	// Dir receives the cell's certificates, configs, data and logs; it is
	// emptied first. Required.
	Dir string
	// BasePort, if not zero, puts replica i on UDP 127.0.0.1:BasePort+i-1;
	// if zero, free ports are chosen.
	BasePort int
	// HTTPPort, if not zero, puts replica i's HTTP listener on TCP
	// 127.0.0.1:HTTPPort+i-1; if zero, a free range is chosen.
	HTTPPort int
	// LogLevel of the replicas. If empty, "warn".
	LogLevel string
	// Extra, if set, edits each replica's JSON config before it starts
	// (for example "session_lease").
	Extra map[string]any
}

// ProcCell is a five-replica cell of `lockcelld serve` processes on
// loopback, set up as an operator would: `lockcelld init`, then one serve
// per replica config. It is the lockcell driver's Cluster: PIDs for CPU and
// memory, /status on each replica's HTTP listener for the master, signals
// for fail-over.
type ProcCell struct {
	cfg   ProcCellConfig
	addrs []string
	http  []string
	ca    *certs.CA

	mu    sync.Mutex
	procs map[int]*proc
}

type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

const procReplicas = 5

// StartProcCell initialises and starts the cell and waits for a master.
func StartProcCell(ctx context.Context, cfg ProcCellConfig) (*ProcCell, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("%w: ProcCellConfig needs Binary and Dir", ErrInvalidConfig)
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, err
	}
	p := &ProcCell{cfg: cfg, procs: map[int]*proc{}}
	var err error
	if p.addrs, err = udpAddrs(cfg.BasePort); err != nil {
		return nil, err
	}
	httpBase := cfg.HTTPPort
	if httpBase == 0 {
		if httpBase, err = freeTCPRange(procReplicas); err != nil {
			return nil, err
		}
	}
	for i := range procReplicas {
		p.http = append(p.http, net.JoinHostPort("127.0.0.1", strconv.Itoa(httpBase+i)))
	}
	out, err := exec.CommandContext(ctx, cfg.Binary, "init", "--dir", cfg.Dir, "--cell", "bench",
		"--replicas", strings.Join(p.addrs, ","), "--http-port", strconv.Itoa(httpBase)).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("bench: lockcelld init: %w: %s", err, out)
	}
	if len(cfg.Extra) > 0 {
		for i := 1; i <= procReplicas; i++ {
			if err := p.editConfig(i, cfg.Extra); err != nil {
				return nil, err
			}
		}
	}
	caPEM, err1 := os.ReadFile(filepath.Join(cfg.Dir, "certs", "ca.pem"))
	keyPEM, err2 := os.ReadFile(filepath.Join(cfg.Dir, "certs", "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("bench: reading the cell CA: %w", err)
	}
	if p.ca, err = certs.LoadCA(caPEM, keyPEM); err != nil {
		return nil, err
	}
	for i := 1; i <= procReplicas; i++ {
		if err := p.start(i); err != nil {
			p.Stop()
			return nil, err
		}
	}
	hctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := p.Healthy(hctx); err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

func (p *ProcCell) editConfig(i int, extra map[string]any) error {
	file := filepath.Join(p.cfg.Dir, fmt.Sprintf("replica-%d.json", i))
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for k, v := range extra {
		m[k] = v
	}
	b, err = json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o600)
}

// udpAddrs returns five loopback UDP addresses: from base, or free ones.
func udpAddrs(base int) ([]string, error) {
	var out []string
	var held []net.PacketConn
	defer func() {
		for _, c := range held {
			_ = c.Close()
		}
	}()
	for i := range procReplicas {
		port := 0
		if base != 0 {
			port = base + i
		}
		pc, err := net.ListenPacket("udp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, fmt.Errorf("bench: UDP port for replica %d: %w", i+1, err)
		}
		held = append(held, pc)
		out = append(out, pc.LocalAddr().String())
	}
	return out, nil
}

// freeTCPRange finds n consecutive free loopback TCP ports.
func freeTCPRange(n int) (int, error) {
	for attempt := 0; attempt < 50; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		base := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if base+n > 65535 {
			continue
		}
		ok := true
		var held []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				ok = false
				break
			}
			held = append(held, l)
		}
		for _, l := range held {
			_ = l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("bench: no free range of TCP ports")
}

// start starts replica i's process.
func (p *ProcCell) start(i int) error {
	logf, err := os.OpenFile(filepath.Join(p.cfg.Dir, fmt.Sprintf("replica-%d.log", i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.cfg.Binary, "serve", "--config", filepath.Join(p.cfg.Dir, fmt.Sprintf("replica-%d.json", i)),
		"--log-level", p.cfg.LogLevel)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("bench: starting replica %d: %w", i, err)
	}
	pr := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(pr.done)
	}()
	p.mu.Lock()
	p.procs[i] = pr
	p.mu.Unlock()
	return nil
}

// Target returns how to reach the cell.
func (p *ProcCell) Target() (LockcellTarget, error) {
	admin, err := p.Issue(cell.AdminTenant, cell.DefaultAdminPrincipal)
	if err != nil {
		return LockcellTarget{}, err
	}
	return LockcellTarget{Addrs: p.addrs, CA: p.ca.Pool(), Issue: p.Issue, Admin: admin, Cluster: p}, nil
}

// Issue issues a client certificate from the cell CA.
func (p *ProcCell) Issue(tenant, principal string) (tls.Certificate, error) {
	return p.ca.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
}

// Dir returns the cell's directory (logs are replica-N.log there).
func (p *ProcCell) Dir() string { return p.cfg.Dir }

// running returns the running members in id order.
func (p *ProcCell) running() map[int]*proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[int]*proc{}
	for i, pr := range p.procs {
		select {
		case <-pr.done:
		default:
			out[i] = pr
		}
	}
	return out
}

// PIDs returns the running replicas' process ids.
func (p *ProcCell) PIDs() []int {
	var out []int
	for i := 1; i <= procReplicas; i++ {
		if pr, ok := p.running()[i]; ok {
			out = append(out, pr.cmd.Process.Pid)
		}
	}
	return out
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// status fetches replica i's /status.
func (p *ProcCell) status(ctx context.Context, i int) (*api.CellStatusResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.http[i-1]+"/status", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("bench: replica %d /status: %s", i, resp.Status)
	}
	var st api.CellStatusResponse
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("bench: replica %d /status: %w", i, err)
	}
	return &st, nil
}

// Leader returns the replica that reports itself master.
func (p *ProcCell) Leader(ctx context.Context) (int, error) {
	for {
		for i := range p.running() {
			if st, err := p.status(ctx, i); err == nil && st.Master == st.Replica && st.Master != 0 {
				return i, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("bench: no replica reports itself master: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Signal sends sig to replica member and waits (up to 15 s) for it to exit.
func (p *ProcCell) Signal(ctx context.Context, member int, sig syscall.Signal) error {
	pr, ok := p.running()[member]
	if !ok {
		return fmt.Errorf("bench: replica %d is not running", member)
	}
	if err := pr.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case <-pr.done:
		return nil
	case <-time.After(15 * time.Second):
		_ = pr.cmd.Process.Kill()
		<-pr.done
		return fmt.Errorf("bench: replica %d did not exit within 15s of %v (killed)", member, sig)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Restart starts a stopped replica on its data.
func (p *ProcCell) Restart(ctx context.Context, member int) error {
	if _, ok := p.running()[member]; ok {
		return nil
	}
	return p.start(member)
}

// Healthy waits until all five processes run, answer /healthz, and one of
// them is master.
func (p *ProcCell) Healthy(ctx context.Context) error {
	for {
		run := p.running()
		if len(run) < procReplicas {
			return fmt.Errorf("bench: %d of %d replicas running (see %s/replica-N.log)", len(run), procReplicas, p.cfg.Dir)
		}
		up := 0
		master := false
		for i := range run {
			if st, err := p.status(ctx, i); err == nil {
				up++
				master = master || (st.Master == st.Replica && st.Master != 0)
			}
		}
		if up == procReplicas && master {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: cell not healthy (%d replicas answer, master %v): %w", up, master, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops every replica: SIGTERM, then SIGKILL after 5 s.
func (p *ProcCell) Stop() {
	run := p.running()
	for _, pr := range run {
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, pr := range run {
		select {
		case <-pr.done:
		case <-time.After(time.Until(deadline)):
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	}
}
