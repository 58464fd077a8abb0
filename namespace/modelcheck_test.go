package namespace

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

var (
	flagSeed = flag.Uint64("ns.seed", 0, "first seed of the namespace model-based test (0: fixed default)")
	flagSeqs = flag.Int("ns.seqs", 0, "number of random command sequences in the model-based test (0: default)")
)

// modelConfig keeps limits small so random sequences hit them.
var modelConfig = Config{MaxContents: 48, MaxPathLen: 24, MaxDepth: 4, ReadDirLimit: 3, DefaultLockDelay: 4 * time.Second, MaxLockDelay: 8 * time.Second}

// gen produces random commands over a small universe of tenants, callers,
// paths and sessions, biased towards commands that succeed.
type gen struct {
	r     *rand.Rand
	m     *model
	now   int64
	sids  []uint64 // every session ID handed out, ended ones included
	grown uint64
}

var genCallers = []Caller{
	{Principal: "admin"},
	{Tenant: "a", Principal: "alice"}, {Tenant: "a", Principal: "alice"}, {Tenant: "a", Principal: "alice"},
	{Tenant: "a", Principal: "bob"}, {Tenant: "a", Principal: "bob"},
	{Tenant: "b", Principal: "carol"}, {Tenant: "b", Principal: "carol"},
	{Tenant: "c", Principal: "eve"},
	{Tenant: "", Principal: "mallory"},
	{Tenant: "a", Principal: ""},
	{Tenant: "a", Principal: "bad name"},
}

var genNames = []string{"x", "y", "z", "acl"}

var genACLContents = []string{"alice\nbob", "bob\n", "*", "*\nb/carol", "b/*\n*", "# c\n alice \r\nbob", "a/alice\nb/carol\nbob", "", "/admin\n*", "carol", "alice"}

func (g *gen) caller() Caller {
	if g.r.IntN(100) < 90 {
		return genCallers[1+g.r.IntN(7)]
	}
	return genCallers[g.r.IntN(len(genCallers))]
}

func (g *gen) path() string {
	if g.r.IntN(40) == 0 {
		return []string{"a/x", "/a//x", "/a/..", "/", "", "/a/x/", "/a/\x01", "/a/y/z/x/y", "/-a/x", "/a/xxxxxxxxxxxxxxxxxxxxxxxx"}[g.r.IntN(10)]
	}
	t := []string{"a", "a", "a", "b", "c"}[g.r.IntN(5)]
	p := "/" + t
	for d := g.r.IntN(4); d > 0; d-- {
		p += "/" + genNames[g.r.IntN(len(genNames))]
	}
	return p
}

// existingPath prefers paths the model has, to drive operations that
// succeed.
func (g *gen) existingPath(c Caller) string { return g.existing(c, false) }

// existing picks a node the model has, mostly in c's tenant, and with
// files set mostly a file.
func (g *gen) existing(c Caller, files bool) string {
	if len(g.m.nodes) == 0 || g.r.IntN(6) == 0 {
		return g.path()
	}
	own := g.r.IntN(5) != 0
	files = files && g.r.IntN(5) != 0
	keys := make([]string, 0, len(g.m.nodes))
	for p, n := range g.m.nodes {
		if (!own || tenantOf(p) == c.Tenant) && (!files || !n.dir) {
			keys = append(keys, p)
		}
	}
	if len(keys) == 0 {
		return g.path()
	}
	sort.Strings(keys)
	return keys[g.r.IntN(len(keys))]
}

func (g *gen) sid(c Caller) uint64 {
	if len(g.sids) == 0 || g.r.IntN(15) == 0 {
		return uint64(g.r.IntN(3)) // 0, or a probably unknown ID
	}
	// Prefer a live session of c.
	if g.r.IntN(8) != 0 {
		var mine []uint64
		for _, id := range g.sids {
			if s := g.m.sessions[id]; s != nil && s.tenant == c.Tenant && s.principal == c.Principal {
				mine = append(mine, id)
			}
		}
		if len(mine) > 0 {
			return mine[g.r.IntN(len(mine))]
		}
	}
	return g.sids[g.r.IntN(len(g.sids))]
}

// liveSession returns a random live session and its owner.
func (g *gen) liveSession() (uint64, Caller, bool) {
	var live []uint64
	for _, id := range g.sids {
		if g.m.sessions[id] != nil {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		return 0, Caller{}, false
	}
	id := live[g.r.IntN(len(live))]
	s := g.m.sessions[id]
	return id, Caller{Tenant: s.tenant, Principal: s.principal}, true
}

// grant returns a grant of path for a random, mostly live, session, as
// the master attaches for the head waiter of the lock's queue.
func (g *gen) grant(path string) Grant {
	c := g.caller()
	sid := g.sid(c)
	if id, owner, ok := g.liveSession(); ok && g.r.IntN(4) != 0 {
		sid, c = id, owner
	}
	mode := []api.LockMode{api.LockExclusive, api.LockShared}[g.r.IntN(2)]
	if g.r.IntN(30) == 0 {
		mode = 7
	}
	return Grant{Caller: c, Session: sid, Path: path, Mode: mode}
}

// grantRun returns the grants a master attaches for the head of a lock's
// queue: one grant, or now and then a run of shared ones (the shared
// waiters at the head), perhaps with another grant behind them that no
// master would attach (an exclusive one, which must meet the lock held).
func (g *gen) grantRun(path string) []Grant {
	if g.r.IntN(2) == 0 {
		return []Grant{g.grant(path)}
	}
	var run []Grant
	for k := 2 + g.r.IntN(3); k > 0; k-- {
		gr := g.grant(path)
		if gr.Mode != 7 || g.r.IntN(3) != 0 {
			gr.Mode = api.LockShared
		}
		run = append(run, gr)
	}
	if g.r.IntN(5) == 0 {
		run = append(run, g.grant(path))
	}
	return run
}

// heldLock returns a random lock some live session holds.
func (g *gen) heldLock() (uint64, string, bool) {
	var paths []string
	for p, n := range g.m.nodes {
		if len(n.holders) > 0 {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return 0, "", false
	}
	sort.Strings(paths)
	p := paths[g.r.IntN(len(paths))]
	h := g.m.nodes[p].holders
	return h[g.r.IntN(len(h))], p, true
}

func (g *gen) contents() []byte {
	switch g.r.IntN(10) {
	case 0:
		return nil
	case 1:
		return bytes.Repeat([]byte{'q'}, 30+g.r.IntN(30)) // sometimes over MaxContents (48)
	case 2, 3:
		return []byte(genACLContents[g.r.IntN(len(genACLContents))])
	}
	return []byte(fmt.Sprintf("v%d", g.r.IntN(1000)))
}

func (g *gen) acl() api.ACLNames {
	pick := func() string {
		switch g.r.IntN(12) {
		case 0:
			return "/a/acl"
		case 1:
			return "/b/acl"
		case 2:
			return g.path()
		}
		return ""
	}
	return api.ACLNames{Read: pick(), Write: pick(), ChangeACL: pick()}
}

func (g *gen) quota() api.TenantQuota {
	q := api.TenantQuota{}
	if g.r.IntN(3) == 0 {
		q.MaxNodes = uint64(3 + g.r.IntN(10))
	}
	if g.r.IntN(3) == 0 {
		q.MaxBytes = uint64(20 + g.r.IntN(100))
	}
	if g.r.IntN(3) == 0 {
		q.MaxSessions = uint64(1 + g.r.IntN(4))
	}
	if g.r.IntN(3) == 0 {
		q.MaxLocks = uint64(1 + g.r.IntN(4))
	}
	return q
}

func (g *gen) command() Command {
	switch g.r.IntN(20) {
	case 0:
		g.now += int64(g.r.IntN(12)) * int64(time.Second)
	case 1:
		// A stamp below the clock: a master whose wall clock is behind,
		// or commands proposed in another order than stamped.
		g.now -= int64(g.r.IntN(5)) * int64(time.Second)
	default:
		g.now += int64(g.r.IntN(1500)) * int64(time.Millisecond)
	}
	c := g.caller()
	cmd := Command{Time: g.now, Caller: c}
	switch k := g.r.IntN(100); {
	case k < 4:
		cmd.Caller = admin
		if g.r.IntN(4) == 0 {
			cmd.Caller = c
		}
		name := []string{"a", "b", "c", "a", "b", ".bad", ""}[g.r.IntN(7)]
		if g.r.IntN(2) == 0 {
			cmd.Op = &CreateTenant{Name: name, Quota: g.quota(), ACL: []api.ACLNames{{}, {}, g.acl()}[g.r.IntN(3)]}
		} else {
			cmd.Op = &UpdateTenant{Name: name, Quota: g.quota()}
		}
	case k < 12:
		cmd.Op = &CreateSession{}
	case k < 14:
		sid := g.sid(c)
		if id, owner, ok := g.liveSession(); ok && g.r.IntN(5) != 0 {
			sid, cmd.Caller = id, owner
		}
		op := &CloseSession{Session: sid}
		if g.r.IntN(2) == 0 {
			for _, p := range g.m.sortedPaths(func(_ string, n *mNode) bool { return slices.Contains(n.holders, sid) }) {
				op.Then = append(op.Then, g.grantRun(p)...)
			}
		}
		cmd.Op = op
	case k < 17:
		sid := g.sid(c)
		if id, _, ok := g.liveSession(); ok && g.r.IntN(5) != 0 {
			sid = id
		}
		if g.r.IntN(8) != 0 {
			cmd.Caller = admin
		}
		op := &ExpireSession{Session: sid}
		if g.r.IntN(2) == 0 {
			// Hand the session's locks (and now and then another path)
			// over to waiters, as the master does.
			for _, p := range g.m.sortedPaths(func(_ string, n *mNode) bool { return slices.Contains(n.holders, sid) }) {
				if g.r.IntN(4) != 0 {
					op.Then = append(op.Then, g.grantRun(p)...)
				}
			}
			if g.r.IntN(6) == 0 {
				op.Then = append(op.Then, g.grant(g.existing(g.caller(), true)))
			}
		}
		cmd.Op = op
	case k < 42:
		if id, owner, ok := g.liveSession(); ok && g.r.IntN(3) != 0 {
			c, cmd.Caller = owner, owner
			_ = id
		}
		op := &OpenNode{Path: g.path(), Create: g.r.IntN(5) != 0, Exclusive: g.r.IntN(3) == 0}
		if g.r.IntN(3) == 0 {
			op.Path = g.existingPath(c)
		}
		if g.r.IntN(2) == 0 {
			op.Session = g.sid(c)
		}
		switch g.r.IntN(5) {
		case 0:
			op.Dir = true
		case 1, 2:
			op.Ephemeral = true
			op.Session = g.sid(c)
		}
		if g.r.IntN(2) == 0 && (!op.Dir || g.r.IntN(10) == 0) {
			op.Contents = g.contents()
		}
		if g.r.IntN(4) == 0 {
			a := g.acl()
			op.ACL = &a
		}
		op.LockDelay = []int64{0, 0, 0, 0, 0, NoLockDelay, int64(2 * time.Second), int64(6 * time.Second), int64(9 * time.Second), -5}[g.r.IntN(10)]
		cmd.Op = op
	case k < 55:
		cmd.Op = &SetContents{Path: g.existing(c, true), Contents: g.contents(), Session: []uint64{0, g.sid(c)}[g.r.IntN(2)],
			IfGeneration: []uint64{0, 0, 0, 0, 1, 2, 3}[g.r.IntN(7)]}
	case k < 62:
		cmd.Op = &Delete{Path: g.existing(c, true), IfInstance: []uint64{0, 0, 0, uint64(g.r.IntN(10))}[g.r.IntN(4)]}
	case k < 64:
		cmd.Op = &SetACL{Path: g.existingPath(c), ACL: g.acl(), IfGeneration: []uint64{0, 0, 1, 2}[g.r.IntN(4)]}
	case k < 84:
		mode := []api.LockMode{api.LockExclusive, api.LockShared}[g.r.IntN(2)]
		if g.r.IntN(30) == 0 {
			mode = []api.LockMode{0, 3, 255}[g.r.IntN(3)]
		}
		sid := g.sid(c)
		if id, owner, ok := g.liveSession(); ok && g.r.IntN(7) != 0 {
			sid, c, cmd.Caller = id, owner, owner
		}
		cmd.Op = &Acquire{Session: sid, Path: g.existing(c, true), Mode: mode}
	default:
		p := g.existingPath(c)
		sid := g.sid(c)
		if id, path, ok := g.heldLock(); ok && g.r.IntN(5) != 0 {
			s := g.m.sessions[id]
			sid, p, cmd.Caller = id, path, Caller{Tenant: s.tenant, Principal: s.principal}
		}
		var gen uint64
		if n := g.m.nodes[p]; n != nil && g.r.IntN(4) != 0 {
			gen = n.lockGen
		} else {
			gen = uint64(g.r.IntN(5))
		}
		op := &Release{Session: sid, Path: p, Generation: gen}
		switch g.r.IntN(6) {
		case 0, 1, 2:
			op.Then = g.grantRun(p)
		case 3:
			if g.r.IntN(4) == 0 {
				op.Then = []Grant{g.grant(g.existing(g.caller(), true))}
			} else if g.r.IntN(4) == 0 {
				op.Then = append(g.grantRun(p), g.grant(g.existing(g.caller(), true)))
			}
		}
		cmd.Op = op
	}
	if g.r.IntN(200) == 0 {
		cmd.Time = -1
	}
	return cmd
}

// sameResult compares a store result with the model's: codes (and the
// LockDelay end, and quota messages) for errors, everything for successes.
func sameResult(got, want Result) string {
	if (got.Err == nil) != (want.Err == nil) {
		return fmt.Sprintf("store err %v, model err %v", got.Err, want.Err)
	}
	if got.Err != nil {
		if got.Err.Code != want.Err.Code || got.Err.Until != want.Err.Until {
			return fmt.Sprintf("store err %v (until %d), model code %v (until %d)", got.Err, got.Err.Until, want.Err.Code, want.Err.Until)
		}
		if want.Err.Code == api.ResourceExhausted && got.Err.Msg != want.Err.Msg {
			return fmt.Sprintf("quota message %q, want %q", got.Err.Msg, want.Err.Msg)
		}
		if got.Reply != nil || got.Changes != nil || got.Freed != nil || got.Handed != nil {
			return "failed command reported effects"
		}
		return ""
	}
	if len(got.Handed) != len(want.Handed) {
		return fmt.Sprintf("store handed %d grants, model %d", len(got.Handed), len(want.Handed))
	}
	for i, h := range got.Handed {
		w := want.Handed[i]
		if h.Tried != w.Tried || !reflect.DeepEqual(h.Reply, w.Reply) || (h.Err == nil) != (w.Err == nil) ||
			h.Err != nil && (h.Err.Code != w.Err.Code || h.Err.Until != w.Err.Until) {
			return fmt.Sprintf("grant %d: store %+v (err %v), model %+v (err %v)", i, h, h.Err, w, w.Err)
		}
	}
	got.Handed, want.Handed = nil, nil
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("store %s\nmodel %s", dumpResult(got), dumpResult(want))
	}
	return ""
}

func dumpResult(r Result) string {
	return fmt.Sprintf("reply=%+v changes=%+v freed=%+v handed=%+v", r.Reply, r.Changes, r.Freed, r.Handed)
}

func describe(c Command) string {
	return fmt.Sprintf("t=%d %+v %s%+v", c.Time, c.Caller, c.Op.Kind(), c.Op)
}

// modelHanded counts the grants (Release.Then, ExpireSession.Then) the
// model-based test saw tried and succeed, and the runs (two or more grants
// of one lock that succeeded in one command), so that TestModel can insist
// it judged hand-overs, and hand-overs to runs of shared waiters, at all.
var modelHanded struct{ tried, granted, runs int }

// checkRuns checks the grants one command handed over, whatever the model
// says: of each lock, the first grant that succeeded took it at a
// generation greater than any before the command (genBefore, the last one
// given), and any others that succeeded are shared grants that joined it at
// that same generation, behind a shared first one.
func checkRuns(res Result, genBefore uint64) string {
	first := map[string]*Granted{}
	count := map[string]int{}
	for i, h := range res.Handed {
		g := h.Reply
		if g == nil {
			continue
		}
		count[g.Path]++
		f, ok := first[g.Path]
		switch {
		case !ok:
			if g.Generation <= genBefore {
				return fmt.Sprintf("grant %d took %s at generation %d, not above %d", i, g.Path, g.Generation, genBefore)
			}
			first[g.Path] = g
		case g.Generation != f.Generation:
			return fmt.Sprintf("grant %d of %s has generation %d; the run's first has %d", i, g.Path, g.Generation, f.Generation)
		case g.Mode != api.LockShared || f.Mode != api.LockShared:
			return fmt.Sprintf("grant %d of %s in mode %v granted beside one in mode %v", i, g.Path, g.Mode, f.Mode)
		}
	}
	for _, n := range count {
		if n > 1 {
			modelHanded.runs++
		}
	}
	return ""
}

// runModelSeq runs one random sequence of slots against a fresh store and a
// fresh model and compares everything. It returns the store for further
// checks.
func runModelSeq(t *testing.T, seed uint64, slots int) *env {
	e := newEnv(t, modelConfig)
	m := newModel(modelConfig)
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), m: m, now: e.now}
	var history []string
	fail := func(format string, args ...any) {
		t.Helper()
		start := max(0, len(history)-15)
		t.Fatalf("seed %d (rerun: -run TestModel -ns.seed=%d -ns.seqs=1): %s\nlast commands:\n%s",
			seed, seed, fmt.Sprintf(format, args...), joinLines(history[start:]))
	}
	// Most sequences start with the tenants in place.
	if g.r.IntN(8) != 0 {
		for _, name := range []string{"a", "b"} {
			c := Command{Time: g.now, Caller: admin, Op: &CreateTenant{Name: name, Quota: []api.TenantQuota{{}, {}, g.quota()}[g.r.IntN(3)]}}
			m.apply(c)
			e.applySlot(c)
		}
	}
	for i := 0; i < slots; i++ {
		n := g.r.IntN(5) // 0: a no-op slot
		cmds := make([]Command, n)
		raws := make([][]byte, n)
		for j := range cmds {
			cmds[j] = g.command()
			raws[j] = encode(t, cmds[j])
			if g.r.IntN(150) == 0 {
				raws[j] = raws[j][:len(raws[j])/2] // garbage
			}
		}
		e.slot++
		got, err := e.s.ApplySlot(e.slot, raws)
		if err != nil {
			fail("slot %d: %v", e.slot, err)
		}
		for j, c := range cmds {
			history = append(history, describe(c))
			var want Result
			genBefore := m.lastGen
			if dec, err := DecodeCommand(raws[j]); err != nil {
				want = Result{Err: mErr(api.InvalidArgument)}
			} else {
				want = m.apply(dec)
			}
			if r, ok := want.Reply.(*SessionCreated); ok {
				g.sids = append(g.sids, r.Session)
			}
			if d := sameResult(got[j], want); d != "" {
				fail("slot %d command %d (%s): %s", e.slot, j, describe(c), d)
			}
			for _, h := range got[j].Handed {
				if h.Tried {
					modelHanded.tried++
				}
				if h.Reply != nil {
					modelHanded.granted++
				}
			}
			if d := checkRuns(got[j], genBefore); d != "" {
				fail("slot %d command %d (%s): %s", e.slot, j, describe(c), d)
			}
		}
		if i%25 == 24 || i == slots-1 {
			if d := compareState(e.s, m); d != "" {
				fail("after slot %d: state differs: %s", e.slot, d)
			}
		}
	}
	if err := e.s.VerifyChecksum(); err != nil {
		fail("%v", err)
	}
	if d := checkIndexes(e.s); d != "" {
		fail("indexes: %s", d)
	}
	if d := compareReads(e.s, m, g); d != "" {
		fail("reads: %s", d)
	}
	return e
}

func joinLines(ls []string) string {
	var b bytes.Buffer
	for _, l := range ls {
		b.WriteString("  " + l + "\n")
	}
	return b.String()
}

// storeDump is the logical state read straight from the store's records.
type storeDump struct {
	nodes    map[string]api.NodeStat
	data     map[string]string
	holders  map[string][]uint64
	sessions map[uint64]api.SessionInfo
	tenants  map[string]api.TenantInfo
	ctr      counters
}

func dumpStore(s *Store) (storeDump, error) {
	d := storeDump{nodes: map[string]api.NodeStat{}, data: map[string]string{}, holders: map[string][]uint64{},
		sessions: map[uint64]api.SessionInfo{}, tenants: map[string]api.TenantInfo{}}
	v := s.view(s.db)
	err := v.scan(keyStart, nil, func(k, val []byte) (bool, error) {
		switch k[1] {
		case tagNode:
			p, _ := pathFromNodeKey(k)
			var n nodeRec
			if err := decodeRec(k, val, &n); err != nil {
				return false, err
			}
			d.nodes[string(p)] = n.stat()
			if len(n.Holders) > 0 {
				d.holders[string(p)] = n.Holders
			}
		case tagData:
			d.data[string(k[2:])] = string(val)
		case tagSession:
			var r sessionRec
			if err := decodeRec(k, val, &r); err != nil {
				return false, err
			}
			id := binary.BigEndian.Uint64(k[2:])
			d.sessions[id] = api.SessionInfo{ID: id, Tenant: r.Tenant, Principal: r.Principal, Created: r.Created}
		case tagTenant:
			var r tenantRec
			if err := decodeRec(k, val, &r); err != nil {
				return false, err
			}
			d.tenants[string(k[2:])] = r.info(string(k[2:]))
		}
		return true, nil
	})
	if err != nil {
		return d, err
	}
	d.ctr, err = v.counters()
	return d, err
}

func compareState(s *Store, m *model) string {
	d, err := dumpStore(s)
	if err != nil {
		return err.Error()
	}
	if len(d.nodes) != len(m.nodes) {
		return fmt.Sprintf("store has %d nodes, model %d", len(d.nodes), len(m.nodes))
	}
	for p, n := range m.nodes {
		st, ok := d.nodes[p]
		if !ok {
			return "store lacks node " + p
		}
		if st != n.stat() {
			return fmt.Sprintf("node %s: store %+v, model %+v", p, st, n.stat())
		}
		if d.data[p] != string(n.contents) {
			return fmt.Sprintf("node %s contents %q, model %q", p, d.data[p], n.contents)
		}
		if !slices.Equal(d.holders[p], n.holders) {
			return fmt.Sprintf("node %s holders %v, model %v", p, d.holders[p], n.holders)
		}
	}
	if len(d.data) > len(m.nodes) {
		return "store has orphan contents"
	}
	if len(d.sessions) != len(m.sessions) {
		return fmt.Sprintf("store has %d sessions, model %d", len(d.sessions), len(m.sessions))
	}
	for id, ms := range m.sessions {
		if d.sessions[id] != (api.SessionInfo{ID: id, Tenant: ms.tenant, Principal: ms.principal, Created: ms.created}) {
			return fmt.Sprintf("session %d: %+v vs %+v", id, d.sessions[id], ms)
		}
	}
	if len(d.tenants) != len(m.tenants) {
		return "tenant count differs"
	}
	for name, mt := range m.tenants {
		if d.tenants[name] != (api.TenantInfo{Name: name, Quota: mt.quota, Usage: mt.usage, Created: mt.created}) {
			return fmt.Sprintf("tenant %s: %+v vs %+v", name, d.tenants[name], *mt)
		}
	}
	if want := (counters{Session: m.lastSess, Instance: m.lastInst, LockGen: m.lastGen, Clock: m.clock, DelayEnd: m.delayEnd}); d.ctr != want {
		return fmt.Sprintf("counters %+v vs %+v", d.ctr, want)
	}
	return ""
}

// checkIndexes verifies that every index key agrees with the records.
func checkIndexes(s *Store) string {
	v := s.view(s.db)
	nodes := map[Path]*nodeRec{}
	var bad string
	idx := map[string]bool{}
	_ = v.scan(keyStart, nil, func(k, val []byte) (bool, error) {
		switch k[1] {
		case tagNode:
			p, _ := pathFromNodeKey(k)
			var n nodeRec
			_ = decodeRec(k, val, &n)
			nodes[p] = &n
		case tagLocked, tagHeld, tagEphemeral, tagTenantSess:
			idx[string(k)] = true
		}
		return true, nil
	})
	want := map[string]bool{}
	for p, n := range nodes {
		if len(n.Holders) > 0 {
			want[string(lockedKey(p))] = true
		}
		for _, h := range n.Holders {
			want[string(heldKey(h, p))] = true
		}
		if n.Owner != 0 {
			want[string(ephemeralKey(n.Owner, p))] = true
		}
		if parent, ok := p.Parent(); ok && (nodes[parent] == nil || !nodes[parent].Dir) {
			bad = fmt.Sprintf("node %s without a parent directory", p)
		}
	}
	_ = v.scan(tagKey(tagSession, 0), nil, func(k, val []byte) (bool, error) {
		var r sessionRec
		_ = decodeRec(k, val, &r)
		want[string(tenantSessionKey(r.Tenant, binary.BigEndian.Uint64(k[2:])))] = true
		return true, nil
	})
	if !reflect.DeepEqual(idx, want) {
		return fmt.Sprintf("index keys %d, want %d", len(idx), len(want))
	}
	return bad
}

// compareReads runs the read API for a spread of callers and paths against
// the model's answers.
func compareReads(s *Store, m *model, g *gen) string {
	callers := append([]Caller{admin}, genCallers...)
	paths := []string{"/a", "/b", "/c", "/a/x", "/a/acl", "/b/acl", "/a/x/y", "/b/y/z", "bad"}
	for p := range m.nodes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, c := range callers {
		for _, p := range paths {
			// Stat
			st, err := s.Stat(c, p)
			wantSt, wantErr := m.stat(c, p)
			if api.CodeOf(err) != api.CodeOf(errOr(wantErr, nil)) || (err == nil && st != wantSt) {
				return fmt.Sprintf("Stat(%+v, %s) = %+v, %v; model %+v, %v", c, p, st, err, wantSt, wantErr)
			}
			// Allowed
			for _, perm := range []api.Perm{api.PermRead, api.PermWrite, api.PermChangeACL} {
				ok, err := s.Allowed(c, p, perm)
				wantOK, wantErr := m.allowedRead(c, p, perm)
				if api.CodeOf(err) != api.CodeOf(errOr(wantErr, nil)) || ok != wantOK {
					return fmt.Sprintf("Allowed(%+v, %s, %v) = %v, %v; model %v, %v", c, p, perm, ok, err, wantOK, wantErr)
				}
			}
			// ReadDir, page by page.
			var names []string
			after := ""
			var rerr error
			for i := 0; i < 100; i++ {
				page, err := s.ReadDir(c, p, after, 2)
				if err != nil {
					rerr = err
					break
				}
				for _, en := range page.Entries {
					names = append(names, en.Name)
					if en.Stat != m.nodes[p+"/"+en.Name].stat() {
						return "ReadDir stat differs for " + p + "/" + en.Name
					}
				}
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			wantNames, wantErr := m.readDir(c, p)
			if api.CodeOf(rerr) != api.CodeOf(errOr(wantErr, nil)) || !slices.Equal(names, wantNames) {
				return fmt.Sprintf("ReadDir(%+v, %s) = %v, %v; model %v, %v", c, p, names, rerr, wantNames, wantErr)
			}
			// CheckSequencer for the current grant and a stale one.
			if n := m.nodes[p]; n != nil && n.lockGen > 0 {
				for _, gen := range []uint64{n.lockGen, n.lockGen - 1} {
					seq := sequencer.Sequencer{Cell: "c", Tenant: tenantOf(p), Path: p, Mode: sequencer.Mode(max(n.mode, 1)), Generation: gen, Instance: n.instance}
					held, err := s.CheckSequencer(c, seq)
					wantHeld := len(n.holders) > 0 && gen == n.lockGen && sequencer.Mode(n.mode) == seq.Mode
					_, wantErr := m.stat(c, p)
					if api.CodeOf(err) != api.CodeOf(errOr(wantErr, nil)) || (err == nil && held != wantHeld) {
						return fmt.Sprintf("CheckSequencer(%+v, %+v) = %v, %v; want %v, %v", c, seq, held, err, wantHeld, wantErr)
					}
				}
			}
		}
		for _, tn := range []string{"a", "b", "c", ""} {
			ss, err := s.ListSessions(c, tn)
			wantSS, wantErr := m.listSessions(c, tn)
			if api.CodeOf(err) != api.CodeOf(errOr(wantErr, nil)) || !reflect.DeepEqual(ss, wantSS) {
				return fmt.Sprintf("ListSessions(%+v, %q) = %v, %v; model %v, %v", c, tn, ss, err, wantSS, wantErr)
			}
			ls, err := s.ListLocks(c, tn)
			wantLS, wantErr := m.listLocks(c, tn)
			if api.CodeOf(err) != api.CodeOf(errOr(wantErr, nil)) || !reflect.DeepEqual(ls, wantLS) {
				return fmt.Sprintf("ListLocks(%+v, %q) = %v, %v; model %v, %v", c, tn, ls, err, wantLS, wantErr)
			}
		}
	}
	_ = g
	return ""
}

func (m *model) lookup(c Caller, path string, perm api.Perm) (string, *mNode, *api.Error) {
	if e := m.tenantCaller(c); e != nil {
		return "", nil, e
	}
	p, e := m.parse(path)
	if e != nil {
		return "", nil, e
	}
	n := m.nodes[p]
	if n == nil {
		return "", nil, m.missing(c, p)
	}
	if perm != 0 && !m.allowed(c, p, n, perm) {
		return "", nil, mErr(api.PermissionDenied)
	}
	return p, n, nil
}

func (m *model) stat(c Caller, path string) (api.NodeStat, *api.Error) {
	_, n, e := m.lookup(c, path, api.PermRead)
	if e != nil {
		return api.NodeStat{}, e
	}
	return n.stat(), nil
}

func (m *model) allowedRead(c Caller, path string, perm api.Perm) (bool, *api.Error) {
	p, n, e := m.lookup(c, path, 0)
	if e != nil {
		return false, e
	}
	return m.allowed(c, p, n, perm), nil
}

func (m *model) readDir(c Caller, path string) ([]string, *api.Error) {
	p, n, e := m.lookup(c, path, api.PermRead)
	if e != nil {
		return nil, e
	}
	if !n.dir {
		return nil, mErr(api.FailedPrecondition)
	}
	var names []string
	for q := range m.nodes {
		if pp, ok := parentOf(q); ok && pp == p {
			names = append(names, baseOf(q))
		}
	}
	sort.Strings(names)
	return names, nil
}

func (m *model) tenantReader(c Caller, tenant string) *api.Error {
	admin, e := m.checkCaller(c)
	if e != nil {
		return e
	}
	if admin && tenant == "" {
		return nil
	}
	if !admin && c.Tenant != tenant {
		return mErr(api.PermissionDenied)
	}
	if ValidTenantName(tenant) != nil {
		return mErr(api.InvalidArgument)
	}
	if m.tenants[tenant] == nil {
		return mErr(api.NotFound)
	}
	return nil
}

func (m *model) listSessions(c Caller, tenant string) ([]api.SessionInfo, *api.Error) {
	if e := m.tenantReader(c, tenant); e != nil {
		return nil, e
	}
	var out []api.SessionInfo
	for id, s := range m.sessions {
		if tenant == "" || s.tenant == tenant {
			out = append(out, api.SessionInfo{ID: id, Tenant: s.tenant, Principal: s.principal, Created: s.created})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (m *model) listLocks(c Caller, tenant string) ([]api.LockInfo, *api.Error) {
	if tenant == "" {
		return nil, mErr(api.InvalidArgument)
	}
	if e := m.tenantReader(c, tenant); e != nil {
		return nil, e
	}
	var out []api.LockInfo
	for _, p := range m.sortedPaths(func(p string, n *mNode) bool { return tenantOf(p) == tenant && len(n.holders) > 0 }) {
		n := m.nodes[p]
		out = append(out, api.LockInfo{Path: p, Instance: n.instance, Mode: n.mode, Generation: n.lockGen, Holders: slices.Clone(n.holders)})
	}
	return out, nil
}

// TestModel applies random command sequences to the store and to the
// reference model and demands identical results, states and reads.
func TestModel(t *testing.T) {
	seqs := 1500
	if testing.Short() {
		seqs = 200
	}
	if *flagSeqs > 0 {
		seqs = *flagSeqs
	}
	seed := *flagSeed
	if seed == 0 {
		seed = 1
	}
	modelHanded.tried, modelHanded.granted, modelHanded.runs = 0, 0, 0
	for i := 0; i < seqs; i++ {
		runModelSeq(t, seed+uint64(i), 30).close()
	}
	// Floors: the random sequences handed locks over, both ways.
	t.Logf("grants tried %d, granted %d; runs of shared grants %d", modelHanded.tried, modelHanded.granted, modelHanded.runs)
	if modelHanded.tried < seqs/10 || modelHanded.granted < seqs/20 || modelHanded.tried == modelHanded.granted {
		t.Errorf("only %d grants tried and %d granted in %d sequences", modelHanded.tried, modelHanded.granted, seqs)
	}
	if modelHanded.runs < seqs/20 {
		t.Errorf("only %d runs of shared grants handed over in %d sequences", modelHanded.runs, seqs)
	}
}
