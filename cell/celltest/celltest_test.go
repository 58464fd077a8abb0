package celltest_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestCrashAllRestartKeepsAckedWrites: every replica crashes after a write
// was acknowledged; restarted on their data directories, the cell serves it.
func TestCrashAllRestartKeepsAckedWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := c.Dial(ctx, c.ClientConfig("", "alice")).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Open(ctx, "/t/x", client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := h.SetContents(ctx, []byte("acked")); err != nil {
			t.Fatal(err)
		}
		for _, id := range c.IDs() {
			c.Crash(id)
		}
		for _, id := range c.IDs() {
			c.Restart(id)
		}
		s2, err := c.Dial(ctx, c.ClientConfig("", "bob")).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := s2.Open(ctx, "/t/x", client.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := h2.GetContents(ctx)
		if err != nil || string(got) != "acked" {
			t.Fatalf("after restarting every replica: %q, %v; want \"acked\"", got, err)
		}
	})
}

// TestPausedMasterStopsServing: a master paused for three master leases
// stops serving when its lease runs out although its loop cannot notice,
// another takes over, and at no sampled instant do two serve — neither
// during the pause nor after the old master resumes.
func TestPausedMasterStopsServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		old, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.Pause(old.ID())
		var sawOther bool
		check := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
				ms := c.Masters()
				if len(ms) > 1 {
					t.Fatalf("replicas %d and %d serve at once", ms[0].ID(), ms[1].ID())
				}
				sawOther = sawOther || (len(ms) == 1 && ms[0] != old)
			}
		}
		check(3 * time.Second)
		c.Resume(old.ID())
		check(2 * time.Second)
		if !sawOther {
			t.Fatal("no other replica took over during the pause")
		}
		if err := c.WaitConverged(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCachedReadsFollowWrites: a session that caches a file reads every
// write another session made to it once that write is acknowledged: the
// master invalidates the cache, through the caching session's KeepAlive,
// before the write completes. Under synctest this also proves the client's
// KeepAlive loop runs on a clock that reads below zero (a bubble's).
func TestCachedReadsFollowWrites(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg := c.ClientConfig("", "reader")
		cfg.Cache = true
		reader, err := c.Dial(ctx, cfg).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		writer, err := c.Dial(ctx, c.ClientConfig("", "writer")).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hr, err := reader.Open(ctx, "/t/f", client.OpenOptions{Create: true, Contents: []byte("0")})
		if err != nil {
			t.Fatal(err)
		}
		hw, err := writer.Open(ctx, "/t/f", client.OpenOptions{})
		if err != nil {
			t.Fatal(err)
		}
		const writes = 20
		for i := 1; i <= writes; i++ {
			if _, _, err := hr.GetContents(ctx); err != nil { // (re)fills the cache
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := hw.SetContents(wctx, []byte(strconv.Itoa(i)))
			wcancel()
			if err != nil {
				t.Fatalf("write %d: %v", i, err)
			}
			got, _, err := hr.GetContents(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != strconv.Itoa(i) {
				t.Fatalf("cached read after acknowledged write %d: %q", i, got)
			}
			time.Sleep(time.Duration(i%4) * 200 * time.Millisecond)
		}
	})
}
