package paxos

import (
	"fmt"
	"slices"
)

// Role is what a replica currently does besides accepting.
type Role uint8

// The roles. Every replica is always an acceptor and a learner too.
const (
	// Follower follows a leader (or waits to hear one).
	Follower Role = iota
	// Candidate runs Phase 1 with its own ballot.
	Candidate
	// Leader completed Phase 1 and proposes in Phase 2.
	Leader
)

// String returns the role's name.
func (r Role) String() string {
	switch r {
	case Follower:
		return "follower"
	case Candidate:
		return "candidate"
	case Leader:
		return "leader"
	}
	return fmt.Sprintf("Role(%d)", uint8(r))
}

// SoftState is volatile state worth telling the caller about when it
// changes: who leads, whether this replica is master, and the epoch.
type SoftState struct {
	// Leader is the replica this one believes leads (0 if unknown).
	Leader ID
	// Master is Status().Master.
	Master bool
	// Epoch is the ballot of the leader this replica follows or is
	// (0 if unknown).
	Epoch Ballot
}

// Outcome is the definite end of one accepted Propose call.
//
// A proposal is decided only once it cannot change: chosen at Slot (Err nil),
// or definitely not chosen (Err is ErrNotLeader when leadership was lost
// before the proposal was placed in a slot, ErrPreempted when its slot's
// chosen value is another). A proposal already placed in a slot is decided
// only when that slot's chosen value is learned; this replica keeps tracking
// it across changes of leadership (but not across a restart). The one
// exception: if the replica installs a snapshot covering the slot before it
// learned the slot's value, the outcome is ErrOutcomeUnknown.
type Outcome struct {
	ID   ProposalID
	Slot Slot
	Err  error
}

// Ready is a batch of work for the caller; see the package documentation for
// the order in which to handle its fields.
type Ready struct {
	// HardState to persist; zero if unchanged.
	HardState HardState
	// Entries to persist (accepted or learned), in the same atomic batch as
	// HardState, replacing any stored entry in the same slot.
	Entries []Entry
	// MustSync reports that HardState and Entries must be on stable storage
	// (fsync) before the messages that depend on them are sent.
	MustSync bool
	// WriteID names the write of HardState and Entries, 0 if the Ready has
	// neither. Write IDs grow by one with each Ready that has a write. With
	// Config.AsyncWrites the caller reports that a write is carried out
	// (saved, and durable if MustSync) with Persisted(WriteID).
	WriteID uint64
	// Messages to send. Without Config.AsyncWrites, those for which
	// Message.DependsOnPersist holds leave only once HardState and Entries
	// are persisted (the others may leave at once). With AsyncWrites every
	// one of them may leave at once: the node holds back each message that
	// depends on a write until the caller reports that write durable
	// (Persisted), and hands it out in a later Ready.
	Messages []Message
	// Snapshot to install (Saver.SaveSnapshot and restore the application
	// from it) before applying Chosen; zero if none.
	Snapshot Snapshot
	// Chosen values to apply, contiguous and strictly in slot order.
	Chosen []Entry
	// SoftState is the new soft state, or nil if unchanged.
	SoftState *SoftState
	// Outcomes of earlier proposals.
	Outcomes []Outcome
}

// Status is a snapshot of a node's state, for the cell and for tests.
type Status struct {
	ID   ID
	Role Role
	// Leader is this replica's best knowledge of the leader (0 if none).
	Leader ID
	// Epoch is the ballot of the current leader as far as this replica
	// knows (0 if none known).
	Epoch Ballot
	// Promised is the highest ballot this replica promised.
	Promised Ballot
	// IsLeader reports that this replica completed Phase 1 and proposes.
	IsLeader bool
	// Master reports that this replica is the leader, a majority's lease
	// grants are live as of the last Tick (counted conservatively), and
	// every slot chosen before its leadership has been handed out in
	// Ready.Chosen and Advanced. While it holds, the caller may serve reads
	// from its applied state.
	Master bool
	// LeaseTicksLeft is the number of ticks the master lease has left
	// (0 unless Master).
	LeaseTicksLeft int
	// Chosen is the highest slot up to which every value is known chosen.
	Chosen Slot
	// Applied is the highest slot the caller has applied (Advanced).
	Applied Slot
	// Compacted is the snapshot slot: the log holds nothing at or below it.
	Compacted Slot
	// Pending is the number of proposals waiting for a slot.
	Pending int
	// Ticks counts calls to Tick since NewNode.
	Ticks uint64
	// WritesInFlight is the number of writes handed out in Ready
	// (Ready.WriteID) and not yet reported carried out (Advance, or
	// Persisted with Config.AsyncWrites); HeldMessages is the number of
	// messages held back until one of them is durable.
	WritesInFlight, HeldMessages int
	// HandOver names the successor of a planned hand-over in progress at
	// this leader (0 if none; see HandOver).
	HandOver ID
	// Successor names the replica this one asked to take over when it
	// stepped down, while it knows no leader since (for at most
	// ElectionTicks); 0 otherwise. A caller may redirect clients there.
	Successor ID
	// PreVote reports that this replica's election timer fired and it is
	// asking whether a majority would vote for it before it campaigns
	// (Role stays Follower meanwhile; see prevote.go).
	PreVote bool
	// Rebuild describes the rebuild in progress: while Rebuild.Phase is not
	// RebuildNone this replica is a learner that votes in nothing.
	Rebuild RebuildStatus
	// Members is the membership this replica knows chosen. Its slices are
	// shared with the node: read them, never modify them.
	Members Membership
	// ConfPending is the slot of a membership change this leader proposed
	// (or recovered) that is not yet known chosen; 0 if none.
	ConfPending Slot
}

// Node is one replica's multi-Paxos state machine: proposer, acceptor and
// learner in one. It has no goroutines, clocks, sockets or disk: the caller
// drives it with Tick, Step and Propose and carries out its Ready batches
// (see the package documentation). A Node is not safe for concurrent use.
//
// Errors: Propose returns ErrNotLeader or ErrBusy; Step returns
// ErrInvalidMessage (wrapped) for bad input, leaving the node unchanged;
// StepDown returns ErrNotLeader or ErrInvalidArgument; Compact returns
// ErrInvalidArgument. A storage error stops the node: every later call
// returns it (wrapped).
type Node struct {
	cfg  Config
	id   ID
	self int // index of id in peers
	// peers lists every replica this node has known as a member since
	// NewNode, this one included; per-peer state (voteSet bits, peerCommit,
	// the leader's arrays) is indexed by position here. It only grows, so
	// indexes never change while the node runs.
	peers []ID
	// conf is the membership this replica knows chosen: the initial one,
	// the snapshot's, or the last membership change at or below chosen.
	conf   Membership
	effTTL uint64
	rng    splitmix64
	err    error

	// Acceptor state. promised and accepted entries are durable.
	promised  Ballot
	log       map[Slot]Entry
	lastSlot  Slot // highest slot in log, or compacted
	compacted Slot
	// Learner state: every slot <= chosen is known chosen and log holds its
	// chosen value (or it is <= compacted).
	chosen  Slot
	handed  Slot // handed out in Ready.Chosen (or covered by a snapshot)
	applied Slot // Advanced

	now uint64 // ticks since NewNode

	// Lease grant this replica made as an acceptor.
	grantBallot Ballot // 0 with grantLeft > 0: unknown holder (restart)
	grantLeft   int
	released    Ballot // grants to ballots <= released are not renewed
	// successor is the replica this one asked to take over when it last
	// stepped down (0 if none), until it hears of a leader or its tick
	// count reaches successorUntil.
	successor      ID
	successorUntil uint64

	role             Role
	leaderBallot     Ballot // ballot of the leader we follow, or our own
	maxRound         uint64 // highest round seen
	electionElapsed  int
	electionTimeout  int
	campaignASAP     bool
	heartbeatElapsed int
	learnWait        int // ticks until an unanswered LearnReq counts as lost
	// learnAsked is the peer our latest LearnReq went to; learnMissed
	// counts the LearnReqs in a row that went unanswered, after which we ask
	// the next peer in turn instead (see learner.go).
	learnAsked  ID
	learnMissed int
	// quiet counts the ticks since a peer's message last arrived; a replica
	// that does not vote asks a peer for chosen values once it reaches
	// ElectionTicks (learner.go, tickQuiet).
	quiet int
	// peerCommit holds, per replica index, the chosen index the peer's
	// latest message carried.
	peerCommit []Slot

	cand *campaign
	lead *leadership
	// pre is the pre-vote in progress; nil unless this follower's election
	// timer fired and it asks before campaigning.
	pre *preVote
	// rb is the rebuild in progress; nil while this replica votes.
	rb *rebuild

	waiting map[Slot][]ProposalID // our proposals placed in a slot, undecided

	// Write bookkeeping (Ready.WriteID, Persisted). writeSeq is the ID of
	// the latest write handed out, syncSeq that of the latest one with
	// MustSync, durable the ID up to which every write is carried out;
	// writes are the ones handed out and not yet carried out, oldest
	// first. With Config.AsyncWrites: held are messages waiting for a
	// write to be durable (ordered by that write), freed the ones whose
	// write now is, and unstable maps each slot with a write not yet
	// durable to the ID of its latest write (its chosen value is not
	// handed out before it is durable here: see handLimit).
	writeSeq, syncSeq, durable uint64
	writes                     []pendingWrite
	held                       []heldMessage
	freed                      []Message
	unstable                   map[Slot]uint64

	// Ready bookkeeping.
	msgs        []Message
	unsaved     []Entry
	unsavedIdx  map[Slot]int
	prevHS      HardState
	outcomes    []Outcome
	pendingSnap Snapshot
	prevSoft    SoftState
}

// NewNode returns a node restored from cfg.Storage: its hard state, its
// snapshot and its accepted entries. It returns ErrInvalidConfig (wrapped)
// for a bad Config and the storage's error if reading fails.
//
// A restarted acceptor cannot remember the lease grants it made, so for
// LeaseTicks ticks after NewNode it promises no new ballot, its own included.
// With Config.Rebuild, or a stored HardState that says Rebuilding, the node
// starts as a rebuilding learner (see the package documentation).
func NewNode(cfg Config) (*Node, error) {
	cfg = cfg.populate()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:        cfg,
		id:         cfg.ID,
		effTTL:     leaseEffective(cfg.LeaseTicks, cfg.DriftPPM),
		rng:        splitmix64{state: cfg.Seed},
		log:        map[Slot]Entry{},
		waiting:    map[Slot][]ProposalID{},
		unsavedIdx: map[Slot]int{},
		unstable:   map[Slot]uint64{},
		grantLeft:  cfg.LeaseTicks,
	}
	// The initial peers in ID order, this replica among them, so that
	// messages to all go out in ID order; later members are appended.
	n.peers = slices.Clone(cfg.Replicas)
	if i, ok := slices.BinarySearch(n.peers, cfg.ID); !ok {
		n.peers = slices.Insert(n.peers, i, cfg.ID)
	}
	n.peerCommit = make([]Slot, len(n.peers))
	n.self = n.index(cfg.ID)
	st := cfg.Storage
	hs, err := st.InitialState()
	if err != nil {
		return nil, fmt.Errorf("paxos: reading hard state: %w", err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("paxos: reading snapshot: %w", err)
	}
	last, err := st.LastSlot()
	if err != nil {
		return nil, fmt.Errorf("paxos: reading last slot: %w", err)
	}
	ents, err := st.Entries(snap.Slot+1, last+1)
	if err != nil {
		return nil, fmt.Errorf("paxos: reading entries: %w", err)
	}
	n.promised = hs.Promised
	n.maxRound = hs.Promised.Round()
	n.compacted = snap.Slot
	n.lastSlot = snap.Slot
	for _, e := range ents {
		if e.Slot <= snap.Slot {
			continue
		}
		n.log[e.Slot] = e
		if e.Slot > n.lastSlot {
			n.lastSlot = e.Slot
		}
		if e.Ballot.Round() > n.maxRound {
			n.maxRound = e.Ballot.Round()
		}
	}
	// Every slot the application applied was chosen. With AsyncWrites the
	// write recording the chosen index may still have been in flight when
	// a slot was applied (its entry was durable: see handLimit), so a
	// crash can leave Applied above the stored index.
	n.chosen = max(hs.Chosen, snap.Slot, cfg.Applied)
	conf := Membership{Voters: slices.Clone(cfg.Replicas)}
	if snap.Members != nil {
		if err := snap.Members.validate(); err != nil {
			return nil, fmt.Errorf("paxos: stored snapshot at slot %d: %w", snap.Slot, err)
		}
		conf = snap.Members.clone()
	}
	for s := snap.Slot + 1; s <= n.chosen; s++ {
		e, ok := n.log[s]
		if !ok {
			return nil, fmt.Errorf("paxos: slot %d is chosen (stored chosen index %d, applied %d) but storage holds no entry for it", s, hs.Chosen, cfg.Applied)
		}
		if c := confOf(e); c != nil {
			conf = c.clone()
			conf.Index = s
		}
	}
	if err := conf.validate(); err != nil {
		return nil, fmt.Errorf("%w: membership: %v", ErrInvalidConfig, err)
	}
	n.setMembership(conf)
	n.prevHS = HardState{Promised: hs.Promised, Chosen: hs.Chosen, Rebuilding: hs.Rebuilding}
	n.applied = cfg.Applied
	n.handed = cfg.Applied
	if cfg.Applied < snap.Slot {
		n.pendingSnap = snap
		n.handed = snap.Slot
	}
	n.resetElection()
	if cfg.Rebuild || hs.Rebuilding {
		n.startRebuild()
	}
	return n, nil
}

// index returns the peer index of id (see Node.peers), or -1.
func (n *Node) index(id ID) int {
	for i, r := range n.peers {
		if r == id {
			return i
		}
	}
	return -1
}

// Tick advances the node's clock by one tick.
func (n *Node) Tick() {
	if n.err != nil {
		return
	}
	n.now++
	if n.grantLeft > 0 {
		n.grantLeft--
	}
	if n.successor != 0 && n.now >= n.successorUntil {
		n.successor = 0
	}
	if n.learnWait > 0 {
		n.learnWait--
		if n.learnWait == 0 {
			n.learnLost()
		}
	}
	switch n.role {
	case Follower:
		if n.rb != nil {
			n.tickRebuild()
			n.advanceRebuild()
			n.tickQuiet()
			break
		}
		if !n.voting() {
			// A learner, or no longer a member: it never campaigns, but it
			// must not stay behind for want of a message.
			n.tickQuiet()
			break
		}
		n.electionElapsed++
		switch {
		case !n.canPromiseSelf():
		case n.campaignASAP:
			// Asked by the master that stepped down: no pre-vote, so the
			// hand-over costs no extra round trip.
			n.campaign()
		case n.pre != nil:
			n.tickPreVote()
		case n.electionElapsed >= n.electionTimeout:
			n.startPreVote()
		}
	case Candidate:
		n.tickCandidate()
	case Leader:
		n.tickLeader()
		n.maybeHandOver()
	}
}

// resetElection restarts the election timer with fresh jitter.
func (n *Node) resetElection() {
	n.electionElapsed = 0
	n.electionTimeout = n.cfg.ElectionTicks + n.rng.intn(n.cfg.ElectionJitterTicks+1)
}

// Step feeds a message from a peer into the node. It returns
// ErrInvalidMessage (wrapped) and changes nothing if the message is
// malformed, misaddressed, from an unknown replica or of an unknown type.
// Stale messages (old ballots, duplicates) are ignored without error.
func (n *Node) Step(m Message) error {
	if n.err != nil {
		return n.err
	}
	if err := n.check(&m); err != nil {
		return err
	}
	if m.Type == MsgAccepted && n.role == Leader && m.Ballot == n.lead.ballot && m.Tick > n.now {
		return fmt.Errorf("%w: Accepted from %d echoes tick %d, this replica is at %d", ErrInvalidMessage, m.From, m.Tick, n.now)
	}
	if m.Type == MsgPromise && n.role == Candidate && m.Ballot == n.cand.ballot && m.Tick > n.now {
		return fmt.Errorf("%w: Promise from %d echoes tick %d, this replica is at %d", ErrInvalidMessage, m.From, m.Tick, n.now)
	}
	n.peerCommit[n.addPeer(m.From)] = m.Commit
	n.quiet = 0
	if r := m.Ballot.Round(); r > n.maxRound {
		n.maxRound = r
	}
	if r := m.Promised.Round(); r > n.maxRound {
		n.maxRound = r
	}
	switch m.Type {
	case MsgPrepare:
		n.onPrepare(m)
	case MsgAccept:
		n.onAccept(m)
	case MsgRelease, MsgTimeoutNow:
		n.onRelease(m)
	case MsgPromise:
		n.onPromise(m)
	case MsgAccepted:
		n.onAccepted(m)
	case MsgReject:
		n.onReject(m)
	case MsgLearnReq:
		n.onLearnReq(m)
	case MsgLearn:
		n.onLearn(m)
	case MsgSnapshot:
		n.onSnapshot(m)
	case MsgRebuild:
		n.onRebuild(m)
	case MsgRebuildAck:
		n.onRebuildAck(m)
	case MsgPreVote:
		n.onPreVote(m)
	case MsgPreVoteResp:
		n.onPreVoteResp(m)
	}
	// Whatever the message, a sender ahead of us is a chance to learn
	// (learner.go): a follower deaf to the master hears how far the log is
	// chosen from the peers refusing its pre-vote, a rebuilding one from
	// any peer's answer.
	if n.err == nil {
		n.maybeLearn(m.From, m.Commit)
	}
	n.advanceRebuild()
	n.maybeHandOver()
	return n.err
}

// Propose asks the leader to propose data. It returns ErrNotLeader if this
// replica is not the established leader (or has stepped down) and ErrBusy
// if too many proposals wait for a slot. Otherwise the proposal gets a
// unique ID and will end in exactly one Outcome in a later Ready. The core
// keeps data; the caller must not modify it afterwards. During a planned
// hand-over (HandOver) a proposal waits for a slot: it ends with
// ErrNotLeader when the hand-over completes, or is placed if it is
// abandoned.
func (n *Node) Propose(data []byte) (ProposalID, error) {
	if n.err != nil {
		return ProposalID{}, n.err
	}
	if n.role != Leader {
		return ProposalID{}, ErrNotLeader
	}
	l := n.lead
	if len(l.pending) >= 4*n.cfg.MaxInflight*n.cfg.MaxBatch {
		return ProposalID{}, ErrBusy
	}
	l.seq++
	id := ProposalID{Ballot: l.ballot, Seq: l.seq}
	l.pending = append(l.pending, Command{ID: id, Data: data})
	return id, nil
}

// StepDown hands leadership over at once: the node stops being master,
// tells the acceptors to release its lease and, if next is not 0, tells
// next to campaign at once, so the next master need not wait out the
// lease. Unlike HandOver it does not wait for its slots to be chosen or for
// next to catch up, so next may first have to learn or recover them.
// Proposals not yet placed in a slot end with ErrNotLeader. It returns
// ErrNotLeader if this replica is not the leader and ErrInvalidArgument if
// next is this replica or not a replica of the cell.
func (n *Node) StepDown(next ID) error {
	if n.err != nil {
		return n.err
	}
	if n.role != Leader {
		return ErrNotLeader
	}
	if next != 0 && (next == n.id || !n.conf.isVoter(next)) {
		return fmt.Errorf("%w: StepDown to %d: not another replica of the cell", ErrInvalidArgument, next)
	}
	n.stepDown(next)
	return nil
}

// Compact tells the node that the caller has just saved (Saver.SaveSnapshot)
// a snapshot of the application at slot s. The node drops its in-memory log
// up to s and serves peers that need slots at or below s from
// Storage.Snapshot. It returns ErrInvalidArgument if s lies beyond the
// applied slot; compacting at or below the current point does nothing.
func (n *Node) Compact(s Slot) error {
	if n.err != nil {
		return n.err
	}
	if s > n.applied {
		return fmt.Errorf("%w: compact at %d beyond applied slot %d", ErrInvalidArgument, s, n.applied)
	}
	if s <= n.compacted {
		return nil
	}
	n.dropLog(s)
	return nil
}

// dropLog forgets every log entry at or below s and records s as the
// compaction point.
func (n *Node) dropLog(s Slot) {
	if Slot(len(n.log)) < s-n.compacted {
		for slot := range n.log {
			if slot <= s {
				delete(n.log, slot)
			}
		}
	} else {
		for slot := n.compacted + 1; slot <= s; slot++ {
			delete(n.log, slot)
		}
	}
	n.compacted = s
	if n.lastSlot < s {
		n.lastSlot = s
	}
}

// Status returns the node's current state.
func (n *Node) Status() Status {
	st := Status{
		ID:        n.id,
		Role:      n.role,
		Promised:  n.promised,
		IsLeader:  n.role == Leader,
		Chosen:    n.chosen,
		Applied:   n.applied,
		Compacted: n.compacted,
		Ticks:     n.now,
		Members:   n.conf,
		Rebuild:   n.rebuildStatus(),
		PreVote:   n.pre != nil,
		Successor: n.successor,

		WritesInFlight: len(n.writes),
		HeldMessages:   len(n.held),
	}
	if n.role == Leader && n.lead.hand != nil {
		st.HandOver = n.lead.hand.to
	}
	if n.role == Leader && n.lead.confSlot > n.chosen {
		st.ConfPending = n.lead.confSlot
	}
	soft := n.softState()
	st.Leader, st.Epoch, st.Master = soft.Leader, soft.Epoch, soft.Master
	if st.Master {
		st.LeaseTicksLeft = int(n.leaseEnd() - n.now)
	}
	if n.lead != nil {
		st.Pending = len(n.lead.pending)
	}
	return st
}

// softState computes the current soft state.
func (n *Node) softState() SoftState {
	switch n.role {
	case Leader:
		return SoftState{Leader: n.id, Epoch: n.lead.ballot, Master: n.isMaster()}
	case Candidate:
		return SoftState{}
	}
	return SoftState{Leader: n.leaderBallot.ID(), Epoch: n.leaderBallot}
}

// hardState returns the hard state to persist. While a snapshot waits to be
// installed, Chosen does not move past what is stored, because the caller
// saves the snapshot after the Ready's HardState. A rebuild is durable until
// the replica rejoins.
func (n *Node) hardState() HardState {
	c := n.chosen
	if !n.pendingSnap.IsEmpty() && c > n.prevHS.Chosen {
		c = n.prevHS.Chosen
	}
	return HardState{Promised: n.promised, Chosen: c, Rebuilding: n.rb != nil && n.rb.phase != RebuildRejoining}
}

// HasReady reports whether Ready would return anything to do.
func (n *Node) HasReady() bool {
	if n.err != nil {
		return false
	}
	if len(n.msgs) > 0 || len(n.freed) > 0 || len(n.unsaved) > 0 || len(n.outcomes) > 0 || !n.pendingSnap.IsEmpty() {
		return true
	}
	if n.hardState() != n.prevHS || n.handed < n.handLimit() || n.softState() != n.prevSoft {
		return true
	}
	if l := n.lead; l != nil && n.role == Leader {
		if len(l.toSend) > 0 || l.commitSent < n.chosen || !l.announced || n.canPlace() {
			return true
		}
	}
	return false
}

// Ready returns the work accumulated since the last Ready. The caller must
// carry it out as the package documentation says and then call Advance
// with it before calling Ready again.
func (n *Node) Ready() Ready {
	if n.err != nil {
		return Ready{}
	}
	if n.role == Leader {
		n.flushProposals()
		n.flushAccepts()
	}
	var rd Ready
	rejoin := false
	if hs := n.hardState(); hs != n.prevHS {
		rd.HardState = hs
		rd.MustSync = hs.Promised != n.prevHS.Promised || hs.Rebuilding != n.prevHS.Rebuilding
		n.prevHS = hs
		rejoin = n.rb != nil && n.rb.phase == RebuildRejoining && !hs.Rebuilding
	}
	if len(n.unsaved) > 0 {
		rd.Entries = n.unsaved
		rd.MustSync = true
		n.unsaved = nil
		clear(n.unsavedIdx)
	}
	if !rd.HardState.IsEmpty() || len(rd.Entries) > 0 {
		n.writeSeq++
		rd.WriteID = n.writeSeq
		if rd.MustSync {
			n.syncSeq = n.writeSeq
		}
		n.writes = append(n.writes, pendingWrite{id: rd.WriteID, hs: rd.HardState, ents: rd.Entries})
		if n.cfg.AsyncWrites {
			for _, e := range rd.Entries {
				n.unstable[e.Slot] = rd.WriteID
			}
		}
		if rejoin {
			n.rb.rejoinWrite = rd.WriteID
		}
	}
	rd.Messages = n.readyMessages()
	if !n.pendingSnap.IsEmpty() {
		rd.Snapshot = n.pendingSnap
		n.pendingSnap = Snapshot{}
	}
	if lim := n.handLimit(); n.handed < lim {
		from := max(n.handed+1, n.compacted+1)
		rd.Chosen = make([]Entry, 0, lim-from+1)
		for s := from; s <= lim; s++ {
			e, ok := n.log[s]
			if !ok {
				panic(fmt.Sprintf("paxos: invariant broken: chosen slot %d (handed %d, chosen %d, compacted %d) missing from the log", s, n.handed, n.chosen, n.compacted))
			}
			rd.Chosen = append(rd.Chosen, e)
		}
		n.handed = lim
	}
	if soft := n.softState(); soft != n.prevSoft {
		n.prevSoft = soft
		rd.SoftState = &soft
	}
	rd.Outcomes = n.outcomes
	n.outcomes = nil
	return rd
}

// Advance tells the node that rd has been carried out: its messages sent,
// its snapshot installed and its chosen values applied, and, unless the
// node was configured with Config.AsyncWrites, its HardState and Entries
// persisted. With AsyncWrites the write may still be in flight; the caller
// reports it with Persisted once it is carried out.
func (n *Node) Advance(rd Ready) {
	if n.err != nil {
		return
	}
	if !rd.Snapshot.IsEmpty() && rd.Snapshot.Slot > n.applied {
		n.applied = rd.Snapshot.Slot
	}
	if k := len(rd.Chosen); k > 0 && rd.Chosen[k-1].Slot > n.applied {
		n.applied = rd.Chosen[k-1].Slot
	}
	if !n.cfg.AsyncWrites && rd.WriteID != 0 {
		n.markDurable(rd.WriteID)
	}
	if n.role == Leader {
		n.advanceLeaderChosen()
		n.maybeHandOver()
	}
}

// Persisted tells a node configured with Config.AsyncWrites that every
// write up to and including the one named id (Ready.WriteID) is carried
// out: saved, and on stable storage if its Ready said MustSync. Writes
// must be carried out in WriteID order, so one call covers all earlier
// ones; a call for an id already covered does nothing. The node then
// counts its own promise and accepts in those writes, hands out the chosen
// values they held, and releases, in the next Ready, the messages that
// waited for them. Persisted may be called at any time between the other
// calls, also between Ready and Advance.
//
// It returns ErrInvalidArgument (wrapped) and changes nothing if the node
// does not use AsyncWrites or no write id was handed out yet.
func (n *Node) Persisted(id uint64) error {
	if n.err != nil {
		return n.err
	}
	if !n.cfg.AsyncWrites {
		return fmt.Errorf("%w: Persisted(%d) on a node without AsyncWrites (Advance reports its writes)", ErrInvalidArgument, id)
	}
	if id > n.writeSeq {
		return fmt.Errorf("%w: Persisted(%d): the latest write handed out is %d", ErrInvalidArgument, id, n.writeSeq)
	}
	n.markDurable(id)
	return nil
}

// pendingWrite is a write handed out in a Ready and not yet carried out.
type pendingWrite struct {
	id   uint64
	hs   HardState
	ents []Entry
}

// heldMessage is a message that depends on persistence, held back (with
// Config.AsyncWrites) until the write after is durable.
type heldMessage struct {
	after uint64
	m     Message
}

// readyMessages returns the messages a Ready hands out: all of them
// without AsyncWrites; with it, the ones released by Persisted and the new
// ones that depend on no write still in flight. A new message that depends
// on persistence is held until the latest synced write is durable: that
// write holds every promise and accept made before the message (they went
// into it or an earlier one).
func (n *Node) readyMessages() []Message {
	if !n.cfg.AsyncWrites {
		out := n.msgs
		n.msgs = nil
		return out
	}
	out := n.freed
	n.freed = nil
	for _, m := range n.msgs {
		if n.syncSeq > n.durable && m.DependsOnPersist() {
			n.held = append(n.held, heldMessage{after: n.syncSeq, m: m})
			continue
		}
		out = append(out, m)
	}
	n.msgs = nil
	return out
}

// handLimit returns the highest chosen slot a Ready may hand out to be
// applied: every chosen slot without AsyncWrites (the Ready's own write is
// persisted before its chosen values are applied), and with it the chosen
// slots below the first one whose write here is not yet durable. Applying
// a value only once this replica's own copy is stored keeps the log at or
// ahead of the application after a crash, as without AsyncWrites.
func (n *Node) handLimit() Slot {
	if len(n.unstable) == 0 {
		return n.chosen
	}
	for s := max(n.handed+1, n.compacted+1); s <= n.chosen; s++ {
		if _, ok := n.unstable[s]; ok {
			return s - 1
		}
	}
	return n.chosen
}

// markDurable records that every write up to id is carried out: the
// leader counts its own acceptance of the slots they hold at its ballot,
// a candidate its own promise, a rebuilt replica votes again once its
// rejoining hard state is durable, and held messages are released.
func (n *Node) markDurable(id uint64) {
	if id <= n.durable {
		return
	}
	n.durable = id
	selfPromise := false
	k := 0
	for ; k < len(n.writes) && n.writes[k].id <= id; k++ {
		w := &n.writes[k]
		for _, e := range w.ents {
			if n.unstable[e.Slot] == w.id {
				delete(n.unstable, e.Slot)
			}
			// Our own accepts count only once durable.
			if n.role == Leader && e.Ballot == n.lead.ballot {
				n.ackSlot(n.self, e.Slot, n.now)
			}
		}
		// So does our own promise.
		if n.role == Candidate && !w.hs.IsEmpty() && w.hs.Promised == n.cand.ballot {
			selfPromise = true
		}
	}
	clear(n.writes[:k])
	n.writes = n.writes[k:]
	if len(n.writes) == 0 {
		n.writes = nil
	}
	j := 0
	for ; j < len(n.held) && n.held[j].after <= id; j++ {
		n.freed = append(n.freed, n.held[j].m)
	}
	clear(n.held[:j])
	n.held = n.held[j:]
	if len(n.held) == 0 {
		n.held = nil
	}
	if n.role == Leader {
		n.advanceLeaderChosen()
		n.maybeHandOver()
	}
	if selfPromise && n.role == Candidate {
		n.cand.selfDurable = true
		n.tryWin()
	}
	// A rebuilt replica votes once its rejoining hard state (the adopted
	// promise, the Rebuilding flag cleared) is durable.
	if rb := n.rb; rb != nil && rb.rejoinWrite != 0 && rb.rejoinWrite <= id {
		n.rb = nil
		n.resetElection()
	}
}

// send queues m for the next Ready, stamping From and Commit.
func (n *Node) send(m Message) {
	m.From = n.id
	m.Commit = n.chosen
	n.msgs = append(n.msgs, m)
}

// persist queues e to be saved in the next Ready.
func (n *Node) persist(e Entry) {
	if i, ok := n.unsavedIdx[e.Slot]; ok {
		n.unsaved[i] = e
		return
	}
	n.unsavedIdx[e.Slot] = len(n.unsaved)
	n.unsaved = append(n.unsaved, e)
}

// setLog stores e in the in-memory log and queues it for persistence.
func (n *Node) setLog(e Entry) {
	n.log[e.Slot] = e
	if e.Slot > n.lastSlot {
		n.lastSlot = e.Slot
	}
	n.persist(e)
}

// fail stops the node with a storage error.
func (n *Node) fail(err error) {
	if n.err == nil {
		n.err = fmt.Errorf("paxos: stopped: storage failed: %w", err)
	}
}
