package paxos

// The acceptor: promises, accepts, lease grants.

// grantLive reports whether this acceptor holds a live lease grant to a
// proposer other than replica from (an unknown holder, after a restart,
// counts as another).
func (n *Node) grantBlocks(from ID) bool {
	return n.grantLeft > 0 && (n.grantBallot == 0 || n.grantBallot.ID() != from)
}

// canPromiseSelf reports whether this replica may promise its own new
// ballot: it votes, and has no live grant to another proposer.
func (n *Node) canPromiseSelf() bool { return n.voting() && !n.grantBlocks(n.id) }

// grant gives ballot b a lease of LeaseTicks from now.
func (n *Node) grant(b Ballot) {
	if b <= n.released {
		return
	}
	n.grantBallot = b
	n.grantLeft = n.cfg.LeaseTicks
}

// onPrepare handles Phase 1a. A rebuilding replica promises nothing and
// says nothing: it cannot know what it promised before.
func (n *Node) onPrepare(m Message) {
	if !n.voting() {
		return
	}
	if m.Released != 0 {
		// The candidate relays a release it received (handover.go).
		n.release(m.Released)
	}
	if m.Ballot < n.promised {
		n.send(Message{Type: MsgReject, To: m.From, Ballot: m.Ballot, Promised: n.promised})
		return
	}
	if m.Ballot > n.promised && n.grantBlocks(m.From) {
		// A lease we granted is live: we promised its holder not to help
		// anyone else until it runs out. Say how long, so the candidate
		// retries promptly.
		n.send(Message{Type: MsgReject, To: m.From, Ballot: m.Ballot, Promised: n.promised, LeaseLeft: uint64(n.grantLeft)})
		return
	}
	if m.Ballot > n.promised {
		n.promised = m.Ballot
		if n.role != Follower {
			n.becomeFollower(0)
		}
		n.leaderBallot = 0
		n.pre = nil
		n.resetElection()
	}
	from := max(m.Slot, n.compacted+1)
	var ents []Entry
	for s := from; s <= n.lastSlot; s++ {
		if e, ok := n.log[s]; ok {
			ents = append(ents, e)
		}
	}
	n.send(Message{Type: MsgPromise, To: m.From, Ballot: m.Ballot, Entries: ents, Compacted: n.compacted, Tick: m.Tick, ConfIndex: n.conf.Index})
}

// onAccept handles Phase 2a (and heartbeats, which are accepts without
// entries).
func (n *Node) onAccept(m Message) {
	if !n.voting() {
		n.learnFromAccept(m)
		if n.rb == nil && n.conf.isLearner(n.id) && n.conf.isVoter(m.From) {
			// A learner tells the leader how far it knows the log chosen
			// (the Accepted's Commit), so that it can be promoted once
			// caught up. It accepts nothing and grants nothing: the
			// leader counts no learner's acknowledgement.
			n.send(Message{Type: MsgAccepted, To: m.From, Ballot: m.Ballot, Tick: m.Tick, Learner: true})
		}
		return
	}
	if m.Ballot < n.promised {
		n.send(Message{Type: MsgReject, To: m.From, Ballot: m.Ballot, Promised: n.promised})
		return
	}
	if m.Ballot > n.promised {
		n.promised = m.Ballot
	}
	if n.role != Follower {
		n.becomeFollower(m.Ballot)
	}
	n.leaderBallot = m.Ballot
	n.electionElapsed = 0
	n.campaignASAP = false
	n.successor = 0
	n.pre = nil
	n.grant(m.Ballot)
	var slots []Slot
	if len(m.Entries) > 0 {
		slots = make([]Slot, 0, len(m.Entries))
	}
	for _, e := range m.Entries {
		if e.Value.Conf != nil && e.Slot-1 > n.chosen {
			// A membership change is accepted only by a replica that knows
			// every slot below it chosen (the leader proposed it knowing
			// so): whoever votes for it knows the membership it replaces.
			// Not acknowledged now; the leader retransmits it.
			if n.learnCommitted(m); e.Slot-1 > n.chosen {
				continue
			}
		}
		slots = append(slots, e.Slot)
		if e.Slot <= n.chosen || e.Slot <= n.compacted {
			// Already chosen here; any value proposed at a ballot at or above
			// our promise is the chosen one, so acknowledging is sound.
			continue
		}
		if old, ok := n.log[e.Slot]; ok && old.Ballot == e.Ballot && old.Value.equal(e.Value) {
			// A retransmission (a heartbeat that left before our Accepted
			// reached the leader) of what we already accepted: our copy is
			// durable, queued for the next Ready or in a write still in
			// flight, and writes are carried out in order. This Accepted
			// depends on persistence like the first, so it leaves only once
			// the latest synced write, which holds that copy or follows it,
			// is durable. Writing the same entry again would only cost an
			// fsync the next command waits behind.
			continue
		}
		n.setLog(e)
	}
	n.learnCommitted(m)
	n.send(Message{Type: MsgAccepted, To: m.From, Ballot: m.Ballot, Slots: slots, Tick: m.Tick})
	n.maybeLearn(m.From, m.Commit)
}

// learnCommitted learns from an Accept's piggybacked chosen index: a slot up
// to it whose entry we hold at the leader's ballot holds the leader's value
// (one proposer per ballot, one value per slot), which the leader knows
// chosen.
func (n *Node) learnCommitted(m Message) {
	for n.chosen < m.Commit {
		e, ok := n.log[n.chosen+1]
		if !ok || e.Ballot != m.Ballot {
			break
		}
		n.markChosen(e)
	}
}

// learnFromAccept is a rebuilding replica's handling of an Accept: it
// accepts nothing and grants no lease, but notes the leader and learns
// what the leader says is chosen.
func (n *Node) learnFromAccept(m Message) {
	if m.Ballot >= n.leaderBallot {
		n.leaderBallot = m.Ballot
	}
	n.learnCommitted(m)
	n.maybeLearn(m.From, m.Commit)
}

// onRelease handles MsgRelease and MsgTimeoutNow from a leader that
// stepped down (handover.go): the grant to its ballot is void, and what it
// says is chosen is learned as from an Accept at that ballot.
func (n *Node) onRelease(m Message) {
	n.release(m.Ballot)
	if n.leaderBallot == m.Ballot {
		n.leaderBallot = 0
	}
	if n.voting() {
		n.learnCommitted(m)
	}
	if m.Type == MsgTimeoutNow && m.Ballot >= n.promised && n.role == Follower && n.voting() {
		if n.canPromiseSelf() {
			n.campaign()
		} else {
			n.campaignASAP = true
		}
	}
}
