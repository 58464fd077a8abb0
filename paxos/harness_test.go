package paxos

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"testing"
)

// This file holds the replica driver shared by the unit tests, the paper
// tests, the simulator and the benchmarks: it carries out Ready batches the
// way the package documentation tells the cell to.

// testApp is a toy state machine: a rolling hash over the applied values.
type testApp struct {
	applied Slot
	hash    uint64
	members *Membership // made by the last applied membership change
}

func (a *testApp) apply(e Entry) {
	a.applied = e.Slot
	a.hash = a.hash*1099511628211 ^ valueDigest(e.Value) ^ uint64(e.Slot)
	if c := e.Value.Conf; c != nil {
		m := c.clone()
		m.Index = e.Slot
		a.members = &m
	}
}

func (a *testApp) snapshot() Snapshot {
	d := make([]byte, 8)
	binary.BigEndian.PutUint64(d, a.hash)
	return Snapshot{Slot: a.applied, Data: d, Members: a.members}
}

func (a *testApp) restore(s Snapshot) {
	a.applied = s.Slot
	a.members = s.Members
	if len(s.Data) != 8 { // not one of ours (the fuzzer's): any state will do
		h := fnv.New64a()
		h.Write(s.Data)
		a.hash = h.Sum64()
		return
	}
	a.hash = binary.BigEndian.Uint64(s.Data)
}

// valueDigest hashes a value's commands.
func valueDigest(v Value) uint64 {
	h := fnv.New64a()
	var b [16]byte
	for _, c := range v.Cmds {
		binary.BigEndian.PutUint64(b[:8], uint64(c.ID.Ballot))
		binary.BigEndian.PutUint64(b[8:], c.ID.Seq)
		h.Write(b[:])
		h.Write(c.Data)
	}
	if m := v.Conf; m != nil {
		for _, list := range [][]ID{m.Voters, {0}, m.Learners} {
			for _, id := range list {
				binary.BigEndian.PutUint64(b[:8], uint64(id))
				h.Write(b[:8])
			}
		}
	}
	return h.Sum64()
}

// replica is one simulated server: a Node, its MemoryStorage and its app.
type replica struct {
	id    ID
	cfg   Config // template for restarts (Storage is filled in)
	node  *Node
	store *MemoryStorage
	app   *testApp
	up    bool

	// Hooks for checkers (optional).
	onSave func(r *replica, hs HardState, ents []Entry)
	// earlySend sends the messages that do not depend on persistence
	// before persisting, as the cell does; crashMidReady, if it returns
	// true, crashes the replica right after that early send, before the
	// Ready is persisted.
	earlySend     bool
	crashMidReady func() bool
	onApply       func(r *replica, e Entry)
	onSnapshot    func(r *replica, s Snapshot)
	onOutcome     func(r *replica, o Outcome)

	soft     SoftState
	outcomes []Outcome
	readies  int

	// With Config.AsyncWrites, writes are the Ready writes handed out and
	// not yet carried out (oldest first): handleReady queues them, the
	// driver completes them later with completeWrites, and a crash loses
	// them. persistEarly is a planted caller bug for negative tests: it
	// reports every write carried out (Persisted) as soon as it is queued,
	// though it is saved only later.
	writes       []Ready
	persistEarly bool
	// life counts the replica's crashes (a write in flight belongs to one
	// life); syncing reports that the driver is making writes durable;
	// lostWrites counts the writes in flight that crashes lost.
	life       uint64
	syncing    bool
	lostWrites int

	// lost: the replica's durable state was damaged while it was down; it
	// restarts rebuilding (Config.Rebuild) if rebuildOnLoss. rebuilding: it
	// restarted so and has not voted again yet.
	lost, rebuildOnLoss, rebuilding bool
}

func newReplica(tb testing.TB, cfg Config) *replica {
	tb.Helper()
	r := &replica{id: cfg.ID, cfg: cfg, store: NewMemoryStorage(), app: &testApp{}, up: true}
	r.cfg.Storage = r.store
	node, err := NewNode(r.cfg)
	if err != nil {
		tb.Fatalf("NewNode(%d): %v", cfg.ID, err)
	}
	r.node = node
	return r
}

// crash loses everything not synced, and every write still in flight, and
// stops the replica.
func (r *replica) crash() {
	r.lostWrites += len(r.writes)
	r.writes = nil
	r.life++
	r.syncing = false
	r.store.Crash()
	r.up = false
	r.node = nil
}

// restart brings a crashed replica back from its storage, with a fresh
// application that the node rebuilds from the snapshot and the log.
func (r *replica) restart(tb testing.TB, seed uint64) {
	tb.Helper()
	cfg := r.cfg
	cfg.Storage = r.store
	cfg.Applied = 0
	cfg.Seed = seed
	cfg.Rebuild = r.lost && r.rebuildOnLoss
	if cfg.Rebuild {
		// As the cell does: the flag is durable before the node starts, so
		// a crash before its first Ready is persisted resumes the rebuild
		// instead of voting with the lost state.
		hs, err := r.store.InitialState()
		if err != nil {
			tb.Fatal(err)
		}
		hs.Rebuilding = true
		if err := r.store.Save(hs, nil, true); err != nil {
			tb.Fatal(err)
		}
	}
	r.app = &testApp{}
	node, err := NewNode(cfg)
	if err != nil {
		tb.Fatalf("restart %d: %v", r.id, err)
	}
	r.node = node
	r.up = true
}

// handleReady carries out every pending Ready and returns the messages to
// send.
func (r *replica) handleReady(tb testing.TB) []Message {
	var out []Message
	for i := 0; r.node.HasReady(); i++ {
		if i > 1000 {
			tb.Fatalf("replica %d: HasReady never settles", r.id)
		}
		rd := r.node.Ready()
		r.readies++
		if r.cfg.AsyncWrites {
			// Every message may leave now; the write completes later
			// (completeWrites), and a crash before then loses it.
			out = append(out, rd.Messages...)
			if rd.WriteID != 0 {
				r.writes = append(r.writes, rd)
				if r.persistEarly {
					if err := r.node.Persisted(rd.WriteID); err != nil {
						tb.Fatal(err)
					}
				}
			}
			if r.crashMidReady != nil && r.crashMidReady() {
				r.crash()
				return out
			}
			r.finishReady(tb, rd)
			continue
		}
		late := rd.Messages
		if r.earlySend {
			late = nil
			for _, m := range rd.Messages {
				if m.DependsOnPersist() {
					late = append(late, m)
				} else {
					out = append(out, m)
				}
			}
			if r.crashMidReady != nil && r.crashMidReady() {
				r.crash()
				return out
			}
		}
		if err := r.store.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
			tb.Fatal(err)
		}
		if r.onSave != nil {
			r.onSave(r, rd.HardState, rd.Entries)
		}
		out = append(out, late...)
		r.finishReady(tb, rd)
	}
	return out
}

// completeWrites carries out the queued writes up to and including id, in
// order (each saved, synced if its Ready said MustSync), and reports them
// to the node. REQUIRES: Config.AsyncWrites.
func (r *replica) completeWrites(tb testing.TB, id uint64) {
	tb.Helper()
	k := 0
	for ; k < len(r.writes) && r.writes[k].WriteID <= id; k++ {
		w := r.writes[k]
		if err := r.store.Save(w.HardState, w.Entries, w.MustSync); err != nil {
			tb.Fatal(err)
		}
		if r.onSave != nil {
			r.onSave(r, w.HardState, w.Entries)
		}
	}
	r.writes = r.writes[k:]
	if r.persistEarly {
		return
	}
	if err := r.node.Persisted(id); err != nil {
		tb.Fatalf("replica %d: Persisted(%d): %v", r.id, id, err)
	}
}

// finishReady carries out the rest of a Ready once its messages are on
// their way: install the snapshot, apply the chosen values, note the soft
// state and outcomes, and Advance.
func (r *replica) finishReady(tb testing.TB, rd Ready) {
	tb.Helper()
	if !rd.Snapshot.IsEmpty() {
		if err := r.store.SaveSnapshot(rd.Snapshot); err != nil {
			tb.Fatal(err)
		}
		r.app.restore(rd.Snapshot)
		if r.onSnapshot != nil {
			r.onSnapshot(r, rd.Snapshot)
		}
	}
	for _, e := range rd.Chosen {
		if e.Slot != r.app.applied+1 {
			tb.Fatalf("replica %d: chosen slot %d handed out after %d", r.id, e.Slot, r.app.applied)
		}
		r.app.apply(e)
		if r.onApply != nil {
			r.onApply(r, e)
		}
	}
	if rd.SoftState != nil {
		r.soft = *rd.SoftState
	}
	for _, o := range rd.Outcomes {
		r.outcomes = append(r.outcomes, o)
		if r.onOutcome != nil {
			r.onOutcome(r, o)
		}
	}
	r.node.Advance(rd)
}

// compact snapshots the app and compacts the node's log.
func (r *replica) compact(tb testing.TB) {
	tb.Helper()
	snap := r.app.snapshot()
	if snap.Slot == 0 {
		return
	}
	if err := r.store.SaveSnapshot(snap); err != nil {
		tb.Fatal(err)
	}
	if err := r.node.Compact(snap.Slot); err != nil {
		tb.Fatal(err)
	}
}

// testNet is a lock-step network for readable unit tests: every replica
// ticks together and messages wait in one FIFO queue.
type testNet struct {
	tb    testing.TB
	reps  []*replica
	queue []Message
	// drop, if set, loses the messages it returns true for.
	drop func(m Message) bool
}

func ids(n int) []ID {
	out := make([]ID, n)
	for i := range out {
		out[i] = ID(i + 1)
	}
	return out
}

// newTestNet builds n replicas with small timers (lease 20, heartbeat 5,
// election 22 ticks) unless tweak changes them.
func newTestNet(tb testing.TB, n int, tweak func(*Config)) *testNet {
	tb.Helper()
	tn := &testNet{tb: tb}
	for _, id := range ids(n) {
		cfg := Config{ID: id, Replicas: ids(n), LeaseTicks: 20, HeartbeatTicks: 5, ElectionTicks: 22, Seed: uint64(id) * 7919}
		if tweak != nil {
			tweak(&cfg)
		}
		tn.reps = append(tn.reps, newReplica(tb, cfg))
	}
	return tn
}

func (tn *testNet) rep(id ID) *replica { return tn.reps[id-1] }

// collect runs every up replica's Ready and queues its messages.
func (tn *testNet) collect() {
	for _, r := range tn.reps {
		if r.up {
			tn.queue = append(tn.queue, r.handleReady(tn.tb)...)
		}
	}
}

// deliver delivers queued messages until the network is quiet.
func (tn *testNet) deliver() {
	tn.collect()
	for steps := 0; len(tn.queue) > 0; steps++ {
		if steps > 100000 {
			tn.tb.Fatal("network does not settle")
		}
		m := tn.queue[0]
		tn.queue = tn.queue[1:]
		to := tn.rep(m.To)
		if !to.up || (tn.drop != nil && tn.drop(m)) {
			continue
		}
		if err := to.node.Step(m); err != nil {
			tn.tb.Fatalf("step %v: %v", m, err)
		}
		tn.queue = append(tn.queue, to.handleReady(tn.tb)...)
	}
}

// tick ticks every up replica k times, delivering messages after each tick.
func (tn *testNet) tick(k int) {
	for i := 0; i < k; i++ {
		for _, r := range tn.reps {
			if r.up {
				r.node.Tick()
			}
		}
		tn.deliver()
	}
}

// tickOne ticks one replica k times, delivering after each.
func (tn *testNet) tickOne(id ID, k int) {
	for i := 0; i < k; i++ {
		tn.rep(id).node.Tick()
		tn.deliver()
	}
}

// leader returns the single replica that is Leader, or nil.
func (tn *testNet) leader() *replica {
	var l *replica
	for _, r := range tn.reps {
		if r.up && r.node.Status().IsLeader {
			if l != nil {
				tn.tb.Fatalf("two leaders: %d and %d", l.id, r.id)
			}
			l = r
		}
	}
	return l
}

// elect ticks until some replica is master; it fails after limit ticks.
func (tn *testNet) elect(limit int) *replica {
	tn.tb.Helper()
	for i := 0; i < limit; i++ {
		if l := tn.leader(); l != nil && l.node.Status().Master {
			return l
		}
		tn.tick(1)
	}
	tn.tb.Fatalf("no master after %d ticks", limit)
	return nil
}

// propose proposes data at r and returns the ID.
func (tn *testNet) propose(r *replica, data string) ProposalID {
	tn.tb.Helper()
	id, err := r.node.Propose([]byte(data))
	if err != nil {
		tn.tb.Fatalf("propose at %d: %v", r.id, err)
	}
	return id
}

// outcome returns r's outcome for id, if any.
func (r *replica) outcome(id ProposalID) (Outcome, bool) {
	for _, o := range r.outcomes {
		if o.ID == id {
			return o, true
		}
	}
	return Outcome{}, false
}

// describeLog renders r's applied values for failure messages.
func describeLog(r *replica) string {
	s := ""
	for slot := Slot(1); slot <= r.node.chosen; slot++ {
		if e, ok := r.node.log[slot]; ok {
			s += describeEntry(e) + " "
		}
	}
	return fmt.Sprintf("replica %d: %s", r.id, s)
}
