package namespace

// A plain in-memory reference model of the namespace: maps and slices, no
// Pebble, no keys, no indexes, no incremental checksums. The model-based test
// (modelcheck_test.go) applies random command sequences to both and demands
// equal results and equal final states.
//
// The model shares only the pure syntax checks with the store (ParsePath,
// ValidTenantName, ValidPrincipal — fuzzed and property-tested on their
// own); every semantic rule is written here a second time, from the
// package documentation.

import (
	"hash/crc64"
	"slices"
	"sort"
	"strings"

	"github.com/lockcell/lockcell/api"
)

type mNode struct {
	instance   uint64
	dir        bool
	owner      uint64
	contentGen uint64
	lockGen    uint64
	aclGen     uint64
	contents   []byte
	created    int64
	modified   int64
	acl        api.ACLNames
	lockDelay  int64
	mode       api.LockMode
	holders    []uint64 // sorted
	delayUntil int64
}

func (n *mNode) stat() api.NodeStat {
	return api.NodeStat{
		Instance: n.instance, ContentGeneration: n.contentGen, LockGeneration: n.lockGen,
		ACLGeneration: n.aclGen, Checksum: crc64.Checksum(n.contents, crc64.MakeTable(crc64.ECMA)),
		Created: n.created, Modified: n.modified, EphemeralOwner: n.owner, IsDir: n.dir,
		Size: uint64(len(n.contents)), ACL: n.acl, LockDelay: n.lockDelay, LockMode: n.mode,
		LockHolders: uint32(len(n.holders)), LockDelayUntil: n.delayUntil,
	}
}

type mSession struct {
	tenant, principal string
	created           int64
}

type mTenant struct {
	quota   api.TenantQuota
	usage   api.TenantUsage
	created int64
}

type model struct {
	cfg      Config
	nodes    map[string]*mNode
	sessions map[uint64]*mSession
	tenants  map[string]*mTenant
	lastSess uint64
	lastInst uint64
	lastGen  uint64
	// clock is the latest command time applied; delayEnd the latest
	// lock-delay end set.
	clock    int64
	delayEnd int64
}

func newModel(cfg Config) *model {
	return &model{cfg: cfg.populate(), nodes: map[string]*mNode{}, sessions: map[uint64]*mSession{}, tenants: map[string]*mTenant{}}
}

func mErr(code api.Code) *api.Error { return &api.Error{Code: code} }

func tenantOf(p string) string {
	s := p[1:]
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

func parentOf(p string) (string, bool) {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "", false
	}
	return p[:i], true
}

func baseOf(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// checkCaller: (admin, error).
func (m *model) checkCaller(c Caller) (bool, *api.Error) {
	if ValidPrincipal(c.Principal) != nil {
		return false, mErr(api.Unauthenticated)
	}
	if c.Tenant == "" {
		if c.Principal == m.cfg.AdminPrincipal {
			return true, nil
		}
		return false, mErr(api.Unauthenticated)
	}
	if m.tenants[c.Tenant] == nil {
		return false, mErr(api.Unauthenticated)
	}
	return false, nil
}

func (m *model) tenantCaller(c Caller) *api.Error {
	admin, e := m.checkCaller(c)
	if e != nil {
		return e
	}
	if admin {
		return mErr(api.PermissionDenied)
	}
	return nil
}

func (m *model) parse(s string) (string, *api.Error) {
	if len(s) > m.cfg.MaxPathLen {
		return "", mErr(api.InvalidArgument)
	}
	p, err := ParsePath(s)
	if err != nil {
		return "", mErr(api.InvalidArgument)
	}
	if strings.Count(string(p), "/") > m.cfg.MaxDepth {
		return "", mErr(api.InvalidArgument)
	}
	return string(p), nil
}

func (m *model) allowed(c Caller, p string, n *mNode, perm api.Perm) bool {
	var name string
	switch perm {
	case api.PermRead:
		name = n.acl.Read
	case api.PermWrite:
		name = n.acl.Write
	case api.PermChangeACL:
		name = n.acl.ChangeACL
	}
	t := tenantOf(p)
	if name == "" {
		return c.Tenant == t
	}
	if _, err := ParsePath(name); err != nil || tenantOf(name) != t {
		return false
	}
	f := m.nodes[name]
	if f == nil || f.dir || c.Tenant == "" {
		return false
	}
	for _, line := range strings.Split(string(f.contents), "\n") {
		line = strings.Trim(line, " \t\r")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lt, ln := t, line
		if before, after, ok := strings.Cut(line, "/"); ok {
			if before == "" {
				continue
			}
			lt, ln = before, after
		}
		if lt == c.Tenant && (ln == "*" || ln == c.Principal) {
			return true
		}
	}
	return false
}

func (m *model) missing(c Caller, p string) *api.Error {
	for q, ok := parentOf(p); ok; q, ok = parentOf(q) {
		if n := m.nodes[q]; n != nil {
			if m.allowed(c, q, n, api.PermRead) {
				return mErr(api.NotFound)
			}
			break
		}
	}
	return mErr(api.PermissionDenied)
}

func (m *model) validACL(a api.ACLNames, tenant string) *api.Error {
	for _, name := range []string{a.Read, a.Write, a.ChangeACL} {
		if name == "" {
			continue
		}
		p, e := m.parse(name)
		if e != nil || tenantOf(p) != tenant {
			return mErr(api.InvalidArgument)
		}
	}
	return nil
}

func (m *model) session(sid uint64, required bool, c Caller) *api.Error {
	if sid == 0 {
		if required {
			return mErr(api.InvalidArgument)
		}
		return nil
	}
	s := m.sessions[sid]
	if s == nil {
		return mErr(api.SessionExpired)
	}
	if s.tenant != c.Tenant || s.principal != c.Principal {
		return mErr(api.PermissionDenied)
	}
	return nil
}

func quotaOK(limit, used, add uint64) bool { return limit == 0 || add == 0 || used+add <= limit }

func quotaErr(tenant, q string, limit uint64) *api.Error { return api.QuotaError(tenant, q, limit) }

// apply applies one decoded command to the model.
func (m *model) apply(cmd Command) Result {
	if cmd.Time < 0 {
		return Result{Err: mErr(api.InvalidArgument)}
	}
	// Time never goes back: a command stamped earlier than the clock runs at
	// the clock; one that succeeds moves the clock to its time.
	cmd.Time = max(m.clock, cmd.Time)
	var res Result
	var reply Reply
	var e *api.Error
	switch op := cmd.Op.(type) {
	case *CreateSession:
		reply, e = m.createSession(cmd)
	case *CloseSession:
		reply, e = m.endSession(cmd, &res, op.Session, false)
	case *ExpireSession:
		reply, e = m.endSession(cmd, &res, op.Session, true)
	case *OpenNode:
		reply, e = m.open(cmd, &res, op)
	case *SetContents:
		reply, e = m.setContents(cmd, &res, op)
	case *Delete:
		reply, e = m.delete(cmd, &res, op)
	case *SetACL:
		reply, e = m.setACL(cmd, &res, op)
	case *Acquire:
		reply, e = m.acquire(cmd, &res, op)
	case *Release:
		reply, e = m.release(cmd, &res, op)
	case *CreateTenant:
		reply, e = m.createTenant(cmd, &res, op)
	case *UpdateTenant:
		reply, e = m.updateTenant(cmd, op)
	}
	if e != nil {
		return Result{Err: e}
	}
	m.clock = cmd.Time
	res.Reply = reply
	var grants []Grant
	switch op := cmd.Op.(type) {
	case *Release:
		grants = op.Then
	case *CloseSession:
		grants = op.Then
	case *ExpireSession:
		grants = op.Then
	}
	if len(grants) > 0 {
		// Each grant whose lock this command's own operation freed (and did
		// not delete) is the Acquire its caller would have sent, at this
		// command's time, in order; a lock that one of them takes is left
		// out of Freed.
		res.Handed = make([]Handed, len(grants))
		freedPaths := map[string]bool{}
		for _, f := range res.Freed {
			if !f.NodeDeleted {
				freedPaths[f.Path] = true
			}
		}
		for i, g := range grants {
			if !freedPaths[g.Path] {
				continue
			}
			sub := m.apply(Command{Time: cmd.Time, Caller: g.Caller, Op: &Acquire{Session: g.Session, Path: g.Path, Mode: g.Mode}})
			res.Handed[i] = Handed{Tried: true, Err: sub.Err}
			if sub.Err == nil {
				res.Handed[i].Reply = sub.Reply.(*Granted)
				res.Changes = append(res.Changes, sub.Changes...)
				if j := slices.IndexFunc(res.Freed, func(f FreedLock) bool { return f.Path == g.Path && !f.NodeDeleted }); j >= 0 {
					res.Freed = slices.Delete(res.Freed, j, j+1)
				}
			}
		}
	}
	return res
}

func (m *model) createSession(cmd Command) (Reply, *api.Error) {
	if e := m.tenantCaller(cmd.Caller); e != nil {
		return nil, e
	}
	t := m.tenants[cmd.Caller.Tenant]
	if !quotaOK(t.quota.MaxSessions, t.usage.Sessions, 1) {
		return nil, quotaErr(cmd.Caller.Tenant, "max_sessions", t.quota.MaxSessions)
	}
	m.lastSess++
	m.sessions[m.lastSess] = &mSession{tenant: cmd.Caller.Tenant, principal: cmd.Caller.Principal, created: cmd.Time}
	t.usage.Sessions++
	return &SessionCreated{Session: m.lastSess, Owner: cmd.Caller}, nil
}

func (m *model) sortedPaths(f func(p string, n *mNode) bool) []string {
	var out []string
	for p, n := range m.nodes {
		if f(p, n) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (m *model) endSession(cmd Command, res *Result, sid uint64, expired bool) (Reply, *api.Error) {
	admin, e := m.checkCaller(cmd.Caller)
	if e != nil {
		return nil, e
	}
	if expired && !admin {
		return nil, mErr(api.PermissionDenied)
	}
	if sid == 0 {
		return nil, mErr(api.InvalidArgument)
	}
	s := m.sessions[sid]
	if s == nil {
		return nil, mErr(api.SessionExpired)
	}
	if !admin && (s.tenant != cmd.Caller.Tenant || s.principal != cmd.Caller.Principal) {
		return nil, mErr(api.PermissionDenied)
	}
	reply := &SessionEnded{Session: sid}
	for _, p := range m.sortedPaths(func(_ string, n *mNode) bool { return slices.Contains(n.holders, sid) }) {
		n := m.nodes[p]
		reply.Released = append(reply.Released, api.LockInfo{Path: p, Instance: n.instance, Mode: n.mode, Generation: n.lockGen})
		n.holders = slices.DeleteFunc(n.holders, func(h uint64) bool { return h == sid })
		if expired && n.lockDelay > 0 && cmd.Time+n.lockDelay > n.delayUntil {
			n.delayUntil = cmd.Time + n.lockDelay
			m.delayEnd = max(m.delayEnd, n.delayUntil)
		}
		if len(n.holders) == 0 {
			n.holders = nil
			n.mode = api.LockNone
			var until int64
			if n.delayUntil > cmd.Time {
				until = n.delayUntil
			}
			res.Freed = append(res.Freed, FreedLock{Path: p, Instance: n.instance, Generation: n.lockGen, DelayUntil: until})
		}
		m.tenants[tenantOf(p)].usage.Locks--
	}
	for _, p := range m.sortedPaths(func(_ string, n *mNode) bool { return n.owner == sid }) {
		m.deleteNode(res, p)
		reply.DeletedEphemerals = append(reply.DeletedEphemerals, p)
	}
	delete(m.sessions, sid)
	m.tenants[s.tenant].usage.Sessions--
	return reply, nil
}

func (m *model) deleteNode(res *Result, p string) {
	n := m.nodes[p]
	t := m.tenants[tenantOf(p)]
	if len(n.holders) > 0 {
		res.Freed = append(res.Freed, FreedLock{Path: p, Instance: n.instance, Generation: n.lockGen, NodeDeleted: true})
		t.usage.Locks -= uint64(len(n.holders))
	}
	t.usage.Nodes--
	t.usage.Bytes -= uint64(len(n.contents))
	delete(m.nodes, p)
	parent, _ := parentOf(p)
	res.Changes = append(res.Changes,
		NodeChange{Kind: ChangeDeleted, Path: p, Instance: n.instance},
		NodeChange{Kind: ChangeChildRemoved, Path: parent, Child: baseOf(p), Instance: m.nodes[parent].instance})
}

func (m *model) check(c Caller, p string, n *mNode, perm api.Perm) *api.Error {
	if !m.allowed(c, p, n, perm) {
		return mErr(api.PermissionDenied)
	}
	return nil
}

func (m *model) open(cmd Command, res *Result, op *OpenNode) (Reply, *api.Error) {
	c := cmd.Caller
	if e := m.tenantCaller(c); e != nil {
		return nil, e
	}
	p, e := m.parse(op.Path)
	if e != nil {
		return nil, e
	}
	if e := m.session(op.Session, op.Ephemeral, c); e != nil {
		return nil, e
	}
	switch {
	case op.Exclusive && !op.Create, op.Dir && len(op.Contents) > 0, op.Dir && op.Ephemeral:
		return nil, mErr(api.InvalidArgument)
	case len(op.Contents) > m.cfg.MaxContents:
		return nil, mErr(api.TooLarge)
	case op.LockDelay < -1 || op.LockDelay > int64(m.cfg.MaxLockDelay):
		return nil, mErr(api.InvalidArgument)
	}
	if op.ACL != nil {
		if e := m.validACL(*op.ACL, tenantOf(p)); e != nil {
			return nil, e
		}
	}
	if n := m.nodes[p]; n != nil {
		if op.Exclusive {
			if parent, ok := parentOf(p); ok {
				if e := m.check(c, parent, m.nodes[parent], api.PermWrite); e != nil {
					return nil, e
				}
			} else if c.Tenant != tenantOf(p) {
				return nil, mErr(api.PermissionDenied)
			}
			return nil, mErr(api.AlreadyExists)
		}
		if e := m.check(c, p, n, api.PermRead); e != nil {
			return nil, e
		}
		return &Opened{Stat: n.stat()}, nil
	}
	parent, hasParent := parentOf(p)
	if !op.Create || !hasParent {
		return nil, m.missing(c, p)
	}
	pn := m.nodes[parent]
	if pn == nil {
		return nil, m.missing(c, parent)
	}
	if e := m.check(c, parent, pn, api.PermWrite); e != nil {
		return nil, e
	}
	if !pn.dir {
		return nil, mErr(api.FailedPrecondition)
	}
	tn := tenantOf(p)
	t := m.tenants[tn]
	if !quotaOK(t.quota.MaxNodes, t.usage.Nodes, 1) {
		return nil, quotaErr(tn, "max_nodes", t.quota.MaxNodes)
	}
	if !quotaOK(t.quota.MaxBytes, t.usage.Bytes, uint64(len(op.Contents))) {
		return nil, quotaErr(tn, "max_bytes", t.quota.MaxBytes)
	}
	m.lastInst++
	n := &mNode{instance: m.lastInst, dir: op.Dir, contentGen: 1, aclGen: 1, created: cmd.Time, modified: cmd.Time, acl: pn.acl}
	if len(op.Contents) > 0 {
		n.contents = slices.Clone(op.Contents)
	}
	if op.ACL != nil {
		n.acl = *op.ACL
	}
	switch op.LockDelay {
	case 0:
		n.lockDelay = int64(m.cfg.DefaultLockDelay)
	case -1:
		n.lockDelay = 0
	default:
		n.lockDelay = op.LockDelay
	}
	if op.Ephemeral {
		n.owner = op.Session
	}
	m.nodes[p] = n
	t.usage.Nodes++
	t.usage.Bytes += uint64(len(op.Contents))
	res.Changes = append(res.Changes,
		NodeChange{Kind: ChangeCreated, Path: p, Instance: n.instance},
		NodeChange{Kind: ChangeChildAdded, Path: parent, Child: baseOf(p), Instance: pn.instance})
	return &Opened{Stat: n.stat(), Created: true}, nil
}

func (m *model) target(c Caller, path string, sid uint64, required bool, perm api.Perm) (string, *mNode, *api.Error) {
	if e := m.tenantCaller(c); e != nil {
		return "", nil, e
	}
	p, e := m.parse(path)
	if e != nil {
		return "", nil, e
	}
	if e := m.session(sid, required, c); e != nil {
		return "", nil, e
	}
	n := m.nodes[p]
	if n == nil {
		return "", nil, m.missing(c, p)
	}
	if perm != 0 {
		if e := m.check(c, p, n, perm); e != nil {
			return "", nil, e
		}
	}
	return p, n, nil
}

func (m *model) setContents(cmd Command, res *Result, op *SetContents) (Reply, *api.Error) {
	if len(op.Contents) > m.cfg.MaxContents {
		if e := m.tenantCaller(cmd.Caller); e != nil {
			return nil, e
		}
		return nil, mErr(api.TooLarge)
	}
	p, n, e := m.target(cmd.Caller, op.Path, op.Session, false, api.PermWrite)
	if e != nil {
		return nil, e
	}
	if n.dir || (op.IfGeneration != 0 && op.IfGeneration != n.contentGen) {
		return nil, mErr(api.FailedPrecondition)
	}
	tn := tenantOf(p)
	t := m.tenants[tn]
	if nl, ol := uint64(len(op.Contents)), uint64(len(n.contents)); nl > ol && !quotaOK(t.quota.MaxBytes, t.usage.Bytes, nl-ol) {
		return nil, quotaErr(tn, "max_bytes", t.quota.MaxBytes)
	}
	t.usage.Bytes = t.usage.Bytes - uint64(len(n.contents)) + uint64(len(op.Contents))
	n.contents = nil
	if len(op.Contents) > 0 {
		n.contents = slices.Clone(op.Contents)
	}
	n.contentGen++
	n.modified = cmd.Time
	res.Changes = append(res.Changes, NodeChange{Kind: ChangeContents, Path: p, Instance: n.instance})
	return &Written{Stat: n.stat()}, nil
}

func (m *model) delete(cmd Command, res *Result, op *Delete) (Reply, *api.Error) {
	p, n, e := m.target(cmd.Caller, op.Path, op.Session, false, api.PermWrite)
	if e != nil {
		return nil, e
	}
	if _, ok := parentOf(p); !ok {
		return nil, mErr(api.FailedPrecondition)
	}
	if op.IfInstance != 0 && op.IfInstance != n.instance {
		return nil, mErr(api.FailedPrecondition)
	}
	for q := range m.nodes {
		if pp, ok := parentOf(q); ok && pp == p {
			return nil, mErr(api.FailedPrecondition)
		}
	}
	if len(n.holders) > 0 {
		return nil, mErr(api.FailedPrecondition)
	}
	m.deleteNode(res, p)
	return &Deleted{Instance: n.instance}, nil
}

func (m *model) setACL(cmd Command, res *Result, op *SetACL) (Reply, *api.Error) {
	p, n, e := m.target(cmd.Caller, op.Path, op.Session, false, api.PermChangeACL)
	if e != nil {
		return nil, e
	}
	if e := m.validACL(op.ACL, tenantOf(p)); e != nil {
		return nil, e
	}
	if op.IfGeneration != 0 && op.IfGeneration != n.aclGen {
		return nil, mErr(api.FailedPrecondition)
	}
	n.aclGen++
	n.acl = op.ACL
	res.Changes = append(res.Changes, NodeChange{Kind: ChangeACL, Path: p, Instance: n.instance})
	return &ACLSet{Stat: n.stat()}, nil
}

func (m *model) acquire(cmd Command, res *Result, op *Acquire) (Reply, *api.Error) {
	if op.Mode != api.LockExclusive && op.Mode != api.LockShared {
		if e := m.tenantCaller(cmd.Caller); e != nil {
			return nil, e
		}
		return nil, mErr(api.InvalidArgument)
	}
	p, n, e := m.target(cmd.Caller, op.Path, op.Session, true, api.PermWrite)
	if e != nil {
		return nil, e
	}
	if slices.Contains(n.holders, op.Session) {
		return nil, mErr(api.FailedPrecondition)
	}
	free := len(n.holders) == 0
	if !free && (op.Mode == api.LockExclusive || n.mode == api.LockExclusive) {
		return nil, mErr(api.Locked)
	}
	if free && cmd.Time < n.delayUntil {
		return nil, &api.Error{Code: api.LockDelay, Until: n.delayUntil}
	}
	tn := tenantOf(p)
	t := m.tenants[tn]
	if !quotaOK(t.quota.MaxLocks, t.usage.Locks, 1) {
		return nil, quotaErr(tn, "max_locks", t.quota.MaxLocks)
	}
	if free {
		m.lastGen++
		n.lockGen = m.lastGen
		n.mode = op.Mode
		res.Changes = append(res.Changes, NodeChange{Kind: ChangeLockAcquired, Path: p, Instance: n.instance})
	}
	n.holders = append(n.holders, op.Session)
	slices.Sort(n.holders)
	t.usage.Locks++
	return &Granted{Tenant: tn, Path: p, Mode: op.Mode, Generation: n.lockGen, Instance: n.instance}, nil
}

func (m *model) release(cmd Command, res *Result, op *Release) (Reply, *api.Error) {
	p, n, e := m.target(cmd.Caller, op.Path, op.Session, true, 0)
	if e != nil {
		return nil, e
	}
	if !slices.Contains(n.holders, op.Session) {
		if e := m.check(cmd.Caller, p, n, api.PermRead); e != nil {
			return nil, e
		}
		return nil, mErr(api.FailedPrecondition)
	}
	if op.Generation != n.lockGen {
		return nil, mErr(api.FailedPrecondition)
	}
	for _, g := range op.Then {
		if g.Path != p {
			return nil, mErr(api.InvalidArgument)
		}
	}
	n.holders = slices.DeleteFunc(n.holders, func(h uint64) bool { return h == op.Session })
	freed := len(n.holders) == 0
	if freed {
		n.holders = nil
		n.mode = api.LockNone
		var until int64
		if n.delayUntil > cmd.Time {
			until = n.delayUntil
		}
		res.Freed = append(res.Freed, FreedLock{Path: p, Instance: n.instance, Generation: n.lockGen, DelayUntil: until})
	}
	m.tenants[tenantOf(p)].usage.Locks--
	return &Released{Freed: freed}, nil
}

func (m *model) createTenant(cmd Command, res *Result, op *CreateTenant) (Reply, *api.Error) {
	admin, e := m.checkCaller(cmd.Caller)
	if e != nil {
		return nil, e
	}
	if !admin || ValidTenantName(op.Name) != nil {
		if !admin {
			return nil, mErr(api.PermissionDenied)
		}
		return nil, mErr(api.InvalidArgument)
	}
	if e := m.validACL(op.ACL, op.Name); e != nil {
		return nil, e
	}
	if m.tenants[op.Name] != nil {
		return nil, mErr(api.AlreadyExists)
	}
	t := &mTenant{quota: op.Quota, created: cmd.Time}
	m.tenants[op.Name] = t
	m.lastInst++
	root := "/" + op.Name
	m.nodes[root] = &mNode{instance: m.lastInst, dir: true, contentGen: 1, aclGen: 1, created: cmd.Time, modified: cmd.Time, acl: op.ACL, lockDelay: int64(m.cfg.DefaultLockDelay)}
	res.Changes = append(res.Changes, NodeChange{Kind: ChangeCreated, Path: root, Instance: m.lastInst})
	return &TenantReply{Tenant: api.TenantInfo{Name: op.Name, Quota: t.quota, Usage: t.usage, Created: t.created}}, nil
}

func (m *model) updateTenant(cmd Command, op *UpdateTenant) (Reply, *api.Error) {
	admin, e := m.checkCaller(cmd.Caller)
	if e != nil {
		return nil, e
	}
	if !admin {
		return nil, mErr(api.PermissionDenied)
	}
	if ValidTenantName(op.Name) != nil {
		return nil, mErr(api.InvalidArgument)
	}
	t := m.tenants[op.Name]
	if t == nil {
		return nil, mErr(api.NotFound)
	}
	t.quota = op.Quota
	return &TenantReply{Tenant: api.TenantInfo{Name: op.Name, Quota: t.quota, Usage: t.usage, Created: t.created}}, nil
}
