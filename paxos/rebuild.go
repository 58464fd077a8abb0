package paxos

import "fmt"

// Rebuilding: a replica that lost or damaged its durable state votes in
// nothing until it has rebuilt. The package documentation ("Lost state")
// argues why the steps below suffice; this file carries them out.
//
//  1. Waiting: for LeaseTicks of its own ticks after NewNode, so that every
//     vote it cast before it lost its state (promise, accept, lease grant)
//     has stopped counting at whichever proposer collected it.
//  2. Probing: it asks every peer for its promised ballot and its highest
//     accepted slot (MsgRebuild, with a fresh nonce, so only answers to
//     questions asked after the wait count) and waits for answers from a
//     majority of the cell other than itself; rebuilding peers do not
//     answer.
//  3. Catching up: it learns chosen values (MsgLearnReq, snapshots) until
//     it knows every slot up to the highest slot any answer reported chosen,
//     asking the leader to fill the log up to it with no-ops if nothing else
//     gets there.
//  4. Rejoining: its hard state takes the highest promised ballot any answer
//     reported and drops the Rebuilding flag; once that is durable
//     (Advance), it votes again.

// RebuildPhase is how far a rebuilding replica has got.
type RebuildPhase uint8

// The phases of a rebuild; RebuildNone means the replica votes.
const (
	// RebuildNone: not rebuilding.
	RebuildNone RebuildPhase = iota
	// RebuildWaiting: waiting out every vote cast before the state was lost.
	RebuildWaiting
	// RebuildProbing: asking a majority of the other replicas for their
	// promised ballot and highest accepted slot.
	RebuildProbing
	// RebuildCatchingUp: learning chosen values up to the target slot.
	RebuildCatchingUp
	// RebuildRejoining: the rejoining hard state is being made durable.
	RebuildRejoining
)

// String returns the phase's name.
func (p RebuildPhase) String() string {
	switch p {
	case RebuildNone:
		return "none"
	case RebuildWaiting:
		return "waiting out forgotten votes"
	case RebuildProbing:
		return "asking a majority for its promises and accepted slots"
	case RebuildCatchingUp:
		return "catching up"
	case RebuildRejoining:
		return "rejoining"
	}
	return fmt.Sprintf("RebuildPhase(%d)", uint8(p))
}

// RebuildStatus describes a rebuild in progress.
type RebuildStatus struct {
	// Phase is RebuildNone unless the replica is rebuilding.
	Phase RebuildPhase
	// TicksLeft is how many ticks the waiting phase has left.
	TicksLeft int
	// Answers is how many peers answered the probe, out of the Needed.
	Answers, Needed int
	// Target is the slot the replica must know chosen before it votes
	// (known from the catching-up phase on).
	Target Slot
	// Promised is the ballot the replica will promise on rejoining (known
	// from the catching-up phase on).
	Promised Ballot
}

// rebuild is the state of a rebuild in progress.
type rebuild struct {
	phase    RebuildPhase
	nonce    uint64        // of the probe; answers must echo it
	answers  map[ID]bool   // peers that answered the probe
	nextSend map[ID]uint64 // tick at which to ask a peer (again)
	promised Ballot        // highest promised ballot answered
	target   Slot          // highest accepted slot answered
	best     ID            // the answering peer with the highest chosen slot
	bestAt   Slot          // its chosen slot
	// rejoinWrite is the write (Ready.WriteID) that carries the rejoining
	// hard state, 0 until a Ready hands it out; the replica votes once it
	// is durable.
	rejoinWrite uint64
}

// startRebuild makes this node a rebuilding learner from now on.
func (n *Node) startRebuild() {
	n.rb = &rebuild{phase: RebuildWaiting, answers: map[ID]bool{}, nextSend: map[ID]uint64{}}
	n.becomeFollower(0)
}

// voting reports whether this replica casts votes: it is a voter of the
// membership it knows, and not rebuilding.
func (n *Node) voting() bool { return n.rb == nil && n.conf.isVoter(n.id) }

// tickRebuild moves a rebuild on by one tick.
func (n *Node) tickRebuild() {
	rb := n.rb
	switch rb.phase {
	case RebuildWaiting:
		if n.now < uint64(n.cfg.LeaseTicks) {
			return
		}
		rb.phase = RebuildProbing
		rb.nonce = n.rng.next() | 1 // never 0: a message without a nonce is refused
		fallthrough
	case RebuildProbing:
		for _, p := range n.conf.Voters {
			if p != n.id && !rb.answers[p] && n.now >= rb.nextSend[p] {
				rb.nextSend[p] = n.now + uint64(n.cfg.HeartbeatTicks)
				n.send(Message{Type: MsgRebuild, To: p, Nonce: rb.nonce})
			}
		}
	case RebuildCatchingUp:
		if n.chosen >= rb.target {
			return
		}
		// Ask the leader (every peer while none is known: only a leader
		// acts on it) to let the log reach the target, and learn from the
		// most advanced peer in case no leader message brings it.
		if leader := n.leaderBallot.ID(); leader != 0 && leader != n.id {
			if n.now >= rb.nextSend[leader] {
				rb.nextSend[leader] = n.now + uint64(n.cfg.HeartbeatTicks)
				n.send(Message{Type: MsgRebuild, To: leader, Nonce: rb.nonce, Slot: rb.target})
			}
		} else {
			for _, p := range n.conf.Voters {
				if p != n.id && n.now >= rb.nextSend[p] {
					rb.nextSend[p] = n.now + uint64(n.cfg.HeartbeatTicks)
					n.send(Message{Type: MsgRebuild, To: p, Nonce: rb.nonce, Slot: rb.target})
				}
			}
		}
		if rb.best != 0 {
			n.maybeLearn(rb.best, rb.bestAt)
		}
	}
}

// onRebuild answers a rebuilding peer's probe, if this replica votes. A
// leader asked to let the log reach a slot fills it with no-ops when
// nothing else is pending.
func (n *Node) onRebuild(m Message) {
	if !n.voting() {
		return // a rebuilding replica's answers carry no weight
	}
	n.send(Message{Type: MsgRebuildAck, To: m.From, Promised: n.promised, Slot: n.lastSlot, Nonce: m.Nonce})
	if n.role == Leader && m.Slot > 0 {
		// Bound the no-ops one request can cause (a peer reports at most
		// what a majority accepted, but a buggy one could ask for more).
		l := n.lead
		l.fillTo = max(l.fillTo, min(m.Slot, l.nextSlot-1+maxFillAhead))
	}
}

// maxFillAhead bounds how far past its next slot one MsgRebuild can make a
// leader fill the log with no-ops; a rebuilding replica asks again each
// heartbeat.
const maxFillAhead = 1 << 16

// onRebuildAck counts an answer to this replica's probe.
func (n *Node) onRebuildAck(m Message) {
	rb := n.rb
	if rb == nil || rb.phase != RebuildProbing || m.Nonce != rb.nonce || rb.answers[m.From] {
		return
	}
	rb.answers[m.From] = true
	rb.promised = max(rb.promised, m.Promised)
	rb.target = max(rb.target, m.Slot)
	if m.Commit > rb.bestAt {
		rb.best, rb.bestAt = m.From, m.Commit
	}
	if !n.conf.isVoter(m.From) {
		return // only a voter's answer says what a quorum may have done
	}
	if len(rb.answers) >= majority(len(n.conf.Voters)) {
		rb.phase = RebuildCatchingUp
		clear(rb.nextSend)
	}
	n.maybeLearn(m.From, m.Commit)
}

// advanceRebuild moves a rebuild that has caught up to rejoining.
func (n *Node) advanceRebuild() {
	rb := n.rb
	if rb == nil || rb.phase != RebuildCatchingUp || n.chosen < rb.target {
		return
	}
	rb.phase = RebuildRejoining
	n.promised = max(n.promised, rb.promised)
	n.maxRound = max(n.maxRound, n.promised.Round())
}

// rebuildStatus describes the rebuild in progress, if any.
func (n *Node) rebuildStatus() RebuildStatus {
	rb := n.rb
	if rb == nil {
		return RebuildStatus{}
	}
	st := RebuildStatus{Phase: rb.phase, Answers: len(rb.answers), Needed: majority(len(n.conf.Voters))}
	if rb.phase == RebuildWaiting && n.now < uint64(n.cfg.LeaseTicks) {
		st.TicksLeft = int(uint64(n.cfg.LeaseTicks) - n.now)
	}
	if rb.phase >= RebuildCatchingUp {
		st.Target, st.Promised = rb.target, rb.promised
	}
	return st
}
