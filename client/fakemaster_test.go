package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/transport"
)

// fakeMaster stands in for a cell's master in the client's unit tests of
// lease timing, over real QUIC on loopback. It answers CellStatus, Open,
// Acquire, Release and CloseSession at once; it hands every KeepAlive (and,
// if asked, CreateSession) to the test, which decides when and what it
// answers, while the client's clock is a pauseClock the test moves. So the
// instants at which the client sends and receives are exactly known.
type fakeMaster struct {
	addr  string
	ca    *certs.CA
	lease time.Duration
	// kas receives every KeepAlive as it arrives; creates every
	// CreateSession if parkCreate.
	kas        chan *pending
	creates    chan *pending
	parkCreate bool
	gen        atomic.Uint64
	// refused counts the calls it does not serve (they would reach a real
	// cell).
	refused atomic.Int64

	// id is the replica id it poses as; cadence the KeepAlive cadence it
	// announces at CreateSession (the test's replies announce their own).
	id      uint64
	cadence time.Duration
	// names is the master its CellStatus names (itself as serving master
	// if it names itself); epoch the epoch it reports; dead makes it
	// answer no CellStatus at all.
	names atomic.Uint64
	epoch atomic.Uint64
	dead  atomic.Bool
	// peer, if set (a string), is another replica's address its
	// CellStatus lists.
	peer atomic.Value

	// script, if set, answers a call before the defaults do: it is given
	// the method and how many calls of it arrived so far (this one
	// included), and a non-nil result (a response, or *api.Error) is the
	// reply. calls counts the calls of each method.
	script func(m api.Method, n int64) any
	calls  [64]atomic.Int64

	// noBatch makes it answer MethodKeepAliveBatch as a replica that
	// predates it does ("unknown method"); batches counts the batch
	// frames it served.
	noBatch atomic.Bool
	batches atomic.Int64
	// noCreateBatch makes it answer MethodCreateSessions as a replica
	// that predates it does ("unknown method").
	noCreateBatch atomic.Bool
	// sessions numbers the sessions of CreateSessions calls (from 7);
	// closed lists the sessions CloseSession named.
	sessions atomic.Uint64
	mu       sync.Mutex
	closed   []uint64

	// Test goroutine only.
	stash []*pending
	seq   uint64
}

// fakeOpts configures a fakeMaster beyond startFakeMaster's defaults.
type fakeOpts struct {
	ca      *certs.CA // nil: a CA of its own
	id      uint64    // 0: 1
	cadence time.Duration
	// script answers calls first (see fakeMaster.script).
	script func(m api.Method, n int64) any
}

// pending is a parked request; send its reply on reply.
type pending struct {
	ka    api.KeepAliveRequest
	reply chan any // a response value, or *api.Error
	// count is a parked CreateSessions call's Count.
	count int
}

func startFakeMaster(t *testing.T, lease time.Duration, parkCreate bool) *fakeMaster {
	t.Helper()
	return startFakeMasterOpts(t, lease, parkCreate, fakeOpts{})
}

func startFakeMasterOpts(t *testing.T, lease time.Duration, parkCreate bool, o fakeOpts) *fakeMaster {
	t.Helper()
	ca := o.ca
	if ca == nil {
		var err error
		if ca, err = certs.NewCA("fake", certs.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if o.id == 0 {
		o.id = 1
	}
	cert, err := ca.IssueReplica(o.id, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The address is known before the handler can run.
	m := &fakeMaster{addr: pc.LocalAddr().String(), ca: ca, lease: lease,
		kas: make(chan *pending), creates: make(chan *pending), parkCreate: parkCreate,
		id: o.id, cadence: o.cadence, script: o.script}
	m.names.Store(o.id)
	m.epoch.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, err := transport.Listen(ctx, transport.Config{ID: o.id, PacketConn: pc, CA: ca.Pool(), Certificate: cert,
		ClientHandler: m.serve, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return m
}

func (m *fakeMaster) serve(ctx context.Context, s *transport.ServerStream) {
	f, err := s.ReadFrame(ctx)
	if err != nil {
		return
	}
	park := func(p *pending, ch chan *pending) any {
		select {
		case ch <- p:
		case <-ctx.Done():
			return nil
		}
		select {
		case r := <-p.reply:
			return r
		case <-ctx.Done():
			return nil
		}
	}
	switch api.Method(f.Tag) {
	case api.MethodKeepAliveStream:
		m.serveKeepAliveStream(ctx, s, f, park)
		return
	case api.MethodKeepAliveBatch:
		if !m.noBatch.Load() {
			m.serveKeepAliveStream(ctx, s, f, park)
			return
		}
		m.refused.Add(1)
		_ = s.WriteFrame(ctx, api.ReplyError, &api.Error{Code: api.InvalidArgument, Msg: "unknown method method(28)"})
		return
	}
	var resp any
	method := api.Method(f.Tag)
	var n int64
	if int(method) < len(m.calls) {
		n = m.calls[method].Add(1)
	}
	if m.script != nil {
		resp = m.script(method, n)
	}
	switch {
	case resp != nil:
		// Scripted.
	case method == api.MethodCellStatus:
		if m.dead.Load() {
			return
		}
		names := m.names.Load()
		role := api.RoleFollower
		if names == m.id {
			role = api.RoleMaster
		}
		st := &api.CellStatusResponse{Cell: "fake", Replica: m.id, Master: names, Epoch: api.Epoch(m.epoch.Load()), Role: role,
			Replicas: []api.ReplicaStatus{{ID: m.id, Addr: m.addr, Master: names == m.id}}}
		if p, ok := m.peer.Load().(string); ok {
			st.Replicas = append(st.Replicas, api.ReplicaStatus{ID: m.id + 100, Addr: p})
		}
		resp = st
	case method == api.MethodCreateSession:
		resp = &api.CreateSessionResponse{Session: 7, Epoch: m.epoch.Load(), LeaseTimeout: int64(m.lease), Principal: "p", Tenant: "t",
			Cadence: int64(m.cadence)}
		if m.parkCreate {
			p := &pending{reply: make(chan any, 1)}
			if park(p, m.creates) == nil {
				return
			}
		}
	case method == api.MethodCreateSessions:
		if m.noCreateBatch.Load() {
			m.refused.Add(1)
			resp = &api.Error{Code: api.InvalidArgument, Msg: "unknown method " + method.String()}
			break
		}
		var req api.CreateSessionsRequest
		if err := f.Decode(&req); err != nil {
			return
		}
		r := &api.CreateSessionsResponse{Epoch: m.epoch.Load(), Principal: "p", Tenant: "t", Cadence: int64(m.cadence)}
		for range req.Count {
			r.Sessions = append(r.Sessions, api.CreatedSession{Session: 6 + m.sessions.Add(1), LeaseTimeout: int64(m.lease)})
		}
		resp = r
		if m.parkCreate {
			p := &pending{reply: make(chan any, 1), count: req.Count}
			if park(p, m.creates) == nil {
				return
			}
		}
	case method == api.MethodKeepAlive:
		p := &pending{reply: make(chan any, 1)}
		if err := f.Decode(&p.ka); err != nil {
			return
		}
		if resp = park(p, m.kas); resp == nil {
			return
		}
	case method == api.MethodOpen:
		var req api.OpenRequest
		if err := f.Decode(&req); err != nil {
			return
		}
		resp = &api.OpenResponse{Handle: api.Handle{Session: 7, Path: req.Path, Instance: 1}}
	case method == api.MethodAcquire:
		var req api.AcquireRequest
		if err := f.Decode(&req); err != nil {
			return
		}
		gen := m.gen.Add(1)
		b, err := sequencer.Sequencer{Cell: "fake", Tenant: "t", Path: req.Handle.Path, Mode: sequencer.Exclusive,
			Generation: gen, Instance: 1}.Marshal()
		if err != nil {
			resp = &api.Error{Code: api.Internal, Msg: err.Error()}
			break
		}
		resp = &api.SequencerResponse{Sequencer: b, Generation: gen, Mode: api.LockExclusive}
	case method == api.MethodCloseSession:
		var req api.CloseSessionRequest
		if err := f.Decode(&req); err != nil {
			return
		}
		m.mu.Lock()
		m.closed = append(m.closed, req.Session)
		m.mu.Unlock()
		resp = &api.Empty{}
	case method == api.MethodRelease:
		resp = &api.Empty{}
	default:
		m.refused.Add(1)
		resp = &api.Error{Code: api.InvalidArgument, Msg: "fake master: " + method.String() + " not served"}
	}
	if e, ok := resp.(*api.Error); ok {
		_ = s.WriteFrame(ctx, api.ReplyError, e)
		return
	}
	_ = s.WriteFrame(ctx, api.ReplyOK, resp)
}

// serveKeepAliveStream serves a KeepAlive stream: every KeepAlive on it
// (a frame of its own, or an entry of a batch frame) goes to the test
// (kas) like one on a stream of its own, and its reply goes back on the
// stream, numbered, in a frame of its own (a batch's entries each in a
// batch reply of one, when the test answers it).
func (m *fakeMaster) serveKeepAliveStream(ctx context.Context, s *transport.ServerStream, f transport.Frame,
	park func(*pending, chan *pending) any) {
	var wmu sync.Mutex
	var wg sync.WaitGroup
	defer wg.Wait()
	serve := func(req api.KeepAliveStreamRequest, batch bool) {
		p := &pending{ka: req.KeepAlive, reply: make(chan any, 1)}
		wg.Go(func() {
			r := park(p, m.kas)
			if r == nil {
				return
			}
			reply := api.KeepAliveStreamReply{Call: req.Call}
			if e, ok := r.(*api.Error); ok {
				reply.Err = e
			} else {
				reply.KeepAlive = r.(*api.KeepAliveResponse)
			}
			wmu.Lock()
			defer wmu.Unlock()
			if batch {
				_ = s.WriteFrame(ctx, api.ReplyOK, &api.KeepAliveBatchReply{Replies: []api.KeepAliveStreamReply{reply}})
			} else {
				_ = s.WriteFrame(ctx, api.ReplyOK, &reply)
			}
		})
	}
	for {
		switch api.Method(f.Tag) {
		case api.MethodKeepAliveBatch:
			var req api.KeepAliveBatchRequest
			if err := f.Decode(&req); err != nil {
				return
			}
			m.batches.Add(1)
			for _, q := range req.KeepAlives {
				serve(q, true)
			}
		default:
			var req api.KeepAliveStreamRequest
			if err := f.Decode(&req); err != nil {
				return
			}
			serve(req, false)
		}
		var err error
		if f, err = s.ReadFrame(ctx); err != nil {
			return
		}
	}
}

// config returns a client config for the fake master with the given drift
// bound, keeping the sessions' time on clk.
func (m *fakeMaster) config(t *testing.T, drift float64, clk monotime.Clock) client.Config {
	t.Helper()
	cert, err := m.ca.IssueClient(certs.ClientID{Tenant: "t", Principal: "p"}, certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return client.WithClock(client.Config{
		Addrs: []string{m.addr}, CA: m.ca.Pool(), Certificate: &cert,
		Drift: drift, GracePeriod: time.Minute, Logger: quietLogger(),
	}, clk)
}

// nextKA returns the next KeepAlive the client sent (one stashed by
// ackedKA first).
func (m *fakeMaster) nextKA(t *testing.T, ctx context.Context) *pending {
	t.Helper()
	if len(m.stash) > 0 {
		p := m.stash[0]
		m.stash = m.stash[1:]
		return p
	}
	select {
	case p := <-m.kas:
		return p
	case <-ctx.Done():
		t.Fatal("the client sent no KeepAlive")
		return nil
	}
}

// answer replies to p with a lease of leaseTimeout held for held, and an
// event the client acknowledges at once; it returns when the client's
// acknowledging KeepAlive arrived, which proves the client has processed
// the reply, and stashes that KeepAlive for nextKA.
func (m *fakeMaster) answer(t *testing.T, ctx context.Context, p *pending, held, leaseTimeout time.Duration) {
	t.Helper()
	m.seq++
	p.reply <- &api.KeepAliveResponse{LeaseTimeout: int64(leaseTimeout), Held: int64(held), Epoch: m.epoch.Load(), Cadence: int64(m.cadence),
		Events: []api.Event{{Kind: api.EventChildAdded, Seq: m.seq, Path: "/t", Child: fmt.Sprint("sync", m.seq)}}}
	var others []*pending
	for {
		select {
		case q := <-m.kas:
			if q.ka.Ack >= m.seq {
				m.stash = append(m.stash, others...)
				m.stash = append(m.stash, q)
				return
			}
			others = append(others, q)
		case <-ctx.Done():
			t.Fatal("the client never acknowledged the reply")
		}
	}
}

// pauseClock is a manual clock whose time can also jump without firing any
// timer: what a process sees at the first instant after it was paused,
// before any of its goroutines has run.
type pauseClock struct {
	*monotime.Manual
	mu   sync.Mutex
	skew time.Duration
}

func newPauseClock() *pauseClock { return &pauseClock{Manual: monotime.NewManual(1_000_000_000)} }

// Now returns the manual time plus every jump so far.
func (c *pauseClock) Now() monotime.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Manual.Now().Add(c.skew)
}

// Jump moves the time forward by d and fires nothing.
func (c *pauseClock) Jump(d time.Duration) {
	c.mu.Lock()
	c.skew += d
	c.mu.Unlock()
}

// JumpTo moves the time forward to t (which must not be in the past) and
// fires nothing.
func (c *pauseClock) JumpTo(t *testing.T, to monotime.Time) {
	t.Helper()
	d := to.Sub(c.Now())
	if d < 0 {
		t.Fatalf("JumpTo %d: already at %d", to, c.Now())
	}
	c.Jump(d)
}
