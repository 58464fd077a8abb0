package cell

import (
	"context"
	"errors"
	"sync"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/session"
)

// master is the master role of one epoch: it exists from the moment the
// replica becomes master until it loses leadership, and holds everything
// that lives only in the master's memory (Chubby §2.9). It composes one
// part per concern, none of which holds the *Replica:
//
//   - sessions: session leases and KeepAlive long-polls (session.Manager);
//   - owners: who owns each live session, and its token bindings (owners.go);
//   - locks: the FIFO queues of lock waiters (lockqueue.go);
//   - subs: the event subscriptions of open handles (events.go);
//   - caches: which sessions cache which nodes (cachereg.go);
//   - lim and sched: per-tenant limits and the fair scheduler of tenant
//     commands (limits.go, fair.go).
//
// master itself wires them to the replica, runs the role's goroutines,
// and keeps the parts in step with applied commands (onApplied). A new
// master rebuilds sessions from the applied state and extends their leases;
// lock waiters and subscriptions are re-established by clients on their
// next call (handles are self-describing).
type master struct {
	r     *Replica
	epoch uint64
	// since is when the role began: only the progress reports received
	// from then on count for the feature gate (features.go).
	since    monotime.Time
	sessions *session.Manager
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	lim      *limiter
	sched    *scheduler
	owners   *sessionOwners
	locks    *lockQueues
	subs     *subscriptions
	caches   *cacheRegistry
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
	m := &master{r: r, epoch: epoch, since: monotime.Now(), sessions: mgr, ctx: ctx, cancel: cancel}
	m.lim = newLimiter(limiterDeps{
		quota: func(tenant string) (api.TenantQuota, bool) {
			info, err := r.ns.Tenant(r.admin(), tenant)
			return info.Quota, err == nil
		},
		readCap: r.cfg.TenantReadConcurrency,
		queue:   r.cfg.TenantQueue,
		shed:    r.metrics.shed,
		now:     monotime.Now,
	})
	m.sched = newScheduler(schedDeps{
		window:  r.cfg.ProposalWindow,
		queue:   r.cfg.TenantQueue,
		weight:  func(tenant string) int { return weightOf(m.lim.quota(tenant)) },
		wake:    r.pipe.poke,
		stopped: func() error { return r.notMaster() },
		shed:    r.metrics.shed,
		queued:  r.metrics.tenantQueue,
	})
	m.owners = newSessionOwners()
	m.subs = newSubscriptions(m.owners.owner,
		func(c namespace.Caller, path string) (bool, error) { return r.ns.Allowed(c, path, api.PermRead) },
		func(sess uint64, ev api.Event) {
			_ = mgr.Publish(session.ID(sess), ev)
			r.metrics.events.Inc()
		})
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
	m.locks = newLockQueues(lockDeps{
		prop:     masterProposer{m},
		conflict: m.subs.conflict,
		now:      r.clock.now,
		waiting:  func(d int) { r.metrics.waiters.Add(float64(d)) },
		hook:     r.cfg.headOutcomeHook,
		twoRound: func() bool { return r.cfg.twoRoundHandOver || len(r.featureMissing(m, FeatureHandOver)) > 0 },
		runs:     func() bool { return len(r.featureMissing(m, FeatureHandOverRun)) == 0 },
	})
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

// masterProposer is how the lock queues of m reach Paxos: through the
// pipeline under m, a try as its caller's request, a queued waiter's
// Acquire as a waiter's (never shed), and a release of a grant nobody
// waits for as the cell's own clean-up (routeFor decides the routes).
type masterProposer struct{ m *master }

func (p masterProposer) acquire(caller namespace.Caller, op *namespace.Acquire, queued bool, done func(namespace.Result, error)) {
	o := originRequest
	if queued {
		o = originWaiter
	}
	// A waiter's or a try's cancellation is the lock queues' to handle
	// (they give back a grant nobody waits for), so the Acquire is
	// submitted under no context of the caller's.
	p.m.r.pipe.submit(context.Background(), p.m, o, caller, op, done)
}

func (p masterProposer) release(caller namespace.Caller, op *namespace.Release, done func(namespace.Result, error)) {
	p.m.r.pipe.submit(context.Background(), p.m, originCell, caller, op, done)
}

// stop ends the role: every lock waiter is told to retry with the new
// master, parked KeepAlives return NotMaster, and tenant commands still
// queued for Paxos are answered NotMaster. Run loop only.
func (m *master) stop() {
	m.cancel()
	m.locks.stop(m.r.notMaster())
	m.sessions.Stop()
	m.wg.Wait()
	m.sched.close()
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
			m.expire(uint64(d.Session), func(res namespace.Result, err error) {
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
		m.locks.lockFreed(f)
	}
}

// tokenRevoked expires every session bound to the revoked token id. It
// runs on the run loop goroutine and must not block.
func (m *master) tokenRevoked(id string) {
	for _, sess := range m.owners.boundTo(id) {
		m.r.log.Info("token revoked; expiring its session", "session", sess, "token", id)
		m.expire(sess, nil)
	}
}
