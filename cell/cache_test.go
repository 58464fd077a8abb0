package cell_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
)

// TestCacheInvalidatedBeforeWrite: a write to a node that another session
// caches completes only after that session acknowledged the invalidation
// (Chubby §2.5); a read while the invalidation is in progress is not
// cacheable.
func TestCacheInvalidatedBeforeWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 60*time.Second)
		a := newTestClient(t, lc, "t", "alice")
		a.createSession(ctx)
		resp, err := a.open(ctx, api.OpenRequest{Path: "/t/cached", Create: true, Contents: []byte("v1"),
			Events: api.WantContentsModified, Cache: true})
		if err != nil {
			t.Fatal(err)
		}
		ha := resp.Handle
		got, err := a.getContents(ctx, ha)
		if err != nil || !got.Cacheable || string(got.Contents) != "v1" {
			t.Fatalf("first read = %+v, %v; want v1, cacheable", got, err)
		}

		b := newTestClient(t, lc, "t", "bob")
		b.createSession(ctx)
		hb := b.mustOpen(ctx, "/t/cached")
		written := b.goSetContents(ctx, hb, []byte("v2"))
		// Alice has not acknowledged anything: the write must wait.
		select {
		case err := <-written:
			t.Fatalf("the write completed (%v) before the caching session acknowledged the invalidation", err)
		case <-time.After(300 * time.Millisecond):
		}
		// A read now must not be cacheable: the write is in progress.
		if got, err := a.getContents(ctx, ha); err != nil || got.Cacheable {
			t.Fatalf("read during the invalidation = %+v, %v; want not cacheable", got, err)
		}
		// Alice's KeepAlive brings the invalidation; the next one acknowledges.
		acknowledgeInvalidation(t, ctx, a, "/t/cached", written)
		if got, err := a.getContents(ctx, ha); err != nil || string(got.Contents) != "v2" || !got.Cacheable {
			t.Fatalf("read after the write = %+v, %v; want v2, cacheable", got, err)
		}
	})
}

// TestCacheWriteAfterAbandonedInvalidation: a write that gives up waiting
// for a caching session's acknowledgement (its deadline ends first) leaves
// that session's cache unflushed, so the next write to the node must wait
// for the session too: it completes only after the session acknowledged
// (on simulated time the default lease outlasts the test, so nothing else
// may end the wait).
func TestCacheWriteAfterAbandonedInvalidation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 90*time.Second)
		a := newTestClient(t, lc, "t", "alice")
		a.createSession(ctx)
		resp, err := a.open(ctx, api.OpenRequest{Path: "/t/cached", Create: true, Contents: []byte("v1"),
			Events: api.WantContentsModified, Cache: true})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := a.getContents(ctx, resp.Handle); err != nil || !got.Cacheable || string(got.Contents) != "v1" {
			t.Fatalf("first read = %+v, %v; want v1, cacheable", got, err)
		}

		b := newTestClient(t, lc, "t", "bob")
		b.createSession(ctx)
		hb := b.mustOpen(ctx, "/t/cached")
		// Alice acknowledges nothing: Bob's first write runs out of time.
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = b.setContents(short, hb, []byte("v2"))
		cancel()
		if err == nil {
			t.Fatal("a write completed although the caching session acknowledged nothing")
		}

		written := b.goSetContents(ctx, hb, []byte("v3"))
		// Alice still caches v1 as far as the master can know: the second
		// write must wait for her too.
		select {
		case err := <-written:
			t.Fatalf("the second write completed (%v) before the caching session acknowledged the invalidation", err)
		case <-time.After(time.Second):
		}
		// Alice's KeepAlive brings the invalidations; the next acknowledges.
		acknowledgeInvalidation(t, ctx, a, "/t/cached", written)
	})
}

// acknowledgeInvalidation has the caching session a fetch its pending
// events with a KeepAlive, checks that they invalidate path, acknowledges
// them with the next KeepAlive, and waits for the write whose result
// arrives on written to complete without error.
func acknowledgeInvalidation(t *testing.T, ctx context.Context, a *testClient, path string, written <-chan error) {
	t.Helper()
	ka, err := a.keepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var saw bool
	for _, ev := range ka.Events {
		saw = saw || ev.Kind == api.EventContentsModified && ev.Path == path
	}
	if !saw {
		t.Fatalf("KeepAlive events %v lack the invalidation of %s", ka.Events, path)
	}
	go func() { _, _ = a.keepAlive(ctx) }()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the write never completed after the acknowledgement")
	}
}
