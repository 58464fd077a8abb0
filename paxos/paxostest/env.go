// Package paxostest drives a cell of paxos.Nodes deterministically for
// golden interaction tests, the way etcd-io/raft's rafttest does for Raft.
//
// An Env holds N replicas, each a paxos.Node over an in-memory
// paxos.MemoryStorage with a tiny replicated application, and one network
// queue. Nothing happens by itself: a script (paxos/testdata/*.txt, run by
// github.com/cockroachdb/datadriven) ticks clocks, takes Ready batches and
// carries out their steps (persist, send, apply, advance) one at a time if
// it wants to, delivers or drops messages, partitions the network and
// crashes and restarts replicas. Every command prints a stable text
// description of what happened, which the script compares with its golden
// output.
//
// Besides the golden text the Env checks three invariants after every
// command and fails the test when one breaks, whatever the golden file
// says: at most one replica is master; no slot is chosen with two values
// (chosen meaning accepted durably by a majority at one ballot, as the
// simulator's oracle defines it); every replica applies the same value in
// each slot.
//
// The package is pure in the sense of paxos: no goroutines, clocks, sockets
// or disk.
package paxostest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/paxos"
)

// Env is a scripted cell. Create it with NewEnv and feed it commands with
// Handle.
type Env struct {
	tb    testing.TB
	nodes []*Node // index ID-1
	// net holds messages sent and not yet delivered or dropped, in send
	// order.
	net []paxos.Message
	// cut[a][b]: messages from a to b are lost.
	cut map[[2]paxos.ID]bool
	out *strings.Builder

	// Oracles.
	votes   map[voteKey]map[paxos.ID]bool
	chosen  map[paxos.Slot]string
	applied map[paxos.Slot]string
	// confs holds the memberships the applied log made, by Index (the
	// initial one, Index 0, first): the oracle's own view of which voters
	// make a slot chosen.
	confs []paxos.Membership
	// reported holds the violations reported, each reported once.
	reported map[string]bool
}

// voteKey names one accepted value: slot, ballot and value.
type voteKey struct {
	slot   paxos.Slot
	ballot paxos.Ballot
	value  string
}

// Node is one scripted replica.
type Node struct {
	ID    paxos.ID
	Cfg   paxos.Config
	Node  *paxos.Node // nil while crashed
	Store *paxos.MemoryStorage
	App   *App
	// rd is a Ready taken and not yet Advanced; done records which of its
	// steps were carried out.
	rd   *paxos.Ready
	done steps
	// sentEarly: the messages that do not depend on persistence were sent.
	sentEarly bool
	// last is the status after the previous command, to report changes.
	last paxos.Status
	// writes are, with Config.AsyncWrites, the writes of Readies handled
	// and not yet carried out, oldest first: persist-writes carries them
	// out, a crash loses them.
	writes []paxos.Ready
}

// steps records the steps of a Ready that were carried out.
type steps struct{ persist, send, apply bool }

// App is the replicated application: the commands applied in slot order,
// and the membership the last applied membership change made (nil before
// the first), which its snapshots carry.
type App struct {
	Applied paxos.Slot
	Cmds    []string
	Members *paxos.Membership
}

// apply applies the chosen entry e.
func (a *App) apply(e paxos.Entry) {
	if c := e.Value.Conf; c != nil {
		m := *c
		m.Index = e.Slot
		a.Members = &m
	} else {
		for _, c := range e.Value.Cmds {
			a.Cmds = append(a.Cmds, string(c.Data))
		}
	}
	a.Applied = e.Slot
}

// snapshot returns the application's state as a snapshot.
func (a *App) snapshot() paxos.Snapshot {
	return paxos.Snapshot{Slot: a.Applied, Data: []byte(strings.Join(a.Cmds, "\n")), Members: a.Members}
}

// restore replaces the application's state with snap's.
func (a *App) restore(snap paxos.Snapshot) {
	a.Applied = snap.Slot
	a.Members = snap.Members
	a.Cmds = nil
	if len(snap.Data) > 0 {
		a.Cmds = strings.Split(string(snap.Data), "\n")
	}
}

// NewEnv returns an empty Env reporting violations to tb.
func NewEnv(tb testing.TB) *Env {
	return &Env{
		tb:      tb,
		cut:     map[[2]paxos.ID]bool{},
		votes:   map[voteKey]map[paxos.ID]bool{},
		chosen:  map[paxos.Slot]string{},
		applied: map[paxos.Slot]string{},

		reported: map[string]bool{},
	}
}

// Nodes returns the replicas, in ID order.
func (env *Env) Nodes() []*Node { return env.nodes }

// node returns replica id, failing the test if there is none.
func (env *Env) node(id paxos.ID) *Node {
	if id < 1 || int(id) > len(env.nodes) {
		env.tb.Fatalf("no replica %d (the cell has %d)", id, len(env.nodes))
	}
	return env.nodes[id-1]
}

// up returns the replicas that are running, in ID order.
func (env *Env) up() []*Node {
	var out []*Node
	for _, n := range env.nodes {
		if n.Node != nil {
			out = append(out, n)
		}
	}
	return out
}

// printf writes to the command's output.
func (env *Env) printf(format string, args ...any) {
	fmt.Fprintf(env.out, format, args...)
}

// violation reports a broken invariant: in the output and as a test error,
// so that rewriting the golden file cannot hide it.
func (env *Env) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if env.reported[msg] {
		return
	}
	env.reported[msg] = true
	env.printf("VIOLATION: %s\n", msg)
	env.tb.Errorf("invariant broken: %s", msg)
}

// AddNodes adds k replicas with IDs following the existing ones, all
// configured from base (ID, Replicas, Storage and Seed are filled in).
// Every replica must be added before the first command that runs them.
func (env *Env) AddNodes(k int, base paxos.Config) error {
	first := len(env.nodes) + 1
	all := make([]paxos.ID, 0, first-1+k)
	for i := 1; i < first+k; i++ {
		all = append(all, paxos.ID(i))
	}
	for _, n := range env.nodes {
		if n.Node != nil && n.Node.Status().Ticks > 0 {
			return fmt.Errorf("add-nodes after replicas started running")
		}
	}
	// Every replica lists the whole cell: rebuild the earlier ones too.
	for _, n := range env.nodes {
		n.Cfg.Replicas = all
		nd, err := paxos.NewNode(n.Cfg)
		if err != nil {
			return err
		}
		n.Node = nd
	}
	env.confs = []paxos.Membership{{Voters: all}}
	for i := first; i < first+k; i++ {
		cfg := base
		cfg.ID = paxos.ID(i)
		cfg.Replicas = all
		cfg.Seed = uint64(i)
		st := paxos.NewMemoryStorage()
		cfg.Storage = st
		nd, err := paxos.NewNode(cfg)
		if err != nil {
			return err
		}
		n := &Node{ID: cfg.ID, Cfg: cfg, Node: nd, Store: st, App: &App{}}
		n.last = nd.Status()
		env.nodes = append(env.nodes, n)
	}
	return nil
}

// Join adds a replica outside the membership, as a replica about to be
// added is started: it lists the cell's initial voters and is none of them.
func (env *Env) Join() (paxos.ID, error) {
	if len(env.nodes) == 0 {
		return 0, fmt.Errorf("join needs a cell: add-nodes first")
	}
	cfg := env.nodes[0].Cfg
	cfg.ID = paxos.ID(len(env.nodes) + 1)
	cfg.Seed = uint64(cfg.ID)
	st := paxos.NewMemoryStorage()
	cfg.Storage = st
	cfg.Rebuild = false
	cfg.Applied = 0
	nd, err := paxos.NewNode(cfg)
	if err != nil {
		return 0, err
	}
	n := &Node{ID: cfg.ID, Cfg: cfg, Node: nd, Store: st, App: &App{}}
	n.last = nd.Status()
	env.nodes = append(env.nodes, n)
	return cfg.ID, nil
}

// Crash stops replica id: everything its storage did not sync is lost, the
// Ready it was handling is abandoned (its unsent messages never leave).
func (env *Env) Crash(id paxos.ID) {
	n := env.node(id)
	if n.Node == nil {
		return
	}
	n.Store.Crash()
	n.Node = nil
	n.writes = nil
	n.rd = nil
	n.done = steps{}
	n.sentEarly = false
}

// Restart starts a crashed replica again from its storage, with an empty
// application that the node refills from the snapshot and the log. With
// wipe the storage is replaced by an empty one first (a lost disk; its
// votes are taken back from the chosen oracle). With rebuild the replica
// starts rebuilding: as the cell does, the Rebuilding flag is made durable
// before NewNode, so that a crash during the rebuild resumes it.
func (env *Env) Restart(id paxos.ID, wipe, rebuild bool) error {
	n := env.node(id)
	if n.Node != nil {
		return fmt.Errorf("replica %d is running; crash it first", id)
	}
	if wipe {
		n.Store = paxos.NewMemoryStorage()
		for k, set := range env.votes {
			delete(set, id)
			if len(set) == 0 {
				delete(env.votes, k)
			}
		}
	}
	if rebuild {
		hs, err := n.Store.InitialState()
		if err != nil {
			return err
		}
		hs.Rebuilding = true
		if err := n.Store.Save(hs, nil, true); err != nil {
			return err
		}
	}
	cfg := n.Cfg
	cfg.Storage = n.Store
	cfg.Applied = 0
	cfg.Rebuild = rebuild
	nd, err := paxos.NewNode(cfg)
	if err != nil {
		return err
	}
	n.Node = nd
	n.App = &App{}
	n.last = nd.Status()
	return nil
}

// send puts m on the network.
func (env *Env) send(m paxos.Message) { env.net = append(env.net, m) }

// deliver steps m into its recipient, unless the recipient is down or the
// link is cut. It reports what happened.
func (env *Env) deliver(m paxos.Message) {
	to := env.node(m.To)
	switch {
	case to.Node == nil:
		env.printf("lost (%d is down): %s\n", m.To, m)
	case env.cut[[2]paxos.ID{m.From, m.To}]:
		env.printf("lost (partition): %s\n", m)
	default:
		env.printf("deliver %s\n", m)
		if err := to.Node.Step(m); err != nil {
			env.printf("error: %v\n", err)
		}
		env.checkMasters()
	}
}

// takeReady makes sure replica n has a Ready in hand, taking a new one if
// the node has work. It reports whether one is in hand.
func (env *Env) takeReady(n *Node, verbose bool) bool {
	if n.rd != nil {
		return true
	}
	if n.Node == nil || !n.Node.HasReady() {
		return false
	}
	rd := n.Node.Ready()
	n.rd = &rd
	n.done = steps{}
	n.sentEarly = false
	if verbose {
		env.printf("> %d handling Ready\n", n.ID)
		env.printf("%s", indent(DescribeReady(rd), "  "))
		if n.Cfg.AsyncWrites && rd.WriteID != 0 {
			env.printf("  write %d queued\n", rd.WriteID)
		}
	}
	return true
}

// persist carries out the persist step of n's Ready.
func (env *Env) persist(n *Node) {
	rd := n.rd
	if n.done.persist {
		return
	}
	n.done.persist = true
	if n.Cfg.AsyncWrites {
		if rd.WriteID != 0 {
			n.writes = append(n.writes, *rd)
		}
		return
	}
	if err := n.Store.Save(rd.HardState, rd.Entries, rd.MustSync); err != nil {
		env.tb.Fatalf("replica %d: save: %v", n.ID, err)
	}
	env.noteVotes(n.ID, rd.Entries)
}

// persistWrites carries out n's queued writes up to and including write
// id (all of them if id is 0), in order, and reports them to the node
// (Persisted). It reports which writes it carried out.
func (env *Env) persistWrites(n *Node, id uint64) {
	if len(n.writes) == 0 {
		env.printf("> %d has no write in flight\n", n.ID)
		return
	}
	if id == 0 {
		id = n.writes[len(n.writes)-1].WriteID
	}
	first := n.writes[0].WriteID
	k := 0
	for ; k < len(n.writes) && n.writes[k].WriteID <= id; k++ {
		w := n.writes[k]
		if err := n.Store.Save(w.HardState, w.Entries, w.MustSync); err != nil {
			env.tb.Fatalf("replica %d: save: %v", n.ID, err)
		}
		env.noteVotes(n.ID, w.Entries)
	}
	n.writes = n.writes[k:]
	if err := n.Node.Persisted(id); err != nil {
		env.printf("error: %v\n", err)
		return
	}
	env.printf("> %d persisted writes %d..%d\n", n.ID, first, id)
	env.checkMasters()
}

// sendEarly sends the messages of n's Ready that do not depend on
// persistence, as the cell does before persisting.
func (env *Env) sendEarly(n *Node) {
	if n.sentEarly || n.done.send {
		return
	}
	n.sentEarly = true
	for _, m := range n.rd.Messages {
		if !m.DependsOnPersist() {
			env.checkDurableFirst(n, m)
			env.send(m)
		}
	}
}

// checkDurableFirst reports a vote that leaves before the Ready that
// carries it is persisted (invariant 2). It judges by the message type,
// independently of Message.DependsOnPersist: a promise, an acknowledgement,
// a refusal naming a promise, a Prepare (its ballot is the sender's own
// promise) or a rebuild answer.
func (env *Env) checkDurableFirst(n *Node, m paxos.Message) {
	if n.Cfg.AsyncWrites {
		env.checkStored(n, m)
		return
	}
	if n.done.persist || (n.rd.HardState.IsEmpty() && len(n.rd.Entries) == 0) {
		return
	}
	switch m.Type {
	case paxos.MsgPrepare, paxos.MsgPromise, paxos.MsgAccepted, paxos.MsgReject, paxos.MsgRebuildAck:
		env.violation("replica %d sent %s before persisting the Ready that carries it", n.ID, m)
	}
}

// checkStored reports a vote that leaves a replica writing asynchronously
// before the storage holds it: a Promise, a Reject or a RebuildAck whose
// ballot the stored promise does not cover, or an Accepted for a slot the
// storage holds at no ballot at least the acknowledged one (and that the
// replica does not know chosen).
func (env *Env) checkStored(n *Node, m paxos.Message) {
	hs, _ := n.Store.InitialState()
	switch m.Type {
	case paxos.MsgPromise:
		if hs.Promised < m.Ballot {
			env.violation("replica %d sent %s while its storage holds promise %s", n.ID, m, hs.Promised)
		}
	case paxos.MsgReject, paxos.MsgRebuildAck:
		if hs.Promised < m.Promised {
			env.violation("replica %d sent %s while its storage holds promise %s", n.ID, m, hs.Promised)
		}
	case paxos.MsgAccepted:
		st := n.Node.Status()
		for _, s := range m.Slots {
			if s <= st.Chosen || s <= st.Compacted {
				continue
			}
			ents, _ := n.Store.Entries(s, s+1)
			if len(ents) == 0 || ents[0].Ballot < m.Ballot {
				env.violation("replica %d sent %s before its storage holds slot %d at that ballot", n.ID, m, s)
			}
		}
	}
}

// sendAll sends the messages of n's Ready not sent yet.
func (env *Env) sendAll(n *Node) {
	if n.done.send {
		return
	}
	n.done.send = true
	for _, m := range n.rd.Messages {
		if n.Cfg.AsyncWrites {
			env.checkStored(n, m)
		}
		if !n.sentEarly || m.DependsOnPersist() {
			env.send(m)
		}
	}
}

// apply installs the snapshot and applies the chosen values of n's Ready.
func (env *Env) apply(n *Node) {
	if n.done.apply {
		return
	}
	n.done.apply = true
	rd := n.rd
	if !rd.Snapshot.IsEmpty() {
		if err := n.Store.SaveSnapshot(rd.Snapshot); err != nil {
			env.tb.Fatalf("replica %d: save snapshot: %v", n.ID, err)
		}
		n.App.restore(rd.Snapshot)
	}
	for _, e := range rd.Chosen {
		if e.Slot != n.App.Applied+1 {
			env.violation("replica %d: chosen slot %d handed out after %d", n.ID, e.Slot, n.App.Applied)
		}
		n.App.apply(e)
		v := DescribeValue(e.Value)
		if prev, ok := env.applied[e.Slot]; ok && prev != v {
			env.violation("replica %d applied %s in slot %d, another replica applied %s", n.ID, v, e.Slot, prev)
		} else if !ok {
			env.applied[e.Slot] = v
			if c := e.Value.Conf; c != nil {
				env.learnConf(*c, e.Slot)
			}
		}
		if c, ok := env.chosen[e.Slot]; ok && c != v {
			env.violation("replica %d applied %s in slot %d, but %s was chosen", n.ID, v, e.Slot, c)
		} else if !ok && n.Cfg.AsyncWrites {
			env.violation("replica %d applied %s in slot %d, which no majority has durably accepted", n.ID, v, e.Slot)
		}
	}
}

// advance ends n's Ready, carrying out the steps not done yet first.
func (env *Env) advance(n *Node) {
	env.persist(n)
	env.sendAll(n)
	env.apply(n)
	n.Node.Advance(*n.rd)
	env.checkMasters()
	n.rd = nil
	n.done = steps{}
	n.sentEarly = false
}

// noteVotes feeds the chosen oracle with entries replica id made durable.
func (env *Env) noteVotes(id paxos.ID, ents []paxos.Entry) {
	for _, e := range ents {
		k := voteKey{e.Slot, e.Ballot, DescribeValue(e.Value)}
		set := env.votes[k]
		if set == nil {
			set = map[paxos.ID]bool{}
			env.votes[k] = set
		}
		set[id] = true
		env.judge(k, set)
	}
}

// judge records k's value as chosen if the replicas in set, which accepted
// it, make a quorum for its slot.
func (env *Env) judge(k voteKey, set map[paxos.ID]bool) {
	if !env.quorum(k.slot, set) {
		return
	}
	if c, ok := env.chosen[k.slot]; ok && c != k.value {
		env.violation("slot %d chosen with two values: %s, then %s at ballot %s", k.slot, c, k.value, k.ballot)
	}
	env.chosen[k.slot] = k.value
}

// quorum reports whether set holds a majority of the voters of the
// membership in force for slot (as the applied log says), or of the one
// before it. The second makes the oracle stricter, never laxer: any
// majority of consecutive memberships meet, so a value a majority of the
// earlier one accepted is found by every later Phase 1, and the protocol
// must treat it as chosen.
func (env *Env) quorum(slot paxos.Slot, set map[paxos.ID]bool) bool {
	i := 0
	for i+1 < len(env.confs) && env.confs[i+1].Index < slot {
		i++
	}
	for j := max(i-1, 0); j <= i; j++ {
		c := 0
		for _, v := range env.confs[j].Voters {
			if set[v] {
				c++
			}
		}
		if c > len(env.confs[j].Voters)/2 {
			return true
		}
	}
	return false
}

// learnConf notes the membership the change chosen in slot made, and
// judges again the votes in the slots it governs.
func (env *Env) learnConf(m paxos.Membership, slot paxos.Slot) {
	m.Index = slot
	env.confs = append(env.confs, m)
	sort.Slice(env.confs, func(i, j int) bool { return env.confs[i].Index < env.confs[j].Index })
	keys := make([]voteKey, 0, len(env.votes))
	for k := range env.votes {
		if k.slot > slot {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].slot != keys[j].slot {
			return keys[i].slot < keys[j].slot
		}
		return keys[i].ballot < keys[j].ballot
	})
	for _, k := range keys {
		env.judge(k, env.votes[k])
	}
}

// handleAll carries out every Ready of the given replicas until none has
// work, returning whether any did.
func (env *Env) handleAll(ns []*Node, verbose bool) bool {
	any := false
	for i := 0; i < 100; i++ {
		progress := false
		for _, n := range ns {
			if n.Node == nil {
				continue
			}
			if env.takeReady(n, verbose) {
				env.advance(n)
				progress = true
			}
		}
		if !progress {
			return any
		}
		any = true
	}
	env.tb.Fatalf("Ready never settles")
	return any
}

// deliverAll delivers every queued message (to the given recipients, or
// all) and reports whether there were any.
func (env *Env) deliverAll(to map[paxos.ID]bool) bool {
	var keep, now []paxos.Message
	for _, m := range env.net {
		if to == nil || to[m.To] {
			now = append(now, m)
		} else {
			keep = append(keep, m)
		}
	}
	env.net = keep
	for _, m := range now {
		env.deliver(m)
	}
	return len(now) > 0
}

// stabilize handles Readies and delivers messages among the given replicas
// until nothing is left to do.
func (env *Env) stabilize(ns []*Node, verbose bool) {
	to := map[paxos.ID]bool{}
	for _, n := range ns {
		to[n.ID] = true
	}
	for i := 0; i < 1000; i++ {
		r := env.handleAll(ns, verbose)
		w := false
		for _, n := range ns {
			if n.Node != nil && len(n.writes) > 0 {
				saved := env.out
				if !verbose {
					env.out = &strings.Builder{}
				}
				env.persistWrites(n, 0)
				env.out = saved
				w = true
			}
		}
		d := env.deliverAll(to)
		if !r && !d && !w {
			return
		}
	}
	env.tb.Fatalf("stabilize does not settle")
}

// checkMasters fails the test if more than one running replica is master.
func (env *Env) checkMasters() {
	var masters []string
	for _, n := range env.nodes {
		if n.Node != nil && n.Node.Status().Master {
			masters = append(masters, fmt.Sprint(n.ID))
		}
	}
	if len(masters) > 1 {
		env.violation("replicas %s are master at the same time", strings.Join(masters, ","))
	}
}

// check runs the checks due at the end of a command and remembers every
// replica's status for the next report of changes.
func (env *Env) check() {
	env.checkMasters()
	for _, n := range env.nodes {
		if n.Node != nil {
			n.last = n.Node.Status()
		}
	}
}

// changes describes what changed in the replicas' status since the last
// check, one line per change.
func (env *Env) changes() string {
	var b strings.Builder
	for _, n := range env.nodes {
		if n.Node == nil {
			continue
		}
		st := n.Node.Status()
		old := n.last
		if st.Role != old.Role {
			fmt.Fprintf(&b, "%d: %s -> %s\n", n.ID, old.Role, st.Role)
		}
		if st.PreVote != old.PreVote {
			fmt.Fprintf(&b, "%d: prevote %v -> %v\n", n.ID, old.PreVote, st.PreVote)
		}
		if st.Master != old.Master {
			fmt.Fprintf(&b, "%d: master %v -> %v\n", n.ID, old.Master, st.Master)
		}
		if st.Rebuild.Phase != old.Rebuild.Phase {
			fmt.Fprintf(&b, "%d: rebuild %s -> %s\n", n.ID, old.Rebuild.Phase, st.Rebuild.Phase)
		}
		if st.HandOver != old.HandOver {
			fmt.Fprintf(&b, "%d: hand-over to %d -> %d\n", n.ID, old.HandOver, st.HandOver)
		}
		if !st.Members.Equal(old.Members) {
			fmt.Fprintf(&b, "%d: members (%s)@%d -> (%s)@%d\n", n.ID, old.Members, old.Members.Index, st.Members, st.Members.Index)
		}
		if st.Successor != old.Successor {
			fmt.Fprintf(&b, "%d: successor %d -> %d\n", n.ID, old.Successor, st.Successor)
		}
	}
	return b.String()
}

// DescribeReady describes rd on stable lines, for golden output.
func DescribeReady(rd paxos.Ready) string {
	var b strings.Builder
	if !rd.HardState.IsEmpty() {
		fmt.Fprintf(&b, "HardState promised=%s chosen=%d", rd.HardState.Promised, rd.HardState.Chosen)
		if rd.HardState.Rebuilding {
			b.WriteString(" rebuilding")
		}
		b.WriteByte('\n')
	}
	if len(rd.Entries) > 0 {
		b.WriteString("Entries:")
		for _, e := range rd.Entries {
			b.WriteString(" " + DescribeEntry(e))
		}
		b.WriteByte('\n')
	}
	if rd.MustSync {
		b.WriteString("MustSync\n")
	}
	if !rd.Snapshot.IsEmpty() {
		fmt.Fprintf(&b, "Snapshot slot=%d\n", rd.Snapshot.Slot)
	}
	if len(rd.Chosen) > 0 {
		b.WriteString("Chosen:")
		for _, e := range rd.Chosen {
			b.WriteString(" " + DescribeEntry(e))
		}
		b.WriteByte('\n')
	}
	if rd.SoftState != nil {
		fmt.Fprintf(&b, "SoftState leader=%d master=%v epoch=%s\n", rd.SoftState.Leader, rd.SoftState.Master, rd.SoftState.Epoch)
	}
	for _, o := range rd.Outcomes {
		fmt.Fprintf(&b, "Outcome %s/%d slot=%d", o.ID.Ballot, o.ID.Seq, o.Slot)
		if o.Err != nil {
			fmt.Fprintf(&b, " err=%q", o.Err.Error())
		}
		b.WriteByte('\n')
	}
	for _, m := range rd.Messages {
		fmt.Fprintf(&b, "Msg %s\n", m)
	}
	return b.String()
}

// DescribeEntry formats e as slot@ballot:value.
func DescribeEntry(e paxos.Entry) string {
	return fmt.Sprintf("%d@%s:%s", e.Slot, e.Ballot, DescribeValue(e.Value))
}

// DescribeValue formats v as its commands' data in braces, noop, or
// conf(...) for a membership change.
func DescribeValue(v paxos.Value) string {
	if v.IsNoop() {
		return "noop"
	}
	if v.Conf != nil {
		return "conf(" + v.Conf.String() + ")"
	}
	parts := make([]string, len(v.Cmds))
	for i, c := range v.Cmds {
		parts[i] = string(c.Data)
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// DescribeStatus formats a replica's status on one line.
func DescribeStatus(st paxos.Status) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d: %s leader=%d promised=%s master=%v", st.ID, st.Role, st.Leader, st.Promised, st.Master)
	if st.Master {
		fmt.Fprintf(&b, " lease=%d", st.LeaseTicksLeft)
	}
	if st.PreVote {
		b.WriteString(" prevote")
	}
	fmt.Fprintf(&b, " chosen=%d applied=%d", st.Chosen, st.Applied)
	if st.Compacted > 0 {
		fmt.Fprintf(&b, " compacted=%d", st.Compacted)
	}
	if st.Pending > 0 {
		fmt.Fprintf(&b, " pending=%d", st.Pending)
	}
	if st.HandOver != 0 {
		fmt.Fprintf(&b, " handover=%d", st.HandOver)
	}
	if st.Successor != 0 {
		fmt.Fprintf(&b, " successor=%d", st.Successor)
	}
	if m := st.Members; m.Index > 0 || len(m.Learners) > 0 || !slices.Contains(m.Voters, st.ID) {
		fmt.Fprintf(&b, " members=(%s)@%d", m, m.Index)
		if st.ConfPending > 0 {
			fmt.Fprintf(&b, " confpending=%d", st.ConfPending)
		}
	}
	if rb := st.Rebuild; rb.Phase != paxos.RebuildNone {
		fmt.Fprintf(&b, " rebuild=%q", rb.Phase)
		if rb.TicksLeft > 0 {
			fmt.Fprintf(&b, " wait=%d", rb.TicksLeft)
		}
		fmt.Fprintf(&b, " answers=%d/%d", rb.Answers, rb.Needed)
		if rb.Target > 0 {
			fmt.Fprintf(&b, " target=%d", rb.Target)
		}
	}
	return b.String()
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// sortedIDs returns the keys of set in order.
func sortedIDs(set map[paxos.ID]bool) []paxos.ID {
	out := make([]paxos.ID, 0, len(set))
	for id := range set {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
