package paxos

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// sampleMessages returns one fully populated message of every type.
func sampleMessages() []Message {
	b := MakeBallot(7, 2)
	ents := []Entry{
		{Slot: 4, Ballot: b, Value: Value{Cmds: []Command{{ID: ProposalID{Ballot: b, Seq: 1}, Data: []byte("a")}}}},
		{Slot: 5, Ballot: b, Value: Value{Cmds: []Command{}}},
	}
	return []Message{
		{Type: MsgPrepare, To: 1, From: 2, Ballot: b, Slot: 4, Commit: 3, Tick: 98},
		{Type: MsgPromise, To: 2, From: 1, Ballot: b, Commit: 4, Compacted: 2, Entries: ents, Tick: 98},
		{Type: MsgAccept, To: 1, From: 2, Ballot: b, Commit: 3, Tick: 99, Entries: ents},
		{Type: MsgAccepted, To: 2, From: 1, Ballot: b, Commit: 3, Tick: 99, Slots: []Slot{4, 5}},
		{Type: MsgReject, To: 2, From: 1, Ballot: b, Promised: MakeBallot(8, 3), LeaseLeft: 17, Commit: 1},
		{Type: MsgLearnReq, To: 1, From: 2, Slot: 4, Commit: 3},
		{Type: MsgLearn, To: 2, From: 1, Commit: 5, Entries: ents},
		{Type: MsgSnapshot, To: 2, From: 1, Commit: 9, Snapshot: Snapshot{Slot: 9, Data: []byte("state")}},
		{Type: MsgRelease, To: 1, From: 2, Ballot: b, Commit: 3},
		{Type: MsgTimeoutNow, To: 3, From: 2, Ballot: b, Commit: 3},
		{Type: MsgRebuild, To: 1, From: 2, Slot: 40, Commit: 3, Nonce: 0xfeed},
		{Type: MsgRebuildAck, To: 2, From: 1, Promised: b, Slot: 41, Commit: 39, Nonce: 0xfeed},
		{Type: MsgPreVote, To: 1, From: 2, Commit: 3, Tick: 97, Nonce: 0xbeef},
		{Type: MsgPreVoteResp, To: 2, From: 1, Commit: 4, Tick: 97, Nonce: 0xbeef, Promised: b, LeaseLeft: 12},
	}
}

func TestMessageMsgpackRoundTrip(t *testing.T) {
	seen := map[MessageType]bool{}
	for _, m := range sampleMessages() {
		seen[m.Type] = true
		b, err := msgpack.Marshal(&m)
		if err != nil {
			t.Fatalf("%s: marshal: %v", m.Type, err)
		}
		var got Message
		if err := msgpack.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: unmarshal: %v", m.Type, err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: round trip changed the message:\n got %#v\nwant %#v", m.Type, got, m)
		}
		again, _ := msgpack.Marshal(&got)
		if string(again) != string(b) {
			t.Errorf("%s: re-encoding differs", m.Type)
		}
	}
	for typ := MessageType(1); typ < msgTypeEnd; typ++ {
		if !seen[typ] {
			t.Errorf("message type %s has no round-trip sample", typ)
		}
	}
}

// TestStepRejectsBadInput feeds malformed messages to a node and checks each
// is refused with ErrInvalidMessage and changes nothing.
func TestStepRejectsBadInput(t *testing.T) {
	b2 := MakeBallot(3, 2)
	e := func(s Slot, b Ballot) Entry { return Entry{Slot: s, Ballot: b} }
	cases := []struct {
		name string
		m    Message
	}{
		{"wrong To", Message{Type: MsgPrepare, To: 9, From: 2, Ballot: b2, Slot: 1}},
		{"unknown sender", Message{Type: MsgPrepare, To: 1, From: 7, Ballot: MakeBallot(3, 7), Slot: 1}},
		{"from self", Message{Type: MsgPrepare, To: 1, From: 1, Ballot: MakeBallot(3, 1), Slot: 1}},
		{"unknown type", Message{Type: 200, To: 1, From: 2}},
		{"zero type", Message{Type: 0, To: 1, From: 2}},
		{"prepare with foreign ballot", Message{Type: MsgPrepare, To: 1, From: 2, Ballot: MakeBallot(3, 3), Slot: 1}},
		{"prepare from slot 0", Message{Type: MsgPrepare, To: 1, From: 2, Ballot: b2}},
		{"accept entry at another ballot", Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{e(1, MakeBallot(2, 2))}}},
		{"accept slot 0", Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{e(0, b2)}}},
		{"accept slots unordered", Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{e(3, b2), e(2, b2)}}},
		{"accept slot beyond MaxSlot", Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Entries: []Entry{e(MaxSlot+1, b2)}}},
		{"commit beyond MaxSlot", Message{Type: MsgAccept, To: 1, From: 2, Ballot: b2, Commit: MaxSlot + 1}},
		{"promise for a foreign ballot", Message{Type: MsgPromise, To: 1, From: 2, Ballot: b2}},
		{"accepted for a foreign ballot", Message{Type: MsgAccepted, To: 1, From: 2, Ballot: b2, Slots: []Slot{1}}},
		{"accepted duplicate slots", Message{Type: MsgAccepted, To: 1, From: 2, Ballot: MakeBallot(1, 1), Slots: []Slot{1, 1}}},
		{"learn above commit", Message{Type: MsgLearn, To: 1, From: 2, Commit: 1, Entries: []Entry{e(2, b2)}}},
		{"learn with a gap", Message{Type: MsgLearn, To: 1, From: 2, Commit: 9, Entries: []Entry{e(1, b2), e(3, b2)}}},
		{"snapshot above commit", Message{Type: MsgSnapshot, To: 1, From: 2, Commit: 1, Snapshot: Snapshot{Slot: 5}}},
		{"snapshot at 0", Message{Type: MsgSnapshot, To: 1, From: 2, Commit: 1}},
		{"learnreq from 0", Message{Type: MsgLearnReq, To: 1, From: 2}},
		{"release of a foreign ballot", Message{Type: MsgRelease, To: 1, From: 2, Ballot: MakeBallot(3, 3)}},
		{"timeoutnow without ballot", Message{Type: MsgTimeoutNow, To: 1, From: 2}},
		{"rebuild without nonce", Message{Type: MsgRebuild, To: 1, From: 2, Slot: 4}},
		{"rebuild ack without nonce", Message{Type: MsgRebuildAck, To: 1, From: 2, Slot: 4}},
		{"rebuild beyond MaxSlot", Message{Type: MsgRebuild, To: 1, From: 2, Slot: MaxSlot + 1, Nonce: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tn := newTestNet(t, 3, nil)
			n := tn.rep(1).node
			before := nodeDigest(n)
			err := n.Step(c.m)
			if !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("Step(%v) = %v, want ErrInvalidMessage", c.m, err)
			}
			if after := nodeDigest(n); after != before {
				t.Fatalf("Step(%v) changed the node:\n%s\n%s", c.m, before, after)
			}
		})
	}
}

// nodeDigest renders the parts of a node's state that Step could change.
func nodeDigest(n *Node) string {
	st := n.Status()
	return describeStatus(st) + " " + describeMsgs(n.msgs) + " " + describeEntries(n.unsaved) +
		" " + describeEntries(logEntries(n)) + " " + fmtAny(n.grantBallot, n.grantLeft, n.released, n.maxRound, n.learnWait, len(n.outcomes), n.electionElapsed, n.campaignASAP)
}
