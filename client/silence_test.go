package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/monotime"
)

// failoverFixture is a client of fake master A, with B beside it (a
// follower that knows A as master) and a lock held through A; the
// client's clock is the test's.
type failoverFixture struct {
	a, b *fakeMaster
	clk  *pauseClock
	t0   monotime.Time
	s    *client.Session
	mu   *client.Mutex
	l    *client.Lock
	// parked is the client's KeepAlive parked at A.
	parked *pending
}

// newFailoverFixture starts the fixture; the client knows both replicas'
// addresses unless onlyA.
func newFailoverFixture(t *testing.T, ctx context.Context, cadence time.Duration, onlyA bool) *failoverFixture {
	t.Helper()
	ca, err := certs.NewCA("fake", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f := &failoverFixture{
		a:   startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 1, cadence: cadence}),
		b:   startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 2, cadence: cadence}),
		clk: newPauseClock(),
	}
	f.b.names.Store(1)
	cfg := f.a.config(t, fakeDrift, f.clk)
	cfg.Addrs = []string{f.a.addr, f.b.addr}
	if onlyA {
		cfg.Addrs = cfg.Addrs[:1]
	}
	cfg.IdleTimeout = time.Minute // the transport tells nothing in time
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	f.t0 = f.clk.Now()
	if f.s, err = c.NewSession(ctx); err != nil {
		t.Fatal(err)
	}
	f.mu = client.NewMutex(f.s, "/t/failover")
	if f.l, err = f.mu.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	f.parked = f.a.nextKA(t, ctx)
	return f
}

// promoteB makes B the serving master of epoch 2.
func (f *failoverFixture) promoteB() {
	f.b.epoch.Store(2)
	f.b.names.Store(2)
}

// expectMoved checks that the KeepAlive ka that reached B finds the
// session safe with its lock, and that B's reply keeps it so.
func (f *failoverFixture) expectMoved(t *testing.T, ctx context.Context, ka *pending) {
	t.Helper()
	if st := f.s.State(); st != client.StateSafe || f.l.Err() != nil {
		t.Fatalf("after moving to the new master: state %v, lock %v", st, f.l.Err())
	}
	f.b.answer(t, ctx, ka, 0, fakeLease)
	if f.s.Epoch() != 2 || f.s.State() != client.StateSafe || f.l.Err() != nil || f.mu.Held() != f.l {
		t.Fatalf("after the new master's reply: epoch %d, state %v, lock %v", f.s.Epoch(), f.s.State(), f.l.Err())
	}
}

// TestSilentMasterSearch pins dead-master detection on the injected
// clock: the client's master (A) announced a 1 s KeepAlive cadence, parks
// the client's KeepAlive and then falls silent (it answers nothing, not
// even CellStatus), while B becomes the serving master. Nothing but the
// clock passing the cadence and SilenceMargin can tell the client; it must
// then ask every replica, move to B and send its KeepAlive there, with its
// lease and its lock intact. Without the silence check (or without the
// search) the KeepAlive would wait for the whole lease at A.
func TestSilentMasterSearch(t *testing.T) {
	const cadence = time.Second
	ctx := testCtx(t, 60*time.Second)
	f := newFailoverFixture(t, ctx, cadence, false)
	f.a.dead.Store(true)
	f.promoteB()
	// Time passes: the cadence and the margin, then in small steps (the
	// loop may not have armed its timer yet), never near the lease's end.
	silence := cadence + client.SilenceMargin(cadence)
	f.clk.Advance(silence)
	var ka *pending
	for ka == nil {
		select {
		case ka = <-f.b.kas:
		case <-time.After(50 * time.Millisecond):
			if f.clk.Now().Sub(f.t0) > shortened(fakeLease)/2 {
				t.Fatalf("no KeepAlive reached the new master within %v of a silence of %v (the client never looked for it)",
					f.clk.Now().Sub(f.t0), silence)
			}
			f.clk.Advance(10 * time.Millisecond)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	f.expectMoved(t, ctx, ka)
}

// TestDeposedMasterRedirects: a master that stops serving answers the
// parked KeepAlive NotMaster at once, naming its successor if it knows
// one. The client's next KeepAlive goes to the successor without waiting
// for anything — the clock does not move in this test, so a backoff or a
// silence timer would never end: the named successor is dialled at once,
// and without a name every replica is asked at once.
func TestDeposedMasterRedirects(t *testing.T) {
	for _, named := range []bool{true, false} {
		name := "unnamed"
		if named {
			name = "named"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			f := newFailoverFixture(t, ctx, time.Second, false)
			f.promoteB()
			e := &api.Error{Code: api.NotMaster, Msg: "stepped down"}
			if named {
				e.Master = f.b.addr
			} else {
				f.a.names.Store(0) // it knows no master now
			}
			f.parked.reply <- e
			select {
			case ka := <-f.b.kas:
				f.expectMoved(t, ctx, ka)
			case <-time.After(20 * time.Second):
				t.Fatal("no KeepAlive reached the new master (the client waits for a timer)")
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		})
	}
}

// TestSearchLearnsReplicas: a client given only its first master's
// address still finds the new master: the deposed master knows no
// successor, but its status lists the other replicas, and the search asks
// them too.
func TestSearchLearnsReplicas(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	f := newFailoverFixture(t, ctx, time.Second, true)
	f.a.peer.Store(f.b.addr)
	f.a.names.Store(0)
	f.promoteB()
	f.parked.reply <- &api.Error{Code: api.NotMaster, Msg: "lost the master lease"}
	select {
	case ka := <-f.b.kas:
		f.expectMoved(t, ctx, ka)
	case <-time.After(20 * time.Second):
		t.Fatal("no KeepAlive reached the new master (the search never asked the replicas A listed)")
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

// TestMoveInterruptsDialToDeadReplica: when the search finds the master
// while the client is dialing a replica that is down (whose handshake
// would take a whole handshake timeout, a minute here, to fail), the dial
// gives way and the client goes to the master at once.
func TestMoveInterruptsDialToDeadReplica(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	ca, err := certs.NewCA("fake", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 1, cadence: time.Second})
	b := startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 2, cadence: time.Second})
	b.names.Store(1)
	// d is a replica that is down: its packets go nowhere.
	d, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	dialed := make(chan struct{})
	go func() {
		buf := make([]byte, 2048)
		if _, _, err := d.ReadFrom(buf); err == nil {
			close(dialed)
		}
	}()
	clk := newPauseClock()
	cfg := a.config(t, fakeDrift, clk)
	// The first dial takes A; the next one, without a hint, starts at d.
	cfg.Addrs = []string{a.addr, d.LocalAddr().String(), b.addr}
	cfg.IdleTimeout = time.Minute
	cfg.HandshakeTimeout = time.Minute
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := client.NewMutex(s, "/t/dial").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A steps down knowing no successor; nobody serves yet.
	a.names.Store(0)
	a.nextKA(t, ctx).reply <- &api.Error{Code: api.NotMaster, Msg: "stepped down"}
	// Calls now (once the client dropped A's connection) dial, starting
	// at the dead replica.
	cctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	go func() {
		for cctx.Err() == nil {
			_, _, _ = s.CheckSequencer(cctx, l.Sequencer())
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case <-dialed:
	case <-ctx.Done():
		t.Fatal("nobody ever dialed the dead replica")
	}
	// The search dials every replica too: wait until the call's own dial
	// is under way.
	for !client.Dialing(c) {
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			t.Fatal("the call never dialed")
		}
	}
	// B takes over while that dial hangs.
	b.epoch.Store(2)
	b.names.Store(2)
	select {
	case ka := <-b.kas:
		if st := s.State(); st != client.StateSafe || l.Err() != nil {
			t.Fatalf("after moving to the new master: state %v, lock %v", st, l.Err())
		}
		b.answer(t, ctx, ka, 0, fakeLease)
	case <-time.After(20 * time.Second):
		t.Fatal("no KeepAlive reached the new master (it waits for the dial to the dead replica)")
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}
