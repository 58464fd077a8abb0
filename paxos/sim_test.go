package paxos

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// The simulator: one goroutine drives 3 or 5 replicas, a message queue,
// per-replica tick clocks running at different rates, and clients, all from
// one seed. It injects loss, duplication, reordering, delay, symmetric and
// one-way partitions, leader isolation, crashes that lose unsynced writes,
// clock-rate drift, and the loss of a replica's durable state: a wiped disk,
// or a log that lost its last few synced writes (a damaged tail) or
// everything after some older point (a damaged middle, which the storage
// stops replaying at). The cell detects such a loss (the simulated replica
// restarts with Config.Rebuild); after every event the simulator checks the
// invariants.

var (
	simSeeds = flag.Int("sim.seeds", 500, "number of simulator seeds TestSimulation runs")
	simSeed  = flag.Int64("sim.seed", -1, "run only this simulator seed (replay)")
	simTrace = flag.Bool("sim.trace", false, "log every simulator event")
)

const simTickMicros = 10_000 // nominal tick: 10 ms

// simParams describes one simulated run; paramsForSeed derives it.
type simParams struct {
	replicas                int
	lease, heartbeat, elect int
	driftPPM                uint32  // the bound the nodes are configured with
	actualDrift             float64 // the spread of tick periods actually simulated
	loss, dup               float64
	minLatency, maxLatency  int64 // microseconds
	slowFrac                float64
	faultTicks              int // length of the faulty phase, in nominal ticks
	crashes, partitions     bool
	compactEvery            int // compact when this many slots are applied past the last snapshot (0: never)
	wire                    bool
	proposeGap              int64 // mean gap between client proposals, microseconds
	maxInflight, maxBatch   int
	leaderIsolationHeavy    bool
	// earlySend sends messages that do not depend on persistence before
	// persisting (as the cell does); with crashes, a replica sometimes
	// crashes between that early send and the persist.
	earlySend bool
	// amnesia injects the loss of durable state among the faults, at most
	// replicas-majority replicas at a time (more and no majority could
	// rebuild them).
	amnesia bool
	// noRebuildRule restarts a replica that lost state as if nothing had
	// happened: it votes at once (the planted bug the rebuild rule exists
	// to prevent). It also lifts the limit on simultaneous losses.
	noRebuildRule bool
	// amnesiaEvery is the chance, one in amnesiaEvery, that a fault is a loss
	// of state (with amnesia).
	amnesiaEvery int
	// spares is the number of replicas started outside the membership;
	// with spares the faulty phase also changes the membership (add a
	// spare as a learner, promote it, remove a voter or the master
	// itself). Amnesia is off then: a rebuilt replica relearns the
	// membership from its peers, which the simulator does not model.
	spares int
	// asyncWrites runs the nodes with Config.AsyncWrites: every message
	// leaves at once, each write completes persistDelay (mean,
	// microseconds) or so later, in order, several at once when they
	// queued while the previous one was being made durable (group
	// commit), and a crash loses the writes in flight.
	asyncWrites  bool
	persistDelay int64
	// persistEarly (with asyncWrites) is a planted caller bug for the
	// negative test: writes are reported carried out (Persisted) as soon
	// as they are handed out, though they become durable only later.
	persistEarly bool
}

func paramsForSeed(seed int64) simParams {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	p := simParams{
		replicas:    []int{3, 5, 5}[rng.IntN(3)],
		lease:       20,
		heartbeat:   5,
		elect:       22,
		driftPPM:    []uint32{10_000, 50_000, 200_000}[rng.IntN(3)],
		loss:        []float64{0, 0.01, 0.05, 0.2}[rng.IntN(4)],
		dup:         []float64{0, 0.02, 0.1}[rng.IntN(3)],
		minLatency:  100,
		maxLatency:  []int64{1_000, 5_000, 30_000}[rng.IntN(3)],
		slowFrac:    []float64{0, 0.01, 0.05}[rng.IntN(3)],
		faultTicks:  500,
		crashes:     rng.IntN(4) != 0,
		partitions:  rng.IntN(4) != 0,
		wire:        rng.IntN(8) == 0,
		proposeGap:  []int64{4_000, 15_000, 50_000}[rng.IntN(3)],
		maxInflight: []int{1, 4, 32}[rng.IntN(3)],
		maxBatch:    []int{1, 3, 64}[rng.IntN(3)],
	}
	// MemoryStorage copies its whole state on every synced write, so runs
	// that never compact propose less.
	if rng.IntN(8) != 0 {
		p.compactEvery = 5 + rng.IntN(30)
	} else {
		p.proposeGap = max(p.proposeGap, 20_000)
	}
	if rng.IntN(4) == 0 {
		p.lease, p.heartbeat, p.elect = 40, 10, 30 // election shorter than the lease
	}
	// Within the bound: periods spread over at most (1+d).
	p.actualDrift = float64(p.driftPPM) / 1e6
	p.leaderIsolationHeavy = rng.IntN(3) == 0
	p.earlySend = rng.IntN(2) == 0
	p.amnesia = rng.IntN(2) == 0
	p.amnesiaEvery = 4
	if rng.IntN(3) == 0 {
		p.spares, p.amnesia = 3, false
	}
	// Drawn last, so that the draws above stay what they were for each seed.
	p.asyncWrites = rng.IntN(2) == 0
	p.persistDelay = []int64{300, 3_000, 15_000}[rng.IntN(3)]
	return p
}

type simEventKind uint8

const (
	evTick simEventKind = iota
	evDeliver
	evPropose
	evFault
	evRestart
	evHeal
	evConf
	evConfOnce // one membership change attempt, not repeated
	evPersist  // a replica's write (with asyncWrites) is durable: wid, life
)

type simEvent struct {
	at   int64
	seq  uint64
	kind simEventKind
	rep  int
	msg  Message
	// wid is the write an evPersist completes (with every earlier one) and
	// life the replica's life it belongs to (a crash ends it).
	wid, life uint64
}

type eventQueue []*simEvent

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(*simEvent)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// voteKey identifies an accepted value for the chosen oracle.
type voteKey struct {
	slot   Slot
	ballot Ballot
	digest uint64
}

type sim struct {
	tb      testing.TB
	seed    int64
	p       simParams
	rng     *rand.Rand
	now     int64
	seq     uint64
	q       eventQueue
	reps    []*replica
	period  []int64
	blocked [][]bool // blocked[from][to]
	trace   uint64
	events  int
	failed  error

	// Oracles.
	// everVotes holds every vote ever made durable, forgotten ones too;
	// everChosen the values a majority of them chose: nothing may be
	// applied or reported chosen before it is there (a vote counted
	// before it was durable would be).
	everVotes    map[voteKey]voteSet
	everChosen   map[Slot]uint64
	votes        map[voteKey]voteSet
	chosen       map[Slot]uint64 // slot -> digest, by the acceptor-majority definition
	applied      map[Slot]uint64 // slot -> digest, first applied
	hashAt       map[Slot]uint64 // slot -> app hash after applying it
	appliedIDs   map[Slot][]ProposalID
	reported     map[ProposalID]Slot
	proposals    int
	healed       bool
	healAt       int64
	firstAfter   int64 // first time a proposal submitted after heal was reported chosen
	afterHeal    map[ProposalID]bool
	noProposals  bool
	idle         bool // no proposals from heal on (TestSimulationIdleCatchUp)
	masterChecks int
	overlap      string // first overlapping-master report
	failFast     bool   // stop at the first violation (normal runs)

	// voteSeq holds, per replica index, each vote the replica has durably
	// cast and the sync that made it durable, so that a loss of state takes
	// back exactly the votes the replica forgot. A value chosen stays chosen
	// in the chosen oracle even when its voters forget it.
	voteSeq  []map[voteKey]uint64
	losses   int // losses of state injected
	rebuilds int // rebuilds completed (the replica voted again)

	// persists counts the syncs of late writes and inFlightMax the most
	// writes queued at one replica at once (with asyncWrites).
	persists    int
	inFlightMax int

	// confs holds the memberships the applied log made, by Index (the
	// initial one first): the chosen oracle's view of the voters whose
	// majority chooses a slot. confsApplied counts the changes applied.
	confs       []Membership
	usedSpares  int
	confChanges int
}

func newSim(tb testing.TB, seed int64, p simParams) *sim {
	s := &sim{
		tb: tb, seed: seed, p: p,
		rng:        rand.New(rand.NewPCG(uint64(seed), 0xc0ffee)),
		votes:      map[voteKey]voteSet{},
		everVotes:  map[voteKey]voteSet{},
		everChosen: map[Slot]uint64{},
		chosen:     map[Slot]uint64{},
		applied:    map[Slot]uint64{},
		hashAt:     map[Slot]uint64{},
		appliedIDs: map[Slot][]ProposalID{},
		reported:   map[ProposalID]Slot{},
		afterHeal:  map[ProposalID]bool{},
		failFast:   true,
	}
	h := fnv.New64a()
	s.trace = h.Sum64()
	total := p.replicas + p.spares
	s.voteSeq = make([]map[voteKey]uint64, total)
	for i := range s.voteSeq {
		s.voteSeq[i] = map[voteKey]uint64{}
	}
	s.blocked = make([][]bool, total)
	for i := range s.blocked {
		s.blocked[i] = make([]bool, total)
	}
	s.confs = []Membership{{Voters: ids(p.replicas)}}
	for i, id := range ids(total) {
		cfg := Config{
			ID: id, Replicas: ids(p.replicas),
			LeaseTicks: p.lease, HeartbeatTicks: p.heartbeat, ElectionTicks: p.elect,
			DriftPPM: p.driftPPM, MaxInflight: p.maxInflight, MaxBatch: p.maxBatch,
			Seed:        s.rng.Uint64(),
			AsyncWrites: p.asyncWrites,
		}
		r := newReplica(tb, cfg)
		r.persistEarly = p.persistEarly
		if p.amnesia {
			r.store.keep = simKeepSyncs
		}
		r.rebuildOnLoss = !p.noRebuildRule
		r.onSave = s.onSave
		r.onApply = s.onApply
		r.onSnapshot = s.onSnapshot
		r.onOutcome = s.onOutcome
		r.earlySend = p.earlySend
		r.crashMidReady = func() bool { return p.crashes && !s.healed && s.rng.IntN(100) == 0 }
		s.reps = append(s.reps, r)
		// Tick periods spread within [P, P*(1+actualDrift)].
		s.period = append(s.period, int64(float64(simTickMicros)*(1+s.rng.Float64()*p.actualDrift)))
		s.push(&simEvent{at: s.rng.Int64N(simTickMicros), kind: evTick, rep: i})
	}
	s.push(&simEvent{at: s.rng.Int64N(simTickMicros), kind: evPropose})
	s.push(&simEvent{at: s.faultGap(), kind: evFault})
	s.push(&simEvent{at: int64(p.faultTicks) * simTickMicros, kind: evHeal})
	if p.spares > 0 {
		s.push(&simEvent{at: s.confGap(), kind: evConf})
	}
	return s
}

// confGap is the time to the next membership change attempt.
func (s *sim) confGap() int64 { return s.now + simTickMicros*int64(20+s.rng.IntN(60)) }

// changeMembership asks the leader (if any) for one membership change: it
// promotes a learner, else adds a spare as a learner, removes a voter (the
// leader itself sometimes) or does nothing, at random. Refusals that the
// protocol gives by design (a change pending, a learner not caught up, not
// leader) are fine.
func (s *sim) changeMembership(remove bool) {
	for i, r := range s.reps {
		if !r.up || r.node.role != Leader {
			continue
		}
		m := r.node.conf
		var cc ConfChange
		switch k := s.rng.IntN(4); {
		case remove && len(m.Voters) > 3:
			cc = ConfChange{Type: ConfRemove, ID: m.Voters[s.rng.IntN(len(m.Voters))]}
		case len(m.Learners) > 0:
			cc = ConfChange{Type: ConfPromote, ID: m.Learners[s.rng.IntN(len(m.Learners))]}
		case k <= 1 && s.usedSpares < s.p.spares:
			cc = ConfChange{Type: ConfAddLearner, ID: ID(s.p.replicas + s.usedSpares + 1)}
		case k >= 2 && len(m.Voters) > 3:
			cc = ConfChange{Type: ConfRemove, ID: m.Voters[s.rng.IntN(len(m.Voters))]}
		default:
			continue
		}
		_, err := r.node.ProposeConfChange(cc)
		switch {
		case err == nil:
			if cc.Type == ConfAddLearner {
				s.usedSpares++
			}
		case errors.Is(err, ErrConfChangePending), errors.Is(err, ErrNotCaughtUp), errors.Is(err, ErrNotLeader):
		default:
			s.failf("replica %d: ProposeConfChange(%v %d) with %s: %v", r.id, cc.Type, cc.ID, m, err)
		}
		s.flush(i)
	}
}

// quorum reports whether set holds a majority of the voters of the
// membership in force for slot (as the applied log says), or of the one
// before it: any majorities of consecutive memberships meet, so a value a
// majority of the earlier one accepted is found by every later Phase 1 and
// must count as chosen. Stricter than either alone, never laxer.
func (s *sim) quorum(slot Slot, set voteSet) bool {
	i := 0
	for i+1 < len(s.confs) && s.confs[i+1].Index < slot {
		i++
	}
	for j := max(i-1, 0); j <= i; j++ {
		c := 0
		for _, v := range s.confs[j].Voters {
			if set.has(int(v - 1)) {
				c++
			}
		}
		if c >= majority(len(s.confs[j].Voters)) {
			return true
		}
	}
	return false
}

// judge records k's value as chosen if its voters make a quorum.
func (s *sim) judge(k voteKey) {
	if !s.quorum(k.slot, s.votes[k]) {
		return
	}
	if d, ok := s.chosen[k.slot]; ok && d != k.digest {
		s.failf("slot %d chosen with two values (%x, then %x at ballot %s)", k.slot, d, k.digest, k.ballot)
	}
	s.chosen[k.slot] = k.digest
}

func (s *sim) push(e *simEvent) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) failf(format string, args ...any) {
	if s.failed == nil {
		s.failed = fmt.Errorf("t=%.3fs: "+format, append([]any{float64(s.now) / 1e6}, args...)...)
	}
}

func (s *sim) faultGap() int64 {
	return simTickMicros * int64(5+s.rng.IntN(60))
}

// simKeepSyncs is how many synced states a replica's storage keeps to roll
// back to, with amnesia.
const simKeepSyncs = 16

// onSave feeds the chosen oracle: a value is chosen once a majority of
// acceptors has accepted it at one ballot (and stays chosen).
func (s *sim) onSave(r *replica, hs HardState, ents []Entry) {
	idx := int(r.id - 1)
	for _, e := range ents {
		k := voteKey{e.Slot, e.Ballot, valueDigest(e.Value)}
		if _, ok := s.voteSeq[idx][k]; !ok {
			s.voteSeq[idx][k] = r.store.syncs
		}
		s.votes[k] = s.votes[k].add(idx)
		s.judge(k)
		s.everVotes[k] = s.everVotes[k].add(idx)
		if s.quorum(k.slot, s.everVotes[k]) {
			s.everChosen[k.slot] = k.digest
		}
	}
}

func (s *sim) onApply(r *replica, e Entry) {
	d := valueDigest(e.Value)
	if c, ok := s.chosen[e.Slot]; ok && c != d {
		s.failf("replica %d applied %x at slot %d, but %x was chosen", r.id, d, e.Slot, c)
	}
	if c, ok := s.everChosen[e.Slot]; !ok || c != d {
		s.failf("replica %d applied %x at slot %d, which no majority has durably accepted", r.id, d, e.Slot)
	}
	if prev, ok := s.applied[e.Slot]; ok {
		if prev != d {
			s.failf("replica %d applied %x at slot %d, another replica applied %x", r.id, d, e.Slot, prev)
		}
		if s.hashAt[e.Slot] != r.app.hash {
			s.failf("replica %d: applied prefix up to slot %d differs", r.id, e.Slot)
		}
		return
	}
	s.applied[e.Slot] = d
	s.hashAt[e.Slot] = r.app.hash
	if c := e.Value.Conf; c != nil {
		m := c.clone()
		m.Index = e.Slot
		s.confs = append(s.confs, m)
		slices.SortFunc(s.confs, func(a, b Membership) int { return cmp.Compare(a.Index, b.Index) })
		s.confChanges++
		keys := make([]voteKey, 0, len(s.votes))
		for k := range s.votes {
			if k.slot > e.Slot {
				keys = append(keys, k)
			}
		}
		slices.SortFunc(keys, func(a, b voteKey) int {
			if a.slot != b.slot {
				return cmp.Compare(a.slot, b.slot)
			}
			return cmp.Compare(a.ballot, b.ballot)
		})
		for _, k := range keys {
			s.judge(k)
		}
	}
	ids := make([]ProposalID, len(e.Value.Cmds))
	for i, c := range e.Value.Cmds {
		ids[i] = c.ID
	}
	s.appliedIDs[e.Slot] = ids
}

func (s *sim) onSnapshot(r *replica, snap Snapshot) {
	if h, ok := s.hashAt[snap.Slot]; ok && h != r.app.hash {
		s.failf("replica %d installed a snapshot at %d that differs from the applied prefix", r.id, snap.Slot)
	}
}

func (s *sim) onOutcome(r *replica, o Outcome) {
	if o.Err != nil {
		return
	}
	if prev, ok := s.reported[o.ID]; ok && prev != o.Slot {
		s.failf("proposal %v reported chosen at %d and %d", o.ID, prev, o.Slot)
	}
	if _, ok := s.everChosen[o.Slot]; !ok {
		s.failf("replica %d reported proposal %v chosen at slot %d, which no majority has durably accepted", r.id, o.ID, o.Slot)
	}
	s.reported[o.ID] = o.Slot
	if s.afterHeal[o.ID] && s.firstAfter == 0 {
		s.firstAfter = s.now
	}
}

// send puts m on the network, subject to the current faults.
func (s *sim) send(m Message) {
	from, to := int(m.From-1), int(m.To-1)
	if s.blocked[from][to] || s.rng.Float64() < s.p.loss {
		return
	}
	copies := 1
	if s.rng.Float64() < s.p.dup {
		copies = 2
	}
	if s.p.wire {
		b, err := msgpack.Marshal(&m)
		if err != nil {
			s.failf("encode %v: %v", m, err)
			return
		}
		var d Message
		if err := msgpack.Unmarshal(b, &d); err != nil {
			s.failf("decode %v: %v", m, err)
			return
		}
		m = d
	}
	for i := 0; i < copies; i++ {
		lat := s.p.minLatency + s.rng.Int64N(s.p.maxLatency-s.p.minLatency+1)
		if s.rng.Float64() < s.p.slowFrac {
			lat += s.rng.Int64N(50 * simTickMicros) // a straggler: reordering
		}
		s.push(&simEvent{at: s.now + lat, kind: evDeliver, rep: to, msg: m})
	}
}

func (s *sim) flush(i int) {
	r := s.reps[i]
	if !r.up {
		return
	}
	for _, m := range r.handleReady(s.tb) {
		s.send(m)
	}
	if !r.up { // crashed between its early send and its persist
		s.push(&simEvent{at: s.now + simTickMicros*int64(1+s.rng.IntN(40)), kind: evRestart, rep: i})
		return
	}
	s.startSync(i)
	if r.rebuilding && r.node.rb == nil {
		r.rebuilding = false
		s.rebuilds++
	}
	if s.p.compactEvery > 0 && r.app.applied >= r.node.compacted+Slot(s.p.compactEvery) {
		r.compact(s.tb)
	}
}

// startSync starts making replica i's queued writes durable, unless a
// sync is already under way: the writes that queue meanwhile are made
// durable together by the next one (group commit).
func (s *sim) startSync(i int) {
	r := s.reps[i]
	if !s.p.asyncWrites || r.syncing || len(r.writes) == 0 {
		return
	}
	s.inFlightMax = max(s.inFlightMax, len(r.writes))
	d := s.rng.Int64N(2*s.p.persistDelay + 1)
	if s.rng.Float64() < s.p.slowFrac {
		d += s.rng.Int64N(20 * simTickMicros) // a stalled disk
	}
	r.syncing = true
	s.push(&simEvent{at: s.now + d, kind: evPersist, rep: i, wid: r.writes[len(r.writes)-1].WriteID, life: r.life})
}

// crashRep crashes replica i, losing its unsynced and in-flight writes.
func (s *sim) crashRep(i int) { s.reps[i].crash() }

// lostWrites counts the writes in flight that crashes lost.
func (s *sim) lostWrites() int {
	c := 0
	for _, r := range s.reps {
		c += r.lostWrites
	}
	return c
}

func (s *sim) hashEvent(e *simEvent) {
	var b [64]byte
	binary.LittleEndian.PutUint64(b[0:], uint64(e.at))
	b[8] = byte(e.kind)
	b[9] = byte(e.rep)
	b[10] = byte(e.msg.Type)
	b[11] = byte(e.msg.From)
	binary.LittleEndian.PutUint64(b[16:], uint64(e.msg.Ballot))
	binary.LittleEndian.PutUint64(b[24:], uint64(e.msg.Commit))
	binary.LittleEndian.PutUint64(b[32:], uint64(len(e.msg.Entries)))
	binary.LittleEndian.PutUint64(b[40:], uint64(e.msg.Slot)^e.wid<<32)
	h := fnv.New64a()
	binary.LittleEndian.PutUint64(b[48:], s.trace)
	h.Write(b[:])
	s.trace = h.Sum64()
}

// step runs one event and checks the invariants after it.
func (s *sim) step() bool {
	if s.q.Len() == 0 {
		return false
	}
	e := heap.Pop(&s.q).(*simEvent)
	s.now = e.at
	s.events++
	s.hashEvent(e)
	if *simTrace {
		s.tb.Logf("t=%d kind=%d rep=%d %v", s.now, e.kind, e.rep, e.msg)
	}
	switch e.kind {
	case evTick:
		if r := s.reps[e.rep]; r.up {
			r.node.Tick()
			s.flush(e.rep)
		}
		s.push(&simEvent{at: s.now + s.period[e.rep], kind: evTick, rep: e.rep})
	case evDeliver:
		r := s.reps[e.rep]
		if r.up && !s.blocked[e.msg.From-1][e.rep] {
			if err := r.node.Step(e.msg); err != nil && !(errors.Is(err, ErrInvalidMessage) && !r.node.conf.isMember(e.msg.From)) {
				s.failf("replica %d: Step(%v): %v", r.id, e.msg, err)
			}
			s.flush(e.rep)
		}
	case evPropose:
		if s.idle && s.healed {
			break // the cell went idle at heal: no more proposals at all
		}
		s.propose()
		if !s.noProposals {
			s.push(&simEvent{at: s.now + 1 + s.rng.Int64N(2*s.p.proposeGap), kind: evPropose})
		}
	case evFault:
		if !s.healed {
			s.fault()
			s.push(&simEvent{at: s.now + s.faultGap(), kind: evFault})
		}
	case evRestart:
		if r := s.reps[e.rep]; !r.up {
			s.restart(e.rep)
		}
	case evPersist:
		if r := s.reps[e.rep]; r.up && e.life == r.life {
			r.syncing = false
			if s.p.crashes && !s.healed && s.rng.IntN(50) == 0 {
				// Power lost just before the sync completes: every write
				// in flight is gone, though its messages that did not
				// depend on it were sent.
				s.crashRep(e.rep)
				s.push(&simEvent{at: s.now + simTickMicros*int64(1+s.rng.IntN(40)), kind: evRestart, rep: e.rep})
				break
			}
			s.persists++
			r.completeWrites(s.tb, e.wid)
			s.flush(e.rep)
		}
	case evHeal:
		s.heal()
	case evConf:
		if !s.healed {
			s.changeMembership(false)
			s.push(&simEvent{at: s.confGap(), kind: evConf})
		}
	case evConfOnce:
		if !s.healed {
			s.changeMembership(true)
		}
	}
	s.checkMasters()
	return true
}

func (s *sim) propose() {
	var cands []int
	for i, r := range s.reps {
		if r.up && r.node.role == Leader {
			cands = append(cands, i)
		}
	}
	i := s.rng.IntN(len(s.reps))
	if len(cands) > 0 && s.rng.IntN(10) != 0 {
		i = cands[s.rng.IntN(len(cands))]
	}
	r := s.reps[i]
	if !r.up {
		return
	}
	s.proposals++
	data := strconv.AppendInt(append(strconv.AppendInt([]byte("s"), s.seed, 10), "-p"...), int64(s.proposals), 10)
	id, err := r.node.Propose(data)
	if err != nil {
		return
	}
	if s.healed {
		s.afterHeal[id] = true
	}
	s.flush(i)
}

// restart brings replica i back from its storage; one that lost state
// rebuilds (unless the rule is off).
func (s *sim) restart(i int) {
	r := s.reps[i]
	r.restart(s.tb, s.rng.Uint64())
	if r.lost {
		r.lost = false
		if !s.p.noRebuildRule {
			r.rebuilding = true
		}
	}
	s.flush(i)
}

// fault injects one random fault; the faulty phase ends at heal.
func (s *sim) fault() {
	n := len(s.reps)
	if s.p.amnesia && s.rng.IntN(s.p.amnesiaEvery) == 0 {
		s.loseState()
		return
	}
	if s.p.spares > 0 && s.rng.IntN(3) == 0 {
		s.splitLeader()
		return
	}
	switch k := s.rng.IntN(8); {
	case (k == 0 || k == 6) && s.p.crashes:
		i := s.rng.IntN(n)
		if r := s.reps[i]; r.up {
			s.crashRep(i)
			down := 1 + s.rng.IntN(80)
			if k == 6 { // back within the lease it may have granted
				down = 1 + s.rng.IntN(s.p.lease/2)
			}
			s.push(&simEvent{at: s.now + simTickMicros*int64(down), kind: evRestart, rep: i})
		}
	case k == 7 && s.p.partitions: // cut one follower off from the leader only
		s.clearPartitions()
		for i, r := range s.reps {
			if r.up && r.node.Status().IsLeader {
				j := s.rng.IntN(n)
				if j != i {
					s.blocked[i][j], s.blocked[j][i] = true, true
				}
			}
		}
	case k == 1 && s.p.partitions: // symmetric split
		s.clearPartitions()
		side := make([]bool, n)
		for i := range side {
			side[i] = s.rng.IntN(2) == 0
		}
		for a := 0; a < n; a++ {
			for b := 0; b < n; b++ {
				s.blocked[a][b] = side[a] != side[b]
			}
		}
	case k == 2 && s.p.partitions: // one-way links
		s.clearPartitions()
		for j := 0; j < 1+s.rng.IntN(n); j++ {
			a, b := s.rng.IntN(n), s.rng.IntN(n)
			if a != b {
				s.blocked[a][b] = true
			}
		}
	case k == 3 && (s.p.partitions || s.p.leaderIsolationHeavy): // isolate the leader
		s.clearPartitions()
		for i, r := range s.reps {
			if r.up && r.node.Status().IsLeader {
				for j := 0; j < n; j++ {
					if j != i {
						s.blocked[i][j], s.blocked[j][i] = true, true
					}
				}
			}
		}
	case k == 4:
		s.clearPartitions()
	case k == 5 && s.p.leaderIsolationHeavy: // the leader steps down or hands over
		for i, r := range s.reps {
			if r.up && r.node.Status().IsLeader {
				// A voter (with a fixed membership, the same draw as 1..n).
				voters := r.node.conf.Voters
				next := voters[s.rng.IntN(len(voters))]
				if next == r.id {
					next = 0
				}
				if s.rng.IntN(2) == 0 {
					if err := r.node.StepDown(next); err != nil {
						s.failf("StepDown: %v", err)
					}
				} else if err := r.node.HandOver(next); err != nil && !errors.Is(err, ErrNoSuccessor) {
					s.failf("HandOver: %v", err)
				}
				s.flush(i)
			}
		}
	}
}

// splitLeader cuts the leader and one other replica off from the rest
// and asks it to remove voters at once and again soon: a master in a
// minority shrinking the membership is where a membership used before it
// is chosen would let a minority choose.
func (s *sim) splitLeader() {
	s.clearPartitions()
	n := len(s.reps)
	for i, r := range s.reps {
		if !r.up || r.node.role != Leader {
			continue
		}
		j := s.rng.IntN(n)
		for a := 0; a < n; a++ {
			for b := 0; b < n; b++ {
				inA, inB := a == i || a == j, b == i || b == j
				s.blocked[a][b] = inA != inB
			}
		}
		s.push(&simEvent{at: s.now + 1, kind: evConfOnce})
		s.push(&simEvent{at: s.now + simTickMicros, kind: evConfOnce})
		return
	}
}

// loseState crashes a replica and damages its durable state: a wiped disk,
// or a log that lost its last one or two synced writes, or everything after
// an older point. The votes it forgot are taken back from the oracle.
func (s *sim) loseState() {
	n := len(s.reps)
	if !s.p.noRebuildRule && s.withoutState() >= n-majority(n) {
		return
	}
	i := s.rng.IntN(n)
	r := s.reps[i]
	if !r.up {
		return
	}
	s.crashRep(i)
	st := r.store
	keptFrom := uint64(0) // votes made durable by later syncs are forgotten
	switch kind := s.rng.IntN(3); {
	case kind == 0 || len(st.history) < 2:
		st.wipe()
	case kind == 1:
		keptFrom = st.rollBack(1 + s.rng.IntN(min(2, len(st.history)-1)))
	default:
		keptFrom = st.rollBack(1 + s.rng.IntN(len(st.history)-1))
	}
	idx := int(r.id - 1)
	for k, seq := range s.voteSeq[idx] {
		if seq > keptFrom {
			delete(s.voteSeq[idx], k)
			s.votes[k] &^= voteSet(0).add(idx)
		}
	}
	r.lost = true
	s.losses++
	s.push(&simEvent{at: s.now + simTickMicros*int64(1+s.rng.IntN(80)), kind: evRestart, rep: i})
}

// withoutState counts the replicas that lost state and have not rebuilt.
func (s *sim) withoutState() int {
	c := 0
	for _, r := range s.reps {
		if r.lost || r.rebuilding {
			c++
		}
	}
	return c
}

// wipe loses everything, as a replaced disk would.
func (m *MemoryStorage) wipe() {
	keep := m.keep
	*m = *NewMemoryStorage()
	m.keep = keep
}

// rollBack replaces the durable state with the one k syncs before the last
// (a log whose last k synced writes were lost) and returns the number of the
// sync it now holds. REQUIRES: 0 < k < len(m.history).
func (m *MemoryStorage) rollBack(k int) uint64 {
	h := m.history[len(m.history)-1-k]
	m.history = m.history[:len(m.history)-k]
	m.durable = h.state
	m.volatile = h.state.clone()
	return h.seq
}

func (s *sim) clearPartitions() {
	for a := range s.blocked {
		for b := range s.blocked[a] {
			s.blocked[a][b] = false
		}
	}
}

// heal ends the faulty phase: links repaired, loss and duplication off,
// crashed replicas restarted.
func (s *sim) heal() {
	s.healed = true
	s.healAt = s.now
	s.clearPartitions()
	s.p.loss, s.p.dup, s.p.slowFrac = 0, 0, 0
	for i, r := range s.reps {
		if !r.up {
			s.restart(i)
		}
	}
}

// checkMasters asserts that at most one replica is master at this instant.
func (s *sim) checkMasters() {
	s.masterChecks++
	var masters []ID
	for _, r := range s.reps {
		// Status().Master, without building the rest of the Status.
		if r.up && r.node.isMaster() {
			masters = append(masters, r.id)
		}
	}
	if len(masters) > 1 {
		msg := fmt.Sprintf("replicas %v are master at the same instant", masters)
		if s.overlap == "" {
			s.overlap = fmt.Sprintf("t=%.3fs: %s", float64(s.now)/1e6, msg)
		}
		if s.failFast {
			s.failf("%s", msg)
		}
	}
}

// livenessTicks bounds the ticks from heal to the first newly chosen
// proposal: a restarted acceptor waits out a lease, a disrupted leader waits
// out its lease and an election, each a few times over.
func (p simParams) livenessTicks() int { return 6 * (p.lease + p.elect + p.heartbeat) }

// run executes the whole scenario and returns the first violation.
func (s *sim) run() error {
	healEnd := int64(s.p.faultTicks+s.p.livenessTicks()) * simTickMicros
	for s.failed == nil && s.now < healEnd {
		if !s.step() {
			break
		}
	}
	if s.failed != nil {
		return s.failed
	}
	if s.firstAfter == 0 {
		return fmt.Errorf("liveness: no proposal made after heal (t=%.3fs) was chosen within %d ticks", float64(s.healAt)/1e6, s.p.livenessTicks())
	}
	// Drain: no more proposals; every replica must catch up.
	s.noProposals = true
	drainEnd := s.now + int64(4*(s.p.lease+s.p.elect))*simTickMicros
	for s.failed == nil && s.now < drainEnd && s.step() {
	}
	if s.failed != nil {
		return s.failed
	}
	var top Slot
	for _, r := range s.reps {
		top = max(top, r.app.applied)
	}
	final := s.confs[len(s.confs)-1]
	for _, r := range s.reps {
		if !final.isMember(r.id) {
			continue // never added, or removed: nobody owes it the log
		}
		if r.app.applied != top || r.app.hash != s.hashAt[top] {
			return fmt.Errorf("after heal and drain replica %d applied %d (hash %x), others %d (%x)", r.id, r.app.applied, r.app.hash, top, s.hashAt[top])
		}
		if st := r.node.Status().Rebuild; st.Phase != RebuildNone {
			return fmt.Errorf("after heal and drain replica %d is still rebuilding: %s (%+v)", r.id, st.Phase, st)
		}
	}
	for id, slot := range s.reported {
		found := false
		for _, x := range s.appliedIDs[slot] {
			found = found || x == id
		}
		if !found {
			return fmt.Errorf("proposal %v was reported chosen at slot %d but is not in the final log", id, slot)
		}
	}
	return nil
}

func simSeedList() []int64 {
	if *simSeed >= 0 {
		return []int64{*simSeed}
	}
	out := make([]int64, *simSeeds)
	for i := range out {
		out[i] = int64(i)
	}
	return out
}

func TestSimulation(t *testing.T) {
	seeds := simSeedList()
	var losses, rebuilds, confSeeds, confChanges atomic.Int64
	var asyncSeeds, persists, grouped, lostWrites atomic.Int64
	t.Run("seeds", func(t *testing.T) {
		for _, seed := range seeds {
			t.Run(fmt.Sprint(seed), func(t *testing.T) {
				t.Parallel()
				p := paramsForSeed(seed)
				s := newSim(t, seed, p)
				if err := s.run(); err != nil {
					t.Fatalf("seed %d (%+v): %v\nreplay: go test ./paxos -run 'TestSimulation$' -sim.seed=%d -v", seed, p, err, seed)
				}
				losses.Add(int64(s.losses))
				rebuilds.Add(int64(s.rebuilds))
				if p.spares > 0 {
					confSeeds.Add(1)
					confChanges.Add(int64(s.confChanges))
				}
				if p.asyncWrites {
					asyncSeeds.Add(1)
					persists.Add(int64(s.persists))
					lostWrites.Add(int64(s.lostWrites()))
					if s.inFlightMax > 1 {
						grouped.Add(1)
					}
				}
				t.Logf("seed %d: %s", seed, s.stats())
			})
		}
	})
	// The loss-of-state faults must really have been exercised: about one
	// seed in two injects them, a few times each.
	if n := int64(len(seeds)); n >= 100 && (losses.Load() < n/4 || rebuilds.Load() < losses.Load()/2) {
		t.Fatalf("%d seeds injected %d losses of state and completed %d rebuilds: too few to judge the rebuild rule", n, losses.Load(), rebuilds.Load())
	}
	// So must the membership changes: about one seed in three makes them,
	// several each.
	if n := int64(len(seeds)); n >= 100 && (confSeeds.Load() < n/5 || confChanges.Load() < 2*confSeeds.Load()) {
		t.Fatalf("%d seeds: %d changed the membership, %d changes applied: too few to judge membership changes", n, confSeeds.Load(), confChanges.Load())
	}
	// And the asynchronous writes: about one seed in two writes late, with
	// several writes queued behind a sync in most, and crashes losing
	// writes in flight.
	if n := int64(len(seeds)); n >= 100 && (asyncSeeds.Load() < n/4 || grouped.Load() < asyncSeeds.Load()/2 || lostWrites.Load() < asyncSeeds.Load()/4) {
		t.Fatalf("%d seeds: %d wrote asynchronously, %d of them queued writes behind a sync, %d writes in flight lost by crashes: too few to judge asynchronous writes", n, asyncSeeds.Load(), grouped.Load(), lostWrites.Load())
	}
	t.Logf("%d seeds: %d losses of state injected, %d rebuilds completed; %d seeds applied %d membership changes; %d wrote asynchronously (%d syncs, %d with writes queued behind a sync, %d writes in flight lost by crashes)", len(seeds), losses.Load(), rebuilds.Load(), confSeeds.Load(), confChanges.Load(), asyncSeeds.Load(), persists.Load(), grouped.Load(), lostWrites.Load())
}

// TestSimulationDeterministic runs seeds twice and compares trace hashes.
func TestSimulationDeterministic(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 42} {
		var hashes [2]uint64
		for i := range hashes {
			s := newSim(t, seed, paramsForSeed(seed))
			if err := s.run(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			hashes[i] = s.trace
		}
		if hashes[0] != hashes[1] {
			t.Fatalf("seed %d: trace hash %x then %x: the simulation is not deterministic", seed, hashes[0], hashes[1])
		}
	}
}

// TestSimulationDriftBeyondBoundOverlaps is the negative test of the lease
// checker: when tick rates differ far more than the configured bound, some
// seed must show two masters at once. It proves the checker can fail.
func TestSimulationDriftBeyondBoundOverlaps(t *testing.T) {
	found := ""
	for seed := int64(0); seed < 200 && found == ""; seed++ {
		p := paramsForSeed(seed)
		p.driftPPM = 10_000 // configured: 1%
		p.actualDrift = 1.0 // simulated: up to 100%
		p.leaderIsolationHeavy, p.partitions = true, true
		s := newSim(t, seed, p)
		s.failFast = false
		_ = s.run()
		if s.overlap != "" {
			found = fmt.Sprintf("seed %d: %s", seed, s.overlap)
		}
	}
	if found == "" {
		t.Fatal("no seed showed overlapping masters with drift 100x beyond the bound: the lease checker cannot fail")
	}
	t.Logf("as expected, %s", found)
}

// stats summarises a run for -v output.
func (s *sim) stats() string {
	var top Slot
	var ballot Ballot
	for _, r := range s.reps {
		top = max(top, r.app.applied)
		ballot = max(ballot, r.node.promised)
	}
	return fmt.Sprintf("events=%d applied=%d chosen-oracle=%d reported=%d proposals=%d ballot=%s losses=%d rebuilds=%d membership-changes=%d async=%v syncs=%d max-in-flight=%d lost-writes=%d final=%s", s.events, top, len(s.chosen), len(s.reported), s.proposals, ballot, s.losses, s.rebuilds, s.confChanges, s.p.asyncWrites, s.persists, s.inFlightMax, s.lostWrites(), s.confs[len(s.confs)-1])
}

// TestSimulationLostStateWithoutRebuild is the negative test of the rebuild
// rule: when a replica that lost its state votes at once on restarting,
// some seed must show a slot chosen twice, two replicas applying different
// values, or two masters at once. It proves the simulator's loss faults and
// checkers can catch the hazard the rule prevents.
func TestSimulationLostStateWithoutRebuild(t *testing.T) {
	var found []string
	seeds := 0
	for seed := int64(0); seed < 400 && len(found) < 3; seed++ {
		p := paramsForSeed(seed)
		p.amnesia, p.noRebuildRule, p.amnesiaEvery = true, true, 2
		s := newSim(t, seed, p)
		_ = s.run()
		seeds++
		if s.failed != nil {
			found = append(found, fmt.Sprintf("seed %d (%d losses): %v", seed, s.losses, s.failed))
		}
	}
	if len(found) == 0 {
		t.Fatalf("no violation in %d seeds with replicas voting at once after losing their state: the loss faults or the checkers cannot fail", seeds)
	}
	t.Logf("as expected, without the rebuild rule %d of %d seeds broke safety:\n%s", len(found), seeds, strings.Join(found, "\n"))
}

// TestSimulationPersistedEarly is the negative test of the asynchronous
// write contract: when the caller reports writes carried out (Persisted)
// as soon as they are handed out, though they become durable only later,
// the node counts its own accepts and releases its Promises and Accepteds
// too early, and a crash loses votes that were counted. Some seed must
// show a slot chosen twice, replicas applying different values, an
// acknowledged proposal missing from the final log, or two masters at
// once. It proves the simulator's late writes, its crashes that lose
// writes in flight and its checkers can catch the hazard.
func TestSimulationPersistedEarly(t *testing.T) {
	var found []string
	seeds := 0
	for seed := int64(0); seed < 300 && len(found) < 3; seed++ {
		p := paramsForSeed(seed)
		p.asyncWrites, p.persistEarly, p.crashes = true, true, true
		p.persistDelay = 15_000
		s := newSim(t, seed, p)
		err := s.run()
		seeds++
		if err != nil {
			found = append(found, fmt.Sprintf("seed %d (%d writes in flight lost): %v", seed, s.lostWrites(), err))
		}
	}
	if len(found) == 0 {
		t.Fatalf("no violation in %d seeds with writes reported durable before they were: the late writes, crashes or checkers cannot fail", seeds)
	}
	t.Logf("as expected, with writes reported durable early %d of %d seeds broke safety:\n%s", len(found), seeds, strings.Join(found, "\n"))
}
