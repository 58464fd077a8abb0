package cell

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
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
// master itself wires them to each other and to its masterDeps (the
// replica builds those, wire.go), runs the role's goroutines, and keeps
// the parts in step with applied commands (onApplied). A new
// master rebuilds sessions from the applied state and extends their leases;
// lock waiters and subscriptions are re-established by clients on their
// next call (handles are self-describing).
type master struct {
	deps  masterDeps
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

// masterDeps is what the master role needs of its replica: the replica
// builds it each time it becomes master (wire.go).
type masterDeps struct {
	log     *slog.Logger
	metrics *metrics
	// state is the applied state the role reads, as cellCaller (the
	// caller the cell uses for its own commands).
	state      masterState
	cellCaller namespace.Caller
	// submit hands a command to the pipeline under the role m
	// (pipeline.submit); wake tells the pipeline that tenant commands are
	// queued (pipeline.poke); load is how many commands are queued for or
	// in Paxos, and the capacity that is measured against (pipeline.load).
	submit func(ctx context.Context, m *master, o origin, caller namespace.Caller, op namespace.Op, done func(namespace.Result, error))
	wake   func()
	load   func() (queued, capacity int)
	// notMaster is the error for a call this role can no longer serve;
	// sessionError maps the session manager's errors.
	notMaster    func() *api.Error
	sessionError func(error) *api.Error
	// rebase starts the cell clock's term (cellClock.rebase); now is the
	// cell's time (cellClock.now).
	rebase func() error
	now    func() (int64, error)
	// sessions configures the session manager (its Epoch is the role's).
	sessions session.Config
	// maxExtension is how far the session lease may be extended under
	// load (Config.MaxSessionLease - SessionLease); 0 or less: never.
	maxExtension time.Duration
	// readCap, queue and window are Config.TenantReadConcurrency,
	// TenantQueue and ProposalWindow.
	readCap, queue, window int
	// hook receives the head waiters' outcomes in tests
	// (Config.headOutcomeHook); twoRound turns the one-round hand-over off
	// for the role m (Config.twoRoundHandOver, or a member that cannot
	// apply it: features.go).
	hook     func(path string, err error, gone <-chan struct{}, deliver func())
	twoRound func(m *master) bool
	// handOverRuns reports that every member of the role m applies a
	// release that hands the lock to a whole run of shared waiters
	// (FeatureHandOverRun).
	handOverRuns func(m *master) bool
}

// masterState is the applied state as the master role reads it
// (namespace.Store implements it).
type masterState interface {
	Tenant(c namespace.Caller, name string) (api.TenantInfo, error)
	SessionOwners(c namespace.Caller) ([]namespace.SessionOwner, error)
	HeldLocks(c namespace.Caller, sid uint64) ([]string, error)
	Allowed(c namespace.Caller, path string, perm api.Perm) (bool, error)
}

func newMaster(d masterDeps, epoch uint64) (*master, error) {
	// Stamps of this term count from now and from the state's clock.
	if err := d.rebase(); err != nil {
		return nil, err
	}
	mgr, err := session.New(d.sessions)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &master{deps: d, epoch: epoch, since: monotime.Now(), sessions: mgr, ctx: ctx, cancel: cancel}
	m.lim = newLimiter(limiterDeps{
		quota: func(tenant string) (api.TenantQuota, bool) {
			info, err := d.state.Tenant(d.cellCaller, tenant)
			return info.Quota, err == nil
		},
		readCap: d.readCap,
		queue:   d.queue,
		shed:    d.metrics.shed,
		now:     monotime.Now,
	})
	m.sched = newScheduler(schedDeps{
		window:  d.window,
		queue:   d.queue,
		weight:  func(tenant string) int { return weightOf(m.lim.quota(tenant)) },
		wake:    d.wake,
		stopped: func() error { return d.notMaster() },
		shed:    d.metrics.shed,
		queued:  d.metrics.tenantQueue,
	})
	m.owners = newSessionOwners()
	m.subs = newSubscriptions(m.owners.owner,
		func(c namespace.Caller, path string) (bool, error) { return d.state.Allowed(c, path, api.PermRead) },
		func(sess uint64, ev api.Event) {
			_ = mgr.Publish(session.ID(sess), ev)
			d.metrics.events.Inc()
		})
	m.caches = newCacheRegistry(cacheDeps{
		mayRead: func(sess uint64, path string) bool {
			c, _ := m.owners.owner(sess)
			return m.subs.mayRead(c, path, false)
		},
		failoverDone: mgr.FailoverDone,
		stopped:      ctx.Done(),
		stoppedErr:   func() error { return d.notMaster() },
		invalidate: func(ctx context.Context, sess uint64, ev api.Event) error {
			return mgr.Invalidate(ctx, session.ID(sess), ev)
		},
		invalidateErr: func(err error) error { return d.sessionError(err) },
		sent:          func(n int) { d.metrics.invalidations.Add(float64(n)) },
	})
	m.locks = newLockQueues(lockDeps{
		prop:     masterProposer{m},
		conflict: m.subs.conflict,
		now:      d.now,
		waiting:  func(n int) { d.metrics.waiters.Add(float64(n)) },
		hook:     d.hook,
		twoRound: func() bool { return d.twoRound(m) },
		runs:     func() bool { return d.handOverRuns(m) },
	})
	// Every session of every tenant, in one ordered scan of the session
	// records: this runs on the run loop while the new master's lease
	// runs, and with 100,000 sessions a scan per tenant's index and a
	// point read per session took about four times as long. The scan
	// decodes only the owners (no creation times, one string per
	// distinct owner), and the IDs come in ascending order, which
	// Manager.Start takes over without sorting or a set of its own.
	list, err := d.state.SessionOwners(d.cellCaller)
	if err != nil {
		cancel()
		return nil, err
	}
	ids := make([]session.ID, len(list))
	for i, s := range list {
		ids[i] = session.ID(s.ID)
	}
	m.owners.addAll(list)
	// Every session the previous master may have been keeping alive gets a
	// full lease from now and a fail-over event (Chubby §2.9).
	if err := mgr.Start(true, ids); err != nil {
		cancel()
		return nil, err
	}
	m.wg.Add(1)
	go m.expireLoop()
	m.wg.Add(1)
	go m.failoverProgress()
	if d.maxExtension > 0 {
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
	p.m.deps.submit(context.Background(), p.m, o, caller, op, done)
}

func (p masterProposer) release(caller namespace.Caller, op *namespace.Release, done func(namespace.Result, error)) {
	p.m.deps.submit(context.Background(), p.m, originCell, caller, op, done)
}

// stop ends the role: every lock waiter is told to retry with the new
// master, parked KeepAlives return NotMaster, and tenant commands still
// queued for Paxos are answered NotMaster. Run loop only.
func (m *master) stop() {
	m.cancel()
	m.locks.stop(m.deps.notMaster())
	m.sessions.Stop()
	m.wg.Wait()
	m.sched.close()
}

// expireInflight bounds the ExpireSession commands the master has
// submitted and not yet seen answered. A fail-over can decide thousands of
// expiries in one instant (every session whose client did not reach the
// new master within its lease); submitted all at once they overflowed the
// Paxos core's queue (paxos.ErrBusy), most of them failed, and their
// sessions, already dead to their clients, stayed in the replicated state
// with their locks until some later master expired them again. A window
// of one slot's worth keeps the core fed without overflowing it, and
// leaves room for the clients' own commands.
const expireInflight = 256

// expiryLogBurst is how many expiries a second the master logs one by one.
// Past it (a fail-over can expire tens of thousands of sessions at once)
// they are counted and summed up in one line when the second ends: a line
// per session made the log cost the master more than the expiries did.
const expiryLogBurst = 16

// expireLoop turns the session manager's expiry decisions into logged
// ExpireSession commands (Chubby: the lease ran out, so the session ends,
// its locks are released with lock-delay and its ephemeral nodes deleted),
// at most expireInflight at a time, in the order decided. A command the
// Paxos core refuses as saturated is submitted again after a pause; any
// other failure is logged, and the next master decides again.
func (m *master) expireLoop() {
	defer m.wg.Done()
	type outcome struct {
		sess uint64
		err  error
	}
	// done never blocks its sender: at most expireInflight commands are
	// out, each answered once.
	done := make(chan outcome, expireInflight)
	var queue []uint64
	inflight := 0
	pause := time.NewTimer(time.Hour)
	pause.Stop()
	paused := false
	// The expiries logged one by one in the second from logFrom, and the
	// ones only counted since; summary ends that second.
	summary := time.NewTimer(time.Hour)
	summary.Stop()
	var logFrom time.Time
	logged, unlogged := 0, 0
	for {
		for !paused && inflight < expireInflight && len(queue) > 0 {
			sess := queue[0]
			queue = queue[1:]
			inflight++
			m.expire(sess, func(res namespace.Result, err error) { done <- outcome{sess, err} })
		}
		select {
		case <-m.ctx.Done():
			return
		case d, ok := <-m.sessions.Decisions():
			if !ok {
				return
			}
			m.deps.metrics.expiries.Inc()
			if unlogged == 0 && time.Since(logFrom) >= time.Second {
				logFrom, logged = time.Now(), 0
			}
			if logged < expiryLogBurst {
				logged++
				m.deps.log.Info("session lease ran out; expiring it", "session", d.Session)
			} else {
				if unlogged == 0 {
					summary.Reset(time.Until(logFrom.Add(time.Second)))
				}
				unlogged++
			}
			queue = append(queue, uint64(d.Session))
		case o := <-done:
			inflight--
			switch {
			case o.err == nil:
			case errors.Is(o.err, paxos.ErrBusy) || isSaturated(o.err):
				// Back-pressure: try again shortly, first in line.
				queue = append([]uint64{o.sess}, queue...)
				if !paused {
					paused = true
					pause.Reset(proposalBackoff)
				}
			default:
				m.deps.log.Warn("expiring session failed; the next master will decide again", "session", o.sess, "err", o.err)
			}
		case <-pause.C:
			paused = false
		case <-summary.C:
			m.deps.log.Info("more sessions' leases ran out; expiring them", "sessions", unlogged,
				"queued", len(queue), "in_flight", inflight)
			logFrom, logged, unlogged = time.Now(), 0, 0
		}
	}
}

// isSaturated reports whether err is the Paxos core's back-pressure as
// the pipeline reports it to a command's submitter.
func isSaturated(err error) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Code == api.ResourceExhausted
}

// failoverProgressEvery is how often the master logs how far the sessions
// it took over are with acknowledging their fail-over events.
const failoverProgressEvery = time.Second

// failoverProgress logs, every failoverProgressEvery until every session
// the master took over acknowledged its fail-over event or expired, how
// many are still pending, and then how long that took: the record of a
// fail-over's KeepAlive storm.
func (m *master) failoverProgress() {
	defer m.wg.Done()
	start := time.Now()
	t := time.NewTicker(failoverProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-m.sessions.FailoverDone():
			st := m.sessions.Stats()
			m.deps.log.Info("fail-over done: every session taken over acknowledged or expired",
				"after", time.Since(start), "sessions", st.Sessions, "expiries", st.Expiries)
			return
		case <-t.C:
			st := m.sessions.Stats()
			m.deps.log.Info("fail-over in progress", "after", time.Since(start), "pending", st.FailoverPending,
				"sessions", st.Sessions, "parked", st.Parked, "keepalives", st.KeepAlives, "expiring", st.Expiring)
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
			m.deps.log.Warn("tracking new session", "session", reply.Session, "err", err)
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
		m.deps.log.Info("token revoked; expiring its session", "session", sess, "token", id)
		m.expire(sess, nil)
	}
}
