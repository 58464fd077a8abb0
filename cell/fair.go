package cell

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// scheduler is the fair share of the master's proposal pipeline between
// tenants. Tenant principals' commands do not go straight into the
// run loop's proposal channel: each tenant has a bounded FIFO queue, and one
// dispatcher goroutine moves commands from the queues into the channel in
// weighted round-robin order (a deficit round-robin with unit cost: a
// tenant of weight w gets up to w commands per turn), while at most
// Config.ProposalWindow commands are between the dispatcher and their
// applied result. A flooding tenant therefore fills its own queue, not the
// pipeline: another tenant's command waits for at most one turn of every
// busy tenant plus the window, whatever the flood. When a tenant's queue is
// full its new commands are shed with ResourceExhausted and a RetryAfter
// hint; nothing that was accepted is dropped (a queued command is either
// proposed or answered with an error that says it was not).
//
// What was tried: a single shared queue with a per-tenant cap on queued
// commands bounds the flooder's share of memory but not of latency (a
// victim still waits behind every queued command of the flooder); a rate
// limit alone cannot tell a saturated master from an idle one. The window
// is what makes the order matter: without it, the dispatcher would move
// everything into the channel at once and the run loop's FIFO would decide.
//
// Commands of the cell itself (session expiry, releases of canceled grants)
// and of the administrator bypass the scheduler: they are few, and they free
// resources. The command's time stamp is taken at dispatch, so a command
// that waited in a queue is stamped when it really enters Paxos.
type scheduler struct {
	r *Replica
	// weight returns a tenant's fair-share weight (≥ 1).
	weight func(tenant string) int
	wake   chan struct{}

	mu struct {
		sync.Mutex
		queues map[string]*tenantQueue
		// ring lists the tenants with queued commands in turn order; next
		// is the index of the tenant whose turn it is.
		ring     []string
		next     int
		inflight int
		// closed is set when the dispatcher has stopped.
		closed bool
	}
}

// tenantQueue is one tenant's FIFO of commands waiting for dispatch.
type tenantQueue struct {
	items  []*schedItem
	weight int
	credit int
}

// schedItem is one queued command.
type schedItem struct {
	caller namespace.Caller
	op     namespace.Op
	done   func(namespace.Result, error)
	// gone, if not nil, is closed when the caller stopped waiting; a
	// command whose caller left before dispatch is dropped unproposed.
	gone <-chan struct{}
}

func newScheduler(r *Replica, lim *limiter) *scheduler {
	s := &scheduler{r: r, wake: make(chan struct{}, 1)}
	s.weight = func(tenant string) int { return weightOf(lim.quota(tenant)) }
	s.mu.queues = map[string]*tenantQueue{}
	return s
}

// submit queues it for tenant. With force the tenant's queue bound is not
// applied (lock-queue kicks: they are bounded by MaxWaiters already, and
// shedding one would strand the waiters behind it).
func (s *scheduler) submit(tenant string, it *schedItem, force bool) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return s.r.notMaster()
	}
	q := s.mu.queues[tenant]
	if q == nil {
		q = &tenantQueue{weight: s.weight(tenant)}
		s.mu.queues[tenant] = q
		s.mu.ring = append(s.mu.ring, tenant)
	}
	limit := s.r.cfg.TenantQueue * q.weight
	if !force && len(q.items) >= limit {
		s.mu.Unlock()
		s.r.metrics.shed(tenant, "queue_full")
		return api.RetryAfterError(fmt.Sprintf("tenant %q: %d commands queued at the master; it is saturated", tenant, limit), 20*time.Millisecond)
	}
	q.items = append(q.items, it)
	s.r.metrics.tenantQueued.WithLabelValues(tenant).Inc()
	s.mu.Unlock()
	s.poke()
	return nil
}

func (s *scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// nextLocked takes the next command to dispatch, or nil if the window is
// full or nothing is queued.
// REQUIRES: s.mu held.
func (s *scheduler) nextLocked() (string, *schedItem) {
	if s.mu.inflight >= s.r.cfg.ProposalWindow {
		return "", nil
	}
	for len(s.mu.ring) > 0 {
		i := s.mu.next % len(s.mu.ring)
		name := s.mu.ring[i]
		q := s.mu.queues[name]
		if len(q.items) == 0 {
			s.mu.ring = append(s.mu.ring[:i], s.mu.ring[i+1:]...)
			delete(s.mu.queues, name)
			s.mu.next = i
			continue
		}
		if q.credit <= 0 {
			q.credit = q.weight
		}
		it := q.items[0]
		q.items[0] = nil
		q.items = q.items[1:]
		q.credit--
		if q.credit == 0 {
			s.mu.next = i + 1
		}
		s.mu.inflight++
		return name, it
	}
	return "", nil
}

// run is the dispatcher; it ends with ctx (the master role), answering
// every command still queued with NotMaster: none of them was proposed.
func (s *scheduler) run(ctx context.Context) {
	defer s.drain()
	for {
		select {
		case <-s.wake:
		case <-ctx.Done():
			return
		}
		for {
			s.mu.Lock()
			tenant, it := s.nextLocked()
			s.mu.Unlock()
			if it == nil {
				break
			}
			s.r.metrics.tenantQueued.WithLabelValues(tenant).Dec()
			if it.gone != nil {
				select {
				case <-it.gone:
					s.finished()
					it.done(namespace.Result{}, errCanceled)
					continue
				default:
				}
			}
			done := it.done
			p, _, err := s.r.newProposal(it.caller, it.op, func(res namespace.Result, err error) {
				s.finished()
				done(res, err)
			})
			if err != nil {
				s.finished()
				done(namespace.Result{}, err)
				continue
			}
			select {
			case s.r.proposeC <- p:
			case <-ctx.Done():
				p.done(namespace.Result{}, s.r.notMaster())
				return
			case <-s.r.done:
				p.done(namespace.Result{}, errUnavailable("the replica stopped"))
				return
			}
		}
	}
}

// finished frees a window place. It runs on the run loop goroutine (from a
// proposal's done) and must not block.
func (s *scheduler) finished() {
	s.mu.Lock()
	s.mu.inflight--
	s.mu.Unlock()
	s.poke()
}

func (s *scheduler) drain() {
	s.mu.Lock()
	queues := s.mu.queues
	s.mu.queues = map[string]*tenantQueue{}
	s.mu.ring = nil
	s.mu.closed = true
	s.mu.Unlock()
	for tenant, q := range queues {
		for _, it := range q.items {
			s.r.metrics.tenantQueued.WithLabelValues(tenant).Dec()
			it.done(namespace.Result{}, s.r.notMaster())
		}
	}
}

// propose runs op for caller (a tenant principal) through the scheduler and
// waits for its applied result. If ctx ends while the command is still
// queued it is never proposed; once dispatched it may still be applied.
func (s *scheduler) propose(ctx context.Context, caller namespace.Caller, op namespace.Op) (namespace.Result, error) {
	type outcome struct {
		res namespace.Result
		err error
	}
	ch := make(chan outcome, 1)
	gone := make(chan struct{})
	it := &schedItem{caller: caller, op: op, gone: gone, done: func(res namespace.Result, err error) { ch <- outcome{res, err} }}
	if err := s.submit(caller.Tenant, it, false); err != nil {
		return namespace.Result{}, err
	}
	select {
	case o := <-ch:
		return o.res, o.err
	case <-ctx.Done():
		close(gone)
		return namespace.Result{}, ctxError(ctx)
	}
}

// proposeAsync runs op for caller through the scheduler and calls done with
// the outcome (on the run loop goroutine, or on the caller's if the command
// is shed at once); done must not block.
func (s *scheduler) proposeAsync(caller namespace.Caller, op namespace.Op, force bool, done func(namespace.Result, error)) {
	if err := s.submit(caller.Tenant, &schedItem{caller: caller, op: op, done: done}, force); err != nil {
		done(namespace.Result{}, err)
	}
}
