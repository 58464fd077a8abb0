package bench

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// LockcellTarget says how to reach a lockcell cell.
type LockcellTarget struct {
	// Addrs are the replicas' client addresses.
	Addrs []string
	// CA is the cell CA.
	CA *x509.CertPool
	// Issue returns a client certificate for tenant/principal.
	Issue func(tenant, principal string) (tls.Certificate, error)
	// Admin is the cell administrator's certificate (to create tenants).
	Admin tls.Certificate
	// Cluster controls the replicas (nil: none).
	Cluster Cluster
	// Logger receives the client library's logs. If nil, they are dropped.
	Logger *slog.Logger
}

// Connection limits. A replica accepts at most 1024 connections from one
// source address (transport.DefaultMaxConnsPerIP) and 256 concurrent
// streams on one connection (transport.DefaultMaxStreamsPerClient), and
// every client of the benchmark comes from 127.0.0.1. So sessions share
// connections: a workload's clients of one tenant share a pool of at most
// poolConns connections (every session of a connection sends its
// KeepAlives in one batch frame on one stream, plus one stream per call in
// flight), and OpenSessions puts sessionsPerConn sessions on each of at
// most maxSessionConns connections, opening at most openPerConn of a
// connection's sessions at once on at most 8 connections at once: 512
// NewSession calls in flight. A Client joins its concurrent NewSession
// calls into CreateSessions calls, and the master charges a call of n
// sessions ceil(n/8) units of the tenant's fair share (cell/fair.go), so
// the calls of 8 connections opening 64 each hold at most 64 units, far
// below the 256 a tenant may have queued before it is shed. On this 2-core
// machine 64 a connection opened about twice as many sessions a second as
// 24 (each call and slot carries more: client.BenchmarkOpenSessions shows
// 111 creations a slot against 43), and 128 opened no more than 64.
const (
	poolConns       = 16
	sessionsPerConn = 500
	maxSessionConns = 1000
	openPerConn     = 64
)

// MaxLockcellSessions is the most sessions OpenSessions can hold from one
// source address under the replicas' default connection limits.
const MaxLockcellSessions = sessionsPerConn * maxSessionConns

// LockcellDriver is the Driver for lockcell, built on the client library:
// client.Mutex for locks (the fencing token is the lock generation),
// Handle.GetContents and SetContents for files under /<tenant>/, and the
// client cache (Config.Cache) for readheavy-cache.
type LockcellDriver struct {
	t   LockcellTarget
	log *slog.Logger

	mu      sync.Mutex
	admin   *client.Client
	tenants map[string]bool
	pools   map[poolKey]*[poolConns]pooled
}

type poolKey struct {
	tenant string
	cache  bool
}

// pooled is one shared connection and the number of open sessions on it.
type pooled struct {
	c    *client.Client
	refs int
}

// NewLockcellDriver returns a driver for the cell t describes.
func NewLockcellDriver(t LockcellTarget) (*LockcellDriver, error) {
	if len(t.Addrs) == 0 || t.CA == nil || t.Issue == nil {
		return nil, fmt.Errorf("%w: lockcell target needs Addrs, CA and Issue", ErrInvalidConfig)
	}
	log := t.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &LockcellDriver{t: t, log: log, tenants: map[string]bool{}, pools: map[poolKey]*[poolConns]pooled{}}, nil
}

// Name returns "lockcell".
func (d *LockcellDriver) Name() string { return "lockcell" }

// Cluster returns the target's cluster.
func (d *LockcellDriver) Cluster() Cluster { return d.t.Cluster }

func (d *LockcellDriver) config(cert tls.Certificate, cache bool) client.Config {
	return client.Config{Addrs: d.t.Addrs, CA: d.t.CA, Certificate: &cert, Cache: cache, Logger: d.log}
}

// ensureTenant creates tenant once (it may already exist from an earlier
// run on the same cell).
func (d *LockcellDriver) ensureTenant(ctx context.Context, tenant string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.tenants[tenant] {
		return nil
	}
	if d.admin == nil {
		c, err := client.Dial(ctx, d.config(d.t.Admin, false))
		if err != nil {
			return fmt.Errorf("bench: dialing as administrator: %w", err)
		}
		d.admin = c
	}
	_, err := operator.New(d.admin).CreateTenant(ctx, tenant, api.TenantQuota{}, api.ACLNames{})
	if err != nil && !errors.Is(err, api.ErrAlreadyExists) {
		return fmt.Errorf("bench: creating tenant %s: %w", tenant, err)
	}
	d.tenants[tenant] = true
	return nil
}

// Connect dials the cell as principal c<ID> of the tenant and opens a
// session.
func (d *LockcellDriver) Connect(ctx context.Context, opts ClientOptions) (Client, error) {
	if err := d.ensureTenant(ctx, opts.Tenant); err != nil {
		return nil, err
	}
	key, slot := poolKey{opts.Tenant, opts.Cache}, opts.ID%poolConns
	c, err := d.acquireConn(ctx, key, slot)
	if err != nil {
		return nil, err
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		d.releaseConn(key, slot)
		return nil, err
	}
	return &lockcellClient{d: d, key: key, slot: slot, s: s, root: "/" + opts.Tenant + "/",
		handles: map[string]*client.Handle{}}, nil
}

// acquireConn returns pool slot's connection, dialing it (as principal
// c<slot>) if needed, and counts a reference.
func (d *LockcellDriver) acquireConn(ctx context.Context, key poolKey, slot int) (*client.Client, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	pool := d.pools[key]
	if pool == nil {
		pool = new([poolConns]pooled)
		d.pools[key] = pool
	}
	p := &pool[slot]
	if p.c == nil {
		cert, err := d.t.Issue(key.tenant, fmt.Sprintf("c%d", slot))
		if err != nil {
			return nil, err
		}
		c, err := client.Dial(ctx, d.config(cert, key.cache))
		if err != nil {
			return nil, err
		}
		p.c = c
	}
	p.refs++
	return p.c, nil
}

// releaseConn drops a reference; the last one closes the connection.
func (d *LockcellDriver) releaseConn(key poolKey, slot int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := &d.pools[key][slot]
	if p.refs--; p.refs == 0 {
		p.c.Close()
		p.c = nil
	}
}

// OpenSessions opens n sessions, sessionsPerConn to a connection. It
// dials every connection first and only then opens sessions on them: a
// dial made while thousands of sessions are being opened competes for the
// CPU with all of them (on this machine, at about 38,000 sessions a new
// connection's handshake took longer than Dial's patience to explain a
// silent cell, and the run failed). The dials wait for the cell as long as
// ctx allows (DialPatience < 0): a loaded cell is not a fault here.
func (d *LockcellDriver) OpenSessions(ctx context.Context, tenant string, n int, progress func(int)) (SessionSet, error) {
	if err := d.ensureTenant(ctx, tenant); err != nil {
		return nil, err
	}
	conns := (n + sessionsPerConn - 1) / sessionsPerConn
	if conns > maxSessionConns {
		return nil, fmt.Errorf("%w: lockcell: the benchmark opens at most %d sessions (%d connections of %d sessions)",
			ErrUnsupported, MaxLockcellSessions, maxSessionConns, sessionsPerConn)
	}
	set := &lockcellSessions{clients: make([]*client.Client, conns), sessions: make([]*client.Session, n)}
	dg, dctx := errgroup.WithContext(ctx)
	dg.SetLimit(8)
	for i := range conns {
		dg.Go(func() error {
			cert, err := d.t.Issue(tenant, fmt.Sprintf("s%d", i))
			if err != nil {
				return err
			}
			cfg := d.config(cert, false)
			cfg.DialPatience = -1
			cfg.Logger = d.log.With("conn", i) // which connection a line of --client-log is about
			c, err := client.Dial(dctx, cfg)
			if err != nil {
				return fmt.Errorf("bench: dialing connection %d: %w", i, err)
			}
			set.clients[i] = c
			return nil
		})
	}
	if err := dg.Wait(); err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	var opened atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i, c := range set.clients {
		g.Go(func() error {
			var sg errgroup.Group
			sg.SetLimit(openPerConn)
			for j := i * sessionsPerConn; j < min(n, (i+1)*sessionsPerConn); j++ {
				sg.Go(func() error {
					s, err := c.NewSession(gctx)
					if err != nil {
						return fmt.Errorf("bench: opening session %d: %w", j, err)
					}
					set.sessions[j] = s
					if k := opened.Add(1); progress != nil && k%100 == 0 {
						progress(int(k))
					}
					return nil
				})
			}
			return sg.Wait()
		})
	}
	if err := g.Wait(); err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	return set, nil
}

// Close closes the administrator's connection.
func (d *LockcellDriver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.admin != nil {
		d.admin.Close()
		d.admin = nil
	}
	for _, pool := range d.pools {
		for i := range pool {
			if pool[i].c != nil {
				pool[i].c.Close()
				pool[i] = pooled{}
			}
		}
	}
	return nil
}

type lockcellSessions struct {
	clients  []*client.Client
	sessions []*client.Session
}

func (l *lockcellSessions) Lost() int {
	n := 0
	for _, s := range l.sessions {
		if s != nil && errors.Is(s.Err(), client.ErrSessionExpired) {
			n++
		}
	}
	return n
}

// Behind implements SessionTerms.
func (l *lockcellSessions) Behind(since uint64) (newest uint64, unsafe, behind int) {
	for _, s := range l.sessions {
		if s == nil || s.Err() != nil {
			continue
		}
		e := s.Epoch()
		newest = max(newest, e)
		safe := s.State() == client.StateSafe
		if !safe {
			unsafe++
		}
		if !safe || e <= since {
			behind++
		}
	}
	return newest, unsafe, behind
}

func (l *lockcellSessions) Close(ctx context.Context) error {
	var g errgroup.Group
	g.SetLimit(64)
	for _, s := range l.sessions {
		if s != nil {
			g.Go(func() error { _ = s.Close(ctx); return nil })
		}
	}
	_ = g.Wait()
	for _, c := range l.clients {
		if c != nil {
			c.Close()
		}
	}
	return nil
}

type lockcellClient struct {
	d    *LockcellDriver
	key  poolKey
	slot int
	s    *client.Session
	root string
	once sync.Once

	mu      sync.Mutex
	handles map[string]*client.Handle
}

func (c *lockcellClient) Mutex(name string) Mutex {
	return &lockcellMutex{m: client.NewMutex(c.s, c.root+name)}
}

// handle returns an open handle on the file name, creating it if needed.
func (c *lockcellClient) handle(ctx context.Context, name string) (*client.Handle, error) {
	c.mu.Lock()
	h := c.handles[name]
	c.mu.Unlock()
	if h != nil {
		return h, nil
	}
	h, err := c.s.Open(ctx, c.root+name, client.OpenOptions{Create: true})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if old := c.handles[name]; old != nil {
		h = old
	} else {
		c.handles[name] = h
	}
	c.mu.Unlock()
	return h, nil
}

func (c *lockcellClient) Read(ctx context.Context, name string) ([]byte, error) {
	h, err := c.handle(ctx, name)
	if err != nil {
		return nil, err
	}
	b, _, err := h.GetContents(ctx)
	return b, err
}

func (c *lockcellClient) Write(ctx context.Context, name string, data []byte) error {
	h, err := c.handle(ctx, name)
	if err != nil {
		return err
	}
	_, err = h.SetContents(ctx, data)
	return err
}

func (c *lockcellClient) Lost() bool { return errors.Is(c.s.Err(), client.ErrSessionExpired) }

func (c *lockcellClient) Close(ctx context.Context) error {
	err := c.s.Close(ctx)
	c.once.Do(func() { c.d.releaseConn(c.key, c.slot) })
	if errors.Is(err, client.ErrSessionExpired) {
		err = nil
	}
	return err
}

// lockcellMutex adapts a client.Mutex to the harness's Lock/Unlock: it
// keeps the grant Lock returned and releases that grant on Unlock. One
// worker uses it at a time.
type lockcellMutex struct {
	m *client.Mutex
	l *client.Lock // the grant not yet released, nil if none
}

func (m *lockcellMutex) Lock(ctx context.Context) (uint64, error) {
	if m.l != nil {
		// An earlier Unlock failed (its context ended, or the cell was
		// failing over): give the grant back before taking a new one.
		_ = m.Unlock(ctx)
	}
	l, err := m.m.Lock(ctx)
	if err != nil {
		return 0, err
	}
	m.l = l
	return l.Generation(), nil
}

func (m *lockcellMutex) Unlock(ctx context.Context) error {
	if m.l == nil {
		return fmt.Errorf("unlock %s: %w", m.m.Path(), client.ErrNotHeld)
	}
	err := m.l.Release(ctx)
	if err == nil || errors.Is(err, client.ErrNotHeld) {
		m.l = nil
	}
	return err
}
