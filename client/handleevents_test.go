package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/watchdog"
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

// TestOpenWaitingForPathGivesUp: Opens and Closes of subscribed handles on
// one path take turns in the session; one waiting for its turn while
// another's call is stuck (every replica paused) gives up when its context
// ends, with that context's error, and waits in a way testing/synctest
// counts as durable, so the simulated clock goes on. A waiter parked on a
// sync.Mutex would freeze the bubble: a real-time watchdog outside it ends
// the process with a message naming this test if the simulated minute
// below takes more than two minutes of real time.
func TestOpenWaitingForPathGivesUp(t *testing.T) {
	defer watchdog.Start(t.Name(), 2*time.Minute, "an Open waits for its path's turn non-durably")()
	synctest.Test(t, func(t *testing.T) {
		tc := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, err := tc.Dial(ctx, tc.ClientConfig("", "watcher")).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		opts := client.OpenOptions{Create: true, Events: api.WantContentsModified}
		for _, id := range tc.IDs() {
			tc.Pause(id)
		}
		firstCtx, firstCancel := context.WithTimeout(ctx, 20*time.Second)
		defer firstCancel()
		first := make(chan error, 1)
		go func() {
			_, err := s.Open(firstCtx, "/t/turns", opts)
			first <- err
		}()
		synctest.Wait() // the first Open holds the path's turn, its call stuck
		start := time.Now()
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Second)
		defer wcancel()
		_, err = s.Open(wctx, "/t/turns", opts)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second Open while the first holds the path: %v, want its context's DeadlineExceeded", err)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Fatalf("second Open gave up after %v, want exactly its 2 s context", waited)
		}
		select {
		case err := <-first:
			t.Fatalf("first Open ended (%v) before its context or the master came back", err)
		default:
		}
		firstCancel()
		if err := <-first; err == nil {
			t.Fatal("first Open succeeded with every replica paused")
		}
		for _, id := range tc.IDs() {
			tc.Resume(id)
		}
		h, err := s.Open(ctx, "/t/turns", opts)
		if err != nil {
			t.Fatalf("Open once the master is back: %v", err)
		}
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
