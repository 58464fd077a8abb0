package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// TestElectionHandover: three candidates; the leader's session is closed,
// then the next leader's session expires. Leadership passes in campaign
// order, each leader's lock context ends when it stops leading, and an
// observer sees each leader exactly once, in order.
func TestElectionHandover(t *testing.T) {
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	obs := tc.session(t, ctx, "observer")
	// No lock-delay, so an expired leader's successor takes over at once.
	if _, err := obs.Open(ctx, "/t/election", client.OpenOptions{Create: true, LockDelay: -1}); err != nil {
		t.Fatal(err)
	}
	oe := client.NewElection(obs, "/t/election")
	if _, err := oe.Leader(ctx); !errors.Is(err, client.ErrNoLeader) {
		t.Fatalf("Leader before any campaign: %v; want ErrNoLeader", err)
	}
	seen := oe.Observe(ctx)

	c1 := tc.session(t, ctx, "one")
	c2client := tc.dial(t, ctx, tc.config(t, "two"))
	c2, err := c2client.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c3 := tc.session(t, ctx, "three")
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
	<-l1.Done()
	r2 := <-w2
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
	<-r2.l.Done()
	r3 := <-w3
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
