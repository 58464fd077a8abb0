package client_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// openSessions opens n sessions through cl, at most par at once.
func openSessions(t *testing.T, ctx context.Context, cl *client.Client, n, par int) []*client.Session {
	t.Helper()
	out := make([]*client.Session, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for range par {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				s, err := cl.NewSession(ctx)
				if err != nil {
					errs <- fmt.Errorf("session %d: %w", i, err)
					return
				}
				out[i] = s
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

// TestThousandsOfSessionsOneConnection: 3,000 sessions share one client's
// connection to a master that allows only 32 concurrent streams on it, so
// they cannot each park a KeepAlive stream: their KeepAlives share the
// connection's KeepAlive stream. Held for three session leases, every
// session stays safe, the master holds all of them, the connection is
// the one they started on, and no session sees an event. Then one
// session loses its KeepAlive replies and falls into jeopardy: the other
// 2,999 stay safe on the same connection, and it recovers.
func TestThousandsOfSessionsOneConnection(t *testing.T) {
	const n = 3000
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Tune: func(cfg *cell.Config) { cfg.MaxStreamsPerConn = 32 }})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var over atomic.Bool
		defer over.Store(true)
		var victim atomic.Pointer[client.Session]
		var events atomic.Int64
		cfg := c.ClientConfig("", "alice")
		cfg.OnEvent = func(s *client.Session, ev client.Event) {
			if s != victim.Load() && !over.Load() {
				if events.Add(1) <= 5 {
					t.Errorf("session %d: event %v", s.ID(), ev)
				}
			}
		}
		cl := c.Dial(ctx, cfg)
		sessions := openSessions(t, ctx, cl, n, 24)
		conn := client.CurrentConn(cl)
		check := func(when string, skip *client.Session) {
			t.Helper()
			safe := 0
			for _, s := range sessions {
				if s == skip {
					continue
				}
				if st := s.State(); st == client.StateSafe {
					safe++
				} else if safe+n/100 < n { // report a few
					t.Errorf("%s: session %d is %v", when, s.ID(), st)
				}
			}
			want := n
			if skip != nil {
				want--
			}
			if safe != want {
				t.Fatalf("%s: %d of %d sessions safe", when, safe, want)
			}
			if got := client.CurrentConn(cl); got != conn {
				t.Fatalf("%s: the shared connection was replaced", when)
			}
			t.Logf("%s: judged %d sessions, all safe on one connection", when, safe)
		}
		time.Sleep(3 * cell.DefaultSessionLease)
		check("after three leases", nil)
		if got := c.Master().Status().Sessions; got != n {
			t.Fatalf("the master holds %d sessions, want %d", got, n)
		}

		v := sessions[n/2]
		victim.Store(v)
		loseKeepAliveReplies(t, ctx, v)
		time.Sleep(cell.DefaultSessionLease)
		if st := v.State(); st != client.StateJeopardy {
			t.Fatalf("victim %v, want jeopardy", st)
		}
		check("one session in jeopardy", v)
		client.HoldKeepAlives(v, false)
		for v.State() != client.StateSafe && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
		}
		check("the victim recovered", nil)
		if events.Load() != 0 {
			t.Fatalf("%d events on the other sessions", events.Load())
		}
	})
}

// TestHundredsOfConnectionsOneAddress: 300 client processes behind one
// address (one IP, a port each), each with its own connection and
// session, all fit under the default per-address limit and stay safe
// for two leases.
func TestHundredsOfConnectionsOneAddress(t *testing.T) {
	const n = 300
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cfg := c.ClientConfig("", "alice")
		cfg.PacketConn = c.PacketConnFrom("10.2.0.1")
		sessions := make([]*client.Session, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				cl, err := c.TryDial(ctx, cfg)
				if err != nil {
					errs <- fmt.Errorf("client %d: %w", i, err)
					return
				}
				if sessions[i], err = cl.NewSession(ctx); err != nil {
					errs <- fmt.Errorf("client %d: session: %w", i, err)
				}
			})
			if i%10 == 9 {
				wg.Wait() // ten processes start at a time
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		time.Sleep(2 * cell.DefaultSessionLease)
		safe := countSafe(sessions)
		if safe != n {
			t.Fatalf("%d of %d sessions safe", safe, n)
		}
		if got := c.Master().Status().Sessions; got != n {
			t.Fatalf("the master holds %d sessions, want %d", got, n)
		}
		t.Logf("judged %d sessions on %d connections from one address: all safe", safe, n)
	})
}

// TestSessionsBeyondStreamLimit: 64 sessions on one connection to a master
// that allows 8 concurrent streams on it stay safe for two leases: their
// KeepAlives share one stream instead of queueing for one each.
func TestSessionsBeyondStreamLimit(t *testing.T) {
	const n = 64
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Tune: func(cfg *cell.Config) { cfg.MaxStreamsPerConn = 8 }})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		sessions := openSessions(t, ctx, cl, n, 4)
		time.Sleep(2 * cell.DefaultSessionLease)
		safe := countSafe(sessions)
		if safe != n {
			t.Fatalf("%d of %d sessions safe on a connection allowing 8 streams", safe, n)
		}
	})
}

// loseKeepAliveReplies makes s lose every KeepAlive reply from now on and
// waits until it reports jeopardy.
func loseKeepAliveReplies(t *testing.T, ctx context.Context, s *client.Session) {
	t.Helper()
	client.HoldKeepAlives(s, true)
	jeopardy := make(chan struct{})
	go func() {
		for ev := range s.Events() {
			if ev.Kind == client.EventJeopardy {
				close(jeopardy)
				return
			}
		}
	}()
	select {
	case <-jeopardy:
	case <-ctx.Done():
		t.Fatal("the session whose replies are lost never fell into jeopardy")
	}
}

// countSafe counts the sessions whose state is safe.
func countSafe(sessions []*client.Session) int {
	safe := 0
	for _, s := range sessions {
		if s.State() == client.StateSafe {
			safe++
		}
	}
	return safe
}
