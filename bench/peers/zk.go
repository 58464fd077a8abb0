package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"golang.org/x/sync/errgroup"

	"github.com/lockcell/lockcell/bench"
)

// ZooKeeperFactory is the ZooKeeper DriverFactory. Flags: --zk-script (the
// cluster script), --zk-start (start a fresh ensemble of --replicas
// servers, stop it after), --zk-servers (of an ensemble it does not
// start; one it starts gives its own), --zk-session-timeout.
func ZooKeeperFactory() bench.DriverFactory {
	var script, servers string
	var start bool
	var timeout time.Duration
	return bench.DriverFactory{
		Name: "zookeeper",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&script, "zk-script", "bench/scripts/zk-cluster.sh", "script that runs the ZooKeeper ensemble (of --replicas servers)")
			fs.BoolVar(&start, "zk-start", true, "start a fresh ensemble with the script (and stop it after)")
			fs.StringVar(&servers, "zk-servers", "127.0.0.1:21810,127.0.0.1:21811,127.0.0.1:21812,127.0.0.1:21813,127.0.0.1:21814", "ZooKeeper client endpoints of an ensemble not started here (--zk-start=false)")
			fs.DurationVar(&timeout, "zk-session-timeout", 12*time.Second, "session timeout, as lockcell's 12 s session lease")
		},
		Open: func(ctx context.Context, log *slog.Logger, oc bench.OpenConfig) (bench.Driver, func(), error) {
			d := &ZooKeeperDriver{servers: strings.Split(servers, ","), timeout: timeout, log: log}
			d.cluster = &scriptCluster{script: script, replicas: oc.Replicas, leader: d.leader, healthy: d.healthy}
			stop := func() {}
			if start {
				var err error
				if stop, err = d.cluster.start(ctx); err != nil {
					return nil, stop, err
				}
				if d.servers, err = d.cluster.endpoints(ctx); err != nil {
					return nil, stop, err
				}
			}
			log.Info("zookeeper ensemble", "servers", d.servers, "pids", d.cluster.PIDs())
			return d, func() { _ = d.Close(); stop() }, nil
		},
	}
}

// ZooKeeperDriver drives ZooKeeper through go-zookeeper: one connection
// (and so one session) per client, zk.Lock for locks (it exposes no
// fencing token, so the contended check is for overlap only), Get and Set
// for files. Reads are served by the server the client is connected to,
// as ZooKeeper does by default (not linearizable).
type ZooKeeperDriver struct {
	servers []string
	timeout time.Duration
	log     *slog.Logger
	cluster *scriptCluster
	roots   sync.Map // paths known to exist
}

// Name returns "zookeeper".
func (d *ZooKeeperDriver) Name() string { return "zookeeper" }

// Cluster returns the script-run ensemble.
func (d *ZooKeeperDriver) Cluster() bench.Cluster { return d.cluster }

// Close does nothing: clients are closed by their owners.
func (d *ZooKeeperDriver) Close() error { return nil }

// srvrMode asks server for its mode with the srvr four-letter word
// ("leader", "follower", ...).
func srvrMode(ctx context.Context, server string) (string, error) {
	var dl net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := dl.DialContext(dctx, "tcp", server)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("peers: %s: no Mode in srvr reply %q", server, b)
}

func (d *ZooKeeperDriver) leader(ctx context.Context) (int, error) {
	for i, s := range d.servers {
		if m, err := srvrMode(ctx, s); err == nil && m == "leader" {
			return i + 1, nil
		}
	}
	return 0, errors.New("peers: no ZooKeeper server reports itself leader")
}

func (d *ZooKeeperDriver) healthy(ctx context.Context) error {
	leaders := 0
	for _, s := range d.servers {
		m, err := srvrMode(ctx, s)
		if err != nil {
			return fmt.Errorf("zookeeper %s not serving: %w", s, err)
		}
		if m == "leader" {
			leaders++
		}
	}
	if leaders != 1 {
		return fmt.Errorf("zookeeper: %d leaders", leaders)
	}
	return nil
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// zkSession is one connection with its session's state.
type zkSession struct {
	conn    *zk.Conn
	expired atomic.Bool
	closed  atomic.Bool
}

// dial connects and waits until the session is established.
func (d *ZooKeeperDriver) dial(ctx context.Context) (*zkSession, error) {
	conn, events, err := zk.Connect(d.servers, d.timeout, zk.WithLogger(nopLogger{}), zk.WithLogInfo(false))
	if err != nil {
		return nil, err
	}
	s := &zkSession{conn: conn}
	up := make(chan struct{})
	go func() {
		once := sync.Once{}
		for ev := range events {
			switch ev.State {
			case zk.StateHasSession:
				once.Do(func() { close(up) })
			case zk.StateExpired:
				s.expired.Store(true)
			}
		}
	}()
	select {
	case <-up:
		return s, nil
	case <-ctx.Done():
		conn.Close()
		return nil, fmt.Errorf("peers: zookeeper session: %w", ctx.Err())
	}
}

// ensure creates path and its parents if missing.
func (d *ZooKeeperDriver) ensure(conn *zk.Conn, path string) error {
	if _, ok := d.roots.Load(path); ok {
		return nil
	}
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		p += "/" + part
		if _, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	d.roots.Store(path, true)
	return nil
}

// Connect opens a connection (one session).
func (d *ZooKeeperDriver) Connect(ctx context.Context, opts bench.ClientOptions) (bench.Client, error) {
	if opts.Cache {
		return nil, fmt.Errorf("%w: ZooKeeper's client has no cache of values", bench.ErrUnsupported)
	}
	s, err := d.dial(ctx)
	if err != nil {
		return nil, err
	}
	root := "/" + opts.Tenant
	if err := d.ensure(s.conn, root+"/files"); err != nil {
		s.conn.Close()
		return nil, err
	}
	return &zkClient{d: d, s: s, root: root}, nil
}

// OpenSessions opens n connections, each with its session.
func (d *ZooKeeperDriver) OpenSessions(ctx context.Context, tenant string, n int, progress func(int)) (bench.SessionSet, error) {
	set := &zkSessions{sessions: make([]*zkSession, n)}
	var opened atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range n {
		g.Go(func() error {
			s, err := d.dial(gctx)
			if err != nil {
				return fmt.Errorf("peers: zookeeper session %d: %w", i, err)
			}
			set.sessions[i] = s
			if k := opened.Add(1); progress != nil && k%100 == 0 {
				progress(int(k))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		_ = set.Close(context.Background())
		return nil, err
	}
	return set, nil
}

type zkSessions struct{ sessions []*zkSession }

func (z *zkSessions) Lost() int {
	n := 0
	for _, s := range z.sessions {
		if s != nil && s.expired.Load() {
			n++
		}
	}
	return n
}

func (z *zkSessions) Close(context.Context) error {
	var g errgroup.Group
	g.SetLimit(64)
	for _, s := range z.sessions {
		if s != nil {
			g.Go(func() error { s.closed.Store(true); s.conn.Close(); return nil })
		}
	}
	return g.Wait()
}

type zkClient struct {
	d    *ZooKeeperDriver
	s    *zkSession
	root string
}

func (c *zkClient) Mutex(name string) bench.Mutex {
	return &zkMutex{l: zk.NewLock(c.s.conn, c.root+"/locks/"+name, zk.WorldACL(zk.PermAll)), busy: make(chan struct{}, 1)}
}

func (c *zkClient) Read(ctx context.Context, name string) ([]byte, error) {
	return withCtx(ctx, func() ([]byte, error) {
		b, _, err := c.s.conn.Get(c.root + "/files/" + name)
		return b, err
	})
}

func (c *zkClient) Write(ctx context.Context, name string, data []byte) error {
	_, err := withCtx(ctx, func() (struct{}, error) {
		p := c.root + "/files/" + name
		_, err := c.s.conn.Set(p, data, -1)
		if errors.Is(err, zk.ErrNoNode) {
			_, err = c.s.conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
			if errors.Is(err, zk.ErrNodeExists) {
				_, err = c.s.conn.Set(p, data, -1)
			}
		}
		return struct{}{}, err
	})
	return err
}

// withCtx runs fn (go-zookeeper takes no contexts) and returns early if
// ctx ends first.
func withCtx[T any](ctx context.Context, fn func() (T, error)) (T, error) {
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() {
		v, err := fn()
		ch <- res{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func (c *zkClient) Lost() bool { return c.s.expired.Load() && !c.s.closed.Load() }

func (c *zkClient) Close(context.Context) error {
	c.s.closed.Store(true)
	c.s.conn.Close()
	return nil
}

// zkMutex wraps zk.Lock, which takes no context: a Lock whose context ends
// returns at once, and the recipe goes on in the background and releases
// the lock if it gets it. busy serializes use of the zk.Lock.
type zkMutex struct {
	l    *zk.Lock
	busy chan struct{}
}

func (m *zkMutex) Lock(ctx context.Context) (uint64, error) {
	select {
	case m.busy <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	ch := make(chan error, 1)
	go func() { ch <- m.l.Lock() }()
	select {
	case err := <-ch:
		if err != nil {
			<-m.busy
			return 0, err
		}
		// Held: busy stays taken until Unlock.
		return 0, nil
	case <-ctx.Done():
		go func() {
			if <-ch == nil {
				_ = m.l.Unlock()
			}
			<-m.busy
		}()
		return 0, ctx.Err()
	}
}

func (m *zkMutex) Unlock(ctx context.Context) error {
	err := m.l.Unlock()
	if err == nil || errors.Is(err, zk.ErrNotLocked) {
		select {
		case <-m.busy:
		default:
		}
		if errors.Is(err, zk.ErrNotLocked) {
			return err
		}
	}
	return err
}
