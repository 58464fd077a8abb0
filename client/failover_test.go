package client_test

import (
	"context"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestFailoverRetriesReads: the client starts at a replica that is not the
// master (and follows the redirect); then the master is killed, and a read
// made at once blocks and succeeds against the new master, with the
// session's epoch moved on and a fail-over event delivered. It runs on
// celltest in simulated time.
func TestFailoverRetriesReads(t *testing.T) {
	synctest.Test(t, testFailoverRetriesReads)
}

func testFailoverRetriesReads(t *testing.T) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := tc.ClientConfig("", "alice")
	m, err := tc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Put the master last so that the first dial lands elsewhere.
	maddr := celltest.Addr(m.ID())
	cfg.Addrs = slices.DeleteFunc(slices.Clone(tc.Addrs()), func(a string) bool { return a == maddr })
	cfg.Addrs = append(cfg.Addrs, maddr)
	cfg.GracePeriod = 20 * time.Second
	c := tc.Dial(ctx, cfg)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Open(ctx, "/t/f", client.OpenOptions{Create: true, Contents: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	epoch := s.Epoch()
	tc.Crash(m.ID())
	b, _, err := h.GetContents(ctx)
	if err != nil || string(b) != "v" {
		t.Fatalf("read across the fail-over: %q, %v", b, err)
	}
	ev := waitEvent(t, ctx, s, client.EventFailover)
	if ev.Node.Epoch <= epoch || s.Epoch() <= epoch {
		t.Fatalf("fail-over event epoch %d, session epoch %d; was %d", ev.Node.Epoch, s.Epoch(), epoch)
	}
	if s.Err() != nil {
		t.Fatal(s.Err())
	}
}
