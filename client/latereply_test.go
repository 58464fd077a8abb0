package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// TestLateJeopardyReplyProvesLease: a session in jeopardy re-sends its
// KeepAlive when the master has not answered within its cadence (and a
// margin), but a reply to the KeepAlive it stopped waiting for still
// proves the lease, counted from that KeepAlive's send time: the master
// renewed the lease when the request arrived and when it answered, both
// after the send. Here the master (cadence 1 s) answers the jeopardy
// KeepAlive sent at the lease end L only 2 s later, after the client gave
// it up and sent others, with Held 1.5 s and a 10 s lease: the session is
// safe again at once, and its lease ends at L+(1.5 s+10 s)(1−drift) to the
// nanosecond, neither earlier nor later.
func TestLateJeopardyReplyProvesLease(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const cadence = time.Second
	m := startFakeMasterOpts(t, fakeLease, false, fakeOpts{cadence: cadence})
	clk := newPauseClock()
	cfg := m.config(t, fakeDrift, clk)
	cfg.ReconnectMin, cfg.ReconnectMax = 100*time.Millisecond, 100*time.Millisecond
	c, err := client.Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := clk.Now()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every KeepAlive is left parked unless the test answers it.
	kas := make(chan *pending, 64)
	go func() {
		for {
			select {
			case p := <-m.kas:
				kas <- p
			case <-ctx.Done():
				return
			}
		}
	}()
	<-kas // the first KeepAlive, sent at t0

	// The lease runs out unrenewed: at L the session is in jeopardy and
	// sends KeepAlives (and looks for the master, which is the same one).
	lend := t0.Add(shortened(fakeLease))
	clk.Advance(lend.Sub(clk.Now()))
	// A pair, to prove the lease at once; both sent at L.
	j := recv(t, ctx, "a KeepAlive in jeopardy", kas)
	recv(t, ctx, "the second KeepAlive of the pair", kas)
	if st := s.State(); st != client.StateJeopardy {
		t.Fatalf("at the lease end: state %v, want jeopardy", st)
	}

	// 2 s later the client has given the pair up (at the cadence and its
	// margin), and sends another once its backoff has passed: only then
	// does j's reply come.
	clk.Advance(2 * time.Second)
	for again := false; !again; {
		select {
		case <-kas:
			again = true
		case <-ctx.Done():
			t.Fatal("no KeepAlive after the pair was given up")
		case <-time.After(5 * time.Millisecond):
			clk.Advance(10 * time.Millisecond)
		}
	}
	if st := s.State(); st != client.StateJeopardy {
		t.Fatalf("before the late reply: state %v, want jeopardy", st)
	}
	const held = 1500 * time.Millisecond
	j.reply <- &api.KeepAliveResponse{LeaseTimeout: int64(fakeLease), Held: int64(held), Epoch: m.epoch.Load(), Cadence: int64(cadence)}
	waitFor(t, ctx, "the late reply to make the session safe (it was dropped)", func() bool {
		return s.State() == client.StateSafe
	})
	end := lend.Add(shortened(held + fakeLease))
	fs := &fakeSession{m: m, clk: clk, s: s, t0: t0}
	expectLeaseEnd(t, fs, nil, end)
	t.Logf("a jeopardy KeepAlive sent at the lease end, answered %v later, proved the lease to %v after its send", 2*time.Second, end.Sub(lend))
}
