package paxos

import "fmt"

// Planned hand-over (HandOver): the master gives its mastership to a
// caught-up successor without waiting out its lease, in the manner of
// Raft's leadership transfer (TimeoutNow), made safe for a master lease.
//
// The steps, at the leader L with ballot b:
//
//  1. HandOver(to) places the proposals already waiting in slots (as far
//     as the window allows) and from then on places no more: later
//     proposals wait. Reads go on; L is still master.
//  2. L waits until every slot it proposed is chosen and the successor S
//     reported (in the chosen index its acknowledgements carry) that it
//     knows them all chosen, and S's latest acknowledgement still counts
//     (S votes and answers). Nothing needs a tick: the last Accepted that
//     brings these about triggers step 3 at once.
//  3. L stops being master and leader in memory (Status().Master is false
//     from this instant), and only then queues MsgTimeoutNow to S and
//     MsgRelease to every other peer; the proposals still waiting end with
//     ErrNotLeader (they were never placed in a slot). Status().Successor
//     names S, so the caller can redirect its clients there.
//  4. Every acceptor that receives either message voids its lease grant to
//     b and never grants b again. S campaigns at once (no pre-vote, no
//     election timeout), and its Prepare carries Released: b, which voids
//     the grant to b at an acceptor that the Release has not reached yet
//     (so that S need not wait out that grant).
//  5. S completes Phase 1 with a majority of promises, heartbeats, and is
//     master once a majority's grants are counted and everything chosen
//     before its leadership is applied (already the case: step 2).
//
// If step 2 does not happen within ElectionTicks (S lags or is down), the
// hand-over is abandoned: L stays leader and places the waiting proposals
// (Status().HandOver goes back to 0). StepDown is the hand-over that does
// not wait.
//
// Why no two masters overlap. A replica is master only while a majority
// of lease grants counts for it (proposer.go), and an acceptor that
// granted b promises no other ballot until its grant to b ends, by running
// out (the ordinary lease argument, lease.go) or by a release of b. A
// release of b is created only by b's leader in step 3, after it stopped
// being master, and b's leader is the only replica that ever holds b
// (ballots carry the replica's ID and a replica never reuses a round), so
// once any release of b exists, b is master nowhere, now or later. S
// becomes master only after a majority promised its ballot; each of those
// acceptors had its grant to b ended, by time (b's leader no longer counts
// it either, by the drift bound) or by a release (b's leader had stopped
// first). So the end of L's mastership precedes every release, which
// precedes every promise S counts, which precedes S's mastership: there
// is no instant at which both are master. A relayed release (Prepare's
// Released) states the same fact — S received it from b's leader — and
// replicas do not lie (the cell authenticates every peer message), so it
// is as good as the original; a duplicated or delayed one repeats a fact
// that stays true. The cell must honour step 3 in the same order: stop
// serving before it sends the Ready's messages (cell/replica.go).
//
// Why the state carries over. S's Phase 1 is an ordinary one, so every
// value chosen under b is recovered (and step 2 made them chosen and known
// to S beforehand, so S recovers nothing and waits for nothing). Lock
// generations and the time in commands live in the replicated state, and
// S serves only after applying every slot chosen before its leadership,
// so sequencers only grow and command time never goes backwards. Session
// leases are kept by the master outside Paxos: the cell's new master
// gives every session a full lease from the instant it becomes master,
// which is after every KeepAlive answer L gave (L stopped answering in
// step 3), so S never expires a session before the lease L promised it
// has run out.

// handOver is a planned hand-over in progress at the leader.
type handOver struct {
	to  ID
	idx int // peer index of to
	// until is the tick at which the hand-over is abandoned.
	until uint64
}

// HandOver starts a planned hand-over of leadership to replica to, or, if
// to is 0, to the peer whose acknowledgements count and that reported the
// highest chosen index (the lowest ID among equals). The leader places
// no more proposals in new slots, waits until its slots are chosen and the
// successor knows them, then stops being master and asks the successor to
// campaign at once, releasing its lease so that nobody waits it out (see
// handover.go). It returns ErrNotLeader if this replica is not the leader,
// ErrInvalidArgument if to is this replica or not a replica of the cell,
// and ErrNoSuccessor if to is 0 and no peer's acknowledgement counts.
// Status().HandOver names the successor while the hand-over is in
// progress; once done, this replica is a follower and Status().Successor
// names it. A new HandOver replaces one in progress.
func (n *Node) HandOver(to ID) error {
	if n.err != nil {
		return n.err
	}
	if n.role != Leader {
		return ErrNotLeader
	}
	if to != 0 && (to == n.id || !n.conf.isVoter(to)) {
		return fmt.Errorf("%w: hand-over to %d: not another replica of the cell", ErrInvalidArgument, to)
	}
	if to == 0 {
		if to = n.pickSuccessor(); to == 0 {
			return fmt.Errorf("%w: no peer's acknowledgement counts", ErrNoSuccessor)
		}
	}
	l := n.lead
	// What was proposed before the hand-over began is placed now; what
	// comes later waits.
	l.hand = nil
	n.flushProposals()
	l.hand = &handOver{to: to, idx: n.index(to), until: n.now + uint64(n.cfg.ElectionTicks)}
	n.maybeHandOver()
	return nil
}

// pickSuccessor returns the peer whose acknowledgement counts now and that
// reported the highest chosen index (the lowest ID among equals), or 0.
func (n *Node) pickSuccessor() ID {
	best := -1
	for i, p := range n.peers {
		if i == n.self || n.lead.grantUntil[i] <= n.now || !n.conf.isVoter(p) {
			continue
		}
		if best < 0 || n.lead.peerChosen[i] > n.lead.peerChosen[best] {
			best = i
		}
	}
	if best < 0 {
		return 0
	}
	return n.peers[best]
}

// maybeHandOver completes the hand-over in progress once the successor
// can take over at once, or abandons it when its time is up.
func (n *Node) maybeHandOver() {
	if n.err != nil || n.role != Leader || n.lead.hand == nil {
		return
	}
	l, h := n.lead, n.lead.hand
	if n.now >= h.until {
		l.hand = nil // abandoned: the waiting proposals are placed again
		return
	}
	if l.nextSlot-1 > n.chosen || len(l.toSend) > 0 {
		return // slots in flight
	}
	if l.peerChosen[h.idx] < n.chosen || l.grantUntil[h.idx] <= n.now {
		return // the successor lags, or has not answered lately
	}
	n.stepDown(h.to)
}

// stepDown ends this leader's mastership and leadership in memory, then
// tells next (if not 0) to campaign at once and every other peer that its
// lease is released. REQUIRES: n.role == Leader.
func (n *Node) stepDown(next ID) {
	b := n.lead.ballot
	n.becomeFollower(0)
	n.released = max(n.released, b)
	if n.grantBallot == b {
		n.grantLeft = 0
	}
	n.successor = next
	n.successorUntil = n.now + uint64(n.cfg.ElectionTicks)
	// The successor's message first: it has the next move.
	if next != 0 {
		n.send(Message{Type: MsgTimeoutNow, To: next, Ballot: b})
	}
	for _, p := range n.peers {
		if p != n.id && p != next && n.conf.isMember(p) {
			n.send(Message{Type: MsgRelease, To: p, Ballot: b})
		}
	}
}

// release voids this acceptor's lease grant to ballot b, whose leader
// stepped down, and keeps it from granting b again.
func (n *Node) release(b Ballot) {
	n.released = max(n.released, b)
	if n.grantBallot == b {
		n.grantLeft = 0
	}
}
