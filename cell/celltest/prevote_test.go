package celltest_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
)

// TestIsolatedReplicaKeepsMaster: a follower cut off from every peer for
// 3 s (its election timer fires again and again: the election wait is
// under a second) and then let back never unseats the master that the
// other four kept hearing: its pre-votes are refused, so it never raises
// the ballot that would make the others refuse the master. The master
// keeps serving throughout, under the same epoch, sampled every
// millisecond for the isolation and 2 s after it. Three followers in turn.
func TestIsolatedReplicaKeepsMaster(t *testing.T) {
	const (
		isolation   = 3 * time.Second
		after       = 2 * time.Second
		sampleFloor = 3 * 4500 // looks over the three rounds
	)
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Latency: handOverLatency})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		m, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
		epoch := m.Status().Epoch
		looks := 0
		var isolated []uint64
		for _, id := range c.IDs() {
			if id == m.ID() || len(isolated) == 3 {
				continue
			}
			isolated = append(isolated, id)
			var rest []uint64
			for _, o := range c.IDs() {
				if o != id {
					rest = append(rest, o)
				}
			}
			c.Partition(rest) // id alone, in no group: cut off from all
			end := time.Now().Add(isolation + after)
			healAt := time.Now().Add(isolation)
			healed := false
			for time.Now().Before(end) {
				if !healed && !time.Now().Before(healAt) {
					c.Heal()
					healed = true
				}
				st := m.Status()
				if !st.Master || st.Epoch != epoch {
					t.Fatalf("replica %d isolated for %v (healed: %v): master %d serves %v under epoch %#x, was %#x",
						id, isolation, healed, m.ID(), st.Master, st.Epoch, epoch)
				}
				looks++
				time.Sleep(time.Millisecond)
			}
			if got := c.Master(); got != m {
				t.Fatalf("after replica %d rejoined, the master is %v, want replica %d", id, got, m.ID())
			}
		}
		t.Logf("isolated replicas %v in turn for %v each; master %d served under one epoch throughout (%d looks)", isolated, isolation, m.ID(), looks)
		if len(isolated) < 3 || looks < sampleFloor {
			t.Fatalf("judged %d isolations with %d looks (floors 3 and %d)", len(isolated), looks, sampleFloor)
		}
	})
}
