package cell

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/internal/invariants"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// pipeline is the one way a command reaches Paxos. Every command, whoever
// proposes it, takes the same four steps:
//
//  1. routed once, when it is submitted: routeFor decides from why it is
//     proposed and who proposes it whether it waits in its tenant's
//     fair-share queue (fair.go) or goes straight to the run loop;
//  2. stamped once, with the cell's time (clock.go), on the run loop at the
//     instant it is handed to the Paxos core, so that a command that waited
//     in a queue carries the time it really entered Paxos;
//  3. proposed once, on the run loop, and only while this replica holds
//     the master lease and runs the master role it was submitted under (a
//     command admitted by one master role is never proposed by the next;
//     while the role's lease lapses its commands wait in their queues);
//  4. answered once: its done is called exactly once with its outcome,
//     whatever happens on the way (shed, canceled before it was proposed,
//     refused, applied, the master role or the replica stopping).
//
// submit is the entry point; do is the blocking form. The run loop calls
// dispatch when wake fires, answer and refuse from the Ready it carries
// out, and stop when it ends.
//
// What was there before: five ways to propose (two on the replica, two on
// the scheduler, one on the loop), each stamping or routing in its own
// way, and a dispatcher goroutine between the tenant queues and the run
// loop, so that a blocked Acquire crossed four goroutines. With the run
// loop taking commands from the queues itself, a command crosses from its
// submitter to the loop and back, and nothing outside this file decides
// how it travels.
type pipeline struct {
	env pipelineEnv
	// wake is signalled (capacity 1) when dispatch has work: a direct
	// command queued, a tenant command queued, or a window place freed.
	wake chan struct{}
	// inPaxos mirrors len(waiters) for readers off the loop (load.go).
	inPaxos atomic.Int64

	mu struct {
		sync.Mutex
		// direct holds the commands routed straight to the loop, in
		// arrival order, until the next dispatch.
		direct []*proposal
		// stopped is set once the run loop has ended: nothing is accepted.
		stopped bool
	}

	// Loop-owned: the commands in the Paxos core, by proposal id.
	waiters map[paxos.ProposalID]*proposal
}

// pipelineEnv is what the pipeline needs of its replica. Its functions
// run on the run loop goroutine.
type pipelineEnv struct {
	// master returns the master role this replica runs (nil if none) and
	// whether it holds the master lease, so that it may propose now.
	master func() (m *master, leased bool)
	// propose hands an encoded command to the Paxos core.
	propose func(data []byte) (paxos.ProposalID, error)
	// stamp returns the cell's time for op and a function to call exactly
	// once when op's outcome is known (cellClock.stamp).
	stamp func(op namespace.Op) (int64, func(), error)
	// notMaster is the error for a command that cannot be proposed because
	// this replica is not the master; refused maps a Paxos refusal.
	notMaster func() error
	refused   func(error) error
	// proposed and applied count a command handed to the core and observe
	// the latency of one applied (metrics); either may be nil.
	proposed func()
	applied  func(time.Duration)
}

// maxInPaxos bounds the commands the pipeline keeps in the Paxos core at
// once; more wait in their queues (direct or tenant) until answers free
// room. A group (submitGroup) is proposed whole once there is any room, so
// the bound may be passed by less than one group. It is also the capacity
// load.go measures the master's load against.
const maxInPaxos = 4096

func newPipeline(env pipelineEnv) *pipeline {
	return &pipeline{env: env, wake: make(chan struct{}, 1), waiters: map[paxos.ProposalID]*proposal{}}
}

// origin is why a command is proposed; with its caller it decides the
// command's route (routeFor).
type origin uint8

const (
	// originRequest is a client's request, proposed on its caller's behalf.
	originRequest origin = iota + 1
	// originWaiter is the Acquire the master proposes for the head waiter of
	// a lock's queue.
	originWaiter
	// originCell is the cell's own clean-up: expiring a session, giving back
	// a grant whose caller stopped waiting.
	originCell
)

func (o origin) String() string {
	switch o {
	case originRequest:
		return "request"
	case originWaiter:
		return "waiter"
	case originCell:
		return "cell"
	}
	return fmt.Sprintf("origin(%d)", uint8(o))
}

// route is how a command travels from its submitter to the Paxos core.
type route uint8

const (
	// routeDirect goes straight to the run loop, ahead of tenant commands.
	routeDirect route = iota + 1
	// routeFair waits in the caller's tenant queue of the fair scheduler,
	// and is shed with ResourceExhausted when that queue is full.
	routeFair
	// routeFairNoShed waits in the caller's tenant queue like routeFair but
	// is never shed.
	routeFairNoShed
)

func (r route) String() string {
	switch r {
	case routeDirect:
		return "direct"
	case routeFair:
		return "fair"
	case routeFairNoShed:
		return "fair-no-shed"
	}
	return fmt.Sprintf("route(%d)", uint8(r))
}

// routeFor is the one routing decision. The cell's own clean-up goes
// direct: it is bounded by the sessions and grants that exist, and it
// frees resources, so it must never wait behind a flood or be shed. So do
// the administrator's commands (a caller of no tenant): they are few, and
// an operator must be able to act on a saturated cell. A tenant's commands
// take its fair share; the Acquire for a lock's head waiter is never shed,
// since its waiters are bounded by MaxWaiters already and shedding it would
// strand every waiter behind it.
func routeFor(o origin, caller namespace.Caller) route {
	switch {
	case o == originCell:
		return routeDirect
	case caller.Tenant == "":
		return routeDirect
	case o == originWaiter:
		return routeFairNoShed
	default:
		return routeFair
	}
}

// proposal is one submitted command on its way through the pipeline.
type proposal struct {
	ctx context.Context
	// m is the master role that admitted the command.
	m      *master
	caller namespace.Caller
	op     namespace.Op
	route  route
	done   func(namespace.Result, error)
	// start is when it was handed to the core.
	start time.Time
	// settled tells the clock the outcome of the stamp it took; nil until
	// stamped.
	settled func()
	// members are the other commands of the group it leads (submitGroup),
	// while the group waits in its tenant queue; nil once dispatched.
	members []*proposal
	// place is the scheduler window place it holds (alone or with its
	// group), if any: its own ownPlace, or its group leader's.
	place    *windowPlace
	ownPlace windowPlace
	// answered is set by finish, to catch a second delivery (invariants).
	answered atomic.Bool
}

// finish delivers the outcome: the one place done is called. It frees what
// the command held (the clock's count of pending stamps, a window place).
func (p *proposal) finish(res namespace.Result, err error) {
	if p.answered.Swap(true) && invariants.Enabled {
		panic(fmt.Sprintf("cell: invariant broken: %v command %T answered twice (now with %v)", p.route, p.op, err))
	}
	if p.settled != nil {
		p.settled()
	}
	if p.place != nil {
		p.place.release()
	}
	p.done(res, err)
}

// submit routes op for caller (routeFor) and queues it for the run loop,
// to be proposed under the master role m (the one that admitted it);
// done is called exactly once with the outcome, on the run loop goroutine,
// or on the caller's if the command is refused at once (m nil, a full
// tenant queue, a stopped replica). done must not block. If ctx ends
// before the command is proposed, it is never proposed and done gets the
// cancellation; once proposed it may still be applied, and done gets that
// outcome. submit never blocks, so the run loop may call it.
func (pl *pipeline) submit(ctx context.Context, m *master, o origin, caller namespace.Caller, op namespace.Op, done func(namespace.Result, error)) {
	pl.enqueue(m, &proposal{ctx: ctx, m: m, caller: caller, op: op, route: routeFor(o, caller), done: done}, nil)
}

// submitGroup submits ops for caller as one group, under the master role
// m: commands that travel together, proposed at once so that they share a
// slot, each applied on its own (each is held to the caller's quotas in
// turn). In a tenant queue the group is one entry, dispatched whole, and
// costs ceil(len(ops)/groupUnit) units of the queue bound, the turn's
// credit and the window (fair.go); a full queue sheds the whole group. done is called exactly once for each i with the outcome of
// ops[i], as submit's done is.
func (pl *pipeline) submitGroup(ctx context.Context, m *master, o origin, caller namespace.Caller, ops []namespace.Op, done func(i int, res namespace.Result, err error)) {
	if len(ops) == 0 {
		return
	}
	r := routeFor(o, caller)
	ps := make([]*proposal, len(ops))
	for i, op := range ops {
		ps[i] = &proposal{ctx: ctx, m: m, caller: caller, op: op, route: r, done: func(res namespace.Result, err error) { done(i, res, err) }}
	}
	pl.enqueue(m, ps[0], ps[1:])
}

// enqueue queues lead, with the other commands of its group (members;
// none for a command alone), on its route under the master role m, or
// answers them all at once if they cannot be queued (m nil, a stopped
// replica, a full tenant queue).
func (pl *pipeline) enqueue(m *master, lead *proposal, members []*proposal) {
	finishAll := func(err error) {
		lead.finish(namespace.Result{}, err)
		for _, p := range members {
			p.finish(namespace.Result{}, err)
		}
	}
	if m == nil {
		finishAll(pl.env.notMaster())
		return
	}
	if lead.route == routeDirect {
		pl.mu.Lock()
		if pl.mu.stopped {
			pl.mu.Unlock()
			finishAll(errUnavailable("the replica stopped"))
			return
		}
		pl.mu.direct = append(pl.mu.direct, lead)
		pl.mu.direct = append(pl.mu.direct, members...)
		pl.mu.Unlock()
		pl.poke()
		return
	}
	if len(members) > 0 {
		lead.members = members
	}
	if err := m.sched.submit(lead.caller.Tenant, lead, lead.route == routeFairNoShed); err != nil {
		lead.members = nil
		finishAll(err)
	}
}

// do runs op for caller through the pipeline under the master role m and
// waits for its outcome. If ctx ends first it returns ctx's error; the
// command may still be applied if it was proposed already.
func (pl *pipeline) do(ctx context.Context, m *master, o origin, caller namespace.Caller, op namespace.Op) (namespace.Result, error) {
	type outcome struct {
		res namespace.Result
		err error
	}
	ch := make(chan outcome, 1)
	pl.submit(ctx, m, o, caller, op, func(res namespace.Result, err error) { ch <- outcome{res, err} })
	select {
	case out := <-ch:
		return out.res, out.err
	case <-ctx.Done():
		return namespace.Result{}, ctxError(ctx)
	}
}

func (pl *pipeline) poke() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// dispatch hands the Paxos core what is queued: every direct command, then
// tenant commands in fair-share order while the scheduler's window has
// room, all within maxInPaxos. Commands handed over together share a slot
// (group commit). Loop only.
func (pl *pipeline) dispatch() {
	room := maxInPaxos - len(pl.waiters)
	if room <= 0 {
		return // the next answer pokes wake
	}
	m, leased := pl.env.master()
	pl.mu.Lock()
	n := min(room, len(pl.mu.direct))
	direct := pl.mu.direct[:n:n]
	pl.mu.direct = pl.mu.direct[n:]
	if leased && len(pl.mu.direct) > 0 {
		pl.poke()
	}
	pl.mu.Unlock()
	var held []*proposal
	for _, p := range direct {
		if p.m == m && !leased {
			// The role's lease lapsed: the command waits for it to come
			// back (afterStep pokes wake) or for the role to end.
			held = append(held, p)
			continue
		}
		pl.propose(p, m)
		room--
	}
	if len(held) > 0 {
		pl.mu.Lock()
		if pl.mu.stopped {
			pl.mu.Unlock()
			panic("cell: invariant broken: the pipeline stopped during a dispatch")
		}
		pl.mu.direct = append(held, pl.mu.direct...)
		pl.mu.Unlock()
	}
	if !leased {
		return
	}
	// Tenant queues of an earlier master role were answered when it
	// stopped (scheduler.close); only the current one's are left.
	for m != nil && room > 0 {
		p := m.sched.next()
		if p == nil {
			break
		}
		group := p.members
		p.members = nil
		pl.propose(p, m)
		for _, q := range group {
			pl.propose(q, m)
		}
		room -= 1 + len(group)
	}
}

// propose stamps p and hands it to the core under the master role m, which
// holds the master lease, or answers it if it cannot be proposed. Loop
// only.
func (pl *pipeline) propose(p *proposal, m *master) {
	if p.ctx.Err() != nil {
		p.finish(namespace.Result{}, ctxError(p.ctx))
		return
	}
	if m == nil || p.m != m {
		p.finish(namespace.Result{}, pl.env.notMaster())
		return
	}
	stamp, settled, err := pl.env.stamp(p.op)
	if err != nil {
		p.finish(namespace.Result{}, errUnavailable("reading the cell's clock: "+err.Error()))
		return
	}
	p.settled = settled
	data, err := namespace.EncodeCommand(namespace.Command{Time: stamp, Caller: p.caller, Op: p.op})
	if err != nil {
		p.finish(namespace.Result{}, errInvalid(err.Error()))
		return
	}
	id, err := pl.env.propose(data)
	if err != nil {
		p.finish(namespace.Result{}, pl.env.refused(err))
		return
	}
	if pl.env.proposed != nil {
		pl.env.proposed()
	}
	p.start = time.Now()
	pl.waiters[id] = p
	pl.inPaxos.Store(int64(len(pl.waiters)))
}

// answer delivers the applied result of the command proposed under id, if
// this replica proposed it (others' commands are not waited for here).
// Loop only.
func (pl *pipeline) answer(id paxos.ProposalID, res namespace.Result) {
	p, ok := pl.take(id)
	if !ok {
		return
	}
	if pl.env.applied != nil {
		pl.env.applied(time.Since(p.start))
	}
	p.finish(res, nil)
}

// refuse answers the proposals the core ended without applying them.
// Loop only.
func (pl *pipeline) refuse(outcomes []paxos.Outcome) {
	for _, o := range outcomes {
		if o.Err == nil {
			continue // answered when its slot was applied
		}
		if p, ok := pl.take(o.ID); ok {
			p.finish(namespace.Result{}, pl.env.refused(o.Err))
		}
	}
}

func (pl *pipeline) take(id paxos.ProposalID) (*proposal, bool) {
	p, ok := pl.waiters[id]
	if !ok {
		return nil, false
	}
	if len(pl.waiters) >= maxInPaxos {
		pl.poke() // room again for what waits in the queues
	}
	delete(pl.waiters, id)
	pl.inPaxos.Store(int64(len(pl.waiters)))
	return p, true
}

// stop answers everything the pipeline holds when the run loop ends (the
// commands in Paxos may or may not be applied; those queued direct were
// not proposed) and refuses what is submitted later. Tenant queues belong
// to the master role, which answers them when it stops (scheduler.close).
// Loop only.
func (pl *pipeline) stop() {
	pl.mu.Lock()
	pl.mu.stopped = true
	direct := pl.mu.direct
	pl.mu.direct = nil
	pl.mu.Unlock()
	for id, p := range pl.waiters {
		delete(pl.waiters, id)
		p.finish(namespace.Result{}, errUnavailable("the replica stopped; the command may or may not have been applied"))
	}
	pl.inPaxos.Store(0)
	for _, p := range direct {
		p.finish(namespace.Result{}, errUnavailable("the replica stopped"))
	}
}

// load returns how many commands are queued for or in the Paxos core, and
// the capacity that is measured against (load.go).
func (pl *pipeline) load() (queued, capacity int) {
	pl.mu.Lock()
	n := len(pl.mu.direct)
	pl.mu.Unlock()
	return n + int(pl.inPaxos.Load()), maxInPaxos
}
