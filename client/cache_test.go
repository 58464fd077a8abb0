package client_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestCacheConsistent: a caching session reads a file, another session
// writes it, and the caching session's next read sees the write (the
// master invalidated the cache before the write completed); a read after
// one's own write sees it. It runs on celltest in simulated time.
func TestCacheConsistent(t *testing.T) {
	synctest.Test(t, testCacheConsistent)
}

func testCacheConsistent(t *testing.T) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := tc.ClientConfig("", "cacher")
	cfg.Cache = true
	a, err := tc.Dial(ctx, cfg).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tc.Dial(ctx, tc.ClientConfig("", "writer")).NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ha, err := a.Open(ctx, "/t/cached", client.OpenOptions{Create: true, Contents: []byte("v1")})
	if err != nil {
		t.Fatal(err)
	}
	hb, err := b.Open(ctx, "/t/cached", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"v1", "v1"} {
		if got, _, err := ha.GetContents(ctx); err != nil || string(got) != want {
			t.Fatalf("read %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if _, err := hb.SetContents(ctx, []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := ha.GetContents(ctx); err != nil || string(got) != "v2" {
		t.Fatalf("read after another session's write: %q, %v; want v2", got, err)
	}
	if _, err := ha.SetContents(ctx, []byte("v3")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := ha.GetContents(ctx); err != nil || string(got) != "v3" {
		t.Fatalf("read after own write: %q, %v; want v3", got, err)
	}
}
