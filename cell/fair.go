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
// round-robin order (a deficit round-robin: a tenant of weight w gets w
// units per turn, a command costs one unit, a group more: see below),
// while at most Config.ProposalWindow units are between their queue and
// their applied result. A flooding tenant therefore fills its own queue,
// not the pipeline: another tenant's command waits for at most one turn
// of every busy tenant plus the window, whatever the flood. When a
// tenant's queue is full its new commands are shed with ResourceExhausted
// and a RetryAfter hint; nothing that was accepted is dropped (a queued
// command is either proposed or answered with an error that says it was
// not).
//
// What was tried: a single shared queue with a per-tenant cap on queued
// commands bounds the flooder's share of memory but not of latency (a
// victim still waits behind every queued command of the flooder); a rate
// limit alone cannot tell a saturated master from an idle one. The window
// is what makes the order matter: without it, everything queued would be
// proposed at once and the order of arrival would decide.
//
// A group of commands submitted together (pipeline.submitGroup: the
// sessions of one CreateSessions call) is one entry of its tenant's queue
// and is dispatched whole, but it costs ceil(n/groupUnit) units for n
// commands, the same number everywhere: of its tenant's queue bound, of
// its tenant's credit in a turn, and of window places, all held until its
// last command's outcome. A command alone costs one unit. A call of n
// commands was also charged n against the tenant's rate when it was
// admitted, and each of its commands is held to the tenant's quotas as it
// is applied. The two bounds are checked before an item is added, so the
// item that crosses one passes it by less than its own cost (a group is
// never refused for its size alone): at most window+maxGroupUnits-1 units
// are out at once, and a tenant in debt after a group sits out turns
// until its credit is positive again, so that groups and single commands
// share turns by units.
//
// Why groupUnit: counted as n units, a group of n let a window of 64
// carry at most 64 session creations into a slot whatever the clients
// sent (opens were bounded by the window, not by Paxos or the CPU);
// counted as one unit, 64 calls of api.MaxCreateSessions let 16,384
// commands (4,096 past the pipeline's maxInPaxos) ahead of another
// tenant's command, more than the Paxos core queues (1,024: 4 times
// paxos.Config.MaxBatch 256 times MaxInflight 1), so that command was
// refused as busy rather than delayed (TestCreateSessionsFloodVictimWait).
// With 8 commands a unit the default window holds at most (64+31)*8 = 760
// commands, under three slots of 256, and client.BenchmarkOpenSessions
// (8 Clients, 64 NewSession calls in flight each, 512 in all) puts as
// many creations into a slot as with one unit a call.
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
		ring []string
		next int
		// inflight is the window's units held (windowPlace).
		inflight int
		// closed is set when the master role has stopped (close).
		closed bool
	}
}

// groupUnit is how many commands of a group cost one unit of the
// scheduler (queue bound, turn credit, window place); see scheduler.
const groupUnit = 8

// maxGroupUnits is the most units one item costs: a CreateSessions call of
// api.MaxCreateSessions sessions.
const maxGroupUnits = (api.MaxCreateSessions + groupUnit - 1) / groupUnit

// units is what the command p, with its group's members if it leads one,
// costs the scheduler: ceil(n/groupUnit) for n commands.
func units(p *proposal) int {
	return (1 + len(p.members) + groupUnit - 1) / groupUnit
}

// tenantQueue is one tenant's FIFO of commands waiting for dispatch; an
// item with members is a group (proposal.members), one entry of the queue
// that costs units(item).
type tenantQueue struct {
	items []*proposal
	// units is the sum of the items' units, held to the queue bound.
	units  int
	weight int
	// credit is what is left of the tenant's turn; negative after a group
	// cost more than the turn had (a debt paid by the turns it sits out).
	credit int
}

// schedDeps is everything the scheduler needs from outside: two numbers
// of the replica's configuration and a few functions its master role
// builds (newMaster). Every function must be set.
type schedDeps struct {
	// window is Config.ProposalWindow: the units of tenant commands that
	// may be between their queue and their applied result at once.
	window int
	// queue is Config.TenantQueue: a tenant's queue bound in units, per
	// unit of weight.
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
// one entry of the tenant's queue costing units(it). With force the
// tenant's queue bound is not applied (routeFairNoShed: see routeFor). An
// error means nothing was queued: the caller answers it and its members.
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
	if !force && q.units >= limit {
		s.mu.Unlock()
		s.d.shed(tenant, "queue_full")
		return api.RetryAfterError(fmt.Sprintf("tenant %q: %d units of commands queued at the master (a call of n sessions counts ceil(n/%d)); it is saturated", tenant, q.units, groupUnit), 20*time.Millisecond)
	}
	q.items = append(q.items, it)
	q.units += units(it)
	s.d.queued(tenant, 1+len(it.members))
	s.mu.Unlock()
	s.d.wake()
	return nil
}

// nextLocked takes the next command (or group) to dispatch and the units
// it costs, which it adds to the window, or nil if the window is full or
// nothing is queued. A tenant in debt gets its weight's credit for the
// turn it sits out; the turns skipped so are paid for by the units of
// groups dispatched before, so they add no more than a constant a unit.
// REQUIRES: s.mu held.
func (s *scheduler) nextLocked() (string, *proposal, int) {
	if s.mu.inflight >= s.d.window {
		return "", nil, 0
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
			q.credit += q.weight
			if q.credit <= 0 {
				s.mu.next = i + 1 // still in debt: the turn passes
				continue
			}
		}
		it := q.items[0]
		u := units(it)
		q.items[0] = nil
		q.items = q.items[1:]
		q.units -= u
		q.credit -= u
		if q.credit <= 0 {
			s.mu.next = i + 1
		}
		s.mu.inflight += u
		return name, it, u
	}
	return "", nil, 0
}

// next takes the next tenant command to propose, in fair-share order, or
// nil if the window is full or nothing is queued; a group's leader comes
// with its members (proposal.members), to be proposed together. The
// command, or the group, holds its units of the window until the last of
// its outcomes is delivered (proposal.finish). Run loop only
// (pipeline.dispatch).
func (s *scheduler) next() *proposal {
	s.mu.Lock()
	tenant, p, u := s.nextLocked()
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	s.d.queued(tenant, -(1 + len(p.members)))
	w := &p.ownPlace
	w.s, w.units = s, u
	w.held.Store(int32(1 + len(p.members)))
	p.place = w
	for _, q := range p.members {
		q.place = w
	}
	return p
}

// windowPlace is the units of the scheduler's window that a command, or
// every command of a group, holds until each has its outcome.
type windowPlace struct {
	s     *scheduler
	units int
	// held counts the commands whose outcome is still to come.
	held atomic.Int32
}

// release is called once per holder as its outcome is delivered; the last
// frees the units.
func (w *windowPlace) release() {
	if w.held.Add(-1) == 0 {
		w.s.finished(w.units)
	}
}

// finished frees units of the window. It runs on the run loop goroutine
// (from a proposal's finish) and must not block.
func (s *scheduler) finished(units int) {
	s.mu.Lock()
	s.mu.inflight -= units
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
