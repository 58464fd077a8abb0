package paxos

// Pre-vote: a follower whose election timer fires does not raise a ballot
// at once. It first asks every peer whether it would vote for it
// (MsgPreVote), and campaigns only once a majority, itself included, says
// yes. A replica says no while it still hears a live master: it is the
// leader and its lease is live, or it follows a leader it heard from within
// the last ElectionTicks ticks, or it holds a live lease grant to another
// replica. So a replica that was cut off or restarted, and whose timer
// fired while the master went on serving a majority, never raises the
// ballot that would make the others refuse the master's next heartbeat.
// The package documentation argues why this costs nothing in safety and
// what happens in a cell of old and new replicas.
//
// A successor named by a master that steps down (MsgTimeoutNow) skips the
// pre-vote: the master asked it to, and a hand-over should cost no extra
// round trip.

// preVote is the state of a pre-vote in progress.
type preVote struct {
	// nonce tells answers to this pre-vote from answers to an earlier one,
	// perhaps made before a restart reset the tick count.
	nonce uint64
	// granted holds, per peer, the tick at which we sent the request it
	// granted; a grant counts for ElectionTicks after it.
	granted map[ID]uint64
	// retryAt is the tick at which to ask the peers that have not granted
	// again.
	retryAt uint64
}

// startPreVote begins a pre-vote.
func (n *Node) startPreVote() {
	n.pre = &preVote{granted: map[ID]uint64{}, nonce: n.rng.next() | 1}
	n.sendPreVotes()
	n.tryPreVote()
}

// sendPreVotes asks every peer that has not granted.
func (n *Node) sendPreVotes() {
	pv := n.pre
	pv.retryAt = n.now + uint64(n.cfg.HeartbeatTicks)
	for _, p := range n.conf.Voters {
		if p == n.id {
			continue
		}
		if _, ok := pv.granted[p]; !ok {
			n.send(Message{Type: MsgPreVote, To: p, Tick: n.now, Nonce: pv.nonce})
		}
	}
}

// preVoteLive reports whether a grant to a request sent at tick sent still
// counts: the grantor's view of the master is at most ElectionTicks old.
func (n *Node) preVoteLive(sent uint64) bool {
	return n.now < sent+uint64(n.cfg.ElectionTicks)
}

// tickPreVote forgets stale grants and asks again every HeartbeatTicks
// (a refusal says the master was live then, not that it still is).
func (n *Node) tickPreVote() {
	pv := n.pre
	for p, sent := range pv.granted {
		if !n.preVoteLive(sent) {
			delete(pv.granted, p)
		}
	}
	if n.now >= pv.retryAt {
		n.sendPreVotes()
	}
	n.tryPreVote()
}

// tryPreVote campaigns if a majority, this replica included, granted.
func (n *Node) tryPreVote() {
	pv := n.pre
	if pv == nil || !n.canPromiseSelf() {
		return
	}
	count := 1
	for p, sent := range pv.granted {
		if n.preVoteLive(sent) && n.conf.isVoter(p) {
			count++
		}
	}
	if count >= majority(len(n.conf.Voters)) {
		n.campaign()
	}
}

// onPreVote answers a pre-vote request. A rebuilding replica, which votes
// in nothing, does not answer.
func (n *Node) onPreVote(m Message) {
	if !n.voting() {
		return
	}
	n.send(Message{Type: MsgPreVoteResp, To: m.From, Tick: m.Tick, Nonce: m.Nonce, Promised: n.promised, LeaseLeft: n.preVoteRefusal(m.From)})
}

// preVoteRefusal returns 0 if this replica would vote for replica from,
// else about how many of its ticks it will go on hearing a live master
// (at least 1).
func (n *Node) preVoteRefusal(from ID) uint64 {
	var left uint64
	switch n.role {
	case Leader:
		if end := n.leaseEnd(); n.now < end {
			left = end - n.now
		}
	case Follower:
		if n.leaderBallot != 0 && n.electionElapsed < n.cfg.ElectionTicks {
			left = uint64(n.cfg.ElectionTicks - n.electionElapsed)
		}
	}
	if n.grantBlocks(from) {
		left = max(left, uint64(n.grantLeft))
	}
	return left
}

// onPreVoteResp counts an answer to our pre-vote.
func (n *Node) onPreVoteResp(m Message) {
	pv := n.pre
	if pv == nil || m.Nonce != pv.nonce || m.LeaseLeft > 0 || m.Tick > n.now || !n.preVoteLive(m.Tick) {
		return
	}
	if old, ok := pv.granted[m.From]; !ok || m.Tick > old {
		pv.granted[m.From] = m.Tick
	}
	n.tryPreVote()
}
