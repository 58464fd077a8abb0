package client_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
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

// TestFailoverConnectionsPerClient: n clients, each holding sessions at
// the master, lose it (a frozen process) and find the new one. Each
// client's search asks one replica at a time, so the fail-over costs the
// cell about one connection per client (the one to the new master, or
// the search's own when the replica it asked was the new master), not
// one per replica per client: at most 2n in all.
func TestFailoverConnectionsPerClient(t *testing.T) {
	const n, perClient = 24, 8
	synctest.Test(t, func(t *testing.T) {
		// Some latency, so that a handshake takes longer than no
		// stagger at all, and less than the search's.
		c := celltest.Start(t, celltest.Options{Latency: 5 * time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var cls []*client.Client
		var sessions []*client.Session
		for i := range n {
			cl := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("p%d", i)))
			cls = append(cls, cl)
			sessions = append(sessions, openSessions(t, ctx, cl, perClient, 4)...)
		}
		old := c.Master()
		if old == nil {
			t.Fatal("no master")
		}
		epoch := sessions[0].Epoch()
		before := make([]client.ConnStats, n)
		for i, cl := range cls {
			before[i] = cl.ConnStats()
		}
		frozen := time.Now()
		c.Pause(old.ID())
		defer c.Resume(old.ID())
		for {
			moved := 0
			for _, s := range sessions {
				if s.Epoch() > epoch && s.State() == client.StateSafe {
					moved++
				}
			}
			if moved == len(sessions) {
				break
			}
			if time.Since(frozen) > cell.DefaultSessionLease {
				t.Fatalf("%d of %d sessions at the new master %v after the master froze", moved, len(sessions), time.Since(frozen))
			}
			time.Sleep(50 * time.Millisecond)
		}
		var dials, resumed, searchDials, searches, most uint64
		for i, cl := range cls {
			st := cl.ConnStats()
			d := st.Dials - before[i].Dials
			dials += d
			most = max(most, d)
			resumed += st.Resumed - before[i].Resumed
			searchDials += st.SearchDials - before[i].SearchDials
			searches += st.Searches - before[i].Searches
		}
		t.Logf("%d clients (%d sessions) at the new master %v after the master froze: %d connections (%d resumed; %d made by %d searches), at most %d by one client",
			n, len(sessions), time.Since(frozen), dials, resumed, searchDials, searches, most)
		// Floors: every client had to connect anew (its connection went
		// to the frozen master), and found the master by searching.
		if dials < n || searches < n {
			t.Fatalf("%d connections and %d searches by %d clients: the fail-over was not judged", dials, searches, n)
		}
		// The clients had met most replicas before (Dial looks for the
		// master among them): those connections resume their sessions.
		if resumed == 0 {
			t.Error("no connection resumed a TLS session")
		}
		if dials > 2*n || most > 4 {
			t.Errorf("%d connections by %d clients in one fail-over (at most %d by one); want at most %d (%d by one)", dials, n, most, 2*n, 4)
		}
	})
}

// TestSearchPassesOverBadReplica: the replica a search asks first (the
// one that named the master last) is partitioned from its peers, so it
// will never learn of a new master, or it is down. The search must ask
// another replica at once (partitioned: its answer says it is out of
// touch) or after one stagger step (down: its handshake is never
// answered), and find the new master.
func TestSearchPassesOverBadReplica(t *testing.T) {
	for _, down := range []bool{false, true} {
		name := "partitioned"
		if down {
			name = "down"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := celltest.Start(t, celltest.Options{})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				cl := c.Dial(ctx, c.ClientConfig("", "alice"))
				old := c.Master()
				if old == nil {
					t.Fatal("no master")
				}
				var bad uint64
				var rest []uint64
				for _, id := range c.IDs() {
					switch {
					case id == old.ID():
					case bad == 0:
						bad = id
					default:
						rest = append(rest, id)
					}
				}
				if down {
					c.Crash(bad)
				} else {
					c.Partition(append(rest, old.ID()))
				}
				// Long enough for it to know it is out of touch.
				time.Sleep(3 * time.Second)
				c.Pause(old.ID())
				defer c.Resume(old.ID())
				var m uint64
				for m == 0 || m == old.ID() {
					if mr := c.Master(); mr != nil {
						m = mr.ID()
					}
					time.Sleep(10 * time.Millisecond)
				}
				client.SetLastNamer(cl, celltest.Addr(bad))
				before := cl.ConnStats()
				start := time.Now()
				fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
				defer fcancel()
				addr, err := client.FindMaster(fctx, cl, old.ID(), celltest.Addr(old.ID()))
				took := time.Since(start)
				st := cl.ConnStats()
				t.Logf("found %s in %v with %d connections, asking replica %d (%s) first", addr, took, st.SearchDials-before.SearchDials, bad, name)
				if err != nil || addr != celltest.Addr(m) {
					t.Fatalf("search found %q (%v), want the new master %s", addr, err, celltest.Addr(m))
				}
				// Partitioned: a round trip or two; down: one stagger
				// step (at most 250 ms) and a round trip or two, not a
				// whole dial timeout.
				bound := 100 * time.Millisecond
				if down {
					bound = 300 * time.Millisecond
				}
				if took > bound {
					t.Errorf("the search took %v with replica %d %s asked first; want at most %v", took, bad, name, bound)
				}
			})
		})
	}
}
