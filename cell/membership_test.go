package cell

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/paxos"
)

// memberRig is a membership on fakes alone: a run loop goroutine that runs
// what membership hands it and then chooses every proposal in order (its
// core applies each membership change to its own membership, as
// paxos.Node does), a master role that is there or not, a feature gate
// and a step-down that record their calls, and a transport that records
// the peer sets it is given.
type memberRig struct {
	t  *testing.T
	ms *membership
	// loop receives what onLoop runs until quit is closed; stopped is
	// closed when it has ended.
	loop    chan func()
	quit    chan struct{}
	stopped chan struct{}

	mu struct {
		sync.Mutex
		serving bool
		// notCaughtUp is how many promotions the core refuses next with
		// paxos.ErrNotCaughtUp.
		notCaughtUp int
		gates       [][]uint64 // except of each gate call
		stepDowns   int
		peers       []map[uint64]string
		sendOnly    []map[uint64]string
	}

	// Loop-owned: the fake core.
	core     paxos.Membership
	slot     paxos.Slot
	seq      uint64
	pending  []paxos.Entry
	proposed int
}

func newMemberRig(t *testing.T) *memberRig {
	g := &memberRig{t: t, loop: make(chan func()), quit: make(chan struct{}), stopped: make(chan struct{})}
	g.mu.serving = true
	first := map[uint64]string{1: "10.0.0.1:7000", 2: "10.0.0.2:7000", 3: "10.0.0.3:7000"}
	initial := []paxos.ID{1, 2, 3}
	g.core = paxos.Membership{Voters: slices.Clone(initial)}
	role := &master{}
	ms, err := newMembership(membershipDeps{
		self:    1,
		first:   first,
		initial: initial,
		log:     slog.New(slog.NewTextHandler(io.Discard, nil)),
		onLoop: func(ctx context.Context, f func()) error {
			done := make(chan struct{})
			select {
			case g.loop <- func() { f(); close(done) }:
			case <-ctx.Done():
				return ctxError(ctx)
			case <-g.stopped:
				return errUnavailable("the replica stopped")
			}
			<-done
			return nil
		},
		stopped: g.stopped,
		propose: func(data []byte) (paxos.ProposalID, error) {
			return g.accept(paxos.Value{Cmds: []paxos.Command{{Data: data}}}), nil
		},
		proposeConf: g.proposeConf,
		serving: func() *master {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !g.mu.serving {
				return nil
			}
			return role
		},
		notMaster: func() *api.Error { return apiErr(api.NotMaster, "this replica is not the master") },
		refused:   func(err error) *api.Error { return apiErr(api.Internal, err.Error()) },
		gate: func(_ context.Context, m *master, _ Features, except ...uint64) error {
			if m != role {
				t.Errorf("the feature gate was asked about master role %p, want the serving one %p", m, role)
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			g.mu.gates = append(g.mu.gates, slices.Clone(except))
			return nil
		},
		stepDown: func(context.Context, uint64) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.mu.stepDowns++
			g.mu.serving = false
			return nil
		},
		setPeers: func(_ context.Context, peers, sendOnly map[uint64]string) error {
			g.mu.Lock()
			defer g.mu.Unlock()
			g.mu.peers = append(g.mu.peers, maps.Clone(peers))
			g.mu.sendOnly = append(g.mu.sendOnly, maps.Clone(sendOnly))
			return nil
		},
		retry: 10 * time.Millisecond,
	}, paxos.NewMemoryStorage(), 0)
	if err != nil {
		t.Fatal(err)
	}
	g.ms = ms
	if peers := ms.startPeers(g.core); len(peers) != 2 || peers[2] != first[2] || peers[3] != first[3] {
		t.Fatalf("start peers %v, want replicas 2 and 3 at their first addresses", peers)
	}
	go g.run()
	return g
}

// run is the fake run loop: it runs what it is handed, then chooses what
// was proposed, applies it (membership.apply) and syncs the peer set, as
// the replica's loop does after a step.
func (g *memberRig) run() {
	defer close(g.stopped)
	for {
		select {
		case f := <-g.loop:
			f()
		case <-g.quit:
			g.ms.stop()
			return
		}
		for _, e := range g.pending {
			g.ms.apply(e)
		}
		g.pending = nil
		g.ms.syncPeers(g.core)
	}
}

// accept gives v the next slot and proposal id. Loop only.
func (g *memberRig) accept(v paxos.Value) paxos.ProposalID {
	g.seq++
	g.slot++
	id := paxos.ProposalID{Ballot: 1, Seq: g.seq}
	v.Cmds[0].ID = id
	g.pending = append(g.pending, paxos.Entry{Slot: g.slot, Ballot: 1, Value: v})
	g.proposed++
	return id
}

// proposeConf is the fake core's membership change. Loop only.
func (g *memberRig) proposeConf(cc paxos.ConfChange) (paxos.ProposalID, error) {
	m := paxos.Membership{Voters: slices.Clone(g.core.Voters), Learners: slices.Clone(g.core.Learners)}
	switch cc.Type {
	case paxos.ConfAddLearner:
		m.Learners = append(m.Learners, cc.ID)
	case paxos.ConfPromote:
		g.mu.Lock()
		refuse := g.mu.notCaughtUp > 0
		if refuse {
			g.mu.notCaughtUp--
		}
		g.mu.Unlock()
		if refuse {
			return paxos.ProposalID{}, paxos.ErrNotCaughtUp
		}
		m.Learners = slices.DeleteFunc(m.Learners, func(id paxos.ID) bool { return id == cc.ID })
		m.Voters = append(m.Voters, cc.ID)
	case paxos.ConfRemove:
		m.Learners = slices.DeleteFunc(m.Learners, func(id paxos.ID) bool { return id == cc.ID })
		m.Voters = slices.DeleteFunc(m.Voters, func(id paxos.ID) bool { return id == cc.ID })
	}
	slices.Sort(m.Voters)
	id := g.accept(paxos.Value{Cmds: []paxos.Command{{}}, Conf: &m})
	m.Index = g.slot
	g.core = m
	return id, nil
}

func (g *memberRig) close() {
	close(g.quit)
	<-g.stopped
}

// TestMembershipWithoutReplica drives the membership's changes on fakes
// alone: AddReplica records the new replica's address, adds it as a
// learner, retries the promotion until the core finds it caught up and
// promotes it, asking the feature gate first for the learner's step and
// then with the learner excepted; the transport's peer set follows.
// RemoveReplica removes a voter, whose address the transport keeps to
// send to only. Bad input, a reused ID, a taken address and a replica that
// is not master are refused with the error naming the cause and propose
// nothing; the master removing itself steps down first and redirects.
func TestMembershipWithoutReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newMemberRig(t)
		defer g.close()
		ctx := context.Background()
		const addr4 = "10.0.0.4:7000"
		judged := 0

		g.mu.Lock()
		g.mu.notCaughtUp = 2
		g.mu.Unlock()
		resp, err := g.ms.addReplica(ctx, 4, addr4)
		if err != nil {
			t.Fatalf("AddReplica(4): %v", err)
		}
		wantSteps := []string{"add-learner 4 at slot 2", "promote 4 at slot 3"}
		if !slices.Equal(resp.Steps, wantSteps) || !slices.Equal(resp.Voters, []uint64{1, 2, 3, 4}) || len(resp.Learners) != 0 ||
			resp.Addrs[4] != addr4 || resp.Slot != 3 {
			t.Fatalf("AddReplica(4) answered %+v; want steps %q, voters 1-4 with 4 at %s, membership of slot 3", resp, wantSteps, addr4)
		}
		judged++
		synctest.Wait() // the loop has synced the peer set after the change
		g.mu.Lock()
		gates, notCaughtUp := slices.Clone(g.mu.gates), g.mu.notCaughtUp
		peers := g.mu.peers[len(g.mu.peers)-1]
		g.mu.Unlock()
		if len(gates) != 2 || !slices.Equal(gates[0], []uint64{0}) || !slices.Equal(gates[1], []uint64{0, 4}) {
			t.Errorf("feature gate asked with except %v; want [0] for the learner's step, then [0 4] for the promotion", gates)
		}
		if notCaughtUp != 0 {
			t.Errorf("%d promotions refused as not caught up were never retried", notCaughtUp)
		}
		if peers[4] != addr4 || len(peers) != 3 {
			t.Errorf("the peer set after the addition is %v; want replicas 2, 3 and 4 at %s", peers, addr4)
		}
		judged++

		resp, err = g.ms.removeReplica(ctx, 2)
		if err != nil {
			t.Fatalf("RemoveReplica(2): %v", err)
		}
		if !slices.Equal(resp.Steps, []string{"remove 2 at slot 4"}) || !slices.Equal(resp.Voters, []uint64{1, 3, 4}) {
			t.Fatalf("RemoveReplica(2) answered %+v; want voters 1, 3, 4 after one step", resp)
		}
		if d := g.ms.view(); !d.retired(2) || d.Slot != 4 {
			t.Errorf("the directory after the removal (slot %d) does not have replica 2 retired", d.Slot)
		}
		synctest.Wait()
		g.mu.Lock()
		peers, sendOnly := g.mu.peers[len(g.mu.peers)-1], g.mu.sendOnly[len(g.mu.sendOnly)-1]
		g.mu.Unlock()
		if _, ok := peers[2]; ok || sendOnly[2] != "10.0.0.2:7000" {
			t.Errorf("after removing replica 2 the peer set is %v, send-only %v; want 2 sent to only, at its address", peers, sendOnly)
		}
		if resp, err := g.ms.removeReplica(ctx, 2); err != nil || len(resp.Steps) != 0 {
			t.Errorf("a repeated RemoveReplica(2) answered %+v, %v; want the membership and no step", resp, err)
		}
		judged++

		// Refusals: each names its cause and proposes nothing.
		before, view := g.proposed, g.ms.view()
		refusals := []struct {
			name string
			do   func() error
			code api.Code
			msg  string
		}{
			{"ID 0", func() error { _, err := g.ms.addReplica(ctx, 0, addr4); return err }, api.InvalidArgument, "out of range"},
			{"no port", func() error { _, err := g.ms.addReplica(ctx, 5, "10.0.0.5"); return err }, api.InvalidArgument, "host:port"},
			{"reused ID", func() error { _, err := g.ms.addReplica(ctx, 2, "10.0.0.9:7000"); return err }, api.InvalidArgument, "never reused"},
			{"taken address", func() error { _, err := g.ms.addReplica(ctx, 5, "10.0.0.3:7000"); return err }, api.InvalidArgument, "is replica 3's"},
			{"member elsewhere", func() error { _, err := g.ms.addReplica(ctx, 3, "10.0.0.9:7000"); return err }, api.InvalidArgument, "is a member at"},
			{"remove non-member", func() error { _, err := g.ms.removeReplica(ctx, 9); return err }, api.InvalidArgument, "not a member"},
			{"replace by itself", func() error { _, err := g.ms.replace(ctx, 3, 3, addr4); return err }, api.InvalidArgument, "new ID"},
			{"replace removed", func() error { _, err := g.ms.replace(ctx, 2, 5, "10.0.0.5:7000"); return err }, api.InvalidArgument, "removed already"},
		}
		for _, rf := range refusals {
			err := rf.do()
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != rf.code || !strings.Contains(ae.Msg, rf.msg) {
				t.Errorf("%s: %v; want %s naming %q", rf.name, err, rf.code, rf.msg)
				continue
			}
			judged++
		}
		if g.proposed != before || g.ms.view() != view {
			t.Errorf("refused requests proposed %d commands or changed the directory", g.proposed-before)
		}

		// The master removing itself hands over first and redirects.
		_, err = g.ms.removeReplica(ctx, 1)
		var ae *api.Error
		g.mu.Lock()
		stepDowns := g.mu.stepDowns
		g.mu.Unlock()
		if !errors.As(err, &ae) || ae.Code != api.NotMaster || !strings.Contains(ae.Msg, "handed over before its removal") || stepDowns != 1 {
			t.Errorf("the master removing itself: %v after %d step-downs; want one step-down and NotMaster saying it handed over", err, stepDowns)
		} else {
			judged++
		}
		// Not master now: nothing is proposed.
		if _, err := g.ms.addReplica(ctx, 5, "10.0.0.5:7000"); !errors.Is(err, api.ErrNotMaster) {
			t.Errorf("AddReplica on a replica that is not master: %v, want NotMaster", err)
		} else {
			judged++
		}
		if g.proposed != before {
			t.Errorf("a replica that is not master proposed %d commands", g.proposed-before)
		}
		if judged < 5+len(refusals) {
			t.Fatalf("judged %d outcomes, want %d", judged, 5+len(refusals))
		}
	})
}

// TestMembershipRefusedAndStopped: a change the core ends without
// applying it (paxos.ErrConfChangePending) is answered FailedPrecondition,
// and one still waiting when the loop stops is answered Unavailable.
func TestMembershipRefusedAndStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newMemberRig(t)
		ctx := context.Background()
		hold := func() paxos.ProposalID {
			// A proposal the fake core takes but does not choose.
			var id paxos.ProposalID
			g.loop <- func() {
				id = g.accept(paxos.Value{Cmds: []paxos.Command{{}}})
				g.pending = nil
			}
			return id
		}
		ch := make(chan memberOutcome, 1)
		id := hold()
		g.loop <- func() { g.ms.waiters[id] = ch }
		g.loop <- func() { g.ms.refuse([]paxos.Outcome{{ID: id, Err: paxos.ErrConfChangePending}}) }
		o := <-ch
		var ae *api.Error
		if err := g.ms.memberError(o.err); !errors.As(err, &ae) || ae.Code != api.FailedPrecondition {
			t.Errorf("a change refused as pending answered %v, want FailedPrecondition", err)
		}
		id = hold()
		g.loop <- func() { g.ms.waiters[id] = ch }
		g.close()
		o = <-ch
		if err := g.ms.memberError(o.err); !errors.As(err, &ae) || ae.Code != api.Unavailable {
			t.Errorf("a change waiting when the loop stopped answered %v, want Unavailable", err)
		}
		if _, err := g.ms.addReplica(ctx, 4, "10.0.0.4:7000"); err == nil {
			t.Errorf("AddReplica after the loop stopped succeeded")
		}
	})
}
