package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestOneMasterSearchPerClient: 300 sessions share one client's
// connection when their master freezes (a paused process: its address
// swallows every packet). Every session's KeepAlive goes unanswered, and
// each looks for the master; the client runs one search for all of them,
// so it dials a handful of connections per replica, not one per session
// per replica (a search per session made 1,500 handshakes at once). Every
// session is safe again at the new master, on one new connection.
func TestOneMasterSearchPerClient(t *testing.T) {
	const n = 300
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var dials atomic.Int64
		cfg := c.ClientConfig("", "alice")
		cfg.PacketConn = func() (net.PacketConn, error) {
			dials.Add(1)
			return c.PacketConn()
		}
		cl := c.Dial(ctx, cfg)
		sessions := openSessions(t, ctx, cl, n, 24)
		old := c.Master()
		conn := client.CurrentConn(cl)
		if old == nil || conn == nil {
			t.Fatal("no master or no connection")
		}
		before, searches := dials.Load(), lookupsOf(cl)
		c.Pause(old.ID())
		defer c.Resume(old.ID())
		// Until every session is safe at the new master.
		for {
			safe := 0
			for _, s := range sessions {
				if s.State() == client.StateSafe && s.Err() == nil {
					safe++
				}
			}
			cc := client.CurrentConn(cl)
			if safe == n && cc != nil && cc != conn && cc.ReplicaID() != old.ID() {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%d of %d sessions safe at a new master after the old one froze", safe, n)
			case <-time.After(100 * time.Millisecond):
			}
		}
		d, s := dials.Load()-before, lookupsOf(cl)-searches
		t.Logf("%d sessions moved to the new master with %d dials in %d searches", n, d, s)
		// Floor: the sessions did look for the master (they dialed), so
		// the bound below judged something.
		if d == 0 {
			t.Fatal("no dial while the master was frozen: nothing looked for it")
		}
		if max := int64(20 * len(c.IDs())); d > max {
			t.Errorf("%d dials to find the new master for %d sessions of one client; want at most %d", d, n, max)
		}
		if s == 0 {
			t.Error("the dials were not made by the client's shared search")
		}
		for _, s := range sessions {
			if err := s.Err(); err != nil {
				t.Errorf("session %d: %v", s.ID(), err)
			}
		}
	})
}

// lookupsOf returns how many searches for the master cl has started.
func lookupsOf(cl *client.Client) uint64 {
	n, _, _ := client.Lookups(cl)
	return n
}
