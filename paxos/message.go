package paxos

import (
	"fmt"
	"strings"
)

// MessageType says what a Message means and which of its fields are used.
type MessageType uint8

// The message types. Every message carries Type, To, From and Commit (the
// sender's chosen index, so any message can tell its receiver it is behind).
const (
	// MsgPrepare (Phase 1a): a candidate asks for a promise on Ballot for
	// every slot from Slot onward. Tick is the candidate's tick count when it
	// sent the message. Released, if not 0, relays a ballot whose leader
	// stepped down and released its lease (handover.go).
	MsgPrepare MessageType = iota + 1
	// MsgPromise (Phase 1b): the acceptor promised Ballot; Entries are all it
	// accepted from the Prepare's Slot onward (the ones at or below Commit
	// hold chosen values); Compacted is its snapshot slot (it holds no
	// entries at or below it); Tick echoes the Prepare's Tick.
	MsgPromise
	// MsgAccept (Phase 2a): the leader with Ballot asks to accept Entries
	// (all at Ballot; none for a heartbeat) and asks for a lease grant. Tick
	// is the leader's tick count when it sent the message.
	MsgAccept
	// MsgAccepted (Phase 2b): the acceptor accepted Slots at Ballot and
	// granted the lease; Tick echoes the Accept's Tick.
	MsgAccepted
	// MsgReject: the acceptor refused Ballot because it promised Promised,
	// or because a lease it granted to another leader has LeaseLeft ticks to
	// run.
	MsgReject
	// MsgLearnReq asks the receiver for the chosen values from Slot onward.
	MsgLearnReq
	// MsgLearn carries chosen values (Entries, contiguous) for a learner.
	MsgLearn
	// MsgSnapshot carries a snapshot for a learner that is behind the
	// sender's compaction point; it asks for the tail with MsgLearnReq.
	MsgSnapshot
	// MsgRelease: the leader with Ballot stepped down; acceptors drop its
	// lease grant.
	MsgRelease
	// MsgTimeoutNow: the leader with Ballot stepped down and asks the
	// receiver to campaign at once (it also releases the grant).
	MsgTimeoutNow
	// MsgRebuild: a rebuilding replica asks a voting replica for its
	// promised ballot and its highest accepted slot (MsgRebuildAck, echoing
	// Nonce). Slot, if not zero, also asks a leader to let the log reach
	// Slot, filling it with no-ops if nothing else is proposed.
	MsgRebuild
	// MsgRebuildAck answers MsgRebuild: Promised is the sender's promised
	// ballot, Slot its highest accepted slot (or snapshot slot), Nonce the
	// request's.
	MsgRebuildAck
	// MsgPreVote: a follower whose election timer fired asks whether the
	// receiver would vote for it if it campaigned, before it raises any
	// ballot (see prevote.go). Tick is the sender's tick count when it
	// asked; Nonce names the pre-vote. New types are appended, so the wire numbers of the ones above
	// never change.
	MsgPreVote
	// MsgPreVoteResp answers MsgPreVote, echoing its Tick and Nonce: a grant if
	// LeaseLeft is 0; otherwise a refusal, because the receiver still hears
	// a live master (or holds a live lease grant) for about LeaseLeft more
	// of its ticks. Promised is the receiver's promised ballot.
	MsgPreVoteResp

	msgTypeEnd // one past the last type
)

// DependsOnPersist reports whether m may leave the replica only once the
// HardState and Entries of the Ready that carries it are durable. It is
// false for the messages whose correctness rests on nothing this Ready
// persists, which the caller may send BEFORE persisting (so that, for
// example, a leader's fsync of its own accept overlaps the followers'):
//
//   - MsgAccept: the leader's ballot was made durable (as its own promise)
//     before it won Phase 1 (see MsgPrepare), so before any Accept under it
//     was made, and it is never reused after a crash; the leader
//     counts its own acceptance only once it is durable (Advance, or
//     Persisted with Config.AsyncWrites);
//     and its lease is counted from the tick the Accept was made, which is
//     no later than when it leaves.
//   - MsgPrepare: it asks for promises and promises nothing itself. The
//     candidate's own promise of its ballot is in the same Ready, and the
//     candidate wins Phase 1, and so makes its first Accept, only once
//     that promise is durable (Advance or Persisted; tryWin), however many answers it
//     has counted. A candidate that crashes before its promise is durable
//     has therefore made no Accept under the ballot: if it reuses the
//     ballot after the restart, the only values ever accepted under it are
//     the ones its second life proposes. Sending it early lets the
//     candidate's fsync of its own promise overlap the acceptors' (in an
//     election, and for a hand-over's successor).
//   - MsgLearn, MsgLearnReq, MsgSnapshot: chosen values are facts, not
//     promises; a request for them promises nothing.
//   - MsgRelease, MsgTimeoutNow: the leader already stopped acting as
//     master in memory when it made them.
//   - MsgRebuild: a rebuilding replica's request promises nothing.
//   - MsgPreVote, MsgPreVoteResp: a pre-vote changes no durable state and
//     binds nobody; a grant is only advice to the asker.
//
// Promise, Accepted, Reject and RebuildAck (an acceptor's answers) depend
// on persistence: invariant 2. With Config.AsyncWrites the node holds them
// back itself until the write they depend on is reported durable.
func (m Message) DependsOnPersist() bool {
	switch m.Type {
	case MsgPrepare, MsgAccept, MsgLearn, MsgLearnReq, MsgSnapshot, MsgRelease, MsgTimeoutNow, MsgRebuild, MsgPreVote, MsgPreVoteResp:
		return false
	}
	return true
}

var msgTypeNames = [...]string{
	MsgPrepare: "Prepare", MsgPromise: "Promise", MsgAccept: "Accept", MsgAccepted: "Accepted",
	MsgReject: "Reject", MsgLearnReq: "LearnReq", MsgLearn: "Learn", MsgSnapshot: "Snapshot",
	MsgRelease: "Release", MsgTimeoutNow: "TimeoutNow", MsgRebuild: "Rebuild", MsgRebuildAck: "RebuildAck",
	MsgPreVote: "PreVote", MsgPreVoteResp: "PreVoteResp",
}

// String returns the type's name, for example "Prepare".
func (t MessageType) String() string {
	if t >= 1 && t < msgTypeEnd {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// Message is the single wire type between replicas. The cell encodes it with
// msgpack (the short tags below). Slices in messages produced by Ready are
// shared between messages and with the core: the caller must not modify them.
type Message struct {
	Type      MessageType `msgpack:"t"`
	To        ID          `msgpack:"o"`
	From      ID          `msgpack:"f"`
	Ballot    Ballot      `msgpack:"b,omitempty"`
	Slot      Slot        `msgpack:"s,omitempty"`
	Commit    Slot        `msgpack:"c,omitempty"`
	Tick      uint64      `msgpack:"k,omitempty"`
	Promised  Ballot      `msgpack:"p,omitempty"`
	LeaseLeft uint64      `msgpack:"l,omitempty"`
	Compacted Slot        `msgpack:"z,omitempty"`
	Entries   []Entry     `msgpack:"e,omitempty"`
	Slots     []Slot      `msgpack:"a,omitempty"`
	Snapshot  Snapshot    `msgpack:"n"`
	Nonce     uint64      `msgpack:"x,omitempty"`
	// Released is a ballot whose leader stepped down (MsgPrepare only).
	Released Ballot `msgpack:"r,omitempty"`
	// ConfIndex is the Index of the membership the sender knows chosen
	// (MsgPromise only): a candidate counts no promise from a replica that
	// knows a later membership than its own (see "Membership").
	ConfIndex Slot `msgpack:"g,omitempty"`
	// Learner marks an Accepted from a learner: it reports only how far the
	// sender knows the log chosen (Commit); it acknowledges no slot and
	// grants no lease.
	Learner bool `msgpack:"lr,omitempty"`
}

// String describes m on one stable line, for logs and golden tests.
func (m Message) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d->%d %s", m.From, m.To, m.Type)
	if m.Ballot != 0 {
		fmt.Fprintf(&b, " b=%s", m.Ballot)
	}
	if m.Slot != 0 {
		fmt.Fprintf(&b, " slot=%d", m.Slot)
	}
	fmt.Fprintf(&b, " commit=%d", m.Commit)
	if m.Tick != 0 {
		fmt.Fprintf(&b, " tick=%d", m.Tick)
	}
	if m.Promised != 0 {
		fmt.Fprintf(&b, " promised=%s", m.Promised)
	}
	if m.LeaseLeft != 0 {
		fmt.Fprintf(&b, " leaseleft=%d", m.LeaseLeft)
	}
	if m.Compacted != 0 {
		fmt.Fprintf(&b, " compacted=%d", m.Compacted)
	}
	if len(m.Entries) > 0 {
		b.WriteString(" entries=[")
		for i, e := range m.Entries {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(describeEntry(e))
		}
		b.WriteByte(']')
	}
	if len(m.Slots) > 0 {
		fmt.Fprintf(&b, " slots=%v", m.Slots)
	}
	if !m.Snapshot.IsEmpty() {
		fmt.Fprintf(&b, " snap=%d", m.Snapshot.Slot)
	}
	if m.Nonce != 0 {
		fmt.Fprintf(&b, " nonce=%x", m.Nonce)
	}
	if m.Released != 0 {
		fmt.Fprintf(&b, " released=%s", m.Released)
	}
	if m.ConfIndex != 0 {
		fmt.Fprintf(&b, " conf=%d", m.ConfIndex)
	}
	if m.Learner {
		b.WriteString(" learner")
	}
	return b.String()
}

// describeEntry formats e as slot@ballot:value, for example 3@2.1:noop or
// 4@2.1:{2.1/1 2.1/2}.
func describeEntry(e Entry) string {
	if e.Value.IsNoop() {
		return fmt.Sprintf("%d@%s:noop", e.Slot, e.Ballot)
	}
	if c := e.Value.Conf; c != nil {
		return fmt.Sprintf("%d@%s:conf(%s)", e.Slot, e.Ballot, c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d@%s:{", e.Slot, e.Ballot)
	for i, c := range e.Value.Cmds {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s/%d", c.ID.Ballot, c.ID.Seq)
	}
	b.WriteByte('}')
	return b.String()
}

// Limits on what a message may carry; beyond them it is rejected.
const (
	// MaxSlot is the highest slot number a message may name.
	MaxSlot Slot = 1 << 62
	// maxMsgEntries bounds Entries and Slots per message.
	maxMsgEntries = 1 << 16
	// maxLearnSlots and maxLearnBytes bound one MsgLearn the core sends.
	maxLearnSlots = 1024
	maxLearnBytes = 1 << 20
)

// check validates what can be validated of m without the node's state
// beyond its identity: addressing, type, ballot ownership, slot sanity.
func (n *Node) check(m *Message) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s from %d: "+format, append([]any{ErrInvalidMessage, m.Type, m.From}, args...)...)
	}
	if m.Type < 1 || m.Type >= msgTypeEnd {
		return bad("unknown message type %d", uint8(m.Type))
	}
	if m.To != n.id {
		return bad("addressed to %d, this is %d", m.To, n.id)
	}
	if m.From == n.id || m.From == 0 || m.From > MaxID {
		return bad("sender %d is not a peer", m.From)
	}
	if !n.conf.isMember(m.From) {
		switch {
		case n.index(m.From) < 0 && len(n.peers) >= MaxReplicas:
			return bad("sender %d is unknown and this replica knows %d already", m.From, len(n.peers))
		case !n.voting():
			// A learner, a replica not (or no longer) a member, or one
			// rebuilding only learns: it takes chosen values from any
			// replica, including members added since the membership it
			// knows (a new replica knows only the initial one).
		case n.index(m.From) >= 0 && (m.Type == MsgRelease || m.Type == MsgTimeoutNow || m.Type == MsgLearnReq):
			// A former member's step-down (a master removes itself by
			// handing over, and its Release and TimeoutNow may arrive after
			// the receiver learned of the removal) and its request for
			// chosen values (facts; that is how it learns of its removal).
		default:
			// A voter refuses the rest from a replica outside the
			// membership it knows: a removed replica must not disturb the
			// cell. (If the sender was added since, this voter learns of
			// it from the members it knows.)
			return bad("sender %d is not a member (%s)", m.From, n.conf)
		}
	}
	if m.Commit > MaxSlot || m.Slot > MaxSlot || m.Compacted > MaxSlot || m.ConfIndex > MaxSlot {
		return bad("slot number beyond %d", MaxSlot)
	}
	if len(m.Entries) > maxMsgEntries || len(m.Slots) > maxMsgEntries {
		return bad("%d entries, %d slots: too many", len(m.Entries), len(m.Slots))
	}
	for i, e := range m.Entries {
		if e.Slot == 0 || e.Slot > MaxSlot {
			return bad("entry slot %d out of range", e.Slot)
		}
		if i > 0 && e.Slot <= m.Entries[i-1].Slot {
			return bad("entry slots not increasing")
		}
		if c := e.Value.Conf; c != nil {
			if err := c.validate(); err != nil {
				return bad("entry %d: %v", e.Slot, err)
			}
			if len(e.Value.Cmds) != 1 || len(e.Value.Cmds[0].Data) != 0 {
				return bad("entry %d: a membership change with %d commands", e.Slot, len(e.Value.Cmds))
			}
		}
	}
	for i, s := range m.Slots {
		if s == 0 || s > MaxSlot {
			return bad("slot %d out of range", s)
		}
		if i > 0 && s <= m.Slots[i-1] {
			return bad("slots not increasing")
		}
	}
	own := func() error { // the ballot must be the sender's own
		if m.Ballot == 0 || m.Ballot.ID() != m.From {
			return bad("ballot %s does not belong to the sender", m.Ballot)
		}
		return nil
	}
	ours := func() error { // the ballot must be one of ours
		if m.Ballot == 0 || m.Ballot.ID() != n.id {
			return bad("ballot %s is not this replica's", m.Ballot)
		}
		return nil
	}
	switch m.Type {
	case MsgPrepare:
		if m.Slot == 0 {
			return bad("prepare from slot 0")
		}
		if m.Released >= m.Ballot && m.Released != 0 {
			return bad("released ballot %s not below the prepare's %s", m.Released, m.Ballot)
		}
		return own()
	case MsgAccept:
		for _, e := range m.Entries {
			if e.Ballot != m.Ballot {
				return bad("entry %d at ballot %s in an accept at %s", e.Slot, e.Ballot, m.Ballot)
			}
		}
		return own()
	case MsgRelease, MsgTimeoutNow:
		if m.Released != 0 {
			return bad("released ballot in a %s", m.Type)
		}
		return own()
	case MsgPromise:
		for _, e := range m.Entries {
			if e.Slot > m.Commit && e.Ballot > m.Ballot {
				return bad("unchosen entry %d at ballot %s above the promise %s", e.Slot, e.Ballot, m.Ballot)
			}
		}
		return ours()
	case MsgAccepted:
		if m.Learner && len(m.Slots) > 0 {
			return bad("a learner acknowledges %d slots", len(m.Slots))
		}
		return ours()
	case MsgReject:
		return ours()
	case MsgLearn:
		for i, e := range m.Entries {
			if e.Slot > m.Commit {
				return bad("learn entry %d above the sender's chosen %d", e.Slot, m.Commit)
			}
			if i > 0 && e.Slot != m.Entries[i-1].Slot+1 {
				return bad("learn entries not contiguous")
			}
		}
	case MsgSnapshot:
		if m.Snapshot.Slot == 0 || m.Snapshot.Slot > m.Commit {
			return bad("snapshot slot %d outside 1..%d", m.Snapshot.Slot, m.Commit)
		}
		if c := m.Snapshot.Members; c != nil && (c.validate() != nil || c.Index > m.Snapshot.Slot) {
			return bad("snapshot membership %v invalid", c)
		}
	case MsgLearnReq:
		if m.Slot == 0 {
			return bad("learn request from slot 0")
		}
	case MsgRebuild, MsgRebuildAck, MsgPreVote, MsgPreVoteResp:
		if m.Nonce == 0 {
			return bad("no nonce")
		}
	}
	return nil
}
