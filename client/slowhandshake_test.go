package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// slowHandshakes wraps a client socket: the first packet of every
// handshake (a QUIC Initial) sent to the address slow names is delayed by
// d, so that a connection to it is set up d late, as with a replica whose
// CPU is taken by a storm of handshakes and KeepAlives; everything else
// goes at once. It counts the delayed packets.
type slowHandshakes struct {
	net.PacketConn
	d       time.Duration
	slow    func() string
	delayed *atomic.Int64
}

// isInitial reports whether p starts with a QUIC version 1 Initial
// packet: a long header (first bit set) of type 0.
func isInitial(p []byte) bool { return len(p) > 0 && p[0]&0x80 != 0 && p[0]&0x30 == 0 }

func (s *slowHandshakes) WriteTo(p []byte, addr net.Addr) (int, error) {
	if isInitial(p) && addr.String() == s.slow() {
		s.delayed.Add(1)
		b := append([]byte(nil), p...)
		time.AfterFunc(s.d, func() { _, _ = s.PacketConn.WriteTo(b, addr) })
		return len(p), nil
	}
	return s.PacketConn.WriteTo(p, addr)
}

// TestFailoverThroughSlowHandshakes: the new master answers each new
// connection's handshake only after 2 s (longer than a KeepAlive's
// cadence and silence margin), while the other replicas answer at once,
// as when the new master's CPU is taken by the fail-over's storm. Every
// session of every client must still reach the new master well within
// the lease the new master gave it. Two things used to keep whole clients
// from ever getting there: the KeepAlives waiting for the dial to the
// master looked like a silent master, so every 1.25 s a new search ran,
// found that same master, and cancelled the dial in progress to it; and a
// dial to the master staggered to the next replica after 250 ms, whose
// quicker handshake won, and whose NotMaster sent the client round again.
func TestFailoverThroughSlowHandshakes(t *testing.T) {
	const clients, perClient = 4, 200
	const handshake = 2 * time.Second
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var old atomic.Uint64 // the master that froze (0 before)
		// From its election on, the new master's handshakes are slow.
		slow := func() string {
			o := old.Load()
			if o == 0 {
				return ""
			}
			for _, r := range c.Running() {
				if st := r.Status(); st.IsLeader && st.ID != o {
					return celltest.Addr(st.ID)
				}
			}
			return ""
		}
		var delayed, expired atomic.Int64
		var over atomic.Bool // the clients' close at the end ends every session
		defer over.Store(true)
		var sessions []*client.Session
		var cls []*client.Client
		for i := range clients {
			cfg := c.ClientConfig("", "p"+string(rune('a'+i)))
			cfg.PacketConn = func() (net.PacketConn, error) {
				pc, err := c.PacketConn()
				if err != nil {
					return nil, err
				}
				return &slowHandshakes{PacketConn: pc, d: handshake, slow: slow, delayed: &delayed}, nil
			}
			cfg.OnEvent = func(s *client.Session, ev client.Event) {
				if ev.Kind == client.EventExpired && !over.Load() && expired.Add(1) <= 5 {
					t.Errorf("session %d ended: %v", s.ID(), s.Err())
				}
			}
			cl := c.Dial(ctx, cfg)
			cls = append(cls, cl)
			sessions = append(sessions, openSessions(t, ctx, cl, perClient, 16)...)
		}
		n := len(sessions)
		time.Sleep(cell.DefaultSessionLease)
		m0 := c.Master()
		if m0 == nil {
			t.Fatal("no master")
		}
		old.Store(m0.ID())
		epoch := sessions[0].Epoch()
		var searches0 uint64
		for _, cl := range cls {
			n, _, _ := client.Lookups(cl)
			searches0 += n
		}
		frozen := time.Now()
		c.Pause(m0.ID())
		defer c.Resume(m0.ID())
		for {
			moved := 0
			for _, s := range sessions {
				if s.Epoch() > epoch && s.State() == client.StateSafe {
					moved++
				}
			}
			if moved == n {
				break
			}
			// The new master gave every session a lease from its election:
			// a session not there by then is lost.
			if d := time.Since(frozen); d > cell.DefaultSessionLease {
				t.Fatalf("%d of %d sessions reached the new master %v after the master froze (%d handshake packets delayed)",
					moved, n, d, delayed.Load())
			}
			time.Sleep(100 * time.Millisecond)
		}
		var searches uint64
		for _, cl := range cls {
			n, _, _ := client.Lookups(cl)
			searches += n
		}
		t.Logf("every session reached the new master %v after the master froze (%d handshake packets delayed by %v; %d searches for the master by %d clients)",
			time.Since(frozen), delayed.Load(), handshake, searches-searches0, clients)
		// One search per client finds the new master; KeepAlives that
		// wait for the slow dial to it must not start more (each costs
		// every replica, the busy new master too, a handshake).
		if searches-searches0 > clients*3/2 {
			t.Errorf("%d searches for the master by %d clients: KeepAlives waiting for a dial took it for a silent master",
				searches-searches0, clients)
		}
		time.Sleep(cell.DefaultSessionLease)
		judged := 0
		for _, s := range sessions {
			if st := s.State(); st != client.StateSafe {
				t.Errorf("session %d is %v a lease after the fail-over", s.ID(), st)
			}
			judged++
		}
		m := c.Master()
		if m == nil || m.ID() == m0.ID() {
			t.Fatal("no new master")
		}
		if got := m.Status().Sessions; got != n {
			t.Errorf("the new master holds %d sessions, want %d", got, n)
		}
		if expired.Load() != 0 {
			t.Fatalf("%d sessions ended", expired.Load())
		}
		// Floors: every session was judged, and the new master's
		// handshakes were slow indeed.
		if judged != n || delayed.Load() == 0 {
			t.Fatalf("judged %d of %d sessions; %d handshake packets delayed", judged, n, delayed.Load())
		}
	})
}

// TestJeopardyThroughSlowHandshakes: sessions in jeopardy must reach a
// master whose handshakes take longer than a KeepAlive in jeopardy waits
// for its answer (a cadence and its margin, after which it is given up and
// sent again). The master's clients are cut off until their sessions fall
// into jeopardy (the client's lease runs short of the master's by the
// drift bound, set high here so that the master still holds the sessions
// for a while); then the cut heals, but every handshake with the master
// takes 1.6 s. A dial bound to the KeepAlive that started it was cancelled
// with it after 1.25 s, every time, and the sessions expired although the
// master was there all along.
func TestJeopardyThroughSlowHandshakes(t *testing.T) {
	const n = 200
	const handshake = 1600 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var slowAddr atomic.Value
		slowAddr.Store("")
		slow := func() string { return slowAddr.Load().(string) }
		var delayed, jeopardy, expired atomic.Int64
		var over atomic.Bool
		defer over.Store(true)
		cfg := c.ClientConfig("", "alice")
		cfg.Drift = 0.4
		cfg.PacketConn = func() (net.PacketConn, error) {
			pc, err := c.PacketConn()
			if err != nil {
				return nil, err
			}
			return &slowHandshakes{PacketConn: pc, d: handshake, slow: slow, delayed: &delayed}, nil
		}
		cfg.OnEvent = func(s *client.Session, ev client.Event) {
			switch {
			case over.Load():
			case ev.Kind == client.EventJeopardy:
				jeopardy.Add(1)
			case ev.Kind == client.EventExpired:
				if expired.Add(1) <= 5 {
					t.Errorf("session %d ended: %v", s.ID(), s.Err())
				}
			}
		}
		cl := c.Dial(ctx, cfg)
		sessions := openSessions(t, ctx, cl, n, 16)
		time.Sleep(cell.DefaultSessionLease)
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		slowAddr.Store(celltest.Addr(m.ID()))
		cut := time.Now()
		c.CutClients(m.ID(), true)
		for jeopardy.Load() < n {
			if time.Since(cut) > cell.DefaultSessionLease {
				t.Fatalf("%d of %d sessions in jeopardy %v after the cut", jeopardy.Load(), n, time.Since(cut))
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.CutClients(m.ID(), false)
		healed := time.Now()
		for {
			safe := 0
			for _, s := range sessions {
				if s.State() == client.StateSafe {
					safe++
				}
			}
			if safe == n {
				break
			}
			if expired.Load() > 0 || time.Since(healed) > cell.DefaultSessionLease {
				t.Fatalf("%d of %d sessions safe again %v after the cut healed (%d handshake packets delayed, %d sessions ended)",
					safe, n, time.Since(healed), delayed.Load(), expired.Load())
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("every session in jeopardy %v after the cut; all safe again %v after it healed (%d handshake packets delayed by %v)",
			healed.Sub(cut), time.Since(healed), delayed.Load(), handshake)
		if got := c.Master(); got == nil || got.ID() != m.ID() || got.Status().Sessions != n {
			t.Fatalf("the master changed or lost sessions")
		}
		// Floors: every session was in jeopardy and came back, through
		// slow handshakes.
		if jeopardy.Load() != n || delayed.Load() == 0 {
			t.Fatalf("%d sessions in jeopardy, want %d; %d handshake packets delayed", jeopardy.Load(), n, delayed.Load())
		}
	})
}
