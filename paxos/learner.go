package paxos

import "slices"

// The learner: chosen values, catch-up, outcomes.

// markChosen records that e (the entry this replica now holds in slot
// chosen+1) holds the slot's chosen value.
// REQUIRES: e.Slot == n.chosen+1 and n.log[e.Slot] == e.
func (n *Node) markChosen(e Entry) {
	if e.Slot != n.chosen+1 {
		panic("paxos: invariant broken: markChosen out of order")
	}
	n.chosen = e.Slot
	n.resolve(e.Slot, e.Value)
	if c := confOf(e); c != nil {
		m := c.clone()
		m.Index = e.Slot
		n.setMembership(m)
	}
}

// resolve decides our proposals placed in slot s, whose chosen value is v.
func (n *Node) resolve(s Slot, v Value) {
	ids, ok := n.waiting[s]
	if !ok {
		return
	}
	delete(n.waiting, s)
	for _, id := range ids {
		o := Outcome{ID: id, Slot: s, Err: ErrPreempted}
		for _, c := range v.Cmds {
			if c.ID == id {
				o.Err = nil
				break
			}
		}
		n.outcomes = append(n.outcomes, o)
	}
}

// Catch-up does not depend on new proposals or on any one link. Every
// message carries its sender's chosen index, and the node keeps the latest
// per peer (peerCommit). A replica behind asks the peer whose message told
// it so (MsgLearnReq); a request unanswered for HeartbeatTicks counts as
// lost, and while some peer is known to be ahead the node asks again on its
// own clock, each time of the next peer in turn once a request went
// unanswered. So a follower that hears the master's heartbeats but whose
// requests to it are lost, or that is deaf to the master but hears the
// peers refusing its pre-vote, still learns every chosen slot from any
// peer it can talk to, in an idle cell as in a busy one.

// maybeLearn asks for chosen values if peer, whose message said the log is
// chosen up to commit, knows more than we do and no request is
// outstanding. After an unanswered request it asks the next peer in turn
// instead of peer.
func (n *Node) maybeLearn(peer ID, commit Slot) {
	if commit <= n.chosen || n.learnWait > 0 {
		return
	}
	if n.learnMissed > 0 {
		peer = n.nextLearnPeer()
	}
	n.learnWait = n.cfg.HeartbeatTicks
	n.learnAsked = peer
	n.send(Message{Type: MsgLearnReq, To: peer, Slot: n.chosen + 1})
}

// learnLost handles a LearnReq that went unanswered for HeartbeatTicks: if
// some peer is still known to be ahead, ask the next peer in turn.
func (n *Node) learnLost() {
	n.learnMissed++
	var ahead Slot
	for i, c := range n.peerCommit {
		if i != n.self {
			ahead = max(ahead, c)
		}
	}
	n.maybeLearn(n.learnAsked, ahead)
}

// tickQuiet lets a replica that does not vote (a learner, a rebuilding
// replica, or one that has not yet learned the membership that made it a
// member) fetch chosen values
// when it hears no peer for ElectionTicks. A voter would campaign and be
// told by a refusing peer that it is behind; a learner cut off from the
// leader alone, in an idle cell, would otherwise never hear that it missed
// anything, and so never learn the change that makes it a voter. It asks
// the next peer in turn, one request per ElectionTicks; a peer that is not
// ahead ignores it.
func (n *Node) tickQuiet() {
	n.quiet++
	if n.quiet < n.cfg.ElectionTicks || n.learnWait > 0 {
		return
	}
	n.quiet = 0
	peer := n.nextLearnPeer()
	if peer == 0 || peer == n.id {
		return
	}
	n.learnWait = n.cfg.HeartbeatTicks
	n.learnAsked = peer
	n.send(Message{Type: MsgLearnReq, To: peer, Slot: n.chosen + 1})
}

// nextLearnPeer returns the peer after learnAsked in replica order,
// skipping this replica. Whether that peer is ahead is not known in an
// idle cell (a follower hears only the master), so every peer gets its
// turn; one that is not ahead ignores the request, which costs a turn.
func (n *Node) nextLearnPeer() ID {
	k := len(n.peers)
	i := max(n.index(n.learnAsked), 0)
	for range k {
		i = (i + 1) % k
		if i != n.self && n.conf.isMember(n.peers[i]) {
			return n.peers[i]
		}
	}
	return n.learnAsked
}

// onLearnReq serves chosen values from m.Slot on: from the log, or the
// snapshot if the log no longer reaches back that far.
func (n *Node) onLearnReq(m Message) {
	if m.Slot > n.chosen {
		return
	}
	if m.Slot <= n.compacted {
		snap, err := n.cfg.Storage.Snapshot()
		if err != nil {
			n.fail(err)
			return
		}
		if snap.Slot < m.Slot || snap.Slot > n.chosen {
			return // storage and core disagree for a moment; the peer retries
		}
		n.send(Message{Type: MsgSnapshot, To: m.From, Snapshot: snap})
		return
	}
	var ents []Entry
	size := 0
	for s := m.Slot; s <= n.chosen && len(ents) < maxLearnSlots && size < maxLearnBytes; s++ {
		e := n.log[s]
		ents = append(ents, e)
		for _, c := range e.Value.Cmds {
			size += len(c.Data) + 16
		}
	}
	n.send(Message{Type: MsgLearn, To: m.From, Entries: ents})
}

// onLearn takes chosen values.
func (n *Node) onLearn(m Message) {
	n.learnWait = 0
	n.learnMissed = 0
	for _, e := range m.Entries {
		if e.Slot <= n.chosen {
			continue
		}
		if e.Slot != n.chosen+1 {
			break
		}
		if n.role == Leader {
			if in, ok := n.lead.inflight[e.Slot]; ok && !sameValue(in.value, e.Value) {
				// Another leader's value was chosen where we proposed: a
				// higher ballot has taken over.
				n.becomeFollower(0)
			} else if ok {
				delete(n.lead.inflight, e.Slot)
			}
		}
		// Keep the higher of the two ballots: never report having accepted
		// at a lower ballot than we did. Claiming the chosen value at our
		// higher ballot is sound, since every value proposed at a ballot at
		// or above the one that chose it is the chosen value.
		if old, ok := n.log[e.Slot]; ok && old.Ballot > e.Ballot {
			e.Ballot = old.Ballot
		}
		n.setLog(e)
		n.markChosen(e)
	}
	if n.role == Leader {
		n.advanceLeaderChosen()
	}
	if n.role == Candidate {
		n.tryWin()
	}
	n.maybeLearn(m.From, m.Commit)
}

// onSnapshot installs a snapshot from a peer that compacted past what we
// have chosen, then asks for the tail.
func (n *Node) onSnapshot(m Message) {
	n.learnWait = 0
	n.learnMissed = 0
	snap := m.Snapshot
	if snap.Slot <= n.chosen {
		return
	}
	if n.role == Leader {
		n.becomeFollower(0)
	}
	var lost []Slot
	for s := range n.waiting {
		if s <= snap.Slot {
			lost = append(lost, s)
		}
	}
	slices.Sort(lost) // outcomes in slot order, whatever the map order
	for _, s := range lost {
		for _, id := range n.waiting[s] {
			n.outcomes = append(n.outcomes, Outcome{ID: id, Slot: s, Err: ErrOutcomeUnknown})
		}
		delete(n.waiting, s)
	}
	n.dropLog(snap.Slot)
	for s := range n.unsavedIdx {
		if s <= snap.Slot {
			n.compactUnsaved(snap.Slot)
			break
		}
	}
	n.chosen = snap.Slot
	n.handed = max(n.handed, snap.Slot)
	n.pendingSnap = snap
	if snap.Members != nil {
		n.setMembership(snap.Members.clone())
	} else {
		n.setMembership(Membership{Voters: slices.Clone(n.cfg.Replicas)})
	}
	if n.role == Candidate {
		n.tryWin()
	}
	n.maybeLearn(m.From, m.Commit)
}

// compactUnsaved drops unsaved entries at or below s.
func (n *Node) compactUnsaved(s Slot) {
	kept := n.unsaved[:0]
	clear(n.unsavedIdx)
	for _, e := range n.unsaved {
		if e.Slot > s {
			n.unsavedIdx[e.Slot] = len(kept)
			kept = append(kept, e)
		}
	}
	n.unsaved = kept
}

// sameValue reports whether a and b hold the same commands.
func sameValue(a, b Value) bool {
	if len(a.Cmds) != len(b.Cmds) || (a.Conf == nil) != (b.Conf == nil) {
		return false
	}
	if a.Conf != nil && !a.Conf.equal(*b.Conf) {
		return false
	}
	for i := range a.Cmds {
		if a.Cmds[i].ID != b.Cmds[i].ID || string(a.Cmds[i].Data) != string(b.Cmds[i].Data) {
			return false
		}
	}
	return true
}
