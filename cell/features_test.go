package cell_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

// gateOldReplica is the replica that, in TestFeatureGate, runs "an older
// binary" until the test upgrades it.
const gateOldReplica = 3

// TestFeatureGate: while one replica of three advertises no features (an
// older binary in a rolling upgrade), the master hands a freed lock over
// in two Paxos slots (the Release, then the waiter's Acquire) and refuses
// a membership change with FailedPrecondition naming that replica,
// changing nothing. Once the replica advertises every feature (it was
// upgraded), a hand-over takes one slot and the change is made. Whichever
// replica becomes master, the lagging one is counted: the master counts
// itself by its own features.
func TestFeatureGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t, 60*time.Second)
		var upgraded atomic.Bool
		tune := func(c *cell.Config) {
			if c.ID == gateOldReplica {
				cell.SetFeatures(c, func() cell.Features {
					if upgraded.Load() {
						return cell.AllFeatures
					}
					return 0
				})
			}
		}
		hc := startHandOverCell(t, ctx, tune, "alice", "bob")
		alice, bob := hc.clients["alice"], hc.clients["bob"]
		m := hc.lc.Master()
		time.Sleep(time.Second) // every replica reports to the master
		ha, hb := alice.mustOpen(ctx, "/t/g"), bob.mustOpen(ctx, "/t/g")

		// handOver has alice take the lock, bob wait for it, and alice
		// release it; it returns the slots the master applied from the
		// release until bob held the lock.
		handOver := func() float64 {
			t.Helper()
			ga, err := alice.acquire(ctx, ha, api.LockExclusive, false)
			if err != nil {
				t.Fatal(err)
			}
			bobc := goAcquire(t, ctx, m, bob, hb)
			synctest.Wait()
			before := countPaxos(m)
			if err := alice.release(ctx, ha, ga.Generation); err != nil {
				t.Fatal(err)
			}
			out := <-bobc
			if out.err != nil {
				t.Fatalf("bob's blocked Acquire: %v", out.err)
			}
			synctest.Wait()
			d := countPaxos(m).minus(before)
			if err := bob.release(ctx, hb, out.seq.Generation); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			return d.slots
		}
		// victim is a replica other than the master to remove.
		victim := uint64(1)
		if m.ID() == victim {
			victim = 2
		}

		if got := handOver(); got != 2 {
			t.Fatalf("with replica %d on an older binary, a hand-over took %v slots; want 2 (the two-round path)", gateOldReplica, got)
		}
		_, err := m.RemoveReplica(ctx, victim)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.FailedPrecondition {
			t.Fatalf("RemoveReplica(%d) with replica %d on an older binary: %v; want FailedPrecondition", victim, gateOldReplica, err)
		}
		if want := "replica 3 runs a binary without membership change"; !strings.Contains(ae.Msg, want) {
			t.Fatalf("refusal %q does not say %q", ae.Msg, want)
		}
		if _, err := m.AddReplica(ctx, 9, "10.0.0.9:7000"); !errors.As(err, &ae) || ae.Code != api.FailedPrecondition {
			t.Fatalf("AddReplica(9) with replica %d on an older binary: %v; want FailedPrecondition", gateOldReplica, err)
		}
		if st := m.Status(); len(st.Voters) != 3 || len(st.Learners) != 0 {
			t.Fatalf("refused changes changed the membership: voters %v learners %v", st.Voters, st.Learners)
		}

		upgraded.Store(true)
		time.Sleep(time.Second) // the upgraded replica reports
		if got := handOver(); got != 1 {
			t.Fatalf("with every replica upgraded, a hand-over took %v slots; want 1", got)
		}
		resp, err := m.RemoveReplica(ctx, victim)
		if err != nil {
			t.Fatalf("RemoveReplica(%d) with every replica upgraded: %v", victim, err)
		}
		if len(resp.Voters) != 2 {
			t.Fatalf("after removing replica %d the voters are %v", victim, resp.Voters)
		}
	})
}
