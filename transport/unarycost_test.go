package transport

import (
	"context"
	"flag"
	"testing"
	"testing/synctest"
	"time"
)

var unaryCalls = flag.Int("transport.unary", 20, "unary calls TestUnaryCost makes")

// TestUnaryCost makes -transport.unary unary calls, one at a time, as the
// client library makes them (OpenStream, WriteFrame, CloseWrite,
// ReadFrame, Close, under a context with a deadline) against a handler
// that answers one frame, over memnet on synctest's clock, and logs the
// allocations per call. It exists to count instructions per call under
// callgrind: on the fake clock no QUIC timer runs in proportion to the
// (50-100 times slowed) wall time, so two runs at N1 < N2 calls differ by
// (N2-N1) calls' work and nothing else. Each reply is checked.
func TestUnaryCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		s.start(1, func(c *Config) { c.ClientHandler = oneShotHandler })
		defer s.closeAll()
		c := s.dialClient("10.1.0.1", nil)
		defer c.Close()
		req := testMsg{Seq: 1, Data: []byte("a lock request of about sixty bytes, as an Acquire is")}
		ok := 0
		call := func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			st, err := c.OpenStream(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := st.WriteFrame(ctx, 7, req); err != nil {
				t.Fatal(err)
			}
			_ = st.CloseWrite()
			f, err := st.ReadFrame(ctx)
			var got testMsg
			if err != nil || f.Tag != 7 || f.Decode(&got) != nil || got.Seq != req.Seq {
				t.Fatalf("call %d: tag %d %+v %v", ok, f.Tag, got, err)
			}
			ok++
		}
		call()
		n := *unaryCalls
		allocs := testing.AllocsPerRun(n, call)
		if ok != n+2 { // AllocsPerRun warms up with one call
			t.Fatalf("%d calls answered, want %d", ok, n+2)
		}
		t.Logf("%d unary calls: %.1f allocations per call (both ends)", n, allocs)
	})
}
