package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/monotime"
)

// The grace tests drive a session through jeopardy on its injected clock
// (a pauseClock against a fakeMaster): the lease end, the grace period's
// end and the lease a late reply proves are exact instants the test
// computes, and the clock moves only when the test moves it, so the 45 s
// grace period takes no real time and no result depends on how fast the
// machine runs. Only the order of events is awaited in real time.

// graceFixture is a session of a fake master holding a lock, with the
// default grace period, and the KeepAlive it has parked at the master.
type graceFixture struct {
	fs *fakeSession
	l  *client.Lock
	// leaseEnd is the session's local lease end: the master never answers
	// a KeepAlive before the test makes it.
	leaseEnd monotime.Time
}

func newGraceFixture(t *testing.T, ctx context.Context) *graceFixture {
	t.Helper()
	m := startFakeMaster(t, fakeLease, false)
	clk := newPauseClock()
	cfg := m.config(t, fakeDrift, clk)
	cfg.GracePeriod = 0 // the default, 45 s
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t0 := clk.Now()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l, err := client.NewMutex(s, "/t/grace").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeSession{m: m, clk: clk, s: s, t0: t0}
	fs.m.nextKA(t, ctx) // the first KeepAlive, parked and never answered
	return &graceFixture{fs: fs, l: l, leaseEnd: t0.Add(shortened(fakeLease))}
}

// lapse stops the process's clock for pause past the lease end (no timer
// fires), checks that the first look finds the session in jeopardy with
// its lock lost, and returns a KeepAlive the loop sent once it took up the
// jeopardy, at leaseEnd+pause (the loop sends none in jeopardy before it
// has fixed the grace period's end).
func (g *graceFixture) lapse(t *testing.T, ctx context.Context, pause time.Duration) *pending {
	t.Helper()
	g.fs.clk.JumpTo(t, g.leaseEnd.Add(pause))
	if st := g.fs.s.State(); st != client.StateJeopardy {
		t.Fatalf("%v past the lease end: state %v, want jeopardy", pause, st)
	}
	if err := g.l.Err(); !errors.Is(err, client.ErrJeopardy) {
		t.Fatalf("%v past the lease end: lock error %v, want ErrJeopardy", pause, err)
	}
	waitEvent(t, ctx, g.fs.s, client.EventJeopardy)
	return g.fs.m.nextKA(t, ctx)
}

// TestGraceExpiresFromLeaseEnd: a session whose process was paused 10 s
// past its lease end is in jeopardy at its first look, and the grace
// period (45 s, Chubby's) runs from the lease end, not from the instant
// the loop noticed the lapse: at leaseEnd+45s−1ns it is still in jeopardy
// and not expired; at leaseEnd+45s it expires with ErrSessionExpired.
func TestGraceExpiresFromLeaseEnd(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	g := newGraceFixture(t, ctx)
	const pause = 10 * time.Second
	g.lapse(t, ctx, pause)
	graceEnd := g.leaseEnd.Add(client.DefaultGracePeriod)

	// The master stays silent. Up to the last nanosecond of the grace
	// period the session is in jeopardy and calls wait.
	g.fs.clk.Advance(graceEnd.Sub(g.fs.clk.Now()) - 1)
	if st, err := g.fs.s.State(), g.fs.s.Err(); st != client.StateJeopardy || err != nil {
		t.Fatalf("1ns before the grace period ends: state %v, err %v; want jeopardy, nil", st, err)
	}
	g.fs.clk.Advance(1)
	select {
	case <-g.fs.s.Done():
	case <-ctx.Done():
		t.Fatalf("at leaseEnd+%v (the grace period's end) the session has not expired: state %v; the grace period is not counted from the lease end",
			client.DefaultGracePeriod, g.fs.s.State())
	}
	if st := g.fs.s.State(); st != client.StateExpired {
		t.Fatalf("after the grace period: state %v, want expired", st)
	}
	if err := g.fs.s.Err(); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("after the grace period: Err %v, want ErrSessionExpired", err)
	}
	if cause := context.Cause(g.fs.s.Ctx()); !errors.Is(cause, client.ErrSessionExpired) {
		t.Fatalf("session context cause %v, want ErrSessionExpired", cause)
	}
	waitEvent(t, ctx, g.fs.s, client.EventExpired)
	if err := g.l.Err(); !errors.Is(err, client.ErrJeopardy) {
		t.Fatalf("the lock lost in jeopardy reports %v, want ErrJeopardy", err)
	}
	t.Logf("judged: jeopardy at leaseEnd+%v, still in jeopardy at leaseEnd+45s-1ns, expired at leaseEnd+45s", pause)
}

// TestGraceMasterBackSafe: in jeopardy, a KeepAlive reply from the master
// makes the session safe again, with the lease it proves counted from the
// KeepAlive's send time (inside the jeopardy) and the master's hold: the
// new lease ends exactly there. The lock lost in jeopardy stays lost, and
// the session outlives the grace period the jeopardy would have ended at.
func TestGraceMasterBackSafe(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	g := newGraceFixture(t, ctx)
	const pause = 10 * time.Second
	ka := g.lapse(t, ctx, pause)
	sent := g.leaseEnd.Add(pause)

	// The master answers, saying it held the KeepAlive 20 s, with a 30 s
	// lease: the lease runs from the send time for held+lease, shortened
	// by the drift bound. The client's clock stands still meanwhile, so
	// every KeepAlive of the jeopardy was sent at the same instant (the
	// connection may be replaced while the loop looks for the master, so
	// the reply to one of them may be lost: each is answered alike).
	const held, lease = 20 * time.Second, 30 * time.Second
	reply := &api.KeepAliveResponse{LeaseTimeout: int64(lease), Held: int64(held), Epoch: g.fs.m.epoch.Load()}
	ka.reply <- reply
	for safe := false; !safe; {
		select {
		case p := <-g.fs.m.kas:
			p.reply <- reply
		case ev := <-g.fs.s.Events():
			safe = ev.Kind == client.EventSafe
		case <-ctx.Done():
			t.Fatalf("the master answered in jeopardy, but the session never became safe: state %v", g.fs.s.State())
		}
	}
	if st := g.fs.s.State(); st != client.StateSafe {
		t.Fatalf("after the master answered in jeopardy: state %v, want safe", st)
	}
	if err := g.l.Err(); !errors.Is(err, client.ErrJeopardy) {
		t.Fatalf("after the return to safe the lock lost in jeopardy reports %v; want ErrJeopardy (it may have been lost)", err)
	}
	end := sent.Add(shortened(held + lease))
	graceEnd := g.leaseEnd.Add(client.DefaultGracePeriod)
	if !end.After(graceEnd) {
		t.Fatalf("test arithmetic: the new lease end %v is not past the old grace end %v", end.Sub(g.fs.t0), graceEnd.Sub(g.fs.t0))
	}
	// Past the grace period the old jeopardy would have ended at, the
	// session lives on its new lease, to the nanosecond.
	expectLeaseEnd(t, g.fs, nil, end)
	if err := g.fs.s.Err(); err != nil {
		t.Fatalf("the session that was safe again ended: %v", err)
	}
	t.Logf("judged: safe again on a lease ending at leaseEnd+%v, exactly", end.Sub(g.leaseEnd))
}
