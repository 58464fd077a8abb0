package paxostest

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/lockcell/lockcell/paxos"
)

// Handle runs one script command and returns its output. The commands
// (replica IDs are bare numbers; keys without values are flags):
//
//	add-nodes n=3 [lease=20] [heartbeat=5] [election=22] [drift=10000] [inflight=32] [batch=256] [async]
//	                             async: Config.AsyncWrites; a Ready's persist step only queues its write
//	persist-writes [IDS] [upto=W] carry out the queued writes (up to write W) and call Persisted
//	tick [IDS] [n=1] [stabilize] tick the replicas (all running ones by default) n times,
//	                             with stabilize stabilizing the cell quietly after each round
//	campaign ID                  tick ID until its election timer fires
//	elect ID                     make ID master: age fresh replicas past their restart lease, tick ID and stabilize until it is
//	propose ID DATA...           propose each DATA at ID (the Ready is not handled)
//	step-down ID [to=N]          StepDown(N) at ID
//	hand-over ID [to=N]          HandOver(N) at ID
//	join                         start a new replica (next ID) outside the membership
//	conf-change ID add-learner=N | promote=N | remove=N
//	                             ProposeConfChange at ID (the Ready is not handled)
//	process-ready [IDS] [persist] [early-send] [send] [apply] [advance] [quiet]
//	                             with no step flags: handle every Ready of the replicas completely;
//	                             with flags: take one Ready (if none is in hand) and carry out only those steps
//	deliver-msgs [IDS] [from=(..)] [type=(..)] [drop]
//	                             deliver (or drop) the queued messages to IDS matching the filters
//	stabilize [IDS] [verbose]    handle Readies and deliver messages among IDS until nothing is left
//	crash ID                     lose unsynced writes and the Ready in hand; stop the replica
//	restart ID [wipe] [rebuild]  restart from storage (wiped first; rebuilding, flag made durable first)
//	partition a=(1,2) b=(3,4,5)  cut every link between different groups (unlisted replicas stay connected)
//	cut from=N to=(..)           cut links one way
//	heal                         repair every link
//	compact ID                   snapshot ID's application and compact its log
//	status [IDS]                 one line per replica
//	log ID                       durable hard state, stored entries and applied commands
//	net                          the queued messages
//
// After every command Handle reports changes of role, pre-vote, mastership
// and rebuild phase, and checks the invariants (see the package comment).
func (env *Env) Handle(t testing.TB, td *datadriven.TestData) string {
	env.tb = t
	var b strings.Builder
	env.out = &b
	if err := env.handle(t, td); err != nil {
		env.printf("error: %v\n", err)
	}
	if len(env.nodes) > 0 {
		b.WriteString(env.changes())
		env.check()
	}
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

// args splits a command's arguments into replica IDs (bare numbers) and
// the rest.
func args(td *datadriven.TestData) (ids []paxos.ID, flags map[string][]string, err error) {
	flags = map[string][]string{}
	for _, a := range td.CmdArgs {
		if len(a.Vals) == 0 {
			if v, e := strconv.ParseUint(a.Key, 10, 16); e == nil {
				ids = append(ids, paxos.ID(v))
				continue
			}
		}
		flags[a.Key] = a.Vals
	}
	return ids, flags, nil
}

// intFlag returns flag k as an int, or def.
func intFlag(flags map[string][]string, k string, def int) (int, error) {
	v, ok := flags[k]
	if !ok {
		return def, nil
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("%s wants one value", k)
	}
	return strconv.Atoi(v[0])
}

// idList parses a flag's values as replica IDs.
func idList(vals []string) ([]paxos.ID, error) {
	out := make([]paxos.ID, 0, len(vals))
	for _, v := range vals {
		x, err := strconv.ParseUint(strings.TrimSpace(v), 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad replica ID %q", v)
		}
		out = append(out, paxos.ID(x))
	}
	return out, nil
}

// pick returns the named replicas, or all if none is named.
func (env *Env) pick(ids []paxos.ID) []*Node {
	if len(ids) == 0 {
		return env.nodes
	}
	out := make([]*Node, 0, len(ids))
	for _, id := range ids {
		out = append(out, env.node(id))
	}
	return out
}

// one returns the single replica a command names.
func (env *Env) one(ids []paxos.ID) (*Node, error) {
	if len(ids) != 1 {
		return nil, fmt.Errorf("name exactly one replica")
	}
	return env.node(ids[0]), nil
}

// running returns n's node or an error if it is down.
func running(n *Node) (*paxos.Node, error) {
	if n.Node == nil {
		return nil, fmt.Errorf("replica %d is down", n.ID)
	}
	return n.Node, nil
}

func (env *Env) handle(t testing.TB, td *datadriven.TestData) error {
	ids, flags, err := args(td)
	if err != nil {
		return err
	}
	switch td.Cmd {
	case "add-nodes":
		return env.cmdAddNodes(flags)
	case "tick":
		k, err := intFlag(flags, "n", 1)
		if err != nil {
			return err
		}
		_, stab := flags["stabilize"]
		saved := env.out
		defer func() { env.out = saved }()
		for i := 0; i < k; i++ {
			for _, n := range env.pick(ids) {
				if n.Node != nil {
					n.Node.Tick()
				}
			}
			env.checkMasters()
			if stab {
				env.out = &strings.Builder{}
				env.stabilize(env.nodes, false)
				env.out = saved
			}
		}
		return nil
	case "campaign":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		return env.campaign(n)
	case "elect":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		return env.elect(n)
	case "propose":
		return env.cmdPropose(td)
	case "step-down", "hand-over":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		nd, err := running(n)
		if err != nil {
			return err
		}
		to, err := intFlag(flags, "to", 0)
		if err != nil {
			return err
		}
		if td.Cmd == "hand-over" {
			return nd.HandOver(paxos.ID(to))
		}
		return nd.StepDown(paxos.ID(to))
	case "join":
		id, err := env.Join()
		if err != nil {
			return err
		}
		env.printf("%d: started outside the membership\n", id)
		return nil
	case "conf-change":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		nd, err := running(n)
		if err != nil {
			return err
		}
		var cc paxos.ConfChange
		for name, typ := range map[string]paxos.ConfChangeType{"add-learner": paxos.ConfAddLearner, "promote": paxos.ConfPromote, "remove": paxos.ConfRemove} {
			if _, ok := flags[name]; ok {
				id, err := intFlag(flags, name, 0)
				if err != nil {
					return err
				}
				cc = paxos.ConfChange{Type: typ, ID: paxos.ID(id)}
			}
		}
		if cc.Type == 0 {
			return fmt.Errorf("conf-change wants add-learner=N, promote=N or remove=N")
		}
		pid, err := nd.ProposeConfChange(cc)
		if err != nil {
			return err
		}
		env.printf("%s %d: proposal %s/%d\n", cc.Type, cc.ID, pid.Ballot, pid.Seq)
		return nil
	case "process-ready":
		return env.cmdProcessReady(ids, flags)
	case "persist-writes":
		upto, err := intFlag(flags, "upto", 0)
		if err != nil {
			return err
		}
		for _, n := range env.pick(ids) {
			if n.Node != nil {
				env.persistWrites(n, uint64(upto))
			}
		}
		return nil
	case "deliver-msgs":
		return env.cmdDeliver(ids, flags)
	case "stabilize":
		_, verbose := flags["verbose"]
		env.stabilize(env.pick(ids), verbose)
		return nil
	case "crash":
		for _, n := range env.pick(ids) {
			env.Crash(n.ID)
		}
		return nil
	case "restart":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		_, wipe := flags["wipe"]
		_, rebuild := flags["rebuild"]
		return env.Restart(n.ID, wipe, rebuild)
	case "partition":
		env.cut = map[[2]paxos.ID]bool{}
		group := map[paxos.ID]string{}
		for name, vals := range flags {
			members, err := idList(vals)
			if err != nil {
				return err
			}
			for _, id := range members {
				group[id] = name
			}
		}
		for a, ga := range group {
			for b, gb := range group {
				if ga != gb {
					env.cut[[2]paxos.ID{a, b}] = true
				}
			}
		}
		return nil
	case "cut":
		from, err := intFlag(flags, "from", 0)
		if err != nil {
			return err
		}
		to, err := idList(flags["to"])
		if err != nil {
			return err
		}
		for _, id := range to {
			env.cut[[2]paxos.ID{paxos.ID(from), id}] = true
		}
		return nil
	case "heal":
		env.cut = map[[2]paxos.ID]bool{}
		return nil
	case "compact":
		n, err := env.one(ids)
		if err != nil {
			return err
		}
		nd, err := running(n)
		if err != nil {
			return err
		}
		snap := n.App.snapshot()
		if err := n.Store.SaveSnapshot(snap); err != nil {
			return err
		}
		if err := nd.Compact(snap.Slot); err != nil {
			return err
		}
		env.printf("%d: compacted at %d\n", n.ID, snap.Slot)
		return nil
	case "status":
		for _, n := range env.pick(ids) {
			if n.Node == nil {
				env.printf("%d: down\n", n.ID)
				continue
			}
			env.printf("%s\n", DescribeStatus(n.Node.Status()))
		}
		return nil
	case "log":
		for _, n := range env.pick(ids) {
			env.describeLog(n)
		}
		return nil
	case "net":
		for _, m := range env.net {
			env.printf("%s\n", m)
		}
		return nil
	}
	t.Fatalf("%s: unknown command %q", td.Pos, td.Cmd)
	return nil
}

func (env *Env) cmdAddNodes(flags map[string][]string) error {
	k, err := intFlag(flags, "n", 3)
	if err != nil {
		return err
	}
	var cfg paxos.Config
	for _, f := range []struct {
		name string
		dst  *int
		def  int
	}{
		{"lease", &cfg.LeaseTicks, 20},
		{"heartbeat", &cfg.HeartbeatTicks, 5},
		{"election", &cfg.ElectionTicks, 22},
		{"inflight", &cfg.MaxInflight, 32},
		{"batch", &cfg.MaxBatch, 256},
	} {
		if *f.dst, err = intFlag(flags, f.name, f.def); err != nil {
			return err
		}
	}
	// The scripts were written when the election jitter was a fifth of
	// the election wait; "jitter" overrides it.
	jitter, err := intFlag(flags, "jitter", cfg.ElectionTicks/5)
	if err != nil {
		return err
	}
	cfg.ElectionJitterTicks = jitter
	if jitter == 0 {
		cfg.ElectionJitterTicks = -1 // none
	}
	drift, err := intFlag(flags, "drift", 10_000)
	if err != nil {
		return err
	}
	cfg.DriftPPM = uint32(drift)
	_, cfg.AsyncWrites = flags["async"]
	return env.AddNodes(k, cfg)
}

func (env *Env) cmdPropose(td *datadriven.TestData) error {
	if len(td.CmdArgs) < 2 {
		return fmt.Errorf("propose ID DATA...")
	}
	v, err := strconv.ParseUint(td.CmdArgs[0].Key, 10, 16)
	if err != nil {
		return fmt.Errorf("bad replica ID %q", td.CmdArgs[0].Key)
	}
	nd, err := running(env.node(paxos.ID(v)))
	if err != nil {
		return err
	}
	for _, a := range td.CmdArgs[1:] {
		id, err := nd.Propose([]byte(a.Key))
		if err != nil {
			env.printf("%s: %v\n", a.Key, err)
			continue
		}
		env.printf("%s: proposal %s/%d\n", a.Key, id.Ballot, id.Seq)
	}
	return nil
}

func (env *Env) cmdProcessReady(ids []paxos.ID, flags map[string][]string) error {
	_, quiet := flags["quiet"]
	var want steps
	var early, adv bool
	_, want.persist = flags["persist"]
	_, want.send = flags["send"]
	_, want.apply = flags["apply"]
	_, early = flags["early-send"]
	_, adv = flags["advance"]
	partial := want.persist || want.send || want.apply || early || adv
	for _, n := range env.pick(ids) {
		if n.Node == nil {
			continue
		}
		if !partial {
			env.handleAll([]*Node{n}, !quiet)
			continue
		}
		if !env.takeReady(n, !quiet) {
			env.printf("> %d has no Ready\n", n.ID)
			continue
		}
		if early {
			env.sendEarly(n)
			env.printf("> %d sent the messages that do not depend on persistence\n", n.ID)
		}
		if want.persist {
			env.persist(n)
			env.printf("> %d persisted\n", n.ID)
		}
		if want.send {
			env.sendAll(n)
			env.printf("> %d sent\n", n.ID)
		}
		if want.apply {
			env.apply(n)
			env.printf("> %d applied\n", n.ID)
		}
		if adv {
			env.advance(n)
			env.printf("> %d advanced\n", n.ID)
		}
	}
	return nil
}

func (env *Env) cmdDeliver(ids []paxos.ID, flags map[string][]string) error {
	to := map[paxos.ID]bool{}
	for _, id := range ids {
		to[id] = true
	}
	from := map[paxos.ID]bool{}
	if v, ok := flags["from"]; ok {
		l, err := idList(v)
		if err != nil {
			return err
		}
		for _, id := range l {
			from[id] = true
		}
	}
	types := map[string]bool{}
	for _, v := range flags["type"] {
		types[strings.TrimSpace(v)] = true
	}
	_, drop := flags["drop"]
	match := func(m paxos.Message) bool {
		return (len(to) == 0 || to[m.To]) && (len(from) == 0 || from[m.From]) && (len(types) == 0 || types[m.Type.String()])
	}
	var keep, now []paxos.Message
	for _, m := range env.net {
		if match(m) {
			now = append(now, m)
		} else {
			keep = append(keep, m)
		}
	}
	env.net = keep
	for _, m := range now {
		if drop {
			env.printf("drop %s\n", m)
			continue
		}
		env.deliver(m)
	}
	if len(now) == 0 {
		env.printf("no messages\n")
	}
	return nil
}

// campaign ticks n until its election timer fires (it asks for votes).
func (env *Env) campaign(n *Node) error {
	nd, err := running(n)
	if err != nil {
		return err
	}
	limit := 20 * (n.Cfg.LeaseTicks + n.Cfg.ElectionTicks)
	for i := 1; i <= limit; i++ {
		nd.Tick()
		if st := nd.Status(); st.Role == paxos.Candidate || st.PreVote {
			env.printf("%d: election timer fired after %d ticks\n", n.ID, i)
			return nil
		}
	}
	return fmt.Errorf("replica %d did not campaign within %d ticks", n.ID, limit)
}

// elect makes n master: every running replica still inside the lease a
// restarted acceptor waits out is ticked past it (with the default
// timings it does not campaign meanwhile), then n alone is ticked, with
// the cell stabilized after each tick, until n is master. Its output is
// only the final status of n.
func (env *Env) elect(n *Node) error {
	nd, err := running(n)
	if err != nil {
		return err
	}
	for _, o := range env.up() {
		for o.Node.Status().Ticks < uint64(o.Cfg.LeaseTicks) {
			o.Node.Tick()
		}
	}
	saved := env.out
	env.out = &strings.Builder{}
	defer func() { env.out = saved }()
	limit := 20 * (n.Cfg.LeaseTicks + n.Cfg.ElectionTicks)
	for i := 0; i < limit; i++ {
		env.stabilize(env.nodes, false)
		if nd.Status().Master {
			saved.WriteString(DescribeStatus(nd.Status()) + "\n")
			return nil
		}
		nd.Tick()
	}
	return fmt.Errorf("replica %d did not become master within %d ticks", n.ID, limit)
}

// describeLog prints n's durable hard state, stored entries and applied
// commands.
func (env *Env) describeLog(n *Node) {
	hs, _ := n.Store.InitialState()
	snap, _ := n.Store.Snapshot()
	last, _ := n.Store.LastSlot()
	ents, _ := n.Store.Entries(snap.Slot+1, last+1)
	env.printf("%d: promised=%s chosen=%d", n.ID, hs.Promised, hs.Chosen)
	if hs.Rebuilding {
		env.printf(" rebuilding")
	}
	if !snap.IsEmpty() {
		env.printf(" snapshot=%d", snap.Slot)
	}
	env.printf("\n")
	for _, e := range ents {
		env.printf("  %s\n", DescribeEntry(e))
	}
	if n.Node != nil {
		env.printf("  applied %d: [%s]\n", n.App.Applied, strings.Join(n.App.Cmds, " "))
	}
}
