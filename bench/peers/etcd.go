package peers

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/lockcell/lockcell/bench"
)

// sessionsPerEtcdClient is how many sessions (leases) OpenSessions puts on
// one etcd client connection.
const sessionsPerEtcdClient = 100

// EtcdFactory is the etcd DriverFactory. Flags: --etcd-script (the
// cluster script), --etcd-start (start a fresh cluster of --replicas
// members, stop it after), --etcd-endpoints (of a cluster it does not
// start; one it starts gives its own), --etcd-ttl (session TTL).
func EtcdFactory() bench.DriverFactory {
	var script, endpoints string
	var start bool
	var ttl time.Duration
	return bench.DriverFactory{
		Name: "etcd",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&script, "etcd-script", "bench/scripts/etcd-cluster.sh", "script that runs the etcd cluster (of --replicas members)")
			fs.BoolVar(&start, "etcd-start", true, "start a fresh etcd cluster with the script (and stop it after)")
			fs.StringVar(&endpoints, "etcd-endpoints", "127.0.0.1:23790,127.0.0.1:23791,127.0.0.1:23792,127.0.0.1:23793,127.0.0.1:23794", "etcd client endpoints of a cluster not started here (--etcd-start=false)")
			fs.DurationVar(&ttl, "etcd-ttl", 12*time.Second, "session (lease) TTL, as lockcell's 12 s session lease")
		},
		Open: func(ctx context.Context, log *slog.Logger, oc bench.OpenConfig) (bench.Driver, func(), error) {
			d := &EtcdDriver{endpoints: strings.Split(endpoints, ","), ttl: int(ttl / time.Second)}
			if d.ttl < 1 {
				return nil, func() {}, fmt.Errorf("%w: --etcd-ttl %v", bench.ErrInvalidConfig, ttl)
			}
			d.cluster = &scriptCluster{script: script, replicas: oc.Replicas, leader: d.leader, healthy: d.healthy}
			stop := func() {}
			if start {
				var err error
				if stop, err = d.cluster.start(ctx); err != nil {
					return nil, stop, err
				}
				if d.endpoints, err = d.cluster.endpoints(ctx); err != nil {
					return nil, stop, err
				}
			}
			log.Info("etcd cluster", "endpoints", d.endpoints, "pids", d.cluster.PIDs())
			return d, func() { _ = d.Close(); stop() }, nil
		},
	}
}

// EtcdDriver drives etcd through clientv3: concurrency.Session and Mutex
// for locks (the fencing token is the revision at which the lock was
// granted), Get (linearizable) and Put for files.
type EtcdDriver struct {
	endpoints []string
	ttl       int
	cluster   *scriptCluster
}

// Name returns "etcd".
func (d *EtcdDriver) Name() string { return "etcd" }

// Cluster returns the script-run cluster.
func (d *EtcdDriver) Cluster() bench.Cluster { return d.cluster }

// Close does nothing: clients are closed by their owners.
func (d *EtcdDriver) Close() error { return nil }

func (d *EtcdDriver) newClient(ctx context.Context, eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Context: context.WithoutCancel(ctx),
		Logger: zap.NewNop(), DialKeepAliveTime: 5 * time.Second})
}

func (d *EtcdDriver) leader(ctx context.Context) (int, error) {
	cli, err := d.newClient(ctx, d.endpoints)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	for i, ep := range d.endpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err == nil && st.Leader != 0 && st.Header.MemberId == st.Leader {
			return i + 1, nil
		}
	}
	return 0, errors.New("peers: no etcd member reports itself leader")
}

func (d *EtcdDriver) healthy(ctx context.Context) error {
	cli, err := d.newClient(ctx, d.endpoints)
	if err != nil {
		return err
	}
	defer cli.Close()
	for _, ep := range d.endpoints {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := cli.Status(sctx, ep)
		cancel()
		if err != nil {
			return fmt.Errorf("etcd %s: %w", ep, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("etcd %s: no leader", ep)
		}
	}
	return nil
}

// Connect opens a client on all endpoints and a session.
func (d *EtcdDriver) Connect(ctx context.Context, opts bench.ClientOptions) (bench.Client, error) {
	if opts.Cache {
		return nil, fmt.Errorf("%w: etcd's client has no cache of values", bench.ErrUnsupported)
	}
	cli, err := d.newClient(ctx, d.endpoints)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(d.ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		cli.Close()
		return nil, err
	}
	return &etcdClient{cli: cli, s: s, prefix: "/" + opts.Tenant + "/"}, nil
}

// OpenSessions opens n sessions, sessionsPerEtcdClient to a client.
func (d *EtcdDriver) OpenSessions(ctx context.Context, tenant string, n int, progress func(int)) (bench.SessionSet, error) {
	nc := (n + sessionsPerEtcdClient - 1) / sessionsPerEtcdClient
	set := &etcdSessions{clients: make([]*clientv3.Client, nc), sessions: make([]*concurrency.Session, n)}
	var opened atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range nc {
		g.Go(func() error {
			// Spread the clients over the members, as lockcell's and
			// ZooKeeper's clients are.
			cli, err := d.newClient(gctx, []string{d.endpoints[i%len(d.endpoints)]})
			if err != nil {
				return err
			}
			set.clients[i] = cli
			var sg errgroup.Group
			sg.SetLimit(16)
			for j := i * sessionsPerEtcdClient; j < min(n, (i+1)*sessionsPerEtcdClient); j++ {
				sg.Go(func() error {
					s, err := concurrency.NewSession(cli, concurrency.WithTTL(d.ttl), concurrency.WithContext(context.WithoutCancel(gctx)))
					if err != nil {
						return fmt.Errorf("peers: etcd session %d: %w", j, err)
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

type etcdSessions struct {
	clients  []*clientv3.Client
	sessions []*concurrency.Session
	closed   atomic.Bool
}

func (e *etcdSessions) Lost() int {
	n := 0
	for _, s := range e.sessions {
		if s == nil {
			continue
		}
		select {
		case <-s.Done():
			n++
		default:
		}
	}
	return n
}

func (e *etcdSessions) Close(ctx context.Context) error {
	e.closed.Store(true)
	var g errgroup.Group
	g.SetLimit(64)
	for _, s := range e.sessions {
		if s != nil {
			g.Go(func() error { _ = s.Close(); return nil })
		}
	}
	_ = g.Wait()
	for _, c := range e.clients {
		if c != nil {
			_ = c.Close()
		}
	}
	return nil
}

type etcdClient struct {
	cli    *clientv3.Client
	s      *concurrency.Session
	prefix string
	closed atomic.Bool
}

func (c *etcdClient) Mutex(name string) bench.Mutex {
	return &etcdMutex{m: concurrency.NewMutex(c.s, c.prefix+"locks/"+name)}
}

func (c *etcdClient) Read(ctx context.Context, name string) ([]byte, error) {
	resp, err := c.cli.Get(ctx, c.prefix+"files/"+name)
	if err != nil {
		return nil, err
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("peers: etcd: no key %s", name)
	}
	return resp.Kvs[0].Value, nil
}

func (c *etcdClient) Write(ctx context.Context, name string, data []byte) error {
	_, err := c.cli.Put(ctx, c.prefix+"files/"+name, string(data))
	return err
}

func (c *etcdClient) Lost() bool {
	if c.closed.Load() {
		return false
	}
	select {
	case <-c.s.Done():
		return true
	default:
		return false
	}
}

func (c *etcdClient) Close(ctx context.Context) error {
	c.closed.Store(true)
	err := c.s.Close()
	_ = c.cli.Close()
	return err
}

type etcdMutex struct {
	mu   sync.Mutex
	m    *concurrency.Mutex
	held bool
}

func (m *etcdMutex) Lock(ctx context.Context) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.held {
		_ = m.m.Unlock(ctx)
		m.held = false
	}
	if err := m.m.Lock(ctx); err != nil {
		return 0, err
	}
	m.held = true
	// The store revision when the grant was observed: it is above the
	// revision that deleted the previous holder's key, so it grows with
	// every hand-over.
	return uint64(m.m.Header().Revision), nil
}

func (m *etcdMutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.m.Unlock(ctx); err != nil {
		return err
	}
	m.held = false
	return nil
}
