package cell

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/session"
)

// master is the master role of one epoch: it exists from the moment the
// replica becomes master until it loses leadership, and holds everything
// that lives only in the master's memory (Chubby §2.9): session leases and
// KeepAlive long-polls (the session.Manager), the FIFO queues of lock
// waiters, and the event subscriptions of open handles. A new master
// rebuilds sessions from the applied state and extends their leases; lock
// waiters and subscriptions are re-established by clients on their next
// call (handles are self-describing).
type master struct {
	r        *Replica
	epoch    uint64
	sessions *session.Manager
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	// lim holds the per-tenant limits that live in master memory, sched
	// the fair scheduler of tenant commands (see limits.go, fair.go).
	lim   *limiter
	sched *scheduler

	mu struct {
		sync.Mutex
		// owners maps every live session to its principal.
		owners map[uint64]namespace.Caller
		// queues holds the lock waiters per lock path, in arrival order.
		queues map[string]*lockQueue
		// subs maps a path to the sessions watching it and what they want.
		subs map[string]map[uint64]api.EventMask
		// cachers maps a path to the sessions that may hold it in their
		// cache (they read it through a Cache handle).
		cachers map[string]map[uint64]struct{}
		// writing counts the cache-invalidating writes in progress per
		// path; while one is, reads are not cacheable.
		writing map[string]int
		// tokens maps a session to the tokens it was created or used with,
		// so that revoking a token ends its sessions (see auth.go).
		tokens map[uint64]map[string]struct{}
	}
}

func newMaster(r *Replica, epoch uint64) (*master, error) {
	// Stamps of this term count from now and from the state's clock.
	if err := r.clock.rebase(); err != nil {
		return nil, err
	}
	mgr, err := session.New(r.sessionConfig(epoch))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &master{r: r, epoch: epoch, sessions: mgr, ctx: ctx, cancel: cancel}
	m.mu.owners = map[uint64]namespace.Caller{}
	m.mu.queues = map[string]*lockQueue{}
	m.mu.subs = map[string]map[uint64]api.EventMask{}
	m.mu.cachers = map[string]map[uint64]struct{}{}
	m.mu.writing = map[string]int{}
	m.mu.tokens = map[uint64]map[string]struct{}{}
	m.lim = newLimiter(r)
	m.sched = newScheduler(r, m.lim, r.pipe.poke)
	admin := r.admin()
	tenants, err := r.ns.ListTenants(admin)
	if err != nil {
		cancel()
		return nil, err
	}
	var ids []session.ID
	for _, t := range tenants {
		list, err := r.ns.ListSessions(admin, t.Name)
		if err != nil {
			cancel()
			return nil, err
		}
		for _, s := range list {
			m.mu.owners[s.ID] = namespace.Caller{Tenant: s.Tenant, Principal: s.Principal}
			ids = append(ids, session.ID(s.ID))
		}
	}
	// Every session the previous master may have been keeping alive gets a
	// full lease from now and a fail-over event (Chubby §2.9).
	if err := mgr.Start(true, ids); err != nil {
		cancel()
		return nil, err
	}
	m.wg.Add(1)
	go m.expireLoop()
	if r.cfg.MaxSessionLease > r.cfg.SessionLease {
		m.wg.Add(1)
		go m.loadLoop()
	}
	return m, nil
}

// stop ends the role: parked KeepAlives return NotMaster, tenant commands
// still queued for Paxos are answered NotMaster, and every lock waiter is
// told to retry with the new master. Run loop only.
func (m *master) stop() {
	m.cancel()
	m.sessions.Stop()
	m.wg.Wait()
	m.sched.close()
	m.mu.Lock()
	queues := m.mu.queues
	m.mu.queues = map[string]*lockQueue{}
	m.mu.Unlock()
	for _, q := range queues {
		for _, w := range q.waiters {
			w.finish(nil, m.r.notMaster())
		}
	}
}

// expireLoop turns the session manager's expiry decisions into logged
// ExpireSession commands (Chubby: the lease ran out, so the session ends,
// its locks are released with lock-delay and its ephemeral nodes deleted).
func (m *master) expireLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case d, ok := <-m.sessions.Decisions():
			if !ok {
				return
			}
			m.r.metrics.expiries.Inc()
			m.r.log.Info("session lease ran out; expiring it", "session", d.Session)
			m.r.pipe.submit(context.Background(), m, originCell, m.r.admin(), &namespace.ExpireSession{Session: uint64(d.Session)}, func(res namespace.Result, err error) {
				if err != nil {
					m.r.log.Warn("expiring session failed; the next master will decide again", "session", d.Session, "err", err)
				}
			})
		}
	}
}

// owner returns the principal that owns a live session.
func (m *master) owner(id uint64) (namespace.Caller, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.mu.owners[id]
	return c, ok
}

// onApplied runs on the run loop goroutine for every command applied while
// this replica is master, whoever proposed it: it keeps sessions, waiters
// and subscriptions in step with the replicated state and publishes events.
// It must not block.
func (m *master) onApplied(cmd []byte, res namespace.Result) {
	switch reply := res.Reply.(type) {
	case *namespace.SessionCreated:
		if c, err := namespace.DecodeCommand(cmd); err == nil {
			m.mu.Lock()
			m.mu.owners[reply.Session] = c.Caller
			m.mu.Unlock()
		}
		if _, err := m.sessions.Add(session.ID(reply.Session)); err != nil && !errors.Is(err, session.ErrDuplicateSession) {
			m.r.log.Warn("tracking new session", "session", reply.Session, "err", err)
		}
	case *namespace.TenantReply:
		m.lim.setQuota(reply.Tenant.Name, reply.Tenant.Quota)
	default:
		m.tokenApplied(reply)
	case *namespace.SessionEnded:
		m.mu.Lock()
		delete(m.mu.owners, reply.Session)
		delete(m.mu.tokens, reply.Session)
		for path, subs := range m.mu.subs {
			delete(subs, reply.Session)
			if len(subs) == 0 {
				delete(m.mu.subs, path)
			}
		}
		for path, cs := range m.mu.cachers {
			delete(cs, reply.Session)
			if len(cs) == 0 {
				delete(m.mu.cachers, path)
			}
		}
		m.mu.Unlock()
		_ = m.sessions.Remove(session.ID(reply.Session))
	}
	for _, ch := range res.Changes {
		m.publishChange(ch)
	}
	for _, f := range res.Freed {
		m.lockFreed(f)
	}
}

// subscribe records that session (of caller) watches path for the events
// in mask, if caller may read the node; a caller that may not is not
// subscribed (the handle's events are the caller's word, like its path).
func (m *master) subscribe(caller namespace.Caller, sess uint64, path string, mask api.EventMask) {
	if mask == 0 {
		return
	}
	m.mu.Lock()
	have := m.mu.subs[path][sess]
	m.mu.Unlock()
	if have&mask == mask {
		return // already subscribed (checked when it was)
	}
	if ok, err := m.r.ns.Allowed(caller, path, api.PermRead); err != nil || !ok {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	subs := m.mu.subs[path]
	if subs == nil {
		subs = map[uint64]api.EventMask{}
		m.mu.subs[path] = subs
	}
	subs[sess] |= mask
}

// unsubscribe forgets session's watch on path.
func (m *master) unsubscribe(sess uint64, path string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if subs := m.mu.subs[path]; subs != nil {
		delete(subs, sess)
		if len(subs) == 0 {
			delete(m.mu.subs, path)
		}
	}
}

// publish sends ev to every session watching ev.Path for want whose
// principal may read the node now: permission was checked when the session
// subscribed, and is checked again here because an ACL change (of the node,
// or of the contents of an ACL file it names) may have taken it away since.
// For a deleted node (EventHandleInvalid) "may read" means the namespace
// would tell the caller NotFound rather than PermissionDenied.
func (m *master) publish(want api.EventMask, ev api.Event) {
	type target struct {
		sess   uint64
		caller namespace.Caller
	}
	m.mu.Lock()
	var to []target
	for sess, mask := range m.mu.subs[ev.Path] {
		if mask&want != 0 {
			to = append(to, target{sess, m.mu.owners[sess]})
		}
	}
	m.mu.Unlock()
	for _, t := range to {
		if !m.mayRead(t.caller, ev.Path, ev.Kind == api.EventHandleInvalid) {
			continue
		}
		_ = m.sessions.Publish(session.ID(t.sess), ev)
		m.r.metrics.events.Inc()
	}
}

// mayRead reports whether caller may read path now. With gone, a node that
// no longer exists counts as readable if the caller may read its nearest
// existing ancestor (it would be told NotFound).
func (m *master) mayRead(caller namespace.Caller, path string, gone bool) bool {
	if caller.Principal == "" {
		return false
	}
	ok, err := m.r.ns.Allowed(caller, path, api.PermRead)
	if err == nil {
		return ok
	}
	return gone && errors.Is(err, api.ErrNotFound)
}

// bindToken records that sess was created or used with token id.
func (m *master) bindToken(sess uint64, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, live := m.mu.owners[sess]; !live {
		return
	}
	ts := m.mu.tokens[sess]
	if ts == nil {
		ts = map[string]struct{}{}
		m.mu.tokens[sess] = ts
	}
	ts[id] = struct{}{}
}

// tokenRevoked expires every session bound to the revoked token id. It
// runs on the run loop goroutine and must not block.
func (m *master) tokenRevoked(id string) {
	m.mu.Lock()
	var ended []uint64
	for sess, ts := range m.mu.tokens {
		if _, ok := ts[id]; ok {
			ended = append(ended, sess)
		}
	}
	m.mu.Unlock()
	for _, sess := range ended {
		m.r.log.Info("token revoked; expiring its session", "session", sess, "token", id)
		m.r.pipe.submit(context.Background(), m, originCell, m.r.admin(), &namespace.ExpireSession{Session: sess}, func(namespace.Result, error) {})
	}
}

func (m *master) publishChange(ch namespace.NodeChange) {
	switch ch.Kind {
	case namespace.ChangeContents:
		m.publish(api.WantContentsModified, api.Event{Kind: api.EventContentsModified, Path: ch.Path, Instance: ch.Instance})
	case namespace.ChangeChildAdded:
		m.publish(api.WantChildAdded, api.Event{Kind: api.EventChildAdded, Path: ch.Path, Child: ch.Child, Instance: ch.Instance})
	case namespace.ChangeChildRemoved:
		m.publish(api.WantChildRemoved, api.Event{Kind: api.EventChildRemoved, Path: ch.Path, Child: ch.Child, Instance: ch.Instance})
	case namespace.ChangeLockAcquired:
		m.publish(api.WantLockAcquired, api.Event{Kind: api.EventLockAcquired, Path: ch.Path, Instance: ch.Instance})
	case namespace.ChangeDeleted:
		// Every handle on the node is now invalid, whatever it asked for.
		m.publish(^api.EventMask(0), api.Event{Kind: api.EventHandleInvalid, Path: ch.Path, Instance: ch.Instance})
		m.mu.Lock()
		delete(m.mu.subs, ch.Path)
		m.mu.Unlock()
	}
}

// registerCacher records, before a read through a Cache handle, that the
// session may cache path, and reports whether the read is cacheable: it is
// not while a write to path is invalidating caches (the read could return
// the old value after the session was invalidated).
func (m *master) registerCacher(sess uint64, path string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.writing[path] > 0 {
		return false
	}
	cs := m.mu.cachers[path]
	if cs == nil {
		cs = map[uint64]struct{}{}
		m.mu.cachers[path] = cs
	}
	cs[sess] = struct{}{}
	return true
}

// forgetCacher records that sess no longer caches path.
func (m *master) forgetCacher(path string, sess uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cs := m.mu.cachers[path]; cs != nil {
		delete(cs, sess)
		if len(cs) == 0 {
			delete(m.mu.cachers, path)
		}
	}
}

// invalidate is called before a write to path is proposed. It marks the
// write in progress, waits until a new master's fail-over is acknowledged by
// every session (Chubby §2.9: until then a client may still trust a cache
// the old master was keeping consistent), then invalidates every session
// caching path and waits until each acknowledged or its lease ran out. The
// caller must call the returned end once the write was applied or failed.
func (m *master) invalidate(ctx context.Context, path string, kind api.EventKind) (end func(), err error) {
	m.mu.Lock()
	m.mu.writing[path]++
	// Each session stays registered until its Invalidate returns nil (it
	// acknowledged, or its lease ran out): a write that gives up waiting
	// (its deadline) leaves the event queued and the session's cache
	// unflushed, so the next write, and any write running beside this
	// one, must wait for that session too. Dropping the registry entry up
	// front let such a write complete while the session still served the
	// old contents from its cache.
	cachers := maps.Clone(m.mu.cachers[path])
	owners := make(map[uint64]namespace.Caller, len(cachers))
	for sess := range cachers {
		owners[sess] = m.mu.owners[sess]
	}
	m.mu.Unlock()
	// A session that may no longer read the node (an ACL, or an ACL file's
	// contents, changed since it read) is dropped without an invalidation:
	// it would reveal the write, and waiting for its acknowledgement would
	// let it stall writers it may not even see. Whatever it cached it read
	// while it could.
	for sess, caller := range owners {
		if !m.mayRead(caller, path, false) {
			delete(cachers, sess)
			m.forgetCacher(path, sess)
		}
	}
	end = func() {
		m.mu.Lock()
		if m.mu.writing[path]--; m.mu.writing[path] <= 0 {
			delete(m.mu.writing, path)
		}
		m.mu.Unlock()
	}
	select {
	case <-m.sessions.FailoverDone():
	case <-ctx.Done():
		end()
		return nil, ctxError(ctx)
	case <-m.ctx.Done():
		end()
		return nil, m.r.notMaster()
	}
	if len(cachers) == 0 {
		return end, nil
	}
	errs := make(chan error, len(cachers))
	for sess := range cachers {
		go func(sess uint64) {
			err := m.sessions.Invalidate(ctx, session.ID(sess), api.Event{Kind: kind, Path: path})
			if err == nil {
				// It holds nothing of path any more, and cannot cache it
				// again while this write is in progress (registerCacher).
				m.forgetCacher(path, sess)
			}
			errs <- err
		}(sess)
	}
	var first error
	for range cachers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	m.r.metrics.invalidations.Add(float64(len(cachers)))
	if first != nil {
		end()
		return nil, m.r.sessionError(first)
	}
	return end, nil
}

// lockQueue is the FIFO of sessions waiting for one lock at this master. A
// release wakes exactly the head (and, for shared grants, the run of shared
// waiters behind it): no thundering herd.
type lockQueue struct {
	path    string
	waiters []*lockWaiter
	// inflight reports that an Acquire for the head is in Paxos.
	inflight bool
	// timer retries the head when a lock-delay ends.
	timer *time.Timer
}

// lockWaiter is one blocked Acquire.
type lockWaiter struct {
	caller  namespace.Caller
	session uint64
	mode    api.LockMode
	// result receives the outcome exactly once (buffered).
	result chan waitResult
	once   sync.Once
	// gone is closed when the caller stopped waiting (canceled).
	gone chan struct{}
}

type waitResult struct {
	granted *namespace.Granted
	err     error
}

func (w *lockWaiter) finish(g *namespace.Granted, err error) {
	w.once.Do(func() { w.result <- waitResult{g, err} })
}

func (w *lockWaiter) abandoned() bool {
	select {
	case <-w.gone:
		return true
	default:
		return false
	}
}

// enqueue adds w behind the lock's other waiters and, if it is first, asks
// for the lock at once.
func (m *master) enqueue(path string, w *lockWaiter) {
	m.mu.Lock()
	q := m.mu.queues[path]
	if q == nil {
		q = &lockQueue{path: path}
		m.mu.queues[path] = q
	}
	q.waiters = append(q.waiters, w)
	m.r.metrics.waiters.Inc()
	m.mu.Unlock()
	m.kick(path)
}

// waiterCount returns the number of blocked Acquire calls.
func (m *master) waiterCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, q := range m.mu.queues {
		n += len(q.waiters)
	}
	return n
}

// queued reports whether someone waits for path (a non-blocking Acquire
// must not overtake them).
func (m *master) queued(path string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.mu.queues[path]
	return q != nil && len(q.waiters) > 0
}

// cancelWaiter removes w (whose caller gave up). If its Acquire is already
// in Paxos, the grant, if any, is released when it arrives (see kick).
func (m *master) cancelWaiter(path string, w *lockWaiter) {
	m.mu.Lock()
	defer m.mu.Unlock()
	q := m.mu.queues[path]
	if q == nil {
		return
	}
	for i, x := range q.waiters {
		if x != w {
			continue
		}
		if i == 0 && q.inflight {
			return // kick sees w.gone when the outcome arrives
		}
		q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
		m.r.metrics.waiters.Dec()
		m.dropIfEmptyLocked(q)
		return
	}
}

func (m *master) dropIfEmptyLocked(q *lockQueue) {
	if len(q.waiters) == 0 && !q.inflight {
		if q.timer != nil {
			q.timer.Stop()
		}
		delete(m.mu.queues, q.path)
	}
}

// kick proposes an Acquire for the head waiter of path, unless one is in
// flight already. The Acquire goes through the fair scheduler under the
// waiter's tenant, never shed (waiters are bounded by MaxWaiters).
func (m *master) kick(path string) {
	m.mu.Lock()
	q := m.mu.queues[path]
	if q == nil || q.inflight || len(q.waiters) == 0 || m.ctx.Err() != nil {
		m.mu.Unlock()
		return
	}
	// Skip waiters that left while queued.
	for len(q.waiters) > 0 && q.waiters[0].abandoned() {
		q.waiters = q.waiters[1:]
		m.r.metrics.waiters.Dec()
	}
	if len(q.waiters) == 0 {
		m.dropIfEmptyLocked(q)
		m.mu.Unlock()
		return
	}
	w := q.waiters[0]
	q.inflight = true
	m.mu.Unlock()
	op := &namespace.Acquire{Session: w.session, Path: path, Mode: w.mode}
	outcome := func(res namespace.Result, err error) { m.headOutcome(q, w, res, err) }
	if hook := m.r.cfg.headOutcomeHook; hook != nil {
		direct := outcome
		outcome = func(res namespace.Result, err error) {
			e := err
			if e == nil && res.Err != nil {
				e = res.Err
			}
			hook(path, e, w.gone, func() { direct(res, err) })
		}
	}
	// The waiter's own cancellation is handled by headOutcome, so the
	// Acquire is submitted under no context of the waiter's.
	m.r.pipe.submit(context.Background(), m, originWaiter, w.caller, op, outcome)
}

// headOutcome handles the result of the head waiter's Acquire. It runs on
// the run loop goroutine and must not block.
//
// A waiter whose caller canceled while its Acquire was in Paxos
// (cancelWaiter left it at the head) leaves the queue here whatever the
// outcome, and a grant it got is given back: a canceled Acquire leaves
// nothing behind. Whether the waiter was canceled is decided under m.mu,
// and its result is delivered under m.mu too, so a canceling caller (which
// closes gone before it takes m.mu in cancelWaiter) either finds the
// result waiting or has its grant released here; never neither.
func (m *master) headOutcome(q *lockQueue, w *lockWaiter, res namespace.Result, err error) {
	if err == nil && res.Err != nil {
		err = res.Err
	}
	g, _ := res.Reply.(*namespace.Granted)
	m.mu.Lock()
	q.inflight = false
	gone := w.abandoned()
	// w is still the head: while its Acquire is in flight nothing else
	// removes it. The check keeps a surprise from dropping someone else.
	atHead := len(q.waiters) > 0 && q.waiters[0] == w
	var next bool
	switch {
	case !atHead:
		next = len(q.waiters) > 0
	case err == nil && g != nil:
		q.waiters = q.waiters[1:]
		m.r.metrics.waiters.Dec()
		// Shared grants let the next shared waiter in at once.
		next = g.Mode == api.LockShared && len(q.waiters) > 0 && q.waiters[0].mode == api.LockShared
	case gone:
		// Canceled while in Paxos and not granted: it leaves now, and the
		// next waiter gets its turn.
		q.waiters = q.waiters[1:]
		m.r.metrics.waiters.Dec()
		next = len(q.waiters) > 0
	case errors.Is(err, api.ErrLocked):
		// Stay at the head; the release that frees the lock kicks again.
		m.notifyConflict(q.path)
	case errors.Is(err, api.ErrLockDelay):
		// The delay ends when the cell's time reaches ae.Until; while a
		// lock-delay runs, that time follows this replica's monotonic
		// clock (clock.go), so the difference is the real wait.
		var ae *api.Error
		errors.As(err, &ae)
		wait := time.Millisecond
		if now, err := m.r.clock.now(); err == nil && ae.Until-now > int64(wait) {
			wait = time.Duration(ae.Until - now)
		}
		if q.timer != nil {
			q.timer.Stop()
		}
		q.timer = time.AfterFunc(wait, func() { m.kick(q.path) })
	default:
		// NotFound, SessionExpired, PermissionDenied, NotMaster...: this
		// waiter is done; the next one gets its turn.
		q.waiters = q.waiters[1:]
		m.r.metrics.waiters.Dec()
		next = len(q.waiters) > 0
	}
	m.dropIfEmptyLocked(q)
	release := g != nil && gone
	switch {
	case release:
	case g != nil:
		w.finish(g, nil) // buffered: does not block
	case gone:
	case err != nil && !errors.Is(err, api.ErrLocked) && !errors.Is(err, api.ErrLockDelay):
		w.finish(nil, err)
	}
	m.mu.Unlock()
	if release {
		// The caller canceled while its Acquire was in Paxos: give the lock
		// back so a canceled waiter leaves nothing behind.
		m.r.pipe.submit(context.Background(), m, originCell, w.caller, &namespace.Release{Session: w.session, Path: q.path, Generation: g.Generation}, func(namespace.Result, error) {})
	}
	if next {
		go m.kick(q.path)
	}
}

// notifyConflict tells the holders of path that someone waits for it.
// REQUIRES: m.mu held.
func (m *master) notifyConflict(path string) {
	if len(m.mu.subs[path]) == 0 {
		return
	}
	go m.publish(api.WantConflictingLock, api.Event{Kind: api.EventConflictingLock, Path: path})
}

// lockFreed wakes the head waiter of a lock that became free, or fails
// every waiter if its node is gone. Runs on the run loop goroutine.
func (m *master) lockFreed(f namespace.FreedLock) {
	if !f.NodeDeleted {
		go m.kick(f.Path)
		return
	}
	m.mu.Lock()
	q := m.mu.queues[f.Path]
	var ws []*lockWaiter
	if q != nil && !q.inflight {
		ws = q.waiters
		q.waiters = nil
		m.r.metrics.waiters.Sub(float64(len(ws)))
		m.dropIfEmptyLocked(q)
	}
	m.mu.Unlock()
	for _, w := range ws {
		w.finish(nil, apiErr(api.NotFound, "the lock's node was deleted"))
	}
	if q != nil && q.inflight {
		go m.kick(f.Path)
	}
}
