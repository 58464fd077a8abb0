package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// TestCloseKeepsOtherHandlesEvents opens handles on one node in one
// session, two subscribed to its events and one not, closes all but one,
// and checks that the session still gets the node's events.
func TestCloseKeepsOtherHandlesEvents(t *testing.T) {
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	s := tc.session(t, ctx, "watcher")
	w := tc.session(t, ctx, "writer")
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
