package client_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestJeopardyLeavesNeighboursAlone: many sessions share one client's
// connection; one of them loses its KeepAlive replies and falls into
// jeopardy. The shared connection stays (the very same one), and none of
// the other sessions leaves StateSafe or sees an event; the troubled
// session is safe again once its replies come back.
func TestJeopardyLeavesNeighboursAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		var unsafe atomic.Int64 // neighbours' events of any kind
		var troubled atomic.Pointer[client.Session]
		var over atomic.Bool // the test is over: closing ends every session
		defer over.Store(true)
		cfg := c.ClientConfig("", "alice")
		cfg.OnEvent = func(s *client.Session, ev client.Event) {
			if s != troubled.Load() && !over.Load() {
				unsafe.Add(1)
				t.Errorf("neighbour session %d: event %v", s.ID(), ev)
			}
		}
		cl := c.Dial(ctx, cfg)
		const n = 50
		sessions := make([]*client.Session, n)
		for i := range sessions {
			s, err := cl.NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			sessions[i] = s
		}
		conn := client.CurrentConn(cl)
		if conn == nil {
			t.Fatal("no connection")
		}
		victim := sessions[0]
		troubled.Store(victim)
		loseKeepAliveReplies(t, ctx, victim)
		if st := victim.State(); st != client.StateJeopardy {
			t.Fatalf("victim state %v", st)
		}
		// A few more KeepAlive cadences with the victim in jeopardy.
		time.Sleep(5 * time.Second)
		judged := 0
		for _, s := range sessions[1:] {
			if st := s.State(); st != client.StateSafe {
				t.Errorf("neighbour session %d: %v while session %d is in jeopardy", s.ID(), st, victim.ID())
			}
			judged++
		}
		if got := client.CurrentConn(cl); got != conn {
			t.Fatalf("the shared connection was replaced (%p → %p) by one session's jeopardy", conn, got)
		}
		client.HoldKeepAlives(victim, false)
		for victim.State() != client.StateSafe {
			select {
			case <-victim.Done():
				t.Fatalf("victim ended: %v", victim.Err())
			case <-ctx.Done():
				t.Fatal("victim never safe again")
			case <-time.After(100 * time.Millisecond):
			}
		}
		if got := client.CurrentConn(cl); got != conn {
			t.Fatal("the shared connection was replaced while the victim recovered")
		}
		if judged != n-1 || unsafe.Load() != 0 {
			t.Fatalf("judged %d neighbours, %d events", judged, unsafe.Load())
		}
	})
}
