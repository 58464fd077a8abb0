package paxos

import "fmt"

// The proposer: campaigning (Phase 1), leading (Phase 2), the master lease.

// The proposer counts every vote it collects (a promise, an accept, a lease
// grant) only for a bounded time: while its own tick count is below the
// tick at which it sent the request that drew the vote, plus effTTL. The
// vote's Tick field echoes that send tick. This bounds how long a vote that
// its acceptor has since forgotten (a wiped or damaged disk) can still be
// used, which a rebuilding replica waits out (see rebuild.go and the
// package documentation).

// campaign is the state of a Phase 1 in progress.
type campaign struct {
	ballot      Ballot
	from        Slot           // first slot the Prepare covers
	promises    map[ID]Message // promises received from peers (Tick: the Prepare's send tick)
	selfDurable bool           // our own promise is on stable storage
	retryAt     map[ID]uint64  // tick at which to resend Prepare to a peer
}

// leadership is the state of an established leader.
type leadership struct {
	ballot     Ballot
	nextSlot   Slot // next slot to propose a new value in
	baseSlot   Slot // last slot recovered by Phase 1; Master needs it applied
	seq        uint64
	pending    []Command // proposals waiting for a slot
	inflight   map[Slot]*inflight
	toSend     []Entry // accepts not yet broadcast
	commitSent Slot    // chosen index last broadcast
	// announced reports that an Accept (and so a request for lease
	// grants) went out in this term: a new leader sends one at once, even
	// with nothing to recover and nothing chosen yet.
	announced  bool
	grantUntil []uint64 // per replica index: tick until which its grant counts
	// peerChosen holds, per replica index, the highest chosen index the
	// replica's acknowledgements in this term carried (a planned
	// hand-over waits for the successor's to reach ours).
	peerChosen []Slot
	lastLive   uint64 // last tick at which the lease was live
	// fillTo is a slot a rebuilding replica waits for: the leader proposes
	// no-ops in new slots up to it when nothing else is pending.
	fillTo Slot
	// hand is the planned hand-over in progress (handover.go); while it is
	// set, no new slot is proposed.
	hand *handOver
	// confWant is a membership change waiting for a slot: it is placed
	// once every slot this leader proposed is chosen, and nothing else is
	// placed before it.
	confWant *Command
	confNext *Membership
	// confSlot is the slot of the last membership change this leader
	// placed or recovered; while it is above chosen, no new slot is
	// proposed (at most one change pending, and the slots after it belong
	// to the membership it makes).
	confSlot Slot
}

// inflight is a slot the leader proposed and does not yet know chosen.
type inflight struct {
	value Value
	acks  voteSet
	// ackTick holds, per replica index, the send tick of the Accept whose
	// acknowledgement is the latest counted; our own acknowledgement never
	// expires.
	ackTick []uint64
}

// newInflight returns the bookkeeping of a slot proposed with v.
func (n *Node) newInflight(v Value) *inflight {
	return &inflight{value: v, ackTick: make([]uint64, len(n.peers))}
}

// voteLive reports whether a vote drawn by a request sent at tick sent
// still counts.
func (n *Node) voteLive(sent uint64) bool { return n.now < sent+n.effTTL }

// ackLive reports whether replica idx's acknowledgement of in counts now.
func (n *Node) ackLive(in *inflight, idx int) bool {
	return in.acks.has(idx) && (idx == n.self || n.voteLive(in.ackTick[idx]))
}

// campaign starts Phase 1 with a ballot above every ballot seen.
func (n *Node) campaign() {
	round := max(n.maxRound, n.promised.Round()) + 1
	b := MakeBallot(round, n.id)
	n.maxRound = round
	n.becomeFollower(0) // refuse pending proposals if we were leading
	n.role = Candidate
	n.promised = b
	n.leaderBallot = 0
	n.campaignASAP = false
	n.successor = 0
	n.resetElection()
	n.cand = &campaign{
		ballot:   b,
		from:     n.chosen + 1,
		promises: map[ID]Message{},
		retryAt:  map[ID]uint64{},
	}
	n.grantBallot, n.grantLeft = 0, 0
	for _, p := range n.conf.Voters {
		if p != n.id {
			n.sendPrepare(p)
		}
	}
}

func (n *Node) sendPrepare(p ID) {
	c := n.cand
	c.retryAt[p] = n.now + uint64(n.cfg.HeartbeatTicks)
	// Released relays the latest release this replica heard of, so that an
	// acceptor the leader's own release has not reached yet need not be
	// waited out (handover.go).
	n.send(Message{Type: MsgPrepare, To: p, Ballot: c.ballot, Slot: c.from, Tick: n.now, Released: n.released})
}

// tickCandidate forgets promises that no longer count and resends Prepare
// to peers whose promise is missing.
func (n *Node) tickCandidate() {
	c := n.cand
	for _, p := range n.conf.Voters {
		if p == n.id {
			continue
		}
		if pr, ok := c.promises[p]; ok && !n.voteLive(pr.Tick) {
			delete(c.promises, p)
			c.retryAt[p] = n.now
		}
		if _, ok := c.promises[p]; !ok && n.now >= c.retryAt[p] {
			n.sendPrepare(p)
		}
	}
}

// onPromise handles Phase 1b.
func (n *Node) onPromise(m Message) {
	if n.role != Candidate || m.Ballot != n.cand.ballot {
		return // stale
	}
	n.cand.promises[m.From] = m
	n.maybeLearn(m.From, m.Commit)
	n.tryWin()
}

// usablePromise reports whether promise p counts now: it still counts in
// time, it covers every slot the new leader must recover (it holds
// entries from our first unchosen slot on), it comes from a voter, and its
// sender knows no later membership than we do (we learn it first; see
// "Membership" in the package documentation).
func (n *Node) usablePromise(p Message) bool {
	return p.Compacted <= n.chosen && n.voteLive(p.Tick) && n.conf.isVoter(p.From) && p.ConfIndex <= n.conf.Index
}

// tryWin completes Phase 1 if a majority (our own durable promise included)
// has promised.
func (n *Node) tryWin() {
	if n.role != Candidate || !n.cand.selfDurable {
		return
	}
	if !n.conf.isVoter(n.id) {
		n.becomeFollower(0)
		return
	}
	count := 1
	for _, p := range n.cand.promises {
		if n.usablePromise(p) {
			count++
		}
	}
	if count >= majority(len(n.conf.Voters)) {
		n.becomeLeader()
	}
}

// becomeLeader ends Phase 1: for every slot from the first unchosen one to
// the highest any promise reported, it proposes the chosen value if a
// promise says it is chosen, else the value with the highest ballot, else a
// no-op. Only then does it accept new proposals.
func (n *Node) becomeLeader() {
	c := n.cand
	b := c.ballot
	start := n.chosen + 1
	type pick struct {
		e      Entry
		chosen bool
		ok     bool
	}
	last := start - 1
	picks := map[Slot]pick{}
	consider := func(e Entry, chosen bool) {
		if e.Slot < start {
			return
		}
		if e.Slot > last {
			last = e.Slot
		}
		cur := picks[e.Slot]
		if cur.chosen {
			return
		}
		if chosen || !cur.ok || e.Ballot > cur.e.Ballot {
			picks[e.Slot] = pick{e: e, chosen: chosen, ok: true}
		}
	}
	for _, p := range c.promises {
		if !n.usablePromise(p) {
			continue
		}
		for _, e := range p.Entries {
			consider(e, e.Slot <= p.Commit)
		}
	}
	for s := start; s <= n.lastSlot; s++ {
		if e, ok := n.log[s]; ok {
			consider(e, false)
		}
	}
	n.role = Leader
	n.cand = nil
	n.leaderBallot = b
	l := &leadership{
		ballot:     b,
		inflight:   map[Slot]*inflight{},
		grantUntil: make([]uint64, len(n.peers)),
		peerChosen: make([]Slot, len(n.peers)),
		lastLive:   n.now,
	}
	n.lead = l
	n.heartbeatElapsed = 0
	for s := start; s <= last; s++ {
		pk := picks[s]
		e := Entry{Slot: s, Ballot: b, Value: pk.e.Value}
		n.setLog(e)
		l.toSend = append(l.toSend, e)
		if e.Value.Conf != nil {
			l.confSlot = s // the last one: nothing new goes beyond it
		}
		if pk.chosen && s == n.chosen+1 {
			n.markChosen(e)
			if n.role != Leader {
				return // the membership change removed this replica
			}
			continue
		}
		l.inflight[s] = n.newInflight(e.Value)
	}
	l.nextSlot = last + 1
	l.baseSlot = last
}

// becomeFollower leaves candidacy or leadership; proposals not yet placed in
// a slot are refused. leader is the ballot of the new leader, if known.
func (n *Node) becomeFollower(leader Ballot) {
	if n.lead != nil {
		if c := n.lead.confWant; c != nil {
			n.outcomes = append(n.outcomes, Outcome{ID: c.ID, Err: ErrNotLeader})
		}
		for _, c := range n.lead.pending {
			n.outcomes = append(n.outcomes, Outcome{ID: c.ID, Err: ErrNotLeader})
		}
		if n.grantBallot == n.lead.ballot {
			n.grantBallot, n.grantLeft = 0, 0
		}
	}
	n.lead = nil
	n.cand = nil
	n.pre = nil
	n.role = Follower
	n.leaderBallot = leader
	n.resetElection()
}

// onReject handles a refusal of our ballot.
func (n *Node) onReject(m Message) {
	switch {
	case n.role == Candidate && m.Ballot == n.cand.ballot:
		if m.Promised > m.Ballot {
			n.becomeFollower(0)
			return
		}
		if m.LeaseLeft > 0 {
			// Retry once the grant has run out on the acceptor's clock,
			// allowing for our clock running faster.
			left := min(m.LeaseLeft, 4*uint64(n.cfg.LeaseTicks))
			left += left*uint64(n.cfg.DriftPPM)/1_000_000 + 1
			n.cand.retryAt[m.From] = n.now + left
		}
	case n.role == Leader && m.Ballot == n.lead.ballot:
		if m.Promised > m.Ballot {
			n.becomeFollower(0)
		}
	}
}

// windowOpen reports whether the leader may propose in a new slot: the
// window has room and no membership change it placed is still unchosen.
func (n *Node) windowOpen() bool {
	l := n.lead
	return uint64(l.nextSlot-1-n.chosen) < uint64(n.cfg.MaxInflight) && l.confSlot <= n.chosen
}

// wantsSlot reports whether the leader has something to put in a new slot:
// pending proposals, or no-ops up to fillTo.
func (l *leadership) wantsSlot() bool { return len(l.pending) > 0 || l.nextSlot <= l.fillTo }

// canPlace reports whether the leader places something in a new slot now:
// a waiting membership change once every slot it proposed is chosen, else
// pending proposals or no-ops while the window is open.
func (n *Node) canPlace() bool {
	l := n.lead
	if l.hand != nil || !n.windowOpen() {
		return false
	}
	if l.confWant != nil {
		return l.nextSlot-1 == n.chosen
	}
	return l.wantsSlot()
}

// flushProposals packs pending proposals into new slots while the window
// allows, up to MaxBatch commands per slot, and fills new slots up to
// fillTo with no-ops when nothing is pending.
func (n *Node) flushProposals() {
	l := n.lead
	for n.canPlace() {
		if c := l.confWant; c != nil {
			s := l.nextSlot
			l.nextSlot++
			e := Entry{Slot: s, Ballot: l.ballot, Value: Value{Cmds: []Command{*c}, Conf: l.confNext}}
			n.setLog(e)
			l.toSend = append(l.toSend, e)
			l.inflight[s] = n.newInflight(e.Value)
			n.waiting[s] = append(n.waiting[s], c.ID)
			l.confWant, l.confNext = nil, nil
			l.confSlot = s
			continue
		}
		if len(l.pending) == 0 {
			s := l.nextSlot
			l.nextSlot++
			e := Entry{Slot: s, Ballot: l.ballot}
			n.setLog(e)
			l.toSend = append(l.toSend, e)
			l.inflight[s] = n.newInflight(e.Value)
			continue
		}
		k := min(len(l.pending), n.cfg.MaxBatch)
		cmds := make([]Command, k)
		copy(cmds, l.pending[:k])
		l.pending = l.pending[k:]
		if len(l.pending) == 0 {
			l.pending = nil
		}
		s := l.nextSlot
		l.nextSlot++
		e := Entry{Slot: s, Ballot: l.ballot, Value: Value{Cmds: cmds}}
		n.setLog(e)
		l.toSend = append(l.toSend, e)
		l.inflight[s] = n.newInflight(e.Value)
		ids := make([]ProposalID, k)
		for i, c := range cmds {
			ids[i] = c.ID
		}
		n.waiting[s] = append(n.waiting[s], ids...)
	}
}

// flushAccepts broadcasts new accepts and the chosen index, asking every
// acceptor for a lease grant.
func (n *Node) flushAccepts() {
	l := n.lead
	if len(l.toSend) == 0 && l.commitSent >= n.chosen && l.announced {
		return
	}
	n.broadcastAccept(l.toSend, nil)
	l.toSend = nil
}

// broadcastAccept sends an Accept with ents to every peer, plus any
// retransmission retx returns for that peer, and renews our own grant.
func (n *Node) broadcastAccept(ents []Entry, retx func(idx int) []Entry) {
	l := n.lead
	// Every peer, former members too: an Accept's chosen index is how a
	// removed replica that missed its removal learns it (and stops).
	for i, p := range n.peers {
		if i == n.self {
			continue
		}
		e := ents
		if retx != nil {
			e = retx(i)
		}
		n.send(Message{Type: MsgAccept, To: p, Ballot: l.ballot, Entries: e, Tick: n.now})
	}
	l.commitSent = n.chosen
	l.announced = true
	// Our own acceptor grants us the lease too.
	n.grant(l.ballot)
	l.grantUntil[n.self] = n.now + n.effTTL
}

// tickLeader renews the lease every HeartbeatTicks (retransmitting unacked
// accepts) and steps down after ElectionTicks without a lease.
func (n *Node) tickLeader() {
	l := n.lead
	n.heartbeatElapsed++
	if n.heartbeatElapsed >= n.cfg.HeartbeatTicks {
		n.heartbeatElapsed = 0
		// A heartbeat renews the lease and retransmits every accept a peer
		// has not acknowledged (or whose acknowledgement no longer counts).
		n.broadcastAccept(nil, func(idx int) []Entry {
			var out []Entry
			for s := n.chosen + 1; s < l.nextSlot; s++ {
				if in, ok := l.inflight[s]; ok && !n.ackLive(in, idx) {
					out = append(out, Entry{Slot: s, Ballot: l.ballot, Value: in.value})
				}
			}
			return out
		})
	}
	if n.leaseLive() {
		l.lastLive = n.now
	} else if n.now-l.lastLive >= uint64(n.cfg.ElectionTicks) {
		n.becomeFollower(0)
	}
}

// onAccepted handles Phase 2b.
func (n *Node) onAccepted(m Message) {
	if n.role != Leader || m.Ballot != n.lead.ballot {
		return // stale
	}
	l := n.lead
	idx := n.index(m.From)
	l.peerChosen[idx] = max(l.peerChosen[idx], m.Commit)
	if m.Learner || !n.conf.isVoter(m.From) {
		// Progress only: a learner grants no lease and accepts nothing.
		n.maybeLearn(m.From, m.Commit)
		return
	}
	if until := m.Tick + n.effTTL; until > l.grantUntil[idx] {
		l.grantUntil[idx] = until
	}
	if n.voteLive(m.Tick) {
		for _, s := range m.Slots {
			n.ackSlot(idx, s, m.Tick)
		}
		n.advanceLeaderChosen()
	}
	n.maybeLearn(m.From, m.Commit)
}

// ackSlot records that replica idx accepted slot s at our ballot, in
// answer to an Accept sent at tick sent.
func (n *Node) ackSlot(idx int, s Slot, sent uint64) {
	if in, ok := n.lead.inflight[s]; ok {
		in.acks = in.acks.add(idx)
		in.ackTick[idx] = max(in.ackTick[idx], sent)
	}
}

// liveAcks counts the acknowledgements of in that count now.
func (n *Node) liveAcks(in *inflight) int {
	c := 0
	for _, p := range n.conf.Voters {
		if idx := n.index(p); idx >= 0 && n.ackLive(in, idx) {
			c++
		}
	}
	return c
}

// advanceLeaderChosen marks chosen every slot from the first unchosen one
// that a majority accepted.
func (n *Node) advanceLeaderChosen() {
	l := n.lead
	for {
		s := n.chosen + 1
		in, ok := l.inflight[s]
		if !ok || n.liveAcks(in) < majority(len(n.conf.Voters)) {
			return
		}
		delete(l.inflight, s)
		n.markChosen(n.log[s])
		if n.role != Leader {
			return // the membership change removed this replica
		}
	}
}

// leaseEnd returns the tick at which the leader stops holding a majority of
// live grants.
func (n *Node) leaseEnd() uint64 {
	var buf [MaxReplicas]uint64
	vals := buf[:0]
	for _, p := range n.conf.Voters {
		if idx := n.index(p); idx >= 0 {
			vals = append(vals, n.lead.grantUntil[idx])
		}
	}
	if len(vals) < len(n.conf.Voters) {
		return 0
	}
	return quorumMin(vals)
}

// leaseLive reports whether a majority of grants is live.
func (n *Node) leaseLive() bool { return n.now < n.leaseEnd() }

// isMaster reports whether this leader may serve reads: lease live and
// everything chosen before its leadership applied.
func (n *Node) isMaster() bool {
	return n.role == Leader && n.leaseLive() && n.applied >= n.lead.baseSlot
}

// ProposeConfChange asks the leader to change the membership by cc, through
// the log: the change is placed in a slot of its own once every slot this
// leader proposed is chosen, the slots after it are proposed only once it
// is chosen, and from the next slot on quorums and leases are counted over
// the new voters (see "Membership" in the package documentation). The
// proposal ends in one Outcome, like Propose's.
//
// It returns ErrNotLeader if this replica is not the established leader,
// ErrConfChangePending while an earlier change is not yet known chosen,
// ErrInvalidConfChange (wrapped) if cc does not apply to the membership,
// and ErrNotCaughtUp (wrapped) for a promotion of a learner that has not
// reported knowing the log chosen to within MaxInflight slots of this
// leader (and past its compaction point). Removing this replica itself is
// allowed: once the change is chosen it hands over to the most advanced
// remaining voter and steps down.
func (n *Node) ProposeConfChange(cc ConfChange) (ProposalID, error) {
	if n.err != nil {
		return ProposalID{}, n.err
	}
	if n.role != Leader {
		return ProposalID{}, ErrNotLeader
	}
	l := n.lead
	if l.confWant != nil || l.confSlot > n.chosen {
		return ProposalID{}, ErrConfChangePending
	}
	next, err := n.conf.apply(cc)
	if err != nil {
		return ProposalID{}, err
	}
	if cc.Type == ConfPromote {
		got := n.peerCommit[n.index(cc.ID)]
		if got+Slot(n.cfg.MaxInflight) < n.chosen || (n.compacted > 0 && got < n.compacted) {
			return ProposalID{}, fmt.Errorf("%w: learner %d knows the log chosen to %d, this leader to %d", ErrNotCaughtUp, cc.ID, got, n.chosen)
		}
	}
	l.seq++
	id := ProposalID{Ballot: l.ballot, Seq: l.seq}
	l.confWant = &Command{ID: id}
	l.confNext = &next
	return id, nil
}
