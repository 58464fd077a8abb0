package cell

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// scheduler is the fair share of the master's proposal pipeline between
// tenants (pipeline.go routes tenant commands here). Tenant principals'
// commands do not go straight to the run loop: each tenant has a bounded
// FIFO queue, and the run loop takes commands from the queues in weighted
// round-robin order (a deficit round-robin with unit cost: a tenant of
// weight w gets up to w commands per turn), while at most
// Config.ProposalWindow commands are between their queue and their applied
// result (a group counts as one command: see below). A flooding tenant
// therefore fills its own queue, not the pipeline: another tenant's
// command waits for at most one turn of every busy tenant plus the window,
// whatever the flood. When a tenant's queue is
// full its new commands are shed with ResourceExhausted and a RetryAfter
// hint; nothing that was accepted is dropped (a queued command is either
// proposed or answered with an error that says it was not).
//
// What was tried: a single shared queue with a per-tenant cap on queued
// commands bounds the flooder's share of memory but not of latency (a
// victim still waits behind every queued command of the flooder); a rate
// limit alone cannot tell a saturated master from an idle one. The window
// is what makes the order matter: without it, everything queued would be
// proposed at once and the order of arrival would decide.
//
// A group of commands submitted together (pipeline.submitGroup: the
// sessions of one CreateSessions call) is one unit here: one entry of its
// tenant's queue, one turn's unit of credit and one window place, held
// until its last command's outcome. The queue and the window therefore
// count calls, not commands; a call of n commands was charged n against
// the tenant's rate when it was admitted, and each of its commands is held
// to the tenant's quotas as it is applied. Counting a group of n as n
// places let a window of 64 carry at most 64 session creations into a
// slot, whatever the clients sent: opens were bounded by the window, not
// by Paxos or the CPU. A group is at most api.MaxCreateSessions commands,
// so the most commands the window lets into Paxos is that many times the
// window, which the pipeline's maxInPaxos bounds in turn.
//
// Which commands come here is routeFor's decision (pipeline.go); the time
// stamp is taken when the run loop proposes a command, so one that waited
// in a queue is stamped when it really enters Paxos.
type scheduler struct {
	d schedDeps

	mu struct {
		sync.Mutex
		queues map[string]*tenantQueue
		// ring lists the tenants with queued commands in turn order; next
		// is the index of the tenant whose turn it is.
		ring     []string
		next     int
		inflight int
		// closed is set when the master role has stopped (close).
		closed bool
	}
}

// tenantQueue is one tenant's FIFO of commands waiting for dispatch; an
// item with members is a group (proposal.members), one unit of the queue.
type tenantQueue struct {
	items  []*proposal
	weight int
	credit int
}

// schedDeps is everything the scheduler needs from outside: two numbers
// of the replica's configuration and a few functions its master role
// builds (newMaster). Every function must be set.
type schedDeps struct {
	// window is Config.ProposalWindow: the tenant commands that may be
	// between their queue and their applied result at once.
	window int
	// queue is Config.TenantQueue: a tenant's queue bound per unit of
	// weight.
	queue int
	// weight returns a tenant's fair-share weight (≥ 1).
	weight func(tenant string) int
	// wake tells the run loop that a command was queued or a window place
	// freed (pipeline.poke).
	wake func()
	// stopped is the error for a command the ended master role will not
	// propose (NotMaster naming the master, if one is known).
	stopped func() error
	// shed counts a command of tenant refused because its queue was full.
	shed func(tenant, reason string)
	// queued reports that tenant's queue grew or shrank by delta commands
	// (a group counts its commands); it may be called with the
	// scheduler's mutex held, so it must not block.
	queued func(tenant string, delta int)
}

// newScheduler returns the scheduler of a master role.
func newScheduler(d schedDeps) *scheduler {
	s := &scheduler{d: d}
	s.mu.queues = map[string]*tenantQueue{}
	return s
}

// submit queues it, with its members if it leads a group, for tenant, as
// one unit of the tenant's queue. With force the tenant's queue bound is
// not applied (routeFairNoShed: see routeFor). An error means nothing was
// queued: the caller answers it and its members.
func (s *scheduler) submit(tenant string, it *proposal, force bool) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return s.d.stopped()
	}
	q := s.mu.queues[tenant]
	if q == nil {
		q = &tenantQueue{weight: s.d.weight(tenant)}
		s.mu.queues[tenant] = q
		s.mu.ring = append(s.mu.ring, tenant)
	}
	limit := s.d.queue * q.weight
	if !force && len(q.items) >= limit {
		s.mu.Unlock()
		s.d.shed(tenant, "queue_full")
		return api.RetryAfterError(fmt.Sprintf("tenant %q: %d commands queued at the master; it is saturated", tenant, limit), 20*time.Millisecond)
	}
	q.items = append(q.items, it)
	s.d.queued(tenant, 1+len(it.members))
	s.mu.Unlock()
	s.d.wake()
	return nil
}

// nextLocked takes the next command to dispatch, or nil if the window is
// full or nothing is queued.
// REQUIRES: s.mu held.
func (s *scheduler) nextLocked() (string, *proposal) {
	if s.mu.inflight >= s.d.window {
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

// next takes the next tenant command to propose, in fair-share order, or
// nil if the window is full or nothing is queued; a group's leader comes
// with its members (proposal.members), to be proposed together. The
// command, or the group, holds one window place until the last of its
// outcomes is delivered (proposal.finish). Run loop only
// (pipeline.dispatch).
func (s *scheduler) next() *proposal {
	s.mu.Lock()
	tenant, p := s.nextLocked()
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	s.d.queued(tenant, -(1 + len(p.members)))
	w := &windowPlace{s: s}
	w.held.Store(int32(1 + len(p.members)))
	p.place = w
	for _, q := range p.members {
		q.place = w
	}
	return p
}

// windowPlace is one place of the scheduler's window, held by a command
// or by every command of a group until each has its outcome.
type windowPlace struct {
	s *scheduler
	// held counts the commands whose outcome is still to come.
	held atomic.Int32
}

// release is called once per holder as its outcome is delivered; the last
// frees the place.
func (w *windowPlace) release() {
	if w.held.Add(-1) == 0 {
		w.s.finished()
	}
}

// finished frees a window place. It runs on the run loop goroutine (from a
// proposal's finish) and must not block.
func (s *scheduler) finished() {
	s.mu.Lock()
	s.mu.inflight--
	waiting := len(s.mu.ring) > 0
	s.mu.Unlock()
	if waiting {
		s.d.wake()
	}
}

// close ends the scheduler with its master role: every command still
// queued is answered NotMaster (none of them was proposed), and later
// submits are refused with it. It wakes the run loop, whose next dispatch
// answers the role's commands queued direct. Run loop only.
func (s *scheduler) close() {
	s.mu.Lock()
	queues := s.mu.queues
	s.mu.queues = map[string]*tenantQueue{}
	s.mu.ring = nil
	s.mu.closed = true
	s.mu.Unlock()
	defer s.d.wake()
	for tenant, q := range queues {
		for _, p := range q.items {
			s.d.queued(tenant, -(1 + len(p.members)))
			members := p.members
			p.members = nil
			p.finish(namespace.Result{}, s.d.stopped())
			for _, q := range members {
				q.finish(namespace.Result{}, s.d.stopped())
			}
		}
	}
}
