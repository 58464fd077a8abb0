package client_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

// TestJeopardySafeThroughFailover: the master dies and the client cannot
// reach the other replicas for a while. The session enters jeopardy (the
// lock's context is cancelled at once), then reaches the new master within
// the grace period and is safe again — with its lock still held and its
// sequencer still valid — after a fail-over event. It runs on celltest in
// simulated time.
func TestJeopardySafeThroughFailover(t *testing.T) {
	synctest.Test(t, testJeopardySafeThroughFailover)
}

func testJeopardySafeThroughFailover(t *testing.T) {
	tc := startSimCell(t, 3, func(c *cell.Config) { c.SessionLease = 4 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := simConfig(tc, "alice")
	cfg.GracePeriod = 20 * time.Second
	cfg.ReconnectMax = 200 * time.Millisecond
	c := tc.Dial(ctx, cfg)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "/t/jl", client.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	old, err := tc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	oldEpoch := s.Epoch()
	for _, r := range tc.Running() {
		if r.ID() != old.ID() {
			tc.CutClients(r.ID(), true)
		}
	}
	tc.Crash(old.ID())

	waitEvent(t, ctx, s, client.EventJeopardy)
	if s.State() != client.StateJeopardy {
		t.Fatalf("state %v after the jeopardy event", s.State())
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("the lock's context was not cancelled in jeopardy")
	}
	if cause := context.Cause(l.Context()); !errors.Is(cause, client.ErrJeopardy) {
		t.Fatalf("lock context cause %v; want ErrJeopardy", cause)
	}
	// Calls wait in jeopardy until their context ends.
	shortCtx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = h.Stat(shortCtx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call in jeopardy: %v; want it to wait for its deadline", err)
	}
	for _, r := range tc.Running() {
		tc.CutClients(r.ID(), false)
	}
	waitEvent(t, ctx, s, client.EventSafe)
	if s.Epoch() <= oldEpoch {
		t.Fatalf("epoch %d after fail-over, was %d", s.Epoch(), oldEpoch)
	}
	seq, err := h.Sequencer(ctx)
	if err != nil || seq.Generation != l.Generation() {
		t.Fatalf("after fail-over: sequencer %v, %v; want the same grant (generation %d)", seq, err, l.Generation())
	}
	ok, reason, err := s.CheckSequencer(ctx, l.Sequencer())
	if err != nil || !ok {
		t.Fatalf("CheckSequencer after fail-over: %v %q %v", ok, reason, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestJeopardyExpired: the cell becomes unreachable and stays so past the
// grace period. The session reports jeopardy and then expired; the lock's
// context is cancelled before the master expires the session, i.e. before
// the cell could grant the lock to anyone else; afterwards another session
// takes the lock. It runs on celltest in simulated time, where the two
// instants compared are exact.
func TestJeopardyExpired(t *testing.T) {
	synctest.Test(t, testJeopardyExpired)
}

func testJeopardyExpired(t *testing.T) {
	tc := startSimCell(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := simConfig(tc, "alice")
	cfg.GracePeriod = 2 * time.Second
	c := tc.Dial(ctx, cfg)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// No lock-delay: the lock is free the moment the session expires.
	h, err := s.Open(ctx, "/t/jx", client.OpenOptions{Create: true, LockDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	l, err := h.Acquire(ctx, api.LockExclusive)
	if err != nil {
		t.Fatal(err)
	}
	var cancelledAt atomic.Int64
	context.AfterFunc(l.Context(), func() { cancelledAt.Store(time.Now().UnixNano()) })
	m, err := tc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := m.Status().Sessions; n != 1 {
		t.Fatalf("%d sessions at the master, want 1", n)
	}

	for _, r := range tc.Running() {
		tc.CutClients(r.ID(), true)
	}
	// The master expires the session (and frees the lock) when its lease
	// runs out; sample when that happens.
	var expiredAt int64
	tick := time.NewTicker(time.Millisecond)
	for expiredAt == 0 {
		select {
		case <-tick.C:
			if m := tc.Master(); m != nil && m.Status().Sessions == 0 {
				expiredAt = time.Now().UnixNano()
			}
		case <-ctx.Done():
			t.Fatal("the master never expired the session")
		}
	}
	tick.Stop()
	ca := cancelledAt.Load()
	if ca == 0 || ca >= expiredAt {
		t.Fatalf("lock context cancelled at %d, master expired the session at %d: the holder was not told in time", ca, expiredAt)
	}
	t.Logf("lock context cancelled %v before the master expired the session", time.Duration(expiredAt-ca))
	waitEvent(t, ctx, s, client.EventExpired)
	if !errors.Is(s.Err(), client.ErrSessionExpired) {
		t.Fatalf("Err = %v; want ErrSessionExpired", s.Err())
	}
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after expiry")
	}
	if _, err := h.Stat(ctx); !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("call on an expired session: %v", err)
	}
	for _, r := range tc.Running() {
		tc.CutClients(r.ID(), false)
	}
	b := simSession(t, ctx, tc, "bob")
	lb, err := client.NewMutex(b, "/t/jx").TryLock(ctx)
	if err != nil {
		t.Fatalf("another session after expiry: %v", err)
	}
	if lb.Generation() <= l.Generation() {
		t.Fatalf("new grant generation %d not above %d", lb.Generation(), l.Generation())
	}
}
