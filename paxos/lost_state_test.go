package paxos

import (
	"errors"
	"fmt"
	"testing"
)

// Scenario tests for a replica that lost its durable state: each builds the
// exact interleaving in which a forgetting acceptor that votes at once lets
// two values be chosen for one slot, and shows that the rebuild rule (see
// the package documentation, "Lost state") prevents it. Each runs with the
// rule on (no conflict) and off (the conflict appears), which proves the
// scenario and its checker can fail.

// TestLostState runs each scenario with the rebuild rule (no conflict) and
// without it (the conflict must appear).
func TestLostState(t *testing.T) {
	for _, sc := range []struct {
		name string
		run  func(t *testing.T, rebuild bool) string
	}{
		{"ForgottenPromise", forgottenPromise},
		{"ForgottenAccept", forgottenAccept},
		{"InFlightAccept", inFlightAccept},
	} {
		t.Run(sc.name, func(t *testing.T) {
			if c := sc.run(t, true); c != "" {
				t.Fatalf("with the rebuild rule: %s", c)
			}
		})
		t.Run(sc.name+"WithoutRebuild", func(t *testing.T) {
			c := sc.run(t, false)
			if c == "" {
				t.Fatal("no conflict although the wiped replica voted at once: the scenario cannot fail")
			}
			t.Logf("as expected without the rule: %s", c)
		})
	}
}

// wipeAndRestart loses every byte of r's durable state, as a replaced disk
// would, and restarts it; with rebuild it restarts as a rebuilding learner
// (what the cell does when it detects the loss), without it votes at once.
func wipeAndRestart(t *testing.T, r *replica, rebuild bool) {
	t.Helper()
	r.crash()
	r.store.wipe()
	r.lost, r.rebuildOnLoss = true, rebuild
	r.restart(t, uint64(r.id)*31)
	r.lost = false
}

// chosenConflict reports a slot that two replicas know chosen with
// different values, or "".
func chosenConflict(tn *testNet) string {
	var top Slot
	for _, r := range tn.reps {
		if r.up {
			top = max(top, r.node.chosen)
		}
	}
	for s := Slot(1); s <= top; s++ {
		var first *replica
		for _, r := range tn.reps {
			if !r.up || r.node.chosen < s || s <= r.node.compacted {
				continue
			}
			if first == nil {
				first = r
				continue
			}
			if a, b := first.node.log[s].Value, r.node.log[s].Value; !sameValue(a, b) {
				return fmt.Sprintf("slot %d chosen as %s at replica %d and %s at replica %d",
					s, describeEntry(first.node.log[s]), first.id, describeEntry(r.node.log[s]), r.id)
			}
		}
	}
	return ""
}

// links returns a drop function that lets a message through only between
// the listed pairs (in both directions).
func links(pairs ...[2]ID) func(Message) bool {
	ok := map[[2]ID]bool{}
	for _, p := range pairs {
		ok[p], ok[[2]ID{p[1], p[0]}] = true, true
	}
	return func(m Message) bool { return !ok[[2]ID{m.From, m.To}] }
}

// leaderWithOneSlot returns a cell of n in which nobody campaigns on its
// own, replica 1 leads, and slot 1 is chosen.
func leaderWithOneSlot(t *testing.T, n int) *testNet {
	t.Helper()
	tn := newTestNet(t, n, func(c *Config) { c.ElectionTicks = 1000 })
	tn.tick(21) // the grants every replica starts with run out
	one := tn.rep(1)
	one.node.campaign()
	tn.deliver()
	tn.tick(2)
	tn.propose(one, "a")
	tn.tick(2)
	if one.node.chosen != 1 {
		t.Fatalf("slot 1 not chosen: %s", describeLog(one))
	}
	return tn
}

// untilVoting ticks until r votes again (or limit ticks pass).
func untilVoting(t *testing.T, tn *testNet, r *replica, limit int) {
	t.Helper()
	for i := 0; i < limit; i++ {
		if r.node.voting() {
			return
		}
		tn.tick(1)
	}
	t.Fatalf("replica %d still rebuilding after %d ticks: %+v", r.id, limit, r.node.Status().Rebuild)
}

// forgottenPromise: replica 2 promises replica 5's ballot B (helping 5
// become leader) and then loses its disk. The old leader 1, cut off from 5
// and 3 but not from 2 and 4, still proposes at its lower ballot b1. If 2
// votes at once it accepts b1, so {1,2,4} choose 1's value in slot 2, while
// 5, relying on 2's forgotten promise, has {5,2,3} choose its own value in
// the same slot. It returns the conflict, if any.
func forgottenPromise(t *testing.T, rebuild bool) string {
	tn := leaderWithOneSlot(t, 5)
	one, two, five := tn.rep(1), tn.rep(2), tn.rep(5)
	// 1 is cut off until every grant to it runs out; then 5 wins with 2
	// and 3 (4 never hears of ballot B).
	tn.drop = links([2]ID{2, 3}, [2]ID{2, 4}, [2]ID{3, 4}, [2]ID{2, 5}, [2]ID{3, 5})
	tn.tick(25)
	five.node.campaign()
	tn.deliver()
	tn.tick(1)
	if !five.node.Status().IsLeader {
		t.Fatalf("5 did not win: %+v", five.node.Status())
	}
	wipeAndRestart(t, two, rebuild)
	// 1 reaches 2 and 4 again; 5 still reaches only 2 and 3.
	tn.drop = links([2]ID{1, 2}, [2]ID{1, 4}, [2]ID{2, 3}, [2]ID{2, 4}, [2]ID{3, 4}, [2]ID{2, 5}, [2]ID{3, 5})
	if rebuild {
		untilVoting(t, tn, two, 200)
	}
	tn.propose(one, "old leader")
	tn.deliver()
	tn.propose(five, "new leader")
	tn.deliver()
	tn.tick(12)
	return chosenConflict(tn)
}

// forgottenAccept: in a cell of three, slot 2's value is chosen by 1 and 2;
// 2 loses its disk and 1 is cut off. If 2 votes at once, 3 (which never
// saw slot 2) wins with 2's empty promise and chooses another value there.
func forgottenAccept(t *testing.T, rebuild bool) string {
	tn := leaderWithOneSlot(t, 3)
	one, two, three := tn.rep(1), tn.rep(2), tn.rep(3)
	tn.drop = links([2]ID{1, 2})
	tn.propose(one, "acknowledged")
	tn.tick(2)
	if one.node.chosen != 2 {
		t.Fatalf("slot 2 not chosen: %s", describeLog(one))
	}
	wipeAndRestart(t, two, rebuild)
	tn.drop = links([2]ID{2, 3})
	tn.tick(25) // every grant to 1 runs out
	three.node.campaign()
	tn.deliver()
	tn.tick(40)
	if three.node.Status().IsLeader {
		tn.propose(three, "other")
		tn.tick(5)
	} else if !rebuild {
		t.Fatalf("3 did not win with 2's empty promise: %+v", three.node.Status())
	}
	// 1 comes back: with the rule, 2 rebuilds from it and slot 2 keeps its
	// value.
	tn.drop = nil
	tn.tick(80)
	if rebuild && !two.node.voting() {
		t.Fatalf("2 still rebuilding with every replica reachable: %+v", two.node.Status().Rebuild)
	}
	if rebuild && (three.node.chosen < 2 || string(three.node.log[2].Value.Cmds[0].Data) != "acknowledged") {
		t.Fatalf("slot 2 lost its chosen value: %s", describeLog(three))
	}
	return chosenConflict(tn)
}

// inFlightAccept: leader 1 sends slot 2's value to 2 and 3; 2 accepts and
// its acknowledgement reaches 1, then 2 loses its disk; the Accept to 3 is
// held in the network. 2 rebuilds by asking 3, 4 and 5 (1 is cut off from
// it), which have not seen slot 2, and votes again. Then 3 gets the held
// Accept: if 1 still counted 2's forgotten acknowledgement, {1,2,3} would
// choose the value, while 4, campaigning with 2 and 5, sees nothing in slot
// 2 and chooses another. The wait (a rebuilding replica waits out the
// lease term) and the bounded life of votes at their collector prevent it.
func inFlightAccept(t *testing.T, rebuild bool) string {
	tn := leaderWithOneSlot(t, 5)
	one, two, four := tn.rep(1), tn.rep(2), tn.rep(4)
	var held []Message
	tn.drop = func(m Message) bool {
		if m.From == 1 && m.To == 3 && m.Type == MsgAccept && len(m.Entries) > 0 {
			held = append(held, m)
			return true
		}
		return m.From == 1 && m.To != 2 || m.To == 1 && m.From != 2
	}
	tn.propose(one, "in flight")
	tn.deliver()
	if len(held) == 0 || one.node.chosen != 1 {
		t.Fatalf("setup: held %d, chosen %d", len(held), one.node.chosen)
	}
	wipeAndRestart(t, two, rebuild)
	// 1 is cut off from everyone; 1's Accepts to 3 stay held.
	tn.drop = func(m Message) bool {
		if m.From == 1 && m.To == 3 && m.Type == MsgAccept && len(m.Entries) > 0 {
			held = append(held, m)
		}
		return m.From == 1 || m.To == 1
	}
	if rebuild {
		untilVoting(t, tn, two, 200)
	}
	// The held Accept reaches 3; 3's acknowledgement reaches 1.
	tn.drop = func(m Message) bool { return (m.From == 1 || m.To == 1) && !(m.From == 3 || m.To == 3) }
	tn.queue = append(tn.queue, held[0])
	tn.deliver()
	// 4 campaigns with 2 and 5 only.
	tn.drop = func(m Message) bool { return m.From == 1 || m.To == 1 || m.From == 3 || m.To == 3 }
	tn.tick(25)
	four.node.campaign()
	tn.deliver()
	tn.tick(2)
	if four.node.Status().IsLeader {
		tn.propose(four, "other")
		tn.tick(5)
	}
	return chosenConflict(tn)
}

// TestRebuildStepByStep drives one rebuilding node by hand through its
// phases: it makes the Rebuilding flag durable first, answers no Prepare or
// Accept, probes only after LeaseTicks, ignores answers to another probe,
// adopts the highest promised ballot answered, catches up to the highest
// slot answered, and votes only once the rejoining hard state is Advanced.
func TestRebuildStepByStep(t *testing.T) {
	st := NewMemoryStorage()
	n, err := NewNode(Config{ID: 1, Replicas: ids(5), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 1000, Storage: st, Rebuild: true})
	if err != nil {
		t.Fatal(err)
	}
	rd := n.Ready()
	if !rd.HardState.Rebuilding || !rd.MustSync {
		t.Fatalf("first Ready: hard state %+v, sync %v; want the Rebuilding flag made durable", rd.HardState, rd.MustSync)
	}
	if err := st.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		t.Fatal(err)
	}
	n.Advance(rd)
	b := MakeBallot(3, 2)
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: b, Slot: 1})
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b, Commit: 1, Entries: []Entry{{Slot: 1, Ballot: b, Value: val("x", b, 1)}}})
	for i := 0; i < 19; i++ {
		n.Tick()
	}
	rd = drain(t, n, st)
	for _, m := range rd.Messages {
		if m.Type != MsgLearnReq {
			t.Fatalf("rebuilding node sent %v before its wait ended", m)
		}
	}
	if len(rd.Entries) != 0 || n.promised != 0 {
		t.Fatalf("rebuilding node accepted %v / promised %s", rd.Entries, n.promised)
	}
	if ph := n.Status().Rebuild.Phase; ph != RebuildWaiting {
		t.Fatalf("phase %s after 19 ticks, want waiting", ph)
	}
	n.Tick()
	rd = drain(t, n, st)
	var nonce uint64
	probes := 0
	for _, m := range rd.Messages {
		if m.Type == MsgRebuild {
			probes++
			nonce = m.Nonce
		}
	}
	if probes != 4 || nonce == 0 {
		t.Fatalf("after the wait: %s; want a probe to each of 4 peers", describeMsgs(rd.Messages))
	}
	high := MakeBallot(9, 4)
	mustStep(t, n, Message{Type: MsgRebuildAck, To: 1, From: 2, Promised: b, Slot: 1, Commit: 1, Nonce: nonce})
	mustStep(t, n, Message{Type: MsgRebuildAck, To: 1, From: 3, Promised: MakeBallot(99, 3), Slot: 50, Nonce: nonce ^ 1}) // another probe's
	mustStep(t, n, Message{Type: MsgRebuildAck, To: 1, From: 3, Promised: b, Slot: 1, Commit: 1, Nonce: nonce})
	if ph := n.Status().Rebuild.Phase; ph != RebuildProbing {
		t.Fatalf("phase %s with 2 of 3 answers", ph)
	}
	mustStep(t, n, Message{Type: MsgRebuildAck, To: 1, From: 4, Promised: high, Slot: 2, Commit: 0, Nonce: nonce})
	if rs := n.Status().Rebuild; rs.Phase != RebuildCatchingUp || rs.Target != 2 || rs.Promised != high {
		t.Fatalf("after 3 answers: %+v; want catching up to slot 2, promise %s", rs, high)
	}
	drain(t, n, st)
	v := val("x", b, 1)
	mustStep(t, n, Message{Type: MsgLearn, To: 1, From: 2, Commit: 1, Entries: []Entry{{Slot: 1, Ballot: b, Value: v}}})
	drain(t, n, st)
	if n.Status().Rebuild.Phase != RebuildCatchingUp {
		t.Fatalf("rejoining before slot 2 is known chosen: %+v", n.Status().Rebuild)
	}
	mustStep(t, n, Message{Type: MsgLearn, To: 1, From: 2, Commit: 2, Entries: []Entry{{Slot: 2, Ballot: b}}})
	if n.Status().Rebuild.Phase != RebuildRejoining || n.voting() {
		t.Fatalf("after catching up: %+v, voting %v", n.Status().Rebuild, n.voting())
	}
	rd = n.Ready()
	if rd.HardState.Rebuilding || rd.HardState.Promised != high || !rd.MustSync {
		t.Fatalf("rejoining hard state %+v sync %v; want promise %s, flag cleared, synced", rd.HardState, rd.MustSync, high)
	}
	if err := st.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		t.Fatal(err)
	}
	if n.voting() {
		t.Fatal("voting before the rejoining hard state was Advanced")
	}
	n.Advance(rd)
	if !n.voting() || n.Status().Rebuild.Phase != RebuildNone {
		t.Fatalf("not voting after Advance: %+v", n.Status().Rebuild)
	}
	// It now refuses the ballot below its adopted promise.
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b, Entries: []Entry{{Slot: 3, Ballot: b}}})
	if r := onlyMsg(t, drain(t, n, st), MsgReject); r.Promised != high {
		t.Fatalf("reject carries %s, want %s", r.Promised, high)
	}
}

// A node restarted from storage whose hard state says Rebuilding resumes
// the rebuild from the start (a restart does not shorten it).
func TestRebuildSurvivesRestart(t *testing.T) {
	st := NewMemoryStorage()
	if err := st.Save(HardState{Promised: MakeBallot(2, 2), Chosen: 0, Rebuilding: true}, nil, true); err != nil {
		t.Fatal(err)
	}
	n, err := NewNode(Config{ID: 1, Replicas: ids(3), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 30, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	if rs := n.Status().Rebuild; rs.Phase != RebuildWaiting || rs.TicksLeft != 20 {
		t.Fatalf("restarted mid-rebuild: %+v", rs)
	}
	for i := 0; i < 200; i++ {
		n.Tick()
	}
	drain(t, n, st)
	if n.role != Follower || n.promised != MakeBallot(2, 2) {
		t.Fatalf("rebuilding node campaigned: role %s promised %s", n.role, n.promised)
	}
}

// A leader asked by a rebuilding replica to let the log reach a slot fills
// it with no-ops when nothing else is pending.
func TestLeaderFillsForRebuild(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	l := tn.elect(300)
	tn.propose(l, "a")
	tn.tick(2)
	other := tn.rep(l.id%3 + 1)
	mustStep(t, l.node, Message{Type: MsgRebuild, To: l.id, From: other.id, Slot: 6, Nonce: 7})
	tn.tick(6)
	if l.node.chosen < 6 {
		t.Fatalf("leader's log reached %d, asked to reach 6", l.node.chosen)
	}
	for s := Slot(2); s <= 6; s++ {
		if !l.node.log[s].Value.IsNoop() {
			t.Fatalf("slot %d holds %v, want a no-op", s, l.node.log[s].Value)
		}
	}
}

// A Promise that echoes a tick the candidate has not reached is refused:
// it would make the promise count longer than it may.
func TestPromiseFromTheFutureRefused(t *testing.T) {
	n, st := bareNode(t, 1, 3)
	n.campaign()
	drain(t, n, st)
	err := n.Step(Message{Type: MsgPromise, To: 1, From: 2, Ballot: n.cand.ballot, Tick: n.now + 1})
	if !errors.Is(err, ErrInvalidMessage) {
		t.Fatalf("Step = %v, want ErrInvalidMessage", err)
	}
}
