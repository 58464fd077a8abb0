package celltest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// memberOpsFloor is the least number of completed lock operations the
// clients of a membership test must make for the test to count: the
// clients ran, and were judged, throughout the changes.
const memberOpsFloor = 200

// lockWorld is a few clients, each holding one lock throughout and
// locking and unlocking a shared mutex in a loop, with an exclusion check
// on the shared one. Every operation must succeed (fail-overs included):
// a session that ends, a held lock lost, an operation that fails or two
// holders at once are violations.
type lockWorld struct {
	t      *testing.T
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ops    atomic.Int64
	inside atomic.Int32
	held   []*client.Lock
	ss     []*client.Session

	mu         sync.Mutex
	violations []string
}

func newLockWorld(t *testing.T, ctx context.Context, c *celltest.Cell, n int) *lockWorld {
	t.Helper()
	w := &lockWorld{t: t}
	wctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	t.Cleanup(func() { cancel(); w.wg.Wait() }) // a failed test leaves no loop behind
	for i := range n {
		s, err := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("member%d", i))).NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held, err := client.NewMutex(s, fmt.Sprintf("/t/held%d", i)).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w.ss, w.held = append(w.ss, s), append(w.held, held)
		shared := client.NewMutex(s, "/t/shared")
		w.wg.Go(func() {
			for wctx.Err() == nil {
				l, err := shared.Lock(wctx)
				if err == nil {
					if w.inside.Add(1) != 1 {
						w.violate("client %d: two holders of /t/shared at once", i)
					}
					time.Sleep(time.Millisecond)
					w.inside.Add(-1)
					err = l.Release(wctx)
				}
				if err == nil {
					w.ops.Add(1)
					// A steady load, not a flood: in the bubble a flood
					// takes no simulated time and starves the learner.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if wctx.Err() == nil {
					w.violate("client %d: lock operation failed: %v", i, err)
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	return w
}

func (w *lockWorld) violate(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violations = append(w.violations, fmt.Sprintf(format, args...))
}

// stop ends the clients' loops and checks everything they saw, the floor
// of operations included.
func (w *lockWorld) stop() {
	w.t.Helper()
	w.cancel()
	w.wg.Wait()
	for i, s := range w.ss {
		if st := s.State(); st != client.StateSafe {
			w.violate("client %d: session %d is %v, want safe", i, s.ID(), st)
		}
		if err := w.held[i].Err(); err != nil {
			w.violate("client %d: held lock lost: %v", i, err)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		w.t.Error(v)
	}
	if n := w.ops.Load(); n < memberOpsFloor {
		w.t.Errorf("the clients completed %d lock operations, fewer than the floor %d: the run judged too little", n, memberOpsFloor)
	} else {
		w.t.Logf("the clients completed %d lock operations across the changes", n)
	}
}

// adminOp returns an Operator with the administrator's certificate.
func adminOp(t *testing.T, ctx context.Context, c *celltest.Cell) *operator.Operator {
	t.Helper()
	return operator.New(c.Dial(ctx, c.ClientConfig("_cell", "admin")))
}

// memberSnapshotEvery makes the replicas of the membership tests compact
// their logs often, so that a new replica catches up by snapshot and a
// restarted one finds its membership in a snapshot.
const memberSnapshotEvery = 100

func startMemberCell(t *testing.T) (*celltest.Cell, context.Context) {
	t.Helper()
	c := celltest.Start(t, celltest.Options{Tune: func(cfg *cell.Config) { cfg.SnapshotEvery = memberSnapshotEvery }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return c, ctx
}

// waitFor polls cond every 10 ms of simulated time until it holds, failing
// the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

func wantMembers(t *testing.T, resp *api.MembershipResponse, voters, learners []uint64) {
	t.Helper()
	if !slices.Equal(resp.Voters, voters) || !slices.Equal(resp.Learners, learners) {
		t.Fatalf("membership voters=%v learners=%v, want voters=%v learners=%v", resp.Voters, resp.Learners, voters, learners)
	}
	if resp.Slot == 0 {
		t.Fatalf("membership %+v names no slot", resp)
	}
}

// TestAddSixthThenRemoveFifth: while clients lock, a 6th replica joins,
// catches up and becomes a voter, then the old 5th is removed. Then two
// of the remaining voters crash: the cell still serves only if the new
// replica really votes (3 of the 5 voters {1,2,3,4,6} are up only with
// it). Every replica ends with the same membership, and the removed one
// knows it was removed, serves nobody, and is refused by its former peers.
func TestAddSixthThenRemoveFifth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startMemberCell(t)
		op := adminOp(t, ctx, c)
		w := newLockWorld(t, ctx, c, 3)
		time.Sleep(500 * time.Millisecond)

		c.Join(6)
		time.Sleep(time.Second) // the cell refuses it; it learns nothing yet
		if st := c.Replica(6).Status(); st.Applied != 0 || st.Master {
			t.Fatalf("replica 6 applied %d slots (master %v) before it was added", st.Applied, st.Master)
		}
		actx, acancel := context.WithTimeout(ctx, time.Minute)
		resp, err := op.AddReplica(actx, 6, celltest.Addr(6))
		acancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("add-replica 6: %v", resp.Steps)
		wantMembers(t, resp, []uint64{1, 2, 3, 4, 5, 6}, nil)
		if len(resp.Steps) != 2 {
			t.Fatalf("add-replica 6 took steps %q, want add-learner and promote", resp.Steps)
		}
		if resp.Addrs[6] != celltest.Addr(6) {
			t.Fatalf("replica 6 at %q, want %q", resp.Addrs[6], celltest.Addr(6))
		}
		m := c.Master()
		waitFor(t, 30*time.Second, "replica 6 catches up", func() bool {
			st := c.Replica(6).Status()
			return m != nil && st.Applied >= m.Status().Applied-1 && slices.Contains(st.Voters, 6)
		})

		time.Sleep(500 * time.Millisecond)
		resp, err = op.RemoveReplica(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		wantMembers(t, resp, []uint64{1, 2, 3, 4, 6}, nil)
		waitFor(t, 30*time.Second, "replica 5 learns its removal", func() bool { return c.Replica(5).Status().Removed })
		// The removed replica serves nobody, and says why.
		var st api.CellStatusResponse
		err = client.AskReplica(ctx, c.ClientConfig("", "probe"), celltest.Addr(5), api.MethodCreateSession, &api.CreateSessionRequest{}, &st)
		if !errors.Is(err, api.ErrNotMaster) {
			t.Fatalf("CreateSession at the removed replica 5: %v, want NotMaster", err)
		}
		if !strings.Contains(err.Error(), "removed") {
			t.Fatalf("CreateSession at the removed replica 5: %v, want it to say the replica was removed", err)
		}
		refusedBy := func() (n uint64) {
			for _, r := range c.Running() {
				if r.ID() != 5 {
					n += r.Status().RefusedPeers
				}
			}
			return n
		}
		refused := refusedBy()
		time.Sleep(2 * time.Second)
		for _, r := range c.Running() {
			if r.ID() == 5 {
				continue
			}
			rs := r.Status()
			if !slices.Equal(rs.Voters, []uint64{1, 2, 3, 4, 6}) {
				t.Fatalf("replica %d has voters %v", r.ID(), rs.Voters)
			}
		}
		// Replica 5 still runs and still reports its progress to its former
		// peers: they refuse it.
		if got := refusedBy(); got <= refused {
			t.Fatalf("the remaining replicas refused %d handshakes or messages of replicas outside the membership before and %d after 2 s with the removed replica 5 running: they still hear it", refused, got)
		} else {
			t.Logf("the remaining replicas refused the removed replica %d times in 2 s", got-refused)
		}
		c.Crash(5)

		// 6 must vote: with 1 and 2 (neither the master, if possible) down,
		// only {3,4,6} are left of five voters.
		down := []uint64{}
		for _, id := range []uint64{1, 2, 3, 4} {
			if len(down) < 2 && (c.Master() == nil || c.Master().ID() != id) {
				down = append(down, id)
			}
		}
		for _, id := range down {
			c.Crash(id)
		}
		t.Logf("crashed %v: the voters left include replica 6", down)
		time.Sleep(3 * time.Second)
		if _, err := c.WaitMaster(ctx); err != nil {
			t.Fatal(err)
		}
		before := w.ops.Load()
		waitFor(t, 30*time.Second, "the clients go on with replica 6 in the quorum", func() bool { return w.ops.Load() > before+50 })
		w.stop()
	})
}

// TestMemberChangeRefusals: membership changes are the administrator's
// only; bad input (an ID out of range, a bad address, a member's ID at
// another address, another member's address, an ID used before) gets a
// clear error and changes nothing; and a replica ID is never used twice.
func TestMemberChangeRefusals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startMemberCell(t)
		op := adminOp(t, ctx, c)
		tenant := operator.New(c.Dial(ctx, c.ClientConfig("", "alice")))
		if _, err := tenant.AddReplica(ctx, 6, celltest.Addr(6)); !errors.Is(err, api.ErrPermissionDenied) {
			t.Fatalf("a tenant principal's AddReplica: %v, want PermissionDenied", err)
		}
		if _, err := tenant.RemoveReplica(ctx, 5); !errors.Is(err, api.ErrPermissionDenied) {
			t.Fatalf("a tenant principal's RemoveReplica: %v, want PermissionDenied", err)
		}
		if _, err := tenant.ReplaceReplica(ctx, 5, 6, celltest.Addr(6)); !errors.Is(err, api.ErrPermissionDenied) {
			t.Fatalf("a tenant principal's ReplaceReplica: %v, want PermissionDenied", err)
		}
		judged := 3
		before := c.Master().Status()
		bad := []struct {
			name string
			call func() error
			want string
		}{
			{"ID 0", func() error { _, err := op.AddReplica(ctx, 0, celltest.Addr(6)); return err }, "out of range"},
			{"ID too large", func() error { _, err := op.AddReplica(ctx, 1<<20, celltest.Addr(6)); return err }, "out of range"},
			{"no port", func() error { _, err := op.AddReplica(ctx, 6, "10.0.0.6"); return err }, "host:port"},
			{"port 0", func() error { _, err := op.AddReplica(ctx, 6, "10.0.0.6:0"); return err }, "port"},
			{"member elsewhere", func() error { _, err := op.AddReplica(ctx, 3, celltest.Addr(6)); return err }, "is a member at"},
			{"member's address", func() error { _, err := op.AddReplica(ctx, 6, celltest.Addr(3)); return err }, "is replica 3's"},
			{"remove non-member", func() error { _, err := op.RemoveReplica(ctx, 9); return err }, "not a member"},
			{"replace by itself", func() error { _, err := op.ReplaceReplica(ctx, 4, 4, celltest.Addr(6)); return err }, "new ID"},
			{"replace non-member", func() error { _, err := op.ReplaceReplica(ctx, 9, 6, celltest.Addr(6)); return err }, "not a member"},
		}
		for _, b := range bad {
			err := b.call()
			if !errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), b.want) {
				t.Errorf("%s: %v, want InvalidArgument saying %q", b.name, err, b.want)
			}
			judged++
		}
		time.Sleep(500 * time.Millisecond)
		after := c.Master().Status()
		if !slices.Equal(after.Voters, before.Voters) || after.Learners != nil || after.MembershipSlot != before.MembershipSlot {
			t.Fatalf("bad input changed the membership: %v/%v at %d, was %v at %d", after.Voters, after.Learners, after.MembershipSlot, before.Voters, before.MembershipSlot)
		}

		// Remove 5; its ID is then refused for good.
		if _, err := op.RemoveReplica(ctx, 5); err != nil {
			t.Fatal(err)
		}
		resp, err := op.RemoveReplica(ctx, 5) // a repeat reports the membership
		if err != nil || len(resp.Steps) != 0 {
			t.Fatalf("repeated RemoveReplica(5): %+v, %v; want no steps and no error", resp, err)
		}
		wantMembers(t, resp, []uint64{1, 2, 3, 4}, nil)
		for _, addr := range []string{celltest.Addr(5), celltest.Addr(7)} {
			_, err := op.AddReplica(ctx, 5, addr)
			if !errors.Is(err, api.ErrInvalidArgument) || !strings.Contains(err.Error(), "never reused") {
				t.Fatalf("AddReplica of the removed ID 5 at %s: %v, want InvalidArgument saying IDs are never reused", addr, err)
			}
			judged++
		}
		if _, err := op.ReplaceReplica(ctx, 4, 5, celltest.Addr(7)); !errors.Is(err, api.ErrInvalidArgument) {
			t.Fatalf("ReplaceReplica by the removed ID 5: %v, want InvalidArgument", err)
		}
		judged++
		// The refusal survives a fail-over and a restart of every replica:
		// the IDs ever used are replicated state.
		for _, id := range c.IDs() {
			c.Crash(id)
		}
		for _, id := range c.IDs() {
			if id != 5 {
				c.Restart(id)
			}
		}
		op = adminOp(t, ctx, c)
		if _, err := op.AddReplica(ctx, 5, celltest.Addr(5)); !errors.Is(err, api.ErrInvalidArgument) {
			t.Fatalf("after a restart, AddReplica of the removed ID 5: %v, want InvalidArgument", err)
		}
		judged++
		if st := c.Master().Status(); !slices.Equal(st.Voters, []uint64{1, 2, 3, 4}) || st.MembershipSlot == 0 {
			t.Fatalf("after a restart the master has voters %v at slot %d, want [1 2 3 4] at the removal's slot", st.Voters, st.MembershipSlot)
		}
		t.Logf("%d refusals judged", judged)
	})
}

// TestReplaceReplicaResumes: a replace of replica 3 by 7 whose new replica
// is not running yet stops, at its deadline, after adding 7 as a learner
// (7 cannot catch up, so it is not promoted: the error says how far it
// got). Once 7 runs, the same request continues: promote, remove 3, while
// clients lock throughout. Then 7 restarts and comes back a voter with the
// membership, which the snapshots carry.
func TestReplaceReplicaResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startMemberCell(t)
		op := adminOp(t, ctx, c)
		w := newLockWorld(t, ctx, c, 3)
		time.Sleep(300 * time.Millisecond)

		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := op.ReplaceReplica(actx, 3, 7, celltest.Addr(7))
		acancel()
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, api.ErrDeadlineExceeded) {
			t.Fatalf("replace by a replica that is not running: %v, want the deadline", err)
		}
		t.Logf("interrupted: %v", err)
		st := c.Master().Status()
		if !slices.Equal(st.Learners, []uint64{7}) || !slices.Contains(st.Voters, 3) {
			t.Fatalf("after the interrupted replace: voters %v learners %v, want 3 a voter and 7 a learner", st.Voters, st.Learners)
		}

		c.Join(7)
		resp, err := op.ReplaceReplica(ctx, 3, 7, celltest.Addr(7))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("resumed: %v", resp.Steps)
		wantMembers(t, resp, []uint64{1, 2, 4, 5, 7}, nil)
		if len(resp.Steps) == 0 || !strings.HasPrefix(resp.Steps[0], "promote 7") || !strings.HasPrefix(resp.Steps[len(resp.Steps)-1], "remove 3") {
			t.Fatalf("the resumed replace took steps %q, want promote 7 ... remove 3", resp.Steps)
		}
		if again, err := op.ReplaceReplica(ctx, 3, 7, celltest.Addr(7)); err != nil || len(again.Steps) != 0 {
			t.Fatalf("repeated finished replace: %+v, %v; want no steps", again, err)
		}
		c.Crash(3)
		// Past the next compaction, so that the entries that made the
		// membership and gave 7's address are in no replica's log.
		waitFor(t, 30*time.Second, "every replica compacts past the replace", func() bool {
			for _, r := range c.Running() {
				if r.Status().Compacted <= resp.Slot {
					return false
				}
			}
			return true
		})

		// Every replica restarts with the membership and the addresses it
		// had, from its snapshot (the first replicas' configurations do not
		// name 7).
		for _, id := range []uint64{1, 2, 4, 5, 7} {
			c.Crash(id)
		}
		for _, id := range []uint64{1, 2, 4, 5, 7} {
			c.Restart(id)
		}
		if _, err := c.WaitMaster(ctx); err != nil {
			t.Fatal(err)
		}
		admin := c.ClientConfig("_cell", "admin")
		for _, id := range []uint64{1, 2, 4, 5, 7} {
			st, err := operator.StatusOfReplica(ctx, admin, celltest.Addr(id))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rs := range st.Replicas {
				got = append(got, fmt.Sprintf("%d@%s", rs.ID, rs.Addr))
			}
			want := []string{"1@" + celltest.Addr(1), "2@" + celltest.Addr(2), "4@" + celltest.Addr(4), "5@" + celltest.Addr(5), "7@" + celltest.Addr(7)}
			if !slices.Equal(got, want) || st.MembershipSlot != resp.Slot {
				t.Fatalf("after a restart replica %d lists replicas %v at membership slot %d, want %v at %d", id, got, st.MembershipSlot, want, resp.Slot)
			}
		}
		before := w.ops.Load()
		waitFor(t, 30*time.Second, "the clients go on after the restart", func() bool { return w.ops.Load() > before+50 })
		w.stop()
	})
}

// TestRemoveMasterHandsOver: removing the master makes it hand over
// first; the successor removes it. Sessions and their held locks survive
// (the clients' loops never fail), and the old master, still running,
// serves nobody and says it was removed.
func TestRemoveMasterHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startMemberCell(t)
		op := adminOp(t, ctx, c)
		w := newLockWorld(t, ctx, c, 3)
		time.Sleep(300 * time.Millisecond)
		m, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		old := m.ID()
		resp, err := op.RemoveReplica(ctx, old)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("remove-replica %d (the master): %v", old, resp.Steps)
		var want []uint64
		for _, id := range c.IDs() {
			if id != old {
				want = append(want, id)
			}
		}
		wantMembers(t, resp, want, nil)
		if len(resp.Steps) != 1 || resp.Steps[0] != fmt.Sprintf("remove %d at slot %d", old, resp.Slot) {
			t.Fatalf("steps %q, want one removal at slot %d", resp.Steps, resp.Slot)
		}
		waitFor(t, 10*time.Second, "the old master learns its removal", func() bool { return c.Replica(old).Status().Removed })
		if st := c.Replica(old).Status(); st.Master {
			t.Fatalf("the removed replica %d still serves as master", old)
		}
		before := w.ops.Load()
		waitFor(t, 30*time.Second, "the clients go on", func() bool { return w.ops.Load() > max(before+50, memberOpsFloor) })
		for _, r := range c.Masters() {
			if r.ID() == old {
				t.Fatalf("the removed replica %d serves", old)
			}
		}
		w.stop()
	})
}
