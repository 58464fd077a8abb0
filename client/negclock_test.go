package client_test

import (
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/monotime"
)

// TestKeepAliveLoopOnNegativeClock: a monotime.Time has no "unset" value,
// and the session's clock may read negative (the process's monotonic clock
// does inside a testing/synctest bubble, whose fake time starts before the
// process did). The KeepAlive loop must work there as anywhere: a reply
// without events is followed at once by the next KeepAlive (the master
// parks it), not by silence until the lease runs short. The clock does not
// move in this test, so only a loop that sends at once passes.
func TestKeepAliveLoopOnNegativeClock(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	m := startFakeMaster(t, fakeLease, false)
	clk := &pauseClock{Manual: monotime.NewManual(-1_000_000 * monotime.Time(time.Second))}
	c, err := client.Dial(ctx, m.config(t, fakeDrift, clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		p := m.nextKA(t, ctx)
		p.reply <- &api.KeepAliveResponse{LeaseTimeout: int64(fakeLease), Epoch: m.epoch.Load(), Cadence: int64(m.cadence)}
		t.Logf("KeepAlive %d answered without events", i+1)
	}
	m.nextKA(t, ctx)
	if st := s.State(); st != client.StateSafe {
		t.Fatalf("state %v, want safe", st)
	}
}
