package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestElectionHandover: three candidates; the leader's session is closed,
// then the next leader's session expires. Leadership passes in campaign
// order, each leader's lock context ends when it stops leading, and an
// observer sees each leader exactly once, in order. The cell is simulated
// (celltest under synctest): the expiry waits out the default session
// lease and grace period in no real time.
func TestElectionHandover(t *testing.T) {
	synctest.Test(t, testElectionHandover)
}

func testElectionHandover(t *testing.T) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	session := func(principal string) *client.Session {
		t.Helper()
		s, err := tc.Dial(ctx, tc.ClientConfig("", principal)).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	obs := session("observer")
	// No lock-delay, so an expired leader's successor takes over at once.
	if _, err := obs.Open(ctx, "/t/election", client.OpenOptions{Create: true, LockDelay: -1}); err != nil {
		t.Fatal(err)
	}
	oe := client.NewElection(obs, "/t/election")
	if _, err := oe.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v; want ErrNoLeader", err)
	}
	seen := oe.Observe(ctx)

	c1 := session("one")
	c2client := tc.Dial(ctx, tc.ClientConfig("", "two"))
	c2, err := c2client.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c3 := session("three")
	e1, e2, e3 := client.NewElection(c1, "/t/election"), client.NewElection(c2, "/t/election"), client.NewElection(c3, "/t/election")

	l1, err := e1.Campaign(ctx, []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	expectLeader(t, ctx, seen, "one")
	type won struct {
		l   interface{ Done() <-chan struct{} }
		err error
	}
	w2, w3 := make(chan won, 1), make(chan won, 1)
	go func() { l, err := e2.Campaign(ctx, []byte("two")); w2 <- won{l, err} }()
	waitWaiters(t, ctx, tc, 1)
	go func() { l, err := e3.Campaign(ctx, []byte("three")); w3 <- won{l, err} }()
	waitWaiters(t, ctx, tc, 2)

	// Hand-over 1: the leader's session is closed.
	if err := c1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	recv(t, ctx, "the closed leader's lock context to end", l1.Done())
	r2 := recv(t, ctx, "the second candidate to win", w2)
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	expectLeader(t, ctx, seen, "two")
	ld, err := oe.Leader(ctx)
	if err != nil || string(ld.Value) != "two" {
		t.Fatalf("Leader = %q, %v; want two", ld.Value, err)
	}

	// Hand-over 2: the leader's process vanishes; its session expires.
	c2client.Close()
	recv(t, ctx, "the expired leader's lock context to end", r2.l.Done())
	r3 := recv(t, ctx, "the third candidate to win", w3)
	if r3.err != nil {
		t.Fatal(r3.err)
	}
	expectLeader(t, ctx, seen, "three")
	ld3, err := oe.Leader(ctx)
	if err != nil || string(ld3.Value) != "three" || ld3.Sequencer.Generation <= ld.Sequencer.Generation {
		t.Fatalf("Leader = %q gen %d, %v; want three above gen %d", ld3.Value, ld3.Sequencer.Generation, err, ld.Sequencer.Generation)
	}
	// The old leaders cannot resign what they no longer hold.
	if err := e2.Resign(ctx); err == nil {
		t.Fatal("Resign by an expired leader succeeded")
	}
	if err := e3.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := oe.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader after resign: %v; want ErrNoLeader", err)
	}
}

// recv waits for a value from ch, failing the test, with what it waited
// for, if ctx ends first.
func recv[T any](t *testing.T, ctx context.Context, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("waited in vain for %s: %v", what, ctx.Err())
		var zero T
		return zero
	}
}

// expectLeader reads the next observed leader and checks it; the observer
// must not report a leader twice or out of order.
func expectLeader(t *testing.T, ctx context.Context, seen <-chan client.Leader, want string) {
	t.Helper()
	select {
	case ld, ok := <-seen:
		if !ok {
			t.Fatal("Observe ended")
		}
		if string(ld.Value) != want {
			t.Fatalf("observed leader %q, want %q", ld.Value, want)
		}
	case <-ctx.Done():
		t.Fatalf("leader %q never observed", want)
	}
}
