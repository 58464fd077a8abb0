package paxos

import (
	"testing"
)

// Corner cases, as table-free scenario tests on the lock-step testNet.

// Leader change with partially accepted slots: slot 1 reached only one
// follower, slot 2 nobody but the old leader, slot 3 a majority. The new
// leader must keep slot 3's value (it may have been chosen), may keep slot
// 1's, and fills slot 2 with a no-op; every replica ends with one log.
func TestLeaderChangeWithPartiallyAcceptedSlots(t *testing.T) {
	tn := newTestNet(t, 5, nil)
	old := tn.elect(300)
	others := []ID{}
	for _, r := range tn.reps {
		if r != old {
			others = append(others, r.id)
		}
	}
	reach := map[int][]ID{0: {others[0]}, 1: {}, 2: {others[0], others[1], others[2]}}
	var pids []ProposalID
	for i := 0; i < 3; i++ {
		allowed := reach[i]
		tn.drop = func(m Message) bool {
			if m.From != old.id || m.Type != MsgAccept || len(m.Entries) == 0 {
				return m.From == old.id || m.To == old.id // nothing else gets through
			}
			for _, a := range allowed {
				if a == m.To {
					return false
				}
			}
			return true
		}
		pids = append(pids, tn.propose(old, []string{"one", "two", "three"}[i]))
		tn.deliver()
	}
	// Cut the old leader off and crash it; the others elect a new leader.
	old.crash()
	tn.drop = nil
	nl := tn.elect(400)
	tn.tick(10)
	third := nl.node.log[3].Value
	if len(third.Cmds) != 1 || string(third.Cmds[0].Data) != "three" {
		t.Fatalf("slot 3 (accepted by a majority) holds %v", third)
	}
	if !nl.node.log[2].Value.IsNoop() {
		t.Fatalf("slot 2 (accepted by no follower) holds %v, want no-op", nl.node.log[2].Value)
	}
	first := nl.node.log[1].Value
	if len(first.Cmds) != 1 || string(first.Cmds[0].Data) != "one" {
		t.Fatalf("slot 1 (accepted by %d, which the new leader's quorum includes) holds %v", others[0], first)
	}
	// The old leader restarts, catches up, and agrees.
	old.restart(t, 99)
	tn.tick(60)
	for _, r := range tn.reps {
		if r.app.applied != nl.app.applied || r.app.hash != nl.app.hash {
			t.Fatalf("replica %d applied %d/%x, leader %d/%x", r.id, r.app.applied, r.app.hash, nl.app.applied, nl.app.hash)
		}
	}
	_ = pids
}

// Dueling proposers: two replicas campaign at once. The higher ballot wins;
// the other backs off; a third campaign against a leased leader is refused
// with the lease's remaining time and does not unseat it.
func TestDuelingProposers(t *testing.T) {
	tn := newTestNet(t, 5, nil)
	tn.tick(21) // restart grants run out, nobody has timed out yet
	a, b := tn.rep(2), tn.rep(4)
	a.node.campaign()
	b.node.campaign()
	tn.deliver()
	tn.tick(3)
	l := tn.leader()
	if l == nil {
		t.Fatal("no leader after dueling campaigns")
	}
	winner := a
	if b.node.promised > a.node.promised || l == b {
		winner = b
	}
	if l != winner {
		t.Fatalf("leader %d, want the higher ballot's owner %d", l.id, winner.id)
	}
	tn.tick(2)
	if !l.node.Status().Master {
		t.Fatal("winner is not master")
	}
	// A third replica campaigns while the lease is live.
	var rejects []Message
	tn.drop = func(m Message) bool {
		if m.Type == MsgReject {
			rejects = append(rejects, m)
		}
		return false
	}
	c := tn.rep(5)
	if c == l {
		c = tn.rep(1)
	}
	c.node.campaign()
	tn.deliver()
	sawLease := false
	for _, m := range rejects {
		sawLease = sawLease || m.LeaseLeft > 0
	}
	if !sawLease {
		t.Fatalf("no refusal carried LeaseLeft: %s", describeMsgs(rejects))
	}
	if !l.node.Status().Master || tn.leader() != l {
		t.Fatal("a campaign during the lease unseated the master")
	}
}

// Lease hand-over: when the master is cut off, no other replica becomes
// master before the old master's own view of its lease has run out.
func TestLeaseHandOverWaitsForOldLease(t *testing.T) {
	tn := newTestNet(t, 5, nil)
	old := tn.elect(300)
	tn.tick(3)
	tn.drop = func(m Message) bool { return m.From == old.id || m.To == old.id }
	oldLeft := old.node.Status().LeaseTicksLeft
	if oldLeft <= 0 {
		t.Fatal("old master has no lease")
	}
	ticks := 0
	var newMaster *replica
	for ticks = 1; ticks < 300 && newMaster == nil; ticks++ {
		tn.tick(1)
		for _, r := range tn.reps {
			if r != old && r.node.Status().Master {
				newMaster = r
			}
		}
		if newMaster != nil && old.node.Status().Master {
			t.Fatalf("tick %d: %d and %d both master", ticks, old.id, newMaster.id)
		}
	}
	if newMaster == nil {
		t.Fatal("no new master")
	}
	if ticks <= oldLeft {
		t.Fatalf("new master after %d ticks, but the old lease had %d left", ticks, oldLeft)
	}
	if old.node.Status().Master {
		t.Fatal("isolated old master still master")
	}
	t.Logf("old lease had %d ticks left; new master %d after %d ticks", oldLeft, newMaster.id, ticks)
}

// Planned hand-over: StepDown stops the master at once and the named
// successor becomes master well before the old lease could have run out.
func TestPlannedHandOver(t *testing.T) {
	tn := newTestNet(t, 5, nil)
	old := tn.elect(300)
	tn.tick(3)
	pid := tn.propose(old, "unplaced") // still waiting for a slot
	next := tn.rep(old.id%5 + 1)
	if err := old.node.StepDown(next.id); err != nil {
		t.Fatal(err)
	}
	if old.node.Status().Master || old.node.Status().IsLeader {
		t.Fatal("still master right after StepDown")
	}
	tn.deliver()
	if o, ok := old.outcome(pid); !ok || o.Err != ErrNotLeader {
		t.Fatalf("unplaced proposal outcome %v %v, want ErrNotLeader", o, ok)
	}
	ticks := 0
	for ; ticks < 100 && !next.node.Status().Master; ticks++ {
		tn.tick(1)
	}
	if !next.node.Status().Master {
		t.Fatal("successor never became master")
	}
	if ticks >= 10 {
		t.Fatalf("successor needed %d ticks; the hand-over should not wait out the lease (20)", ticks)
	}
	if err := next.node.StepDown(next.id); err == nil {
		t.Fatal("StepDown to self accepted")
	}
}

// A restarted acceptor keeps its promise: after a crash that loses unsynced
// writes it still refuses lower ballots, and reports what it accepted.
func TestRestartedAcceptorKeepsPromise(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	tn.tick(21)
	r := tn.rep(1)
	b5 := MakeBallot(5, 2)
	mustStep(t, r.node, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: b5, Slot: 1})
	r.handleReady(t)
	mustStep(t, r.node, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b5, Entries: []Entry{{Slot: 1, Ballot: b5, Value: val("kept", b5, 1)}}})
	r.handleReady(t)
	r.crash()
	r.restart(t, 5)
	if got := r.node.Status().Promised; got != b5 {
		t.Fatalf("promised %s after restart, want %s", got, b5)
	}
	b4 := MakeBallot(4, 3)
	mustStep(t, r.node, Message{Type: MsgPrepare, To: 1, From: 3, Ballot: b4, Slot: 1})
	mustStep(t, r.node, Message{Type: MsgAccept, To: 1, From: 3, Ballot: b4, Entries: []Entry{{Slot: 1, Ballot: b4}}})
	msgs := r.handleReady(t)
	if len(msgs) != 2 || msgs[0].Type != MsgReject || msgs[1].Type != MsgReject {
		t.Fatalf("restarted acceptor answered %s", describeMsgs(msgs))
	}
	for i := 0; i < 20; i++ {
		r.node.Tick()
	}
	b6 := MakeBallot(6, 3)
	mustStep(t, r.node, Message{Type: MsgPrepare, To: 1, From: 3, Ballot: b6, Slot: 1})
	msgs = r.handleReady(t)
	if len(msgs) != 1 || msgs[0].Type != MsgPromise || len(msgs[0].Entries) != 1 || msgs[0].Entries[0].Ballot != b5 {
		t.Fatalf("promise after restart: %s", describeMsgs(msgs))
	}
}

// Snapshot catch-up: a replica that was down while the others compacted
// gets the snapshot, then the tail, and ends with the same state.
func TestSnapshotCatchUp(t *testing.T) {
	tn := newTestNet(t, 3, func(c *Config) { c.MaxBatch = 1 })
	l := tn.elect(300)
	lag := tn.rep(l.id%3 + 1)
	lag.crash()
	for i := 0; i < 30; i++ {
		tn.propose(l, "x")
		tn.deliver()
	}
	for _, r := range tn.reps {
		if r.up {
			r.compact(t)
		}
	}
	for i := 0; i < 5; i++ { // a tail after the snapshot
		tn.propose(l, "tail")
		tn.deliver()
	}
	snaps := 0
	tn.drop = func(m Message) bool {
		if m.Type == MsgSnapshot && m.To == lag.id {
			snaps++
		}
		return false
	}
	lag.restart(t, 7)
	tn.tick(40)
	if snaps == 0 {
		t.Fatal("no snapshot was sent to the lagging replica")
	}
	if lag.app.applied != l.app.applied || lag.app.hash != l.app.hash {
		t.Fatalf("lagging replica at %d/%x, leader at %d/%x", lag.app.applied, lag.app.hash, l.app.applied, l.app.hash)
	}
	if lag.node.Status().Compacted < 30 {
		t.Fatalf("lagging replica's compaction point %d", lag.node.Status().Compacted)
	}
}

// Every accepted proposal gets exactly one outcome, even through a change of
// leader: placed ones when their slot is learned.
func TestOutcomesExactlyOnce(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	l := tn.elect(300)
	var pids []ProposalID
	// Proposals placed while followers cannot answer: undecided.
	tn.drop = func(m Message) bool { return m.From == l.id && m.Type == MsgAccept }
	for i := 0; i < 3; i++ {
		pids = append(pids, tn.propose(l, "p"))
		tn.deliver()
	}
	tn.drop = func(m Message) bool { return m.From == l.id || m.To == l.id }
	tn.tick(80) // the others elect a new leader; the old one steps down
	tn.drop = nil
	// The old leader rejoins without disrupting the new one (pre-vote), so
	// its undecided slots are decided only when the new leader proposes in
	// them: new traffic, as a cell always has.
	nl := tn.leader()
	if nl == nil || nl == l {
		t.Fatalf("no new leader after the old one was cut off")
	}
	for i := 0; i < 3; i++ {
		tn.propose(nl, "q")
		tn.deliver()
	}
	tn.tick(40)
	for _, id := range pids {
		n := 0
		for _, o := range l.outcomes {
			if o.ID == id {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("proposal %v has %d outcomes: %v", id, n, l.outcomes)
		}
	}
}

// A restarted acceptor must not help a second master while the first still
// counts the grant it made before the crash. Three replicas: the master M
// holds grants from itself and A; B is cut off from M and campaigns; A
// crashes, restarts and hears only B.
func TestRestartedAcceptorDoesNotEnableSecondMaster(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	m := tn.elect(300)
	a, b := tn.rep(m.id%3+1), tn.rep((m.id+1)%3+1)
	// B is cut off from M; M can still reach A.
	tn.drop = func(x Message) bool {
		return (x.From == m.id && x.To == b.id) || (x.From == b.id && x.To == m.id)
	}
	// B's election timer runs (at least 22 ticks); A keeps granting M.
	tn.tick(15)
	if !m.node.Status().Master {
		t.Fatal("M lost its lease")
	}
	a.crash()
	a.restart(t, 3)
	// Now A hears only B.
	tn.drop = func(x Message) bool { return x.From == m.id || x.To == m.id }
	for i := 0; i < 100; i++ {
		tn.tick(1)
		if m.node.Status().Master && b.node.Status().Master {
			t.Fatalf("tick %d: %d and %d both master", i, m.id, b.id)
		}
	}
	if !b.node.Status().Master {
		t.Fatal("B never became master once the old lease ran out")
	}
}

// With asynchronous writes the application may apply a chosen slot (its
// entry durable here) before the write that records the chosen index is:
// a crash in between restarts the node with Applied above the stored
// chosen index. Every applied slot was chosen, so the node counts it
// chosen and hands nothing out again; a slot applied but missing from the
// log is a storage error, not a silent gap.
func TestRestartAppliedAboveStoredChosen(t *testing.T) {
	b := MakeBallot(3, 2)
	cfg := Config{ID: 1, Replicas: ids(3), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 22, Seed: 7919}
	st := NewMemoryStorage()
	if err := st.Save(HardState{Promised: b}, []Entry{{Slot: 1, Ballot: b, Value: val("applied", b, 1)}}, true); err != nil {
		t.Fatal(err)
	}
	cfg.Storage, cfg.Applied = st, 1
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatalf("restart with Applied 1 above stored chosen 0: %v", err)
	}
	if s := n.Status(); s.Chosen != 1 || s.Applied != 1 {
		t.Fatalf("after restart chosen %d applied %d, want 1 and 1", s.Chosen, s.Applied)
	}
	if n.HasReady() {
		if rd := n.Ready(); len(rd.Chosen) > 0 {
			t.Fatalf("restart handed out applied slots again: %v", rd.Chosen)
		}
	}
	cfg.Storage, cfg.Applied = NewMemoryStorage(), 1
	if _, err := NewNode(cfg); err == nil {
		t.Fatal("restart with Applied 1 and an empty log: no error")
	}
}
