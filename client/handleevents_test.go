package client_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestCloseKeepsOtherHandlesEvents opens handles on one node in one
// session, two subscribed to its events and one not, closes all but one,
// and checks that the session still gets the node's events. It runs on
// celltest in simulated time.
func TestCloseKeepsOtherHandlesEvents(t *testing.T) {
	synctest.Test(t, testCloseKeepsOtherHandlesEvents)
}

func testCloseKeepsOtherHandlesEvents(t *testing.T) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := tc.Dial(ctx, tc.ClientConfig("", "watcher")).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w, err := tc.Dial(ctx, tc.ClientConfig("", "writer")).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	opts := client.OpenOptions{Create: true, Events: api.WantContentsModified}
	h1, err := s.Open(ctx, "/t/ev", opts)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := s.Open(ctx, "/t/ev", opts)
	if err != nil {
		t.Fatal(err)
	}
	wh, err := w.Open(ctx, "/t/ev", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	modified := func(want string) {
		t.Helper()
		if _, err := wh.SetContents(ctx, []byte(want)); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		for {
			ev := waitEvent(t, wctx, s, client.EventNode)
			if ev.Node.Kind == api.EventContentsModified && ev.Node.Path == "/t/ev" {
				return
			}
		}
	}
	h0, err := s.Open(ctx, "/t/ev", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	modified("one")
	// A handle that subscribed to nothing, closed.
	if err := h0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	modified("zero")
	if err := h1.Close(ctx); err != nil {
		t.Fatal(err)
	}
	modified("two")
	if err := h2.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
