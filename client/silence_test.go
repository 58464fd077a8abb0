package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/certs"
)

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
	ca, err := certs.NewCA("fake", certs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 1, cadence: cadence})
	b := startFakeMasterOpts(t, fakeLease, false, fakeOpts{ca: ca, id: 2, cadence: cadence})
	b.names.Store(1) // a follower that knows A as master
	clk := newPauseClock()
	cfg := a.config(t, fakeDrift, clk)
	cfg.Addrs = []string{a.addr, b.addr}
	cfg.IdleTimeout = time.Minute
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
	mu := client.NewMutex(s, "/t/silent")
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.nextKA(t, ctx) // parked at A for good
	// A dies; B takes over as master of a new epoch.
	a.dead.Store(true)
	b.epoch.Store(2)
	b.names.Store(2)
	// Time passes: the cadence and the margin, then in small steps (the
	// loop may not have armed its timer yet), never near the lease's end.
	silence := cadence + client.SilenceMargin(cadence)
	clk.Advance(silence)
	var ka *pending
	for step := 0; ka == nil; step++ {
		select {
		case ka = <-b.kas:
		case <-time.After(50 * time.Millisecond):
			if clk.Now().Sub(t0) > shortened(fakeLease)/2 {
				t.Fatalf("no KeepAlive reached the new master within %v of a silence of %v (the client never looked for it)",
					clk.Now().Sub(t0), silence)
			}
			clk.Advance(10 * time.Millisecond)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if st := s.State(); st != client.StateSafe || l.Err() != nil {
		t.Fatalf("after moving to the new master: state %v, lock %v", st, l.Err())
	}
	b.answer(t, ctx, ka, cadence, fakeLease)
	if s.Epoch() != 2 || s.State() != client.StateSafe || l.Err() != nil || mu.Held() != l {
		t.Fatalf("after the new master's reply: epoch %d, state %v, lock %v", s.Epoch(), s.State(), l.Err())
	}
}
