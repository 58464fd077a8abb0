package client_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// waitFor polls cond (the client's queue is not observable otherwise)
// until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s never happened", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// parked returns the next CreateSessions call the fake master parked.
func parked(t *testing.T, ctx context.Context, m *fakeMaster) *pending {
	t.Helper()
	return recv(t, ctx, "a CreateSessions call", m.creates)
}

// TestNewSessionOldReplica: a replica that answers CreateSessions as an
// unknown method gets a CreateSession per NewSession: those sent alone and
// those made at once, and later ones without asking CreateSessions again.
func TestNewSessionOldReplica(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	m := startFakeMaster(t, fakeLease, false)
	m.noCreateBatch.Store(true)
	c, err := client.Dial(ctx, m.config(t, fakeDrift, newPauseClock()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	const alone, together = 3, 20
	for range alone {
		if _, err := c.NewSession(ctx); err != nil {
			t.Fatalf("NewSession from an old replica: %v", err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, together)
	for range together {
		wg.Go(func() {
			if _, err := c.NewSession(ctx); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent NewSession from an old replica: %v", err)
	}
	batches, singles := m.calls[api.MethodCreateSessions].Load(), m.calls[api.MethodCreateSession].Load()
	if batches != 1 || singles != alone+together {
		t.Fatalf("%d sessions from an old replica took %d CreateSessions and %d CreateSession calls; want 1 and %d",
			alone+together, batches, singles, alone+together)
	}
	if n := client.HeldSessions(c); n != alone+together {
		t.Fatalf("the client holds %d sessions, want %d", n, alone+together)
	}
}

// TestNewSessionCanceledQueued: a NewSession whose ctx ends while it waits
// for the next CreateSessions call returns ctx's error at once and is not
// asked for: the next call, made when the one in flight returns, asks
// only for the caller that stayed.
func TestNewSessionCanceledQueued(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	m := startFakeMaster(t, fakeLease, true)
	c, err := client.Dial(ctx, m.config(t, fakeDrift, newPauseClock()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	first := make(chan error, 1)
	go func() { _, err := c.NewSession(ctx); first <- err }()
	p1 := parked(t, ctx, m)

	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { _, err := c.NewSession(leaving); left <- err }()
	waitFor(t, ctx, "the second NewSession queued", func() bool { return client.QueuedOpens(c) == 1 })
	staying := make(chan error, 1)
	go func() { _, err := c.NewSession(ctx); staying <- err }()
	waitFor(t, ctx, "the third NewSession queued", func() bool { return client.QueuedOpens(c) == 2 })
	leave()
	if err := recv(t, ctx, "the canceled NewSession to return", left); !errors.Is(err, context.Canceled) {
		t.Fatalf("NewSession canceled while queued: %v; want context.Canceled", err)
	}
	if n := client.QueuedOpens(c); n != 1 {
		t.Fatalf("%d callers queued after one left; want 1", n)
	}
	p1.reply <- struct{}{}
	if err := recv(t, ctx, "the first NewSession", first); err != nil {
		t.Fatal(err)
	}
	p2 := parked(t, ctx, m)
	if p2.count != 1 {
		t.Fatalf("the next CreateSessions asked for %d sessions; want 1 (the caller that left is not asked for)", p2.count)
	}
	p2.reply <- struct{}{}
	if err := recv(t, ctx, "the staying NewSession", staying); err != nil {
		t.Fatal(err)
	}
	if n := client.OpenBatches(c); n != 2 {
		t.Fatalf("%d CreateSessions calls; want 2", n)
	}
}

// TestNewSessionCanceledInFlight: a NewSession whose ctx ends after its
// CreateSessions call was sent returns ctx's error at once; the session
// the call creates for it is closed at the master and never held by the
// Client, while the other caller of the same call gets its own.
func TestNewSessionCanceledInFlight(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	m := startFakeMaster(t, fakeLease, true)
	c, err := client.Dial(ctx, m.config(t, fakeDrift, newPauseClock()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	type result struct {
		s   *client.Session
		err error
	}
	first := make(chan result, 1)
	go func() { s, err := c.NewSession(ctx); first <- result{s, err} }()
	p1 := parked(t, ctx, m)
	leaving, leave := context.WithCancel(ctx)
	left := make(chan result, 1)
	staying := make(chan result, 1)
	go func() { s, err := c.NewSession(leaving); left <- result{s, err} }()
	waitFor(t, ctx, "the second NewSession queued", func() bool { return client.QueuedOpens(c) == 1 })
	go func() { s, err := c.NewSession(ctx); staying <- result{s, err} }()
	waitFor(t, ctx, "the third NewSession queued", func() bool { return client.QueuedOpens(c) == 2 })
	p1.reply <- struct{}{}
	r1 := recv(t, ctx, "the first NewSession", first)
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	p2 := parked(t, ctx, m)
	if p2.count != 2 {
		t.Fatalf("the second CreateSessions asked for %d sessions; want 2", p2.count)
	}
	leave()
	if r := recv(t, ctx, "the canceled NewSession to return", left); !errors.Is(r.err, context.Canceled) || r.s != nil {
		t.Fatalf("NewSession canceled in flight: %v, %v; want context.Canceled and no session", r.s, r.err)
	}
	p2.reply <- struct{}{}
	r3 := recv(t, ctx, "the staying NewSession", staying)
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	// The call created sessions 8 and 9 (the first call's was 7): the one
	// not handed out is closed.
	orphan := uint64(8)
	if r3.s.ID() == 8 {
		orphan = 9
	}
	waitFor(t, ctx, "the orphan session closed", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return slices.Contains(m.closed, orphan)
	})
	if n := client.HeldSessions(c); n != 2 {
		t.Fatalf("the client holds %d sessions; want 2 (not the one whose caller left)", n)
	}
	m.mu.Lock()
	closed := slices.Clone(m.closed)
	m.mu.Unlock()
	if len(closed) != 1 {
		t.Fatalf("the master was asked to close %v; want only the orphan %d", closed, orphan)
	}
}
