package cell

import (
	"context"
	"errors"
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

	// owners maps live sessions to their principals and token bindings.
	owners *sessionOwners
	// subs holds the event subscriptions of open handles.
	subs *subscriptions
	// caches knows which sessions may cache which nodes, and invalidates
	// them before a write.
	caches *cacheRegistry

	mu struct {
		sync.Mutex
		// queues holds the lock waiters per lock path, in arrival order.
		queues map[string]*lockQueue
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
	m.owners = newSessionOwners()
	m.subs = newSubscriptions(m.owners.owner,
		func(c namespace.Caller, path string) (bool, error) { return r.ns.Allowed(c, path, api.PermRead) },
		func(sess uint64, ev api.Event) {
			_ = m.sessions.Publish(session.ID(sess), ev)
			r.metrics.events.Inc()
		})
	m.mu.queues = map[string]*lockQueue{}
	m.caches = newCacheRegistry(cacheDeps{
		mayRead: func(sess uint64, path string) bool {
			c, _ := m.owners.owner(sess)
			return m.subs.mayRead(c, path, false)
		},
		failoverDone: mgr.FailoverDone,
		stopped:      ctx.Done(),
		stoppedErr:   func() error { return r.notMaster() },
		invalidate: func(ctx context.Context, sess uint64, ev api.Event) error {
			return mgr.Invalidate(ctx, session.ID(sess), ev)
		},
		invalidateErr: func(err error) error { return r.sessionError(err) },
		sent:          func(n int) { r.metrics.invalidations.Add(float64(n)) },
	})
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
			m.owners.add(s.ID, namespace.Caller{Tenant: s.Tenant, Principal: s.Principal})
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

// onApplied runs on the run loop goroutine for every command applied while
// this replica is master, whoever proposed it: it keeps sessions, waiters
// and subscriptions in step with the replicated state and publishes events.
// It learns everything from the result (the namespace decoded the command
// once, to apply it). It must not block.
func (m *master) onApplied(res namespace.Result) {
	switch reply := res.Reply.(type) {
	case *namespace.SessionCreated:
		m.owners.add(reply.Session, reply.Owner)
		if _, err := m.sessions.Add(session.ID(reply.Session)); err != nil && !errors.Is(err, session.ErrDuplicateSession) {
			m.r.log.Warn("tracking new session", "session", reply.Session, "err", err)
		}
	case *namespace.TenantReply:
		m.lim.setQuota(reply.Tenant.Name, reply.Tenant.Quota)
	default:
		m.tokenApplied(reply)
	case *namespace.SessionEnded:
		m.owners.remove(reply.Session)
		m.subs.forgetSession(reply.Session)
		m.caches.forgetSession(reply.Session)
		_ = m.sessions.Remove(session.ID(reply.Session))
	}
	for _, ch := range res.Changes {
		m.subs.publishChange(ch)
	}
	for _, f := range res.Freed {
		m.lockFreed(f)
	}
}

// tokenRevoked expires every session bound to the revoked token id. It
// runs on the run loop goroutine and must not block.
func (m *master) tokenRevoked(id string) {
	for _, sess := range m.owners.boundTo(id) {
		m.r.log.Info("token revoked; expiring its session", "session", sess, "token", id)
		m.r.pipe.submit(context.Background(), m, originCell, m.r.admin(), &namespace.ExpireSession{Session: sess}, func(namespace.Result, error) {})
	}
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
		m.subs.conflict(q.path)
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
