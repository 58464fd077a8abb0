package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// TestCacheConsistent: a caching session reads a file, another session
// writes it, and the caching session's next read sees the write (the
// master invalidated the cache before the write completed); a read after
// one's own write sees it.
func TestCacheConsistent(t *testing.T) {
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 30*time.Second)
	cfg := tc.config(t, "cacher")
	cfg.Cache = true
	c := tc.dial(t, ctx, cfg)
	a, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := tc.session(t, ctx, "writer")
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
