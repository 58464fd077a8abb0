package client_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// failoverLease is the session lease of the fail-over tests: long enough
// that a fail-over (master lease 0.8 s, then an election) ends well within
// it, as with the 12 s default.
const failoverLease = 8 * time.Second

// TestMasterLossInvisibleToHolders: a lock holder whose master dies keeps
// its session safe and its lock context intact across the fail-over, and
// moves to the new master. "silent" is a kill -9 as the client sees it: the
// master is cut off from its peers and its clients' packets vanish, so
// nothing tells the client (its connection's idle timeout is a minute);
// only the master's silence past its KeepAlive cadence does, and the
// client must then find the new master among all replicas before its
// lease runs short. "stopped" is a master that shut down. Each runs on
// celltest in simulated time.
func TestMasterLossInvisibleToHolders(t *testing.T) {
	for _, silent := range []bool{true, false} {
		name := "stopped"
		if silent {
			name = "silent"
		}
		t.Run(name, func(t *testing.T) { synctest.Test(t, func(t *testing.T) { testMasterLoss(t, silent) }) })
	}
}

func testMasterLoss(t *testing.T, silent bool) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3, Tune: func(c *cell.Config) { c.SessionLease = failoverLease }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cfg := tc.ClientConfig("", "alice")
	cfg.IdleTimeout = time.Minute // the transport tells nothing in time
	cfg.GracePeriod = 30 * time.Second
	c := tc.Dial(ctx, cfg)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu := client.NewMutex(s, "/t/holder")
	l, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	epoch := s.Epoch()
	m, err := tc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if silent {
		tc.Faults().Isolate(m.ID())
		tc.CutClients(m.ID(), true)
	} else {
		tc.Crash(m.ID())
	}
	// Every event up to the fail-over's: none may be jeopardy.
	var seen []client.EventKind
	for failover := false; !failover; {
		select {
		case ev := <-s.Events():
			seen = append(seen, ev.Kind)
			failover = ev.Kind == client.EventFailover
		case <-ctx.Done():
			t.Fatalf("no fail-over event; events %v", seen)
		}
	}
	for _, k := range seen {
		if k == client.EventJeopardy || k == client.EventExpired {
			t.Fatalf("the holder saw %v during a fail-over that ended within its lease (events %v)", k, seen)
		}
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lock lost across the fail-over: %v", err)
	}
	if l.Context().Err() != nil || mu.Held() != l || s.State() != client.StateSafe || s.Epoch() <= epoch {
		t.Fatalf("after the fail-over: context %v, held %v, state %v, epoch %d (was %d)",
			l.Context().Err(), mu.Held() == l, s.State(), s.Epoch(), epoch)
	}
	// The new master agrees that the holder holds it.
	if ok, why, err := s.CheckSequencer(ctx, l.Sequencer()); err != nil || !ok {
		t.Fatalf("the new master on the holder's sequencer: valid %v (%s), %v", ok, why, err)
	}
	if err := l.Err(); err != nil {
		t.Fatalf("lock lost after the fail-over: %v", err)
	}
}
