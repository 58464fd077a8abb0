// Package celltest runs a whole lockcell cell inside one test process: N
// real replicas (real Paxos, real Pebble stores on disk, real QUIC+TLS) on
// the in-process packet network of transport/memnet, and real client
// sessions (package client) on the same network.
//
// It is meant for testing/synctest: start the Cell inside synctest.Test
// and the replicas' tickers, master leases, session leases, QUIC timers
// and the clients' grace periods all run on the bubble's fake clock, so a
// test waits out a 12 s lease in no real time and nothing it checks
// depends on how fast the machine is. Pebble's fsyncs are real system
// calls; while one runs the fake clock simply stands still. A Cell works
// outside a bubble too, on real time.
//
// Controls, each naming the replica by id (1..N):
//
//   - Crash stops a replica as a crash would (no hand-over); Restart starts
//     it again on the same data directory, with every durable promise and
//     applied command it had.
//   - Partition cuts the peer messages between groups of replicas; Heal
//     removes every partition and cut.
//   - CutClients makes a replica unreachable for clients (a silent
//     partition: their packets vanish) while its peers still reach it.
//   - Pause freezes a replica: its run loop stops and its network address
//     becomes a black hole, as a stopped process looks to everyone else;
//     Stall stops only its run loop (a stuck fsync), so that clients still
//     reach its handlers; Resume lets it go on, with the time that passed
//     meanwhile.
//   - Options.ClockScale gives a replica a clock that runs fast or slow.
//
// Simulate runs a whole-cell simulation on a Cell: seeded faults, clients
// locking, writing and reading, and the invariants checked throughout
// (see its doc; TestCellSimulation and make sim-cell run it).
//
// Life cycle: Start registers Close with t.Cleanup; under synctest every
// goroutine the cell started has ended when Close returns, as synctest
// demands of a bubble.
package celltest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/transport"
	"github.com/lockcell/lockcell/transport/memnet"
)

// Tenant is the tenant every Cell creates at start; its root is /t.
const Tenant = "t"

// ErrNoMaster is returned by WaitMaster when no replica serves before the
// context ends.
var ErrNoMaster = errors.New("celltest: no master")

// Options configures a Cell. The zero value starts five replicas.
type Options struct {
	// Replicas is the number of replicas. If zero, 5.
	Replicas int
	// Cell names the cell. If empty, "test".
	Cell string
	// Seed seeds the fault injector's random choices (transport.Faults).
	Seed uint64
	// ClockScale maps a replica id to the rate of its clock (see
	// cell.Config.ClockScale: 1.01 ticks 1% slower). Missing ids run at 1.
	ClockScale map[uint64]float64
	// Tune, if set, adjusts each replica's Config before every start.
	Tune func(*cell.Config)
	// Latency, if positive, delays every datagram on the simulated
	// network by this long (memnet.Network.Latency); zero delivers at once.
	Latency time.Duration
	// Logger receives the replicas' and clients' logs. If nil, they are
	// discarded unless LOCKCELL_TEST_LOG is set in the environment.
	Logger *slog.Logger
}

// Cell is a running in-process cell. Its methods are safe for concurrent
// use.
type Cell struct {
	t       testing.TB
	opts    Options
	dir     string
	ca      *certs.CA
	signing ed25519.PrivateKey
	net     *memnet.Network
	faults  *transport.Faults
	addrs   map[uint64]string
	ids     []uint64
	// joined are the replicas started by Join (cell.Config.Join), each
	// with the addresses it was given (the cell's replicas when it
	// joined); the first replicas keep the first addresses, as their
	// configuration files would.
	joined map[uint64]map[uint64]string
	first  map[uint64]string

	mu struct {
		sync.Mutex
		replicas map[uint64]*cell.Replica
		paused   map[uint64]pause
		nextPort int
		clients  []*client.Client
	}
}

// Addr is replica id's address on the simulated network.
func Addr(id uint64) string { return fmt.Sprintf("10.0.0.%d:7000", id) }

// Start starts a cell of opts.Replicas replicas, waits until one serves as
// master and creates the tenant Tenant. Under synctest call it inside the
// bubble. It fails the test on error.
func Start(t testing.TB, opts Options) *Cell {
	t.Helper()
	if opts.Replicas == 0 {
		opts.Replicas = 5
	}
	if opts.Cell == "" {
		opts.Cell = "test"
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	ca, err := certs.NewCA(opts.Cell, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, signing, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cell{
		t: t, opts: opts, dir: t.TempDir(), ca: ca, signing: signing,
		net: &memnet.Network{Latency: opts.Latency}, faults: transport.NewFaults(opts.Seed), addrs: map[uint64]string{},
		joined: map[uint64]map[uint64]string{},
	}
	c.mu.replicas = map[uint64]*cell.Replica{}
	c.mu.paused = map[uint64]pause{}
	for id := uint64(1); id <= uint64(opts.Replicas); id++ {
		c.ids = append(c.ids, id)
		c.addrs[id] = Addr(id)
		if err := cell.InitDataDir(c.DataDir(id)); err != nil {
			t.Fatal(err)
		}
	}
	c.first = maps.Clone(c.addrs)
	t.Cleanup(c.Close)
	for _, id := range c.ids {
		if err := c.start(id); err != nil {
			t.Fatalf("celltest: starting replica %d: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		m, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = m.CreateTenant(ctx, Tenant, api.TenantQuota{})
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			break
		}
		if !errors.Is(err, api.ErrNotMaster) && !errors.Is(err, api.ErrUnavailable) {
			t.Fatalf("celltest: creating tenant %q: %v", Tenant, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return c
}

func quietLogger() *slog.Logger {
	if os.Getenv("LOCKCELL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// IDs returns the replica ids in increasing order.
func (c *Cell) IDs() []uint64 { return append([]uint64(nil), c.ids...) }

// Addrs returns the replicas' addresses in id order.
func (c *Cell) Addrs() []string {
	out := make([]string, len(c.ids))
	for i, id := range c.ids {
		out[i] = c.addrs[id]
	}
	return out
}

// DataDir is replica id's data directory.
func (c *Cell) DataDir(id uint64) string {
	return filepath.Join(c.dir, "r"+strconv.FormatUint(id, 10))
}

// Faults is the fault injector every replica's endpoint shares.
func (c *Cell) Faults() *transport.Faults { return c.faults }

// Network is the simulated network.
func (c *Cell) Network() *memnet.Network { return c.net }

// PublicKey is the cell's sequencer-signing key.
func (c *Cell) PublicKey() ed25519.PublicKey { return c.signing.Public().(ed25519.PublicKey) }

// Config returns the Config replica id starts with.
func (c *Cell) Config(id uint64) (cell.Config, error) {
	cert, err := c.ca.IssueReplica(id, certs.Options{})
	if err != nil {
		return cell.Config{}, err
	}
	cfg := cell.Config{
		ID:          id,
		Cell:        c.opts.Cell,
		Replicas:    maps.Clone(c.first),
		DataDir:     c.DataDir(id),
		CA:          c.ca.Pool(),
		Certificate: cert,
		SigningKey:  c.signing,
		ClockScale:  c.opts.ClockScale[id],
		Faults:      c.faults,
		Logger:      c.opts.Logger,
	}
	if addrs, ok := c.joined[id]; ok {
		cfg.Replicas, cfg.Join = maps.Clone(addrs), true
	}
	if c.opts.Tune != nil {
		c.opts.Tune(&cfg)
	}
	return cfg, nil
}

func (c *Cell) start(id uint64) error {
	cfg, err := c.Config(id)
	if err != nil {
		return err
	}
	pc, err := c.net.Listen(c.addrs[id])
	if err != nil {
		return err
	}
	cfg.PacketConn = pc
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cell.Start(ctx, cfg)
	if err != nil {
		_ = pc.Close()
		return err
	}
	c.mu.Lock()
	c.mu.replicas[id] = r
	c.mu.Unlock()
	return nil
}

// Join starts a new replica id, at Addr(id), that joins the running cell
// (cell.Config.Join): it knows the cell's replicas, votes in nothing and
// serves nobody until the cell adds it (Replica.AddReplica, lockctl cell
// add-replica), then catches up. Call it from the test's goroutine only.
// It fails the test on error.
func (c *Cell) Join(id uint64) {
	c.t.Helper()
	if _, ok := c.addrs[id]; ok {
		c.t.Fatalf("celltest: replica %d is already in the cell", id)
	}
	c.ids = append(c.ids, id)
	c.addrs[id] = Addr(id)
	c.joined[id] = maps.Clone(c.addrs)
	if err := cell.InitDataDir(c.DataDir(id)); err != nil {
		c.t.Fatal(err)
	}
	if err := c.start(id); err != nil {
		c.t.Fatalf("celltest: starting replica %d: %v", id, err)
	}
}

// Replica returns running replica id, or nil if it is crashed.
func (c *Cell) Replica(id uint64) *cell.Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.replicas[id]
}

// Running returns the running replicas in id order.
func (c *Cell) Running() []*cell.Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*cell.Replica
	for _, id := range c.ids {
		if r := c.mu.replicas[id]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Masters returns the running replicas that report they serve as master
// (at most one, if the cell is correct).
func (c *Cell) Masters() []*cell.Replica {
	var out []*cell.Replica
	for _, r := range c.Running() {
		if r.Status().Master {
			out = append(out, r)
		}
	}
	return out
}

// Master returns the running replica that serves as master, or nil.
func (c *Cell) Master() *cell.Replica {
	if ms := c.Masters(); len(ms) > 0 {
		return ms[0]
	}
	return nil
}

// WaitMaster waits until some running replica serves as master.
func (c *Cell) WaitMaster(ctx context.Context) (*cell.Replica, error) {
	for {
		if m := c.Master(); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNoMaster, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Crash stops replica id as a crash would: no hand-over, its master role
// (if any) ends, and everything it made durable stays on disk. Crashing a
// crashed replica does nothing.
func (c *Cell) Crash(id uint64) {
	c.Resume(id)
	c.mu.Lock()
	r := c.mu.replicas[id]
	delete(c.mu.replicas, id)
	c.mu.Unlock()
	if r != nil {
		_ = r.Close()
	}
}

// Restart starts crashed replica id again on its data directory. It fails
// the test on error; restarting a running replica does nothing.
func (c *Cell) Restart(id uint64) {
	c.t.Helper()
	if c.Replica(id) != nil {
		return
	}
	if err := c.start(id); err != nil {
		c.t.Fatalf("celltest: restarting replica %d: %v", id, err)
	}
}

// Partition cuts the peer messages between replicas of different groups.
// A replica in no group is cut off from every other. It replaces earlier
// partitions; client traffic is not affected (see CutClients).
func (c *Cell) Partition(groups ...[]uint64) {
	group := map[uint64]int{}
	for i, g := range groups {
		for _, id := range g {
			group[id] = i + 1
		}
	}
	st := c.faults.State()
	st.Rules = nil
	for _, a := range c.ids {
		for _, b := range c.ids {
			if a != b && (group[a] == 0 || group[a] != group[b]) {
				st.Rules = append(st.Rules, transport.Rule{From: a, To: b, Drop: 1})
			}
		}
	}
	if err := c.faults.Set(st); err != nil {
		c.t.Fatalf("celltest: partition: %v", err)
	}
}

// Mute drops every peer message replica id sends, on top of the
// partitions in force (a one-way partition: it still hears its peers).
// Heal or the next Partition ends it.
func (c *Cell) Mute(id uint64) {
	if err := c.faults.AddRule(transport.Rule{From: id, Drop: 1}); err != nil {
		c.t.Fatalf("celltest: mute: %v", err)
	}
}

// CutClients makes replica id unreachable for clients (cut true) or
// reachable again (false).
func (c *Cell) CutClients(id uint64, cut bool) {
	st := c.faults.State()
	var kept []uint64
	for _, x := range st.ClientsCut {
		if x != id {
			kept = append(kept, x)
		}
	}
	if cut {
		kept = append(kept, id)
	}
	st.ClientsCut = kept
	if err := c.faults.Set(st); err != nil {
		c.t.Fatalf("celltest: cutting clients: %v", err)
	}
}

// Heal removes every partition and client cut (not pauses).
func (c *Cell) Heal() { c.faults.Heal() }

// pause is a stalled replica's release and whether its address was made a
// black hole.
type pause struct {
	resume  chan struct{}
	blocked bool
}

// Pause freezes running replica id until Resume: its run loop stops (as
// if its process were stopped) and its address becomes a black hole.
// Pausing a paused or crashed replica does nothing.
func (c *Cell) Pause(id uint64) { c.stall(id, true) }

// Stall stops running replica id's run loop until Resume, as a stuck
// fsync or a long GC pause would, while its endpoint and RPC handlers go
// on: clients still reach it, and it must refuse them once its master
// lease has run out. Stalling a paused or crashed replica does nothing.
func (c *Cell) Stall(id uint64) { c.stall(id, false) }

func (c *Cell) stall(id uint64, block bool) {
	c.mu.Lock()
	r := c.mu.replicas[id]
	if _, ok := c.mu.paused[id]; r == nil || ok {
		c.mu.Unlock()
		return
	}
	p := pause{resume: make(chan struct{}), blocked: block}
	c.mu.paused[id] = p
	c.mu.Unlock()
	if block {
		_ = c.net.Block(c.addrs[id], true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Stall(ctx, p.resume); err != nil {
		c.t.Logf("celltest: stalling replica %d: %v", id, err)
	}
}

// Resume lets paused or stalled replica id run again. Resuming a running
// replica does nothing.
func (c *Cell) Resume(id uint64) {
	c.mu.Lock()
	p, ok := c.mu.paused[id]
	delete(c.mu.paused, id)
	c.mu.Unlock()
	if !ok {
		return
	}
	if p.blocked {
		_ = c.net.Block(c.addrs[id], false)
	}
	close(p.resume)
}

// Paused reports whether replica id is paused or stalled.
func (c *Cell) Paused(id uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.paused[id]
	return ok
}

// ClientCertificate issues a client certificate for tenant/principal.
func (c *Cell) ClientCertificate(tenant, principal string) (tls.Certificate, error) {
	return c.ca.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
}

// AdminCertificate issues a certificate of the cell administrator.
func (c *Cell) AdminCertificate() (tls.Certificate, error) {
	return c.ClientCertificate(cell.AdminTenant, cell.DefaultAdminPrincipal)
}

// CAPool returns the pool of the cell's CA, for clients that dial the
// replicas with transport.Dial (over PacketConn sockets).
func (c *Cell) CAPool() *x509.CertPool { return c.ca.Pool() }

// ClientConfig returns a client.Config for principal of tenant (Tenant if
// empty) that connects over the simulated network.
func (c *Cell) ClientConfig(tenant, principal string) client.Config {
	c.t.Helper()
	if tenant == "" {
		tenant = Tenant
	}
	cert, err := c.ClientCertificate(tenant, principal)
	if err != nil {
		c.t.Fatal(err)
	}
	return client.Config{
		Addrs:       c.Addrs(),
		CA:          c.ca.Pool(),
		Certificate: &cert,
		Logger:      c.opts.Logger,
		PacketConn:  c.PacketConn,
	}
}

// PacketConn returns a fresh client socket on the simulated network.
func (c *Cell) PacketConn() (net.PacketConn, error) {
	c.mu.Lock()
	c.mu.nextPort++
	port := c.mu.nextPort
	c.mu.Unlock()
	return c.net.Listen(fmt.Sprintf("10.1.%d.%d:%d", port/250%250, port%250+1, 20000+port/62500))
}

// PacketConnFrom returns a function that makes fresh client sockets all on
// one IP (ip, e.g. "10.2.0.1"), each on a new port: for many client
// processes behind one address (client.Config.PacketConn).
func (c *Cell) PacketConnFrom(ip string) func() (net.PacketConn, error) {
	return func() (net.PacketConn, error) {
		c.mu.Lock()
		c.mu.nextPort++
		port := c.mu.nextPort
		c.mu.Unlock()
		return c.net.Listen(fmt.Sprintf("%s:%d", ip, 1024+port%60000))
	}
}

// Dial connects a client with cfg (from ClientConfig, adjusted) and
// closes it when the Cell closes. It fails the test on error.
func (c *Cell) Dial(ctx context.Context, cfg client.Config) *client.Client {
	c.t.Helper()
	cl, err := c.TryDial(ctx, cfg)
	if err != nil {
		c.t.Fatalf("celltest: dial: %v", err)
	}
	return cl
}

// TryDial is Dial that returns the error (no master yet, say, in the middle
// of a fault) instead of failing the test; a client it returns is closed
// by Close like Dial's.
func (c *Cell) TryDial(ctx context.Context, cfg client.Config) (*client.Client, error) {
	cl, err := client.Dial(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.mu.clients = append(c.mu.clients, cl)
	c.mu.Unlock()
	return cl, nil
}

// Close closes the clients made by Dial and stops every replica. It is
// safe to call more than once.
func (c *Cell) Close() {
	c.mu.Lock()
	clients := c.mu.clients
	c.mu.clients = nil
	c.mu.Unlock()
	for _, cl := range clients {
		_ = cl.Close()
	}
	for _, id := range c.ids {
		c.Crash(id)
	}
}
