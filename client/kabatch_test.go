package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// TestKeepAliveBatchFallback: a client whose KeepAlive batches a replica
// answers with "unknown method" (one that predates them) sends them again
// as one frame each on a stream of their own, without a failure its
// sessions see; the lease is still counted from the KeepAlive's send.
// Against a replica that knows batches, the KeepAlives go as batches.
func TestKeepAliveBatchFallback(t *testing.T) {
	for _, old := range []bool{false, true} {
		name := "batch"
		if old {
			name = "old replica"
		}
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			m := startFakeMaster(t, fakeLease, false)
			m.noBatch.Store(old)
			clk := newPauseClock()
			c, err := client.Dial(ctx, m.config(t, fakeDrift, clk))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			t0 := clk.Now()
			s, err := c.NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fs := &fakeSession{m: m, clk: clk, s: s, t0: t0}
			l, err := client.NewMutex(s, "/t/lease").Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ka := m.nextKA(t, ctx) // sent at t0
			clk.Jump(time.Second)
			const held = 2 * time.Second
			m.answer(t, ctx, ka, held, fakeLease)
			expectLeaseEnd(t, fs, l, t0.Add(shortened(held+fakeLease)))
			batches, refused := m.batches.Load(), m.refused.Load()
			if old && (batches != 0 || refused == 0) {
				t.Fatalf("old replica: %d batches served, %d refused; want 0 and at least 1", batches, refused)
			}
			if !old && (batches < 2 || refused != 0) {
				t.Fatalf("new replica: %d batches served, %d refused; want at least 2 and 0", batches, refused)
			}
		})
	}
}
