package cell_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
)

// TestWriteWaitsForFailoverBarrier: a new master does not know which
// sessions cache what (the old master kept that in memory), so a write that
// would invalidate caches must wait until every session that lived through
// the fail-over has acknowledged its fail-over event (on which a client
// flushes its cache) or lost its session (Chubby §2.9). Alice caches a file
// and then falls silent across a fail-over; Bob, a session of the new
// master, writes the file. The write may complete only once Alice can no
// longer trust her cache: at that moment her session must be over.
func TestWriteWaitsForFailoverBarrier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Default leases: on simulated time Alice's session outlives the
		// election (the new master grants it a full lease from its
		// take-over) however loaded the machine is; Bob's write waits
		// about one session lease.
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 120*time.Second)
		a := newTestClient(t, lc, "t", "alice")
		a.createSession(ctx)
		resp, err := a.open(ctx, api.OpenRequest{Path: "/t/cached", Create: true, Contents: []byte("v1"), Cache: true})
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.getContents(ctx, resp.Handle)
		if err != nil || !got.Cacheable || string(got.Contents) != "v1" {
			t.Fatalf("Alice's read = %+v, %v; want v1, cacheable", got, err)
		}
		// Alice stays alive until the fail-over, then sends nothing more.
		kaCtx, stopKA := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); a.keepAliveLoop(kaCtx, make(chan api.Event, 16)) }()
		time.Sleep(200 * time.Millisecond) // one KeepAlive round at least
		old := lc.Master()
		stopKA()
		wg.Wait()
		lc.Crash(old.ID())
		nm, err := lc.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st := nm.Status(); st.Sessions < 1 {
			t.Fatalf("the new master has %d sessions; Alice's must have lived through the fail-over", st.Sessions)
		}

		b := newTestClient(t, lc, "t", "bob")
		b.createSession(ctx)
		// Bob's write waits until Alice's session is over, about a lease: Bob
		// keeps his own session alive meanwhile (on a connection of his own),
		// or it could run out before his write completes.
		bka := newTestClient(t, lc, "t", "bob")
		bka.sess, bka.epoch = b.sess, b.epoch
		bkaCtx, stopBKA := context.WithCancel(ctx)
		wg.Add(1)
		go func() { defer wg.Done(); bka.keepAliveLoop(bkaCtx, make(chan api.Event, 16)) }()
		defer func() { stopBKA(); wg.Wait() }()
		hb := b.mustOpen(ctx, "/t/cached")
		start := time.Now()
		if _, err := b.setContents(ctx, hb, []byte("v2")); err != nil {
			t.Fatalf("Bob's write: %v", err)
		}
		waited := time.Since(start)
		// The write completed: Alice must be unable to go on trusting v1. Her
		// session is over, so her next KeepAlive says so; a live session would
		// instead be handed the fail-over event it never acknowledged.
		if err := a.dial(ctx); err != nil {
			t.Fatal(err)
		}
		ka, err := a.keepAlive(ctx)
		if !errors.Is(err, api.ErrSessionExpired) {
			t.Fatalf("Bob's write completed after %v while Alice's session was live and had not acknowledged the fail-over "+
				"(her KeepAlive: %+v, %v): she could still read v1 from her cache", waited.Round(time.Millisecond), ka, err)
		}
		t.Logf("Bob's write waited %v for the fail-over barrier", waited.Round(time.Millisecond))
	})
}
