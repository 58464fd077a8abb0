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
		t.Logf("every session reached the new master %v after the master froze (%d handshake packets delayed by %v)",
			time.Since(frozen), delayed.Load(), handshake)
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
