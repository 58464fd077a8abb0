package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestFailoverKeepsThousandsOfSessions: 5,000 sessions on one Client, all
// driven by the client's one KeepAlive loop, when their master freezes (a
// paused process, or a dead machine: nothing tells the client, whose
// KeepAlives just go unanswered, so only the sessions' timers notice). The
// cell elects another master well within the session lease, so no session
// may even fall into jeopardy: every one reaches the new master (learns its
// epoch) while its lease still runs, and is still safe a lease later, with
// the new master holding all of them.
func TestFailoverKeepsThousandsOfSessions(t *testing.T) {
	const n = 5000
	const moveBound = cell.DefaultSessionLease / 2
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var jeopardy, expired atomic.Int64
		var over atomic.Bool // the client's close at the end ends every session
		defer over.Store(true)
		cfg := c.ClientConfig("", "alice")
		cfg.OnEvent = func(s *client.Session, ev client.Event) {
			if over.Load() {
				return
			}
			switch ev.Kind {
			case client.EventJeopardy:
				if jeopardy.Add(1) <= 5 {
					t.Errorf("session %d fell into jeopardy", s.ID())
				}
			case client.EventExpired:
				if expired.Add(1) <= 5 {
					t.Errorf("session %d ended: %v", s.ID(), s.Err())
				}
			}
		}
		cl := c.Dial(ctx, cfg)
		sessions := openSessions(t, ctx, cl, n, 32)
		time.Sleep(cell.DefaultSessionLease)
		old := c.Master()
		if old == nil {
			t.Fatal("no master")
		}
		epoch := sessions[0].Epoch()
		frozen := time.Now()
		c.Pause(old.ID())
		defer c.Resume(old.ID())
		// Until every session learned the new master's epoch.
		for {
			moved := 0
			for _, s := range sessions {
				if s.Epoch() > epoch {
					moved++
				}
			}
			if moved == n {
				break
			}
			// Each session's timer notices the silence a cadence (and a
			// margin) after its KeepAlive was parked, and the search finds
			// the new master soon after its election: long before the
			// lease would need a probe.
			if d := time.Since(frozen); d > moveBound {
				t.Fatalf("%d of %d sessions reached the new master %v after the master froze", moved, n, d)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%d of %d sessions reached the new master", moved, n)
			case <-time.After(100 * time.Millisecond):
			}
		}
		t.Logf("every session reached the new master %v after the master froze", time.Since(frozen))
		time.Sleep(cell.DefaultSessionLease)
		m := c.Master()
		if m == nil || m.ID() == old.ID() {
			t.Fatal("no new master")
		}
		judged := 0
		for _, s := range sessions {
			if st := s.State(); st != client.StateSafe {
				t.Errorf("session %d is %v a lease after the fail-over", s.ID(), st)
			}
			judged++
		}
		if got := m.Status().Sessions; got != n {
			t.Errorf("the new master holds %d sessions, want %d", got, n)
		}
		if jeopardy.Load() != 0 || expired.Load() != 0 {
			t.Fatalf("%d sessions fell into jeopardy, %d ended", jeopardy.Load(), expired.Load())
		}
		// Floor: every session was judged, and every one moved.
		if judged != n {
			t.Fatalf("judged %d sessions, want %d", judged, n)
		}
		t.Logf("judged %d sessions: all moved from master %d to master %d and stayed safe", judged, old.ID(), m.ID())
	})
}
