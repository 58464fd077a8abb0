package namespace

import (
	"fmt"
	"slices"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
)

// applier applies one command inside a slot's txn.
//
// Every operation follows one discipline: first read and check everything
// that can fail with an *api.Error, then write. A command that fails has
// therefore written nothing, and ApplySlot verifies it (the txn counts
// writes). Storage errors (the plain error results) abort the whole slot.
type applier struct {
	*txn
	now int64
	c   Caller
	res *Result
}

// apply applies cmd and returns its Result. The error is a storage failure.
func (t *txn) apply(cmd Command) (Result, error) {
	var res Result
	if cmd.Time < 0 {
		return Result{Err: api.Errorf(api.InvalidArgument, "command time %d is negative", cmd.Time)}, nil
	}
	// The clock never goes back: a command stamped below the time of one
	// applied before it (a new master whose wall clock is behind, or two
	// commands stamped and proposed in different orders) is applied at the
	// later time. Only a command that succeeds moves the clock: one that
	// fails changes nothing.
	a := &applier{txn: t, now: max(t.ctr.Clock, cmd.Time), c: cmd.Caller, res: &res}
	var (
		reply Reply
		aerr  *api.Error
		err   error
	)
	switch op := cmd.Op.(type) {
	case *CreateSession:
		reply, aerr, err = a.createSession()
	case *CloseSession:
		reply, aerr, err = a.endSession(op.Session, false)
	case *ExpireSession:
		reply, aerr, err = a.endSession(op.Session, true)
	case *OpenNode:
		reply, aerr, err = a.open(op)
	case *SetContents:
		reply, aerr, err = a.setContents(op)
	case *Delete:
		reply, aerr, err = a.delete(op)
	case *SetACL:
		reply, aerr, err = a.setACL(op)
	case *Acquire:
		reply, aerr, err = a.acquire(op)
	case *Release:
		reply, aerr, err = a.release(op)
	case *CreateTenant:
		reply, aerr, err = a.createTenant(op)
	case *UpdateTenant:
		reply, aerr, err = a.updateTenant(op)
	case *IssueToken:
		reply, aerr, err = a.issueToken(op)
	case *RevokeToken:
		reply, aerr, err = a.revokeToken(op)
	default:
		aerr = api.Errorf(api.InvalidArgument, "unknown operation %T", cmd.Op)
	}
	if err != nil {
		return Result{}, err
	}
	if aerr != nil {
		return Result{Err: aerr}, nil
	}
	t.ctr.Clock = a.now
	res.Reply = reply
	if grants := thenOf(cmd.Op); len(grants) > 0 {
		if err := t.handOver(cmd.Time, grants, &res); err != nil {
			return Result{}, err
		}
	}
	return res, nil
}

// thenOf returns the grants op carries.
func thenOf(op Op) []Grant {
	switch o := op.(type) {
	case *Release:
		return o.Then
	case *CloseSession:
		return o.Then
	case *ExpireSession:
		return o.Then
	}
	return nil
}

// handOver tries each grant whose lock the command's own operation freed
// (it is in res.Freed before any grant is tried), as an Acquire of the
// grant's caller at the command's time, and records the outcomes in
// res.Handed. Grants of one lock are tried in order, each as the Acquire it
// stands for: the first takes the freed lock, a shared one behind a shared
// one joins it at the same generation, anything else meets the lock held.
// A lock that a grant took is taken out of res.Freed, and the grants'
// changes are added to res.Changes. The error is a storage failure.
// REQUIRES: the command's own operation succeeded.
func (t *txn) handOver(at int64, grants []Grant, res *Result) error {
	res.Handed = make([]Handed, len(grants))
	freed := slices.Clone(res.Freed)
	for i, g := range grants {
		if !slices.ContainsFunc(freed, func(f FreedLock) bool { return f.Path == g.Path && !f.NodeDeleted }) {
			continue
		}
		writes, before := t.writes, t.ctr
		sub, err := t.apply(Command{Time: at, Caller: g.Caller, Op: &Acquire{Session: g.Session, Path: g.Path, Mode: g.Mode}})
		if err != nil {
			return err
		}
		h := &res.Handed[i]
		h.Tried = true
		if sub.Err != nil {
			if t.writes != writes || t.ctr != before {
				// INVARIANT: a failing command writes nothing (see applier).
				err := fmt.Errorf("%w: BUG: a grant of %s failed with %v after writing", ErrCorrupt, g.Path, sub.Err)
				if invariants.Enabled {
					panic(err)
				}
				return err
			}
			h.Err = sub.Err
			continue
		}
		h.Reply = sub.Reply.(*Granted)
		res.Changes = append(res.Changes, sub.Changes...)
		res.Freed = slices.DeleteFunc(res.Freed, func(f FreedLock) bool { return f.Path == g.Path && !f.NodeDeleted })
	}
	return nil
}

func (a *applier) change(kind ChangeKind, p Path, child string, inst uint64) {
	a.res.Changes = append(a.res.Changes, NodeChange{Kind: kind, Path: string(p), Child: child, Instance: inst})
}

// liveSession checks that sid names a live session of the caller. With
// required false, sid 0 is accepted (no session) and returns nil.
func (a *applier) liveSession(sid uint64, required bool) (*sessionRec, *api.Error, error) {
	if sid == 0 {
		if required {
			return nil, api.Errorf(api.InvalidArgument, "a session is required"), nil
		}
		return nil, nil, nil
	}
	s, err := a.session(sid)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		return nil, api.Errorf(api.SessionExpired, "session %d has ended", sid), nil
	}
	if s.Tenant != a.c.Tenant || s.Principal != a.c.Principal {
		return nil, api.Errorf(api.PermissionDenied, "session %d belongs to another principal", sid), nil
	}
	return s, nil, nil
}

// adjust changes a tenant's usage counters by the given deltas.
func (a *applier) adjust(tenant string, nodes, bytes, sessions, locks int64) error {
	t, err := a.mustTenant(tenant)
	if err != nil {
		return err
	}
	return a.adjustRec(tenant, t, nodes, bytes, sessions, locks)
}

// adjustRec is adjust on t, the tenant's record as this command read it
// (nothing it did since wrote the record), saving a second read.
func (a *applier) adjustRec(tenant string, t *tenantRec, nodes, bytes, sessions, locks int64) error {
	u := &t.Usage
	for _, f := range []struct {
		v *uint64
		d int64
	}{{&u.Nodes, nodes}, {&u.Bytes, bytes}, {&u.Sessions, sessions}, {&u.Locks, locks}} {
		if f.d < 0 && *f.v < uint64(-f.d) {
			return fmt.Errorf("%w: tenant %q usage would go negative", ErrCorrupt, tenant)
		}
		*f.v = uint64(int64(*f.v) + f.d)
	}
	return a.putTenant(tenant, t)
}

func (a *applier) createSession() (Reply, *api.Error, error) {
	if aerr, err := a.checkTenantCaller(a.c); aerr != nil || err != nil {
		return nil, aerr, err
	}
	t, err := a.mustTenant(a.c.Tenant)
	if err != nil {
		return nil, nil, err
	}
	if aerr := quotaCheck(a.c.Tenant, "max_sessions", t.Quota.MaxSessions, t.Usage.Sessions, 1); aerr != nil {
		return nil, aerr, nil
	}
	a.ctr.Session++
	sid := a.ctr.Session
	rec := &sessionRec{Tenant: a.c.Tenant, Principal: a.c.Principal, Created: a.now}
	if err := a.create(sessionKey(sid), encodeRec(rec)); err != nil {
		return nil, nil, err
	}
	if err := a.create(tenantSessionKey(a.c.Tenant, sid), nil); err != nil {
		return nil, nil, err
	}
	if err := a.adjustRec(a.c.Tenant, t, 0, 0, 1, 0); err != nil {
		return nil, nil, err
	}
	return &SessionCreated{Session: sid, Owner: a.c}, nil, nil
}

func (a *applier) endSession(sid uint64, expired bool) (Reply, *api.Error, error) {
	admin, aerr, err := a.checkCaller(a.c)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	if expired && !admin {
		return nil, api.Errorf(api.PermissionDenied, "only the cell may expire a session"), nil
	}
	if sid == 0 {
		return nil, api.Errorf(api.InvalidArgument, "a session is required"), nil
	}
	s, err := a.session(sid)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		return nil, api.Errorf(api.SessionExpired, "session %d has ended", sid), nil
	}
	if !admin && (s.Tenant != a.c.Tenant || s.Principal != a.c.Principal) {
		return nil, api.Errorf(api.PermissionDenied, "session %d belongs to another principal", sid), nil
	}

	// Writes from here on.
	reply := &SessionEnded{Session: sid}
	held, err := a.keysWithPrefix(sessionPrefix(tagHeld, sid))
	if err != nil {
		return nil, nil, err
	}
	for _, k := range held {
		p := Path(k[10:])
		n, err := a.mustNode(p)
		if err != nil {
			return nil, nil, err
		}
		if !n.holds(sid) {
			return nil, nil, fmt.Errorf("%w: session %d indexed as holding %s but is not a holder", ErrCorrupt, sid, p)
		}
		reply.Released = append(reply.Released, api.LockInfo{Path: string(p), Instance: n.Instance, Mode: n.Mode, Generation: n.LockGen})
		gen := n.LockGen
		n.removeHolder(sid)
		if expired && n.LockDelay > 0 && a.now+n.LockDelay > n.DelayUntil {
			n.DelayUntil = a.now + n.LockDelay
			a.ctr.DelayEnd = max(a.ctr.DelayEnd, n.DelayUntil)
		}
		if len(n.Holders) == 0 {
			if err := a.del(lockedKey(p)); err != nil {
				return nil, nil, err
			}
			a.res.Freed = append(a.res.Freed, FreedLock{Path: string(p), Instance: n.Instance, Generation: gen, DelayUntil: a.delayAfter(n)})
		}
		if err := a.putNode(p, n); err != nil {
			return nil, nil, err
		}
		if err := a.del(k); err != nil {
			return nil, nil, err
		}
		if err := a.adjust(p.Tenant(), 0, 0, 0, -1); err != nil {
			return nil, nil, err
		}
	}
	eph, err := a.keysWithPrefix(sessionPrefix(tagEphemeral, sid))
	if err != nil {
		return nil, nil, err
	}
	for _, k := range eph {
		p := Path(k[10:])
		n, err := a.mustNode(p)
		if err != nil {
			return nil, nil, err
		}
		if err := a.deleteNode(p, n); err != nil {
			return nil, nil, err
		}
		reply.DeletedEphemerals = append(reply.DeletedEphemerals, string(p))
	}
	if err := a.del(sessionKey(sid)); err != nil {
		return nil, nil, err
	}
	if err := a.del(tenantSessionKey(s.Tenant, sid)); err != nil {
		return nil, nil, err
	}
	if err := a.adjust(s.Tenant, 0, 0, -1, 0); err != nil {
		return nil, nil, err
	}
	return reply, nil, nil
}

// delayAfter is the lock-delay end to report for a lock just freed: the
// node's DelayUntil if still ahead, else 0.
func (a *applier) delayAfter(n *nodeRec) int64 {
	if n.DelayUntil > a.now {
		return n.DelayUntil
	}
	return 0
}

// deleteNode removes node n at p with its contents and indexes, dropping
// any lock holders (their locks are reported freed with NodeDeleted).
// REQUIRES: p has no children and is not a tenant root.
func (a *applier) deleteNode(p Path, n *nodeRec) error {
	tenant := p.Tenant()
	for _, h := range n.Holders {
		if err := a.del(heldKey(h, p)); err != nil {
			return err
		}
	}
	if len(n.Holders) > 0 {
		if err := a.del(lockedKey(p)); err != nil {
			return err
		}
		a.res.Freed = append(a.res.Freed, FreedLock{Path: string(p), Instance: n.Instance, Generation: n.LockGen, NodeDeleted: true})
	}
	if n.Owner != 0 {
		if err := a.del(ephemeralKey(n.Owner, p)); err != nil {
			return err
		}
	}
	if err := a.del(nodeKey(p)); err != nil {
		return err
	}
	if err := a.del(dataKey(p)); err != nil {
		return err
	}
	if err := a.adjust(tenant, -1, -int64(n.Size), 0, -int64(len(n.Holders))); err != nil {
		return err
	}
	parent, _ := p.Parent()
	pn, err := a.mustNode(parent)
	if err != nil {
		return err
	}
	a.change(ChangeDeleted, p, "", n.Instance)
	a.change(ChangeChildRemoved, parent, p.Base(), pn.Instance)
	return nil
}

func (a *applier) open(op *OpenNode) (Reply, *api.Error, error) {
	if aerr, err := a.checkTenantCaller(a.c); aerr != nil || err != nil {
		return nil, aerr, err
	}
	p, aerr := a.parsePath(op.Path)
	if aerr != nil {
		return nil, aerr, nil
	}
	_, aerr, err := a.liveSession(op.Session, op.Ephemeral)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	switch {
	case op.Exclusive && !op.Create:
		return nil, api.Errorf(api.InvalidArgument, "exclusive open requires create"), nil
	case op.Dir && len(op.Contents) > 0:
		return nil, api.Errorf(api.InvalidArgument, "a directory has no contents"), nil
	case op.Dir && op.Ephemeral:
		return nil, api.Errorf(api.InvalidArgument, "an ephemeral node must be a file"), nil
	case len(op.Contents) > a.cfg.MaxContents:
		return nil, api.Errorf(api.TooLarge, "contents of %d bytes, more than %d", len(op.Contents), a.cfg.MaxContents), nil
	case op.LockDelay < NoLockDelay || op.LockDelay > int64(a.cfg.MaxLockDelay):
		return nil, api.Errorf(api.InvalidArgument, "lock-delay %v not in 0..%v", time.Duration(op.LockDelay), a.cfg.MaxLockDelay), nil
	}
	if op.ACL != nil {
		if aerr := a.validACLNames(*op.ACL, p.Tenant()); aerr != nil {
			return nil, aerr, nil
		}
	}
	n, err := a.node(p)
	if err != nil {
		return nil, nil, err
	}
	if n != nil {
		if op.Exclusive {
			// Existence is revealed only to those who could create it.
			if parent, ok := p.Parent(); ok {
				pn, err := a.mustNode(parent)
				if err != nil {
					return nil, nil, err
				}
				if aerr, err := a.check(a.c, parent, pn, api.PermWrite); aerr != nil || err != nil {
					return nil, aerr, err
				}
			} else if a.c.Tenant != p.Tenant() {
				return nil, api.Errorf(api.PermissionDenied, "%s: no write permission", p), nil
			}
			return nil, api.Errorf(api.AlreadyExists, "%s exists", p), nil
		}
		if aerr, err := a.check(a.c, p, n, api.PermRead); aerr != nil || err != nil {
			return nil, aerr, err
		}
		return &Opened{Stat: n.stat()}, nil, nil
	}
	if !op.Create || p.IsRoot() {
		aerr, err := a.missing(a.c, p)
		return nil, aerr, err
	}
	parent, _ := p.Parent()
	pn, err := a.node(parent)
	if err != nil {
		return nil, nil, err
	}
	if pn == nil {
		aerr, err := a.missing(a.c, parent)
		return nil, aerr, err
	}
	if aerr, err := a.check(a.c, parent, pn, api.PermWrite); aerr != nil || err != nil {
		return nil, aerr, err
	}
	if !pn.Dir {
		return nil, api.Errorf(api.FailedPrecondition, "%s: parent is not a directory", p), nil
	}
	tenant := p.Tenant()
	t, err := a.mustTenant(tenant)
	if err != nil {
		return nil, nil, err
	}
	if aerr := quotaCheck(tenant, "max_nodes", t.Quota.MaxNodes, t.Usage.Nodes, 1); aerr != nil {
		return nil, aerr, nil
	}
	if aerr := contentsCheck(tenant, t, len(op.Contents)); aerr != nil {
		return nil, aerr, nil
	}
	if aerr := quotaCheck(tenant, "max_bytes", t.Quota.MaxBytes, t.Usage.Bytes, uint64(len(op.Contents))); aerr != nil {
		return nil, aerr, nil
	}

	// Writes from here on.
	a.ctr.Instance++
	acl := pn.ACL
	if op.ACL != nil {
		acl = *op.ACL
	}
	delay := op.LockDelay
	switch delay {
	case 0:
		delay = int64(a.cfg.DefaultLockDelay)
	case NoLockDelay:
		delay = 0
	}
	rec := &nodeRec{
		Instance:   a.ctr.Instance,
		Dir:        op.Dir,
		ContentGen: 1,
		ACLGen:     1,
		Sum:        contentSum(op.Contents),
		Size:       uint64(len(op.Contents)),
		Created:    a.now,
		Modified:   a.now,
		ACL:        acl,
		LockDelay:  delay,
	}
	if op.Ephemeral {
		rec.Owner = op.Session
		if err := a.set(ephemeralKey(op.Session, p), nil); err != nil {
			return nil, nil, err
		}
	}
	if err := a.putNode(p, rec); err != nil {
		return nil, nil, err
	}
	if len(op.Contents) > 0 {
		if err := a.set(dataKey(p), op.Contents); err != nil {
			return nil, nil, err
		}
	}
	if err := a.adjust(tenant, 1, int64(len(op.Contents)), 0, 0); err != nil {
		return nil, nil, err
	}
	a.change(ChangeCreated, p, "", rec.Instance)
	a.change(ChangeChildAdded, parent, p.Base(), pn.Instance)
	return &Opened{Stat: rec.stat(), Created: true}, nil, nil
}

// target does the checks every operation on an existing node starts with:
// tenant caller, path, optional session, node exists, permission (perm 0:
// none).
func (a *applier) target(path string, sid uint64, sessionRequired bool, perm api.Perm) (Path, *nodeRec, *api.Error, error) {
	if aerr, err := a.checkTenantCaller(a.c); aerr != nil || err != nil {
		return "", nil, aerr, err
	}
	p, aerr := a.parsePath(path)
	if aerr != nil {
		return "", nil, aerr, nil
	}
	if _, aerr, err := a.liveSession(sid, sessionRequired); aerr != nil || err != nil {
		return "", nil, aerr, err
	}
	n, err := a.node(p)
	if err != nil {
		return "", nil, nil, err
	}
	if n == nil {
		aerr, err := a.missing(a.c, p)
		return "", nil, aerr, err
	}
	if perm != 0 {
		if aerr, err := a.check(a.c, p, n, perm); aerr != nil || err != nil {
			return "", nil, aerr, err
		}
	}
	return p, n, nil, nil
}

func (a *applier) setContents(op *SetContents) (Reply, *api.Error, error) {
	if len(op.Contents) > a.cfg.MaxContents {
		if aerr, err := a.checkTenantCaller(a.c); aerr != nil || err != nil {
			return nil, aerr, err
		}
		return nil, api.Errorf(api.TooLarge, "contents of %d bytes, more than %d", len(op.Contents), a.cfg.MaxContents), nil
	}
	p, n, aerr, err := a.target(op.Path, op.Session, false, api.PermWrite)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	if n.Dir {
		return nil, api.Errorf(api.FailedPrecondition, "%s is a directory", p), nil
	}
	if op.IfGeneration != 0 && op.IfGeneration != n.ContentGen {
		return nil, api.Errorf(api.FailedPrecondition, "%s: content generation is %d, not %d", p, n.ContentGen, op.IfGeneration), nil
	}
	tenant := p.Tenant()
	newSize := uint64(len(op.Contents))
	if newSize > n.Size {
		t, err := a.mustTenant(tenant)
		if err != nil {
			return nil, nil, err
		}
		if aerr := quotaCheck(tenant, "max_bytes", t.Quota.MaxBytes, t.Usage.Bytes, newSize-n.Size); aerr != nil {
			return nil, aerr, nil
		}
		if aerr := contentsCheck(tenant, t, len(op.Contents)); aerr != nil {
			return nil, aerr, nil
		}
	}

	// Writes from here on.
	delta := int64(newSize) - int64(n.Size)
	n.ContentGen++
	n.Sum = contentSum(op.Contents)
	n.Size = newSize
	n.Modified = a.now
	if err := a.putNode(p, n); err != nil {
		return nil, nil, err
	}
	if newSize > 0 {
		err = a.set(dataKey(p), op.Contents)
	} else {
		err = a.del(dataKey(p))
	}
	if err != nil {
		return nil, nil, err
	}
	if delta != 0 {
		if err := a.adjust(tenant, 0, delta, 0, 0); err != nil {
			return nil, nil, err
		}
	}
	a.change(ChangeContents, p, "", n.Instance)
	return &Written{Stat: n.stat()}, nil, nil
}

func (a *applier) delete(op *Delete) (Reply, *api.Error, error) {
	p, n, aerr, err := a.target(op.Path, op.Session, false, api.PermWrite)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	if p.IsRoot() {
		return nil, api.Errorf(api.FailedPrecondition, "%s: a tenant root cannot be deleted", p), nil
	}
	if op.IfInstance != 0 && op.IfInstance != n.Instance {
		return nil, api.Errorf(api.FailedPrecondition, "%s: instance is %d, not %d", p, n.Instance, op.IfInstance), nil
	}
	if n.Dir {
		has, err := a.hasChildren(p)
		if err != nil {
			return nil, nil, err
		}
		if has {
			return nil, api.Errorf(api.FailedPrecondition, "%s: directory not empty", p), nil
		}
	}
	if len(n.Holders) > 0 {
		return nil, api.Errorf(api.FailedPrecondition, "%s: lock is held", p), nil
	}
	if err := a.deleteNode(p, n); err != nil {
		return nil, nil, err
	}
	return &Deleted{Instance: n.Instance}, nil, nil
}

func (a *applier) setACL(op *SetACL) (Reply, *api.Error, error) {
	p, n, aerr, err := a.target(op.Path, op.Session, false, api.PermChangeACL)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	if aerr := a.validACLNames(op.ACL, p.Tenant()); aerr != nil {
		return nil, aerr, nil
	}
	if op.IfGeneration != 0 && op.IfGeneration != n.ACLGen {
		return nil, api.Errorf(api.FailedPrecondition, "%s: ACL generation is %d, not %d", p, n.ACLGen, op.IfGeneration), nil
	}
	n.ACLGen++
	n.ACL = op.ACL
	if err := a.putNode(p, n); err != nil {
		return nil, nil, err
	}
	a.change(ChangeACL, p, "", n.Instance)
	return &ACLSet{Stat: n.stat()}, nil, nil
}

func (a *applier) acquire(op *Acquire) (Reply, *api.Error, error) {
	if op.Mode != api.LockExclusive && op.Mode != api.LockShared {
		if aerr, err := a.checkTenantCaller(a.c); aerr != nil || err != nil {
			return nil, aerr, err
		}
		return nil, api.Errorf(api.InvalidArgument, "lock mode %d is neither exclusive nor shared", op.Mode), nil
	}
	p, n, aerr, err := a.target(op.Path, op.Session, true, api.PermWrite)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	sid := op.Session
	if n.holds(sid) {
		return nil, api.Errorf(api.FailedPrecondition, "%s: session %d already holds the lock", p, sid), nil
	}
	free := len(n.Holders) == 0
	if !free && (op.Mode == api.LockExclusive || n.Mode == api.LockExclusive) {
		return nil, api.Errorf(api.Locked, "%s: held %s by another session", p, n.Mode), nil
	}
	if free && a.now < n.DelayUntil {
		return nil, api.LockDelayError(string(p), n.DelayUntil), nil
	}
	tenant := p.Tenant()
	t, err := a.mustTenant(tenant)
	if err != nil {
		return nil, nil, err
	}
	if aerr := quotaCheck(tenant, "max_locks", t.Quota.MaxLocks, t.Usage.Locks, 1); aerr != nil {
		return nil, aerr, nil
	}

	// Writes from here on.
	if free {
		a.ctr.LockGen++
		n.LockGen = a.ctr.LockGen
		n.Mode = op.Mode
		if err := a.set(lockedKey(p), nil); err != nil {
			return nil, nil, err
		}
		a.change(ChangeLockAcquired, p, "", n.Instance)
	}
	n.addHolder(sid)
	if err := a.putNode(p, n); err != nil {
		return nil, nil, err
	}
	if err := a.set(heldKey(sid, p), []byte{byte(op.Mode)}); err != nil {
		return nil, nil, err
	}
	if err := a.adjust(tenant, 0, 0, 0, 1); err != nil {
		return nil, nil, err
	}
	return &Granted{Tenant: tenant, Path: string(p), Mode: op.Mode, Generation: n.LockGen, Instance: n.Instance}, nil, nil
}

func (a *applier) release(op *Release) (Reply, *api.Error, error) {
	p, n, aerr, err := a.target(op.Path, op.Session, true, 0)
	if aerr != nil || err != nil {
		return nil, aerr, err
	}
	sid := op.Session
	if !n.holds(sid) {
		// A holder may always give its lock back, whatever the ACLs say
		// now; anyone else learns that the lock is not theirs only if they
		// may read the node. Otherwise the refusal would reveal that the
		// node exists.
		if aerr, err := a.check(a.c, p, n, api.PermRead); aerr != nil || err != nil {
			return nil, aerr, err
		}
		return nil, api.Errorf(api.FailedPrecondition, "%s: session %d does not hold the lock", p, sid), nil
	}
	if op.Generation != n.LockGen {
		return nil, api.Errorf(api.FailedPrecondition, "%s: stale release of generation %d; the lock is at %d", p, op.Generation, n.LockGen), nil
	}
	if slices.ContainsFunc(op.Then, func(g Grant) bool { return g.Path != string(p) }) {
		return nil, api.Errorf(api.InvalidArgument, "a release hands over only its own lock, not %s", firstOtherPath(op.Then, string(p))), nil
	}

	// Writes from here on.
	gen := n.LockGen
	n.removeHolder(sid)
	freed := len(n.Holders) == 0
	if freed {
		if err := a.del(lockedKey(p)); err != nil {
			return nil, nil, err
		}
		a.res.Freed = append(a.res.Freed, FreedLock{Path: string(p), Instance: n.Instance, Generation: gen, DelayUntil: a.delayAfter(n)})
	}
	if err := a.putNode(p, n); err != nil {
		return nil, nil, err
	}
	if err := a.del(heldKey(sid, p)); err != nil {
		return nil, nil, err
	}
	if err := a.adjust(p.Tenant(), 0, 0, 0, -1); err != nil {
		return nil, nil, err
	}
	return &Released{Freed: freed}, nil, nil
}

// firstOtherPath returns the path of the first grant not of path p.
func firstOtherPath(grants []Grant, p string) string {
	for _, g := range grants {
		if g.Path != p {
			return g.Path
		}
	}
	return p
}

// contentsCheck applies the tenant's MaxContents to a file of size bytes.
func contentsCheck(tenant string, t *tenantRec, size int) *api.Error {
	if max := t.Quota.MaxContents; max != 0 && uint64(size) > max {
		return api.QuotaError(tenant, "max_contents", max)
	}
	return nil
}

func (a *applier) checkAdmin() (*api.Error, error) {
	admin, aerr, err := a.checkCaller(a.c)
	if aerr != nil || err != nil {
		return aerr, err
	}
	if !admin {
		return api.Errorf(api.PermissionDenied, "only the administrator manages tenants"), nil
	}
	return nil, nil
}

func (a *applier) createTenant(op *CreateTenant) (Reply, *api.Error, error) {
	if aerr, err := a.checkAdmin(); aerr != nil || err != nil {
		return nil, aerr, err
	}
	if err := ValidTenantName(op.Name); err != nil {
		return nil, err.(*api.Error), nil
	}
	if aerr := a.validACLNames(op.ACL, op.Name); aerr != nil {
		return nil, aerr, nil
	}
	t, err := a.tenant(op.Name)
	if err != nil {
		return nil, nil, err
	}
	if t != nil {
		return nil, api.Errorf(api.AlreadyExists, "tenant %q exists", op.Name), nil
	}

	// Writes from here on.
	t = &tenantRec{Quota: op.Quota, Created: a.now}
	if err := a.putTenant(op.Name, t); err != nil {
		return nil, nil, err
	}
	a.ctr.Instance++
	root := Path("/" + op.Name)
	rec := &nodeRec{
		Instance:   a.ctr.Instance,
		Dir:        true,
		ContentGen: 1,
		ACLGen:     1,
		Created:    a.now,
		Modified:   a.now,
		ACL:        op.ACL,
		LockDelay:  int64(a.cfg.DefaultLockDelay),
	}
	if err := a.putNode(root, rec); err != nil {
		return nil, nil, err
	}
	a.change(ChangeCreated, root, "", rec.Instance)
	return &TenantReply{Tenant: t.info(op.Name)}, nil, nil
}

func (a *applier) updateTenant(op *UpdateTenant) (Reply, *api.Error, error) {
	if aerr, err := a.checkAdmin(); aerr != nil || err != nil {
		return nil, aerr, err
	}
	if err := ValidTenantName(op.Name); err != nil {
		return nil, err.(*api.Error), nil
	}
	t, err := a.tenant(op.Name)
	if err != nil {
		return nil, nil, err
	}
	if t == nil {
		return nil, api.Errorf(api.NotFound, "tenant %q does not exist", op.Name), nil
	}
	t.Quota = op.Quota
	if err := a.putTenant(op.Name, t); err != nil {
		return nil, nil, err
	}
	return &TenantReply{Tenant: t.info(op.Name)}, nil, nil
}
