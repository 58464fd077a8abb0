package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestSessionStaysSafe: a session kept alive by its loop for three
// session leases (the default 12 s, in simulated time) never enters
// jeopardy (the probe pair proves renewals while the master parks the
// long-poll).
func TestSessionStaysSafe(t *testing.T) {
	synctest.Test(t, testSessionStaysSafe)
}

func testSessionStaysSafe(t *testing.T) {
	c := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := c.Dial(ctx, c.ClientConfig("", "alice")).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "/t/file", client.OpenOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SetContents(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(3 * cell.DefaultSessionLease)
	for done := false; !done; {
		select {
		case ev := <-s.Events():
			if ev.Kind == client.EventJeopardy || ev.Kind == client.EventExpired {
				t.Fatalf("event %v on a healthy session", ev)
			}
		case <-deadline:
			done = true
		}
	}
	b, st, err := h.GetContents(ctx)
	if err != nil || string(b) != "hello" {
		t.Fatalf("GetContents = %q, %v", b, err)
	}
	if st.ContentGeneration < 2 {
		t.Fatalf("content generation %d after a write", st.ContentGeneration)
	}
	if s.State() != client.StateSafe {
		t.Fatalf("state %v", s.State())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(s.Err(), client.ErrClosed) {
		t.Fatalf("Err after Close = %v", s.Err())
	}
	if _, err := h.Stat(ctx); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
	_ = api.LockNone
}
