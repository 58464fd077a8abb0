package paxos

import (
	"errors"
	"testing"
)

// Paper tests: one test per sentence of Paxos Made Simple (Lamport, 2001)
// or Paxos Made Live (Chandra, Griesemer, Redstone, 2007), quoting it, in
// init / act / check form. They drive a bare node with hand-made messages.

// bareNode returns node id of a cell of n replicas, with small timers, its
// grants from NewNode already run out so it may promise.
func bareNode(t *testing.T, id ID, n int) (*Node, *MemoryStorage) {
	t.Helper()
	st := NewMemoryStorage()
	node, err := NewNode(Config{ID: id, Replicas: ids(n), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 1000, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		node.Tick()
	}
	drain(t, node, st)
	return node, st
}

// drain runs every Ready: persist, then collect messages.
func drain(t *testing.T, n *Node, st *MemoryStorage) Ready {
	t.Helper()
	var all Ready
	for n.HasReady() {
		rd := n.Ready()
		if err := st.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
			t.Fatal(err)
		}
		if !rd.HardState.IsEmpty() {
			all.HardState = rd.HardState
		}
		all.MustSync = all.MustSync || rd.MustSync
		all.Entries = append(all.Entries, rd.Entries...)
		all.Messages = append(all.Messages, rd.Messages...)
		all.Chosen = append(all.Chosen, rd.Chosen...)
		all.Outcomes = append(all.Outcomes, rd.Outcomes...)
		n.Advance(rd)
	}
	return all
}

func mustStep(t *testing.T, n *Node, m Message) {
	t.Helper()
	if err := n.Step(m); err != nil {
		t.Fatalf("Step(%v): %v", m, err)
	}
}

func val(data string, b Ballot, seq uint64) Value {
	return Value{Cmds: []Command{{ID: ProposalID{Ballot: b, Seq: seq}, Data: []byte(data)}}}
}

func onlyMsg(t *testing.T, rd Ready, typ MessageType) Message {
	t.Helper()
	if len(rd.Messages) != 1 || rd.Messages[0].Type != typ {
		t.Fatalf("want one %s, got %s", typ, describeMsgs(rd.Messages))
	}
	return rd.Messages[0]
}

// "P1. An acceptor must accept the first proposal that it receives."
// (Paxos Made Simple, §2.2)
func TestPaperAcceptorAcceptsFirstProposal(t *testing.T) {
	n, _ := bareNode(t, 1, 3)
	b := MakeBallot(1, 2)
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b, Entries: []Entry{{Slot: 1, Ballot: b, Value: val("v", b, 1)}}})
	rd := drain(t, n, NewMemoryStorage())
	m := onlyMsg(t, rd, MsgAccepted)
	if len(m.Slots) != 1 || m.Slots[0] != 1 || len(rd.Entries) != 1 || !rd.MustSync {
		t.Fatalf("accepted %v, persisted %v (sync %v)", m.Slots, rd.Entries, rd.MustSync)
	}
}

// "If an acceptor receives a prepare request with number n greater than that
// of any prepare request to which it has already responded, then it responds
// to the request with a promise not to accept any more proposals numbered
// less than n and with the highest-numbered proposal (if any) that it has
// accepted." (Paxos Made Simple, §2.2, Phase 1 (b))
func TestPaperPromiseCarriesHighestAccepted(t *testing.T) {
	n, st := bareNode(t, 1, 3)
	b1, b2 := MakeBallot(1, 2), MakeBallot(2, 3)
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b1, Entries: []Entry{{Slot: 1, Ballot: b1, Value: val("v", b1, 1)}}})
	drain(t, n, st)
	for i := 0; i < 20; i++ { // let the lease granted to b1 run out
		n.Tick()
	}
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 3, Ballot: b2, Slot: 1})
	rd := drain(t, n, st)
	p := onlyMsg(t, rd, MsgPromise)
	if len(p.Entries) != 1 || p.Entries[0].Ballot != b1 || string(p.Entries[0].Value.Cmds[0].Data) != "v" {
		t.Fatalf("promise entries %v", p.Entries)
	}
	// The promise: an accept below b2 is now refused.
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b1, Entries: []Entry{{Slot: 2, Ballot: b1}}})
	rd = drain(t, n, st)
	if r := onlyMsg(t, rd, MsgReject); r.Promised != b2 {
		t.Fatalf("reject carries promised %s, want %s", r.Promised, b2)
	}
}

// "An acceptor can accept a proposal numbered n iff it has not responded to
// a prepare request having a number greater than n." (Paxos Made Simple,
// §2.2, P1a)
func TestPaperAcceptIffNoHigherPromise(t *testing.T) {
	n, st := bareNode(t, 1, 3)
	b2, b3 := MakeBallot(2, 2), MakeBallot(3, 3)
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: b2, Slot: 1})
	drain(t, n, st)
	// Equal to the promise: accepted.
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{{Slot: 1, Ballot: b2}}})
	onlyMsg(t, drain(t, n, st), MsgAccepted)
	// Higher than the promise, with no prepare seen: accepted too.
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 3, Ballot: b3, Entries: []Entry{{Slot: 1, Ballot: b3}}})
	onlyMsg(t, drain(t, n, st), MsgAccepted)
	// Lower now: refused.
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{{Slot: 2, Ballot: b2}}})
	onlyMsg(t, drain(t, n, st), MsgReject)
}

// "If the proposer receives a response to its prepare requests (numbered n)
// from a majority of acceptors, then it sends an accept request to each of
// those acceptors for a proposal numbered n with a value v, where v is the
// value of the highest-numbered proposal among the responses, or is any
// value if the responses reported no proposals." (Paxos Made Simple, §2.2,
// Phase 2 (a))
func TestPaperLeaderReproposesHighestNumbered(t *testing.T) {
	n, st := bareNode(t, 1, 5)
	n.campaign()
	rd := drain(t, n, st)
	b := n.cand.ballot
	if len(rd.Messages) != 4 || !rd.MustSync || rd.HardState.Promised != b {
		t.Fatalf("campaign: %s, hs %+v sync %v", describeMsgs(rd.Messages), rd.HardState, rd.MustSync)
	}
	low, high := MakeBallot(b.Round()-1, 2), MakeBallot(b.Round()-1, 4)
	mustStep(t, n, Message{Type: MsgPromise, To: 1, From: 2, Ballot: b, Tick: n.now, Entries: []Entry{{Slot: 1, Ballot: low, Value: val("low", low, 1)}}})
	mustStep(t, n, Message{Type: MsgPromise, To: 1, From: 4, Ballot: b, Tick: n.now, Entries: []Entry{{Slot: 1, Ballot: high, Value: val("high", high, 1)}, {Slot: 3, Ballot: low, Value: val("three", low, 2)}}})
	rd = drain(t, n, st)
	if !n.Status().IsLeader {
		t.Fatal("no leader after a majority of promises")
	}
	var acc Message
	for _, m := range rd.Messages {
		if m.Type == MsgAccept {
			acc = m
		}
	}
	got := describeEntries(acc.Entries)
	want := describeEntries([]Entry{{Slot: 1, Ballot: b, Value: val("high", high, 1)}, {Slot: 2, Ballot: b}, {Slot: 3, Ballot: b, Value: val("three", low, 2)}})
	if got != want {
		t.Fatalf("leader proposed %s, want %s", got, want)
	}
	if string(acc.Entries[0].Value.Cmds[0].Data) != "high" {
		t.Fatalf("slot 1 carries %q, want the highest-numbered value", acc.Entries[0].Value.Cmds[0].Data)
	}
}

// "A newly chosen leader executes phase 1 for infinitely many instances of
// the consensus algorithm ... Using the same proposal number for all
// instances, it can do this by sending a single reasonably short message to
// the other servers." (Paxos Made Simple, §3)
func TestPaperOnePrepareForAllSlots(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	l := tn.elect(200)
	for i := 0; i < 5; i++ {
		tn.propose(l, "x")
		tn.deliver()
	}
	prepares := 0
	tn.drop = func(m Message) bool {
		if m.Type == MsgPrepare {
			prepares++
		}
		return false
	}
	// A stable leader skips Phase 1: many more proposals, no Prepare.
	for i := 0; i < 20; i++ {
		tn.propose(l, "y")
		tn.tick(1)
	}
	if prepares != 0 {
		t.Fatalf("stable leader sent %d prepares", prepares)
	}
	if st := l.node.Status(); st.Chosen < 6 {
		t.Fatalf("chosen %d", st.Chosen)
	}
}

// "the leader ... proposes ... a special "no-op" command that leaves the
// state unchanged" to fill gaps (Paxos Made Simple, §3).
func TestPaperFillsGapsWithNoops(t *testing.T) {
	n, st := bareNode(t, 1, 3)
	n.campaign()
	drain(t, n, st)
	b := n.cand.ballot
	old := MakeBallot(b.Round()-1, 3)
	mustStep(t, n, Message{Type: MsgPromise, To: 1, From: 2, Ballot: b, Tick: n.now, Entries: []Entry{{Slot: 4, Ballot: old, Value: val("four", old, 1)}}})
	rd := drain(t, n, st)
	var acc Message
	for _, m := range rd.Messages {
		if m.Type == MsgAccept {
			acc = m
		}
	}
	if len(acc.Entries) != 4 {
		t.Fatalf("accept %v", acc)
	}
	for _, e := range acc.Entries[:3] {
		if !e.Value.IsNoop() {
			t.Fatalf("gap slot %d holds %v, want no-op", e.Slot, e.Value)
		}
	}
}

// "the acceptor must record [its promise] on disk before responding"; in
// Paxos Made Live terms, a replica's promise and accepted values are part of
// its durable state (§4: "disk corruption ... a replica may renege on
// promises it has made"). The node marks them MustSync.
func TestPaperPromiseIsDurableBeforeReply(t *testing.T) {
	n, _ := bareNode(t, 1, 3)
	b := MakeBallot(5, 2)
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: b, Slot: 1})
	rd := n.Ready()
	if rd.HardState.Promised != b || !rd.MustSync || len(rd.Messages) != 1 {
		t.Fatalf("Ready %+v: the promise must be persisted, synced, in the same Ready as the reply", rd)
	}
}

// "A replica that has accepted a ... [master lease] ... will not ... acknowledge
// prepare messages from other replicas" while the lease lasts, and "the
// master ... periodically ... renews its lease" (Paxos Made Live §5.2,
// "Master leases"; Chubby §2.12). The refusal says how long is left.
func TestPaperLeaseBlocksOtherProposers(t *testing.T) {
	n, st := bareNode(t, 1, 3)
	b := MakeBallot(1, 2)
	mustStep(t, n, Message{Type: MsgAccept, To: 1, From: 2, Ballot: b, Tick: 1})
	drain(t, n, st)
	n.Tick()
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 3, Ballot: MakeBallot(2, 3), Slot: 1})
	r := onlyMsg(t, drain(t, n, st), MsgReject)
	if r.LeaseLeft != 19 || n.Status().Promised != b {
		t.Fatalf("reject %v, promised %s", r, n.Status().Promised)
	}
	for i := 0; i < 19; i++ {
		n.Tick()
	}
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 3, Ballot: MakeBallot(2, 3), Slot: 1})
	onlyMsg(t, drain(t, n, st), MsgPromise)
}

// "the new master ... must ... wait for the lease of the old master to
// expire" (Paxos Made Live, §5.2); a restarted replica cannot know what it
// granted, so it waits a full lease before promising.
func TestPaperRestartedAcceptorWaitsOutGrants(t *testing.T) {
	st := NewMemoryStorage()
	n, err := NewNode(Config{ID: 1, Replicas: ids(3), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 1000, Storage: st})
	if err != nil {
		t.Fatal(err)
	}
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: MakeBallot(1, 2), Slot: 1})
	if r := onlyMsg(t, drain(t, n, st), MsgReject); r.LeaseLeft != 20 {
		t.Fatalf("reject %v", r)
	}
	for i := 0; i < 20; i++ {
		n.Tick()
	}
	mustStep(t, n, Message{Type: MsgPrepare, To: 1, From: 2, Ballot: MakeBallot(1, 2), Slot: 1})
	onlyMsg(t, drain(t, n, st), MsgPromise)
}

// Propose outside leadership is refused with ErrNotLeader (Chubby §2.2:
// clients find the master and send it their requests).
func TestPaperProposeNeedsLeader(t *testing.T) {
	n, _ := bareNode(t, 1, 3)
	if _, err := n.Propose([]byte("x")); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Propose on a follower: %v", err)
	}
}
