package transport

import (
	"context"
	"crypto/tls"
	"flag"
	"testing"
	"testing/synctest"
)

var (
	costHandshakes = flag.Int("transport.handshakes", 10, "client handshakes TestHandshakeCost makes")
	costResumed    = flag.Bool("transport.resumed", true, "TestHandshakeCost resumes sessions (false: full handshakes only)")
)

// TestHandshakeCost makes -transport.handshakes client connections to one
// replica, one at a time, each with one call, resuming the session of the
// first (-transport.resumed) or with full handshakes only, over memnet on
// synctest's clock. It exists to count instructions per handshake under
// callgrind: two runs at N1 < N2 handshakes differ by (N2-N1) handshakes'
// work (both ends) and nothing else. It checks that each handshake was
// of the kind asked for.
func TestHandshakeCost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 1)
		e := s.start(1, func(c *Config) { c.ClientHandler = oneShotHandler })
		defer s.closeAll()
		cert := s.clientCert("t", "alice")
		cache := tls.NewLRUClientSessionCache(4)
		dial := func() {
			c := s.dialClient("10.1.0.1", func(d *DialConfig) {
				d.Certificate = cert
				if *costResumed {
					d.SessionCache = cache
				}
			})
			if _, err := c.Call(context.Background(), 7, testMsg{Seq: 1}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait() // the ticket arrives
			c.Close()
			synctest.Wait()
		}
		dial()
		n := *costHandshakes
		for range n {
			dial()
		}
		st := e.Stats()
		full, resumed := uint64(n+1), uint64(0)
		if *costResumed {
			full, resumed = 1, uint64(n)
		}
		if st.ClientFullHandshakes != full || st.ClientResumed != resumed {
			t.Fatalf("%d full and %d resumed handshakes, want %d and %d", st.ClientFullHandshakes, st.ClientResumed, full, resumed)
		}
		t.Logf("%d handshakes after the first: %d full, %d resumed", n, st.ClientFullHandshakes, st.ClientResumed)
	})
}
