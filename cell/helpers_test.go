package cell_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/transport"
)

// startCell starts an in-process cell over real QUIC on loopback with a
// "t" tenant, and stops it when the test ends.
func startCell(t testing.TB, n int, tune func(*cell.Config)) *cell.LocalCell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{
		Dir:       t.TempDir(),
		Replicas:  n,
		Cell:      "test",
		DevTenant: "t",
		Tune:      tune,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return lc
}

// testClient is a minimal client for the cell's tests: it finds the master,
// follows NotMaster, and makes one call per stream. The real client library
// (package client) adds sessions with jeopardy and grace, caching and
// recipes.
//
// It is safe for concurrent use (a test keeps a session alive in one
// goroutine while it calls in another): mu guards conn, epoch and ack.
type testClient struct {
	t    testing.TB
	lc   testCell
	cert tls.Certificate
	sess uint64

	mu    sync.Mutex
	conn  *transport.ClientConn
	epoch uint64
	ack   uint64
}

// testCell is what testClient needs of a cell: an in-process celltest.Cell
// on the simulated network, or a LocalCell on real QUIC sockets.
type testCell interface {
	Addrs() []string
	Master() *cell.Replica
	ClientCertificate(tenant, principal string) (tls.Certificate, error)
	AdminCertificate() (tls.Certificate, error)
}

// dialConfig returns the transport.DialConfig that reaches addrs of tc
// with cert: over a fresh socket of the simulated network (which Dial
// owns) for a celltest.Cell, over UDP for a LocalCell.
func dialConfig(tc testCell, addrs []string, cert *tls.Certificate) (transport.DialConfig, error) {
	cfg := transport.DialConfig{Addrs: addrs, Certificate: cert, HandshakeTimeout: 2 * time.Second}
	switch c := tc.(type) {
	case *celltest.Cell:
		pc, err := c.PacketConn()
		if err != nil {
			return cfg, err
		}
		cfg.CA, cfg.PacketConn = c.CAPool(), pc
	case *cell.LocalCell:
		cfg.CA = c.CA.Pool()
	}
	return cfg, nil
}

func newTestClient(t testing.TB, lc testCell, tenant, principal string) *testClient {
	t.Helper()
	var cert tls.Certificate
	var err error
	if tenant == cell.AdminTenant {
		cert, err = lc.AdminCertificate()
	} else {
		cert, err = lc.ClientCertificate(tenant, principal)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &testClient{t: t, lc: lc, cert: cert}
	t.Cleanup(func() { c.setConn(nil) })
	return c
}

// dial connects to the master (or, failing that, any replica).
func (c *testClient) dial(ctx context.Context) error {
	c.mu.Lock()
	old := c.conn
	c.conn = nil
	c.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	addrs := c.lc.Addrs()
	start := 0
	if m := c.lc.Master(); m != nil {
		start = int(m.ID() - 1)
	}
	cfg, err := dialConfig(c.lc, addrs, &c.cert)
	if err != nil {
		return err
	}
	cfg.Start = start
	conn, err := transport.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	c.setConn(conn)
	return nil
}

// setConn installs conn, closing the one it replaces.
func (c *testClient) setConn(conn *transport.ClientConn) {
	c.mu.Lock()
	old := c.conn
	c.conn = conn
	c.mu.Unlock()
	if old != nil && old != conn {
		_ = old.Close()
	}
}

// dialOnly connects to one replica.
func (c *testClient) dialOnly(ctx context.Context, addr string) error {
	cfg, err := dialConfig(c.lc, []string{addr}, &c.cert)
	if err != nil {
		return err
	}
	conn, err := transport.Dial(ctx, cfg)
	if err != nil {
		return err
	}
	c.setConn(conn)
	return nil
}

// call makes one RPC; on NotMaster, Unavailable or a broken connection it
// redials and retries until ctx ends (only the caller knows whether the
// method is safe to retry: retry=false returns the first error).
func (c *testClient) call(ctx context.Context, m api.Method, req, resp any, retry bool) error {
	for {
		err := c.callOnce(ctx, m, req, resp)
		if err == nil || !retry || ctx.Err() != nil {
			return err
		}
		if !errors.Is(err, api.ErrNotMaster) && !errors.Is(err, api.ErrUnavailable) && !errors.Is(err, transport.ErrConnClosed) {
			var ae *api.Error
			if errors.As(err, &ae) {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
		_ = c.dial(ctx)
	}
}

func (c *testClient) callOnce(ctx context.Context, m api.Method, req, resp any) error {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil {
		if err := c.dial(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		conn = c.conn
		c.mu.Unlock()
		if conn == nil {
			return transport.ErrConnClosed
		}
	}
	f, err := conn.Call(ctx, uint16(m), req)
	if err != nil {
		if ctx.Err() == nil {
			// The connection is broken: drop it (unless another caller
			// already replaced it).
			c.mu.Lock()
			if c.conn == conn {
				c.conn = nil
			}
			c.mu.Unlock()
			_ = conn.Close()
		}
		return err
	}
	return celltest.DecodeReply(f, resp)
}

func (c *testClient) header() api.Header {
	c.mu.Lock()
	defer c.mu.Unlock()
	return api.Header{Session: c.sess, Epoch: c.epoch}
}

func (c *testClient) createSession(ctx context.Context) {
	c.t.Helper()
	var resp api.CreateSessionResponse
	if err := c.call(ctx, api.MethodCreateSession, &api.CreateSessionRequest{}, &resp, true); err != nil {
		c.t.Fatalf("CreateSession: %v", err)
	}
	c.mu.Lock()
	c.sess, c.epoch = resp.Session, resp.Epoch
	c.mu.Unlock()
}

// keepAlive makes one KeepAlive call and acknowledges its events.
func (c *testClient) keepAlive(ctx context.Context) (api.KeepAliveResponse, error) {
	var resp api.KeepAliveResponse
	c.mu.Lock()
	ack := c.ack
	c.mu.Unlock()
	err := c.call(ctx, api.MethodKeepAlive, &api.KeepAliveRequest{Header: c.header(), Ack: ack}, &resp, false)
	if err == nil {
		c.mu.Lock()
		if resp.Epoch != c.epoch {
			c.ack = 0
		}
		c.epoch = resp.Epoch
		for _, ev := range resp.Events {
			if ev.Seq > c.ack {
				c.ack = ev.Seq
			}
		}
		c.mu.Unlock()
	}
	return resp, err
}

// keepAliveLoop keeps the session alive until ctx ends, reporting each
// reply's events.
func (c *testClient) keepAliveLoop(ctx context.Context, events chan<- api.Event) {
	for ctx.Err() == nil {
		resp, err := c.keepAlive(ctx)
		if err != nil {
			if errors.Is(err, api.ErrSessionExpired) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			_ = c.dial(ctx)
			continue
		}
		for _, ev := range resp.Events {
			select {
			case events <- ev:
			default:
			}
		}
	}
}

// resync reconnects to the master and learns its epoch by a KeepAlive.
func (c *testClient) resync(ctx context.Context) {
	c.t.Helper()
	for {
		_ = c.dial(ctx)
		if _, err := c.keepAlive(ctx); err == nil {
			return
		} else if ctx.Err() != nil {
			c.t.Fatalf("resync: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *testClient) open(ctx context.Context, req api.OpenRequest) (api.OpenResponse, error) {
	req.Header = c.header()
	var resp api.OpenResponse
	err := c.call(ctx, api.MethodOpen, &req, &resp, true)
	return resp, err
}

func (c *testClient) mustOpen(ctx context.Context, path string) api.Handle {
	c.t.Helper()
	resp, err := c.open(ctx, api.OpenRequest{Path: path, Create: true})
	if err != nil {
		c.t.Fatalf("Open %s: %v", path, err)
	}
	return resp.Handle
}

func (c *testClient) acquire(ctx context.Context, h api.Handle, mode api.LockMode, wait bool) (api.SequencerResponse, error) {
	var resp api.SequencerResponse
	err := c.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: c.header(), Handle: h, Mode: mode, Wait: wait}, &resp, false)
	return resp, err
}

func (c *testClient) release(ctx context.Context, h api.Handle, gen uint64) error {
	return c.call(ctx, api.MethodRelease, &api.ReleaseRequest{Header: c.header(), Handle: h, Generation: gen}, &api.Empty{}, false)
}

func (c *testClient) checkSequencer(ctx context.Context, seq []byte) (api.CheckSequencerResponse, error) {
	var resp api.CheckSequencerResponse
	err := c.call(ctx, api.MethodCheckSequencer, &api.CheckSequencerRequest{Header: c.header(), Sequencer: seq}, &resp, true)
	return resp, err
}

// goSetContents runs setContents in a goroutine and returns where its
// error arrives.
func (c *testClient) goSetContents(ctx context.Context, h api.Handle, data []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := c.setContents(ctx, h, data)
		done <- err
	}()
	return done
}

func (c *testClient) setContents(ctx context.Context, h api.Handle, data []byte) (api.StatResponse, error) {
	var resp api.StatResponse
	err := c.call(ctx, api.MethodSetContents, &api.SetContentsRequest{Header: c.header(), Handle: h, Contents: data}, &resp, false)
	return resp, err
}

func (c *testClient) getContents(ctx context.Context, h api.Handle) (api.ContentsResponse, error) {
	var resp api.ContentsResponse
	err := c.call(ctx, api.MethodGetContentsAndStat, &api.HandleRequest{Header: c.header(), Handle: h}, &resp, true)
	return resp, err
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// simCell starts an in-process cell of n replicas with the tenant "t" on
// the simulated network (celltest), tuned by tune if not nil. Call it
// inside synctest.Test: leases and timeouts then run on the bubble's clock,
// so nothing a test checks depends on the machine's speed.
func simCell(t testing.TB, n int, tune func(*cell.Config)) *celltest.Cell {
	t.Helper()
	return celltest.Start(t, celltest.Options{Replicas: n, Tune: tune})
}
