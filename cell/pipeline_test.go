package cell

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// pipeRig drives a pipeline without a network, a store or a Paxos core:
// the test plays the run loop (dispatch, answer, refuse, stop) and the
// master role (its scheduler, closed when the role stops), and counts
// what the pipeline does.
type pipeRig struct {
	t  *testing.T
	r  *Replica
	pl *pipeline
	// m is the master role (only its scheduler is set); nil while there
	// is none. leased reports that it holds the master lease.
	m      *master
	leased bool
	// proposed holds the ids handed to the core, in order, with what was
	// proposed under each.
	proposed []paxos.ProposalID
	cmds     map[paxos.ProposalID]namespace.Command
	stamps   int
	settled  int
	seq      uint64
	// attempts counts the commands handed to the core, refused or not.
	attempts int
	// busy makes the core refuse proposals (paxos.ErrNotLeader).
	busy bool
}

func newPipeRig(t *testing.T) *pipeRig {
	g := &pipeRig{t: t, leased: true, cmds: map[paxos.ProposalID]namespace.Command{}}
	g.r = &Replica{cfg: Config{ProposalWindow: 4, TenantQueue: 3}}
	g.r.metrics = newMetrics(metricsSources{})
	g.pl = newPipeline(pipelineEnv{
		master: func() (*master, bool) { return g.m, g.m != nil && g.leased },
		propose: func(data []byte) (paxos.ProposalID, error) {
			g.attempts++
			if g.busy {
				return paxos.ProposalID{}, paxos.ErrNotLeader
			}
			c, err := namespace.DecodeCommand(data)
			if err != nil {
				t.Fatalf("the pipeline proposed an undecodable command: %v", err)
			}
			g.seq++
			id := paxos.ProposalID{Ballot: 1, Seq: g.seq}
			g.proposed = append(g.proposed, id)
			g.cmds[id] = c
			return id, nil
		},
		stamp: func(namespace.Op) (int64, func(), error) {
			g.stamps++
			var once bool
			return int64(1000 + g.stamps), func() {
				if once {
					t.Errorf("a stamp was settled twice")
				}
				once = true
				g.settled++
			}, nil
		},
		notMaster: func() error { return g.r.notMaster() },
		refused:   func(err error) error { return g.r.proposeError(err) },
	})
	g.startMaster()
	return g
}

// startMaster starts a master role (of which the pipeline uses only the
// scheduler).
func (g *pipeRig) startMaster() {
	s := newScheduler(schedDeps{
		window:  g.r.cfg.ProposalWindow,
		queue:   g.r.cfg.TenantQueue,
		weight:  func(string) int { return 1 },
		wake:    g.pl.poke,
		stopped: func() error { return g.r.notMaster() },
		shed:    func(string, string) {},
		queued:  func(string, int) {},
	})
	g.m = &master{sched: s}
}

// stopMaster ends the master role as master.stop does (on the loop).
func (g *pipeRig) stopMaster() {
	g.m.sched.close()
	g.m = nil
}

// delivery counts the outcomes of one submitted command.
type delivery struct {
	name  string
	count int
	res   namespace.Result
	err   error
}

func (d *delivery) done(res namespace.Result, err error) {
	d.count++
	d.res, d.err = res, err
}

var (
	tenantA = namespace.Caller{Tenant: "a", Principal: "alice"}
	tenantB = namespace.Caller{Tenant: "b", Principal: "bob"}
	admin   = namespace.Caller{Principal: DefaultAdminPrincipal}
)

// submit submits op and returns its delivery counter.
func (g *pipeRig) submit(ctx context.Context, name string, o origin, c namespace.Caller, op namespace.Op) *delivery {
	d := &delivery{name: name}
	g.pl.submit(ctx, g.m, o, c, op, d.done)
	return d
}

// applyAll answers every proposal in the core as applied, in order.
func (g *pipeRig) applyAll() {
	for _, id := range g.proposed {
		g.pl.answer(id, namespace.Result{Reply: &namespace.SessionCreated{Session: id.Seq}})
	}
	g.proposed = nil
}

// expect checks each delivery's count and error code (api.OK: applied).
func expect(t *testing.T, want api.Code, ds ...*delivery) int {
	t.Helper()
	for _, d := range ds {
		if d.count != 1 {
			t.Errorf("%s: delivered %d times; want exactly once", d.name, d.count)
			continue
		}
		got := api.OK
		if d.err != nil {
			var ae *api.Error
			if !errors.As(d.err, &ae) {
				t.Errorf("%s: error %v is not an *api.Error", d.name, d.err)
				continue
			}
			got = ae.Code
		}
		if got != want {
			t.Errorf("%s: outcome %v (%v); want %v", d.name, got, d.err, want)
		}
	}
	return len(ds)
}

// TestRouteFor: the routing decision per command kind. The cell's own
// clean-up and the administrator's commands bypass the fair scheduler; a
// tenant's requests take their fair share and may be shed; the Acquire for
// a lock's head waiter takes its fair share but is never shed. The rig
// checks the decision where it lands, too: which queue holds the command.
func TestRouteFor(t *testing.T) {
	cases := []struct {
		o      origin
		caller namespace.Caller
		op     namespace.Op
		want   route
	}{
		{originRequest, tenantA, &namespace.CreateSession{}, routeFair},
		{originRequest, tenantA, &namespace.Acquire{Session: 1, Path: "/a/l"}, routeFair},
		{originRequest, tenantA, &namespace.CreateTenant{Name: "x"}, routeFair}, // refused by the state, not by its route
		{originRequest, admin, &namespace.CreateTenant{Name: "x"}, routeDirect},
		{originRequest, admin, &namespace.IssueToken{ID: "t", Tenant: "a"}, routeDirect},
		{originWaiter, tenantA, &namespace.Acquire{Session: 1, Path: "/a/l"}, routeFairNoShed},
		{originWaiter, admin, &namespace.Acquire{Session: 1, Path: "/l"}, routeDirect},
		{originCell, admin, &namespace.ExpireSession{Session: 1}, routeDirect},
		{originCell, tenantA, &namespace.Release{Session: 1, Path: "/a/l", Generation: 1}, routeDirect},
	}
	judged := 0
	for _, tc := range cases {
		name := fmt.Sprintf("%v %T by %q/%q", tc.o, tc.op, tc.caller.Tenant, tc.caller.Principal)
		if got := routeFor(tc.o, tc.caller); got != tc.want {
			t.Errorf("%s: routeFor = %v; want %v", name, got, tc.want)
		}
		// Where it lands: the direct queue or its tenant's queue.
		g := newPipeRig(t)
		g.submit(context.Background(), name, tc.o, tc.caller, tc.op)
		g.pl.mu.Lock()
		direct := len(g.pl.mu.direct)
		g.pl.mu.Unlock()
		g.m.sched.mu.Lock()
		queued := 0
		if q := g.m.sched.mu.queues[tc.caller.Tenant]; q != nil {
			queued = len(q.items)
		}
		g.m.sched.mu.Unlock()
		wantDirect, wantQueued := 1, 0
		if tc.want != routeDirect {
			wantDirect, wantQueued = 0, 1
		}
		if direct != wantDirect || queued != wantQueued {
			t.Errorf("%s: landed in the direct queue %d times and in tenant %q's queue %d times; want %d and %d",
				name, direct, tc.caller.Tenant, queued, wantDirect, wantQueued)
		}
		judged++
	}
	// A tenant's full queue sheds its requests but not its waiters' Acquires.
	g := newPipeRig(t)
	for i := 0; i < 3; i++ {
		g.submit(context.Background(), "fill", originRequest, tenantA, &namespace.CreateSession{})
	}
	shed := g.submit(context.Background(), "request over the bound", originRequest, tenantA, &namespace.CreateSession{})
	kick := g.submit(context.Background(), "waiter over the bound", originWaiter, tenantA, &namespace.Acquire{Session: 1, Path: "/a/l"})
	judged += expect(t, api.ResourceExhausted, shed)
	if kick.count != 0 {
		t.Errorf("a head waiter's Acquire was answered at submit (%v); want it queued", kick.err)
	}
	if judged < len(cases)+1 {
		t.Fatalf("judged %d routes; want at least %d", judged, len(cases)+1)
	}
}

// TestPipelineAnswersOnce: every submitted command is answered exactly
// once, whatever happens to it: applied, refused by the core, canceled
// before or after it was proposed, refused for want of a master lease,
// shed, queued when the master role stops, in Paxos when the replica
// stops, or submitted after that. Late events (an answer for an id already
// answered, a second stop) deliver nothing more. Every command proposed
// is stamped once and every stamp settled once; the window ends empty.
func TestPipelineAnswersOnce(t *testing.T) {
	g := newPipeRig(t)
	bg := context.Background()
	judged := 0
	var all []*delivery
	track := func(ds ...*delivery) []*delivery { all = append(all, ds...); return ds }

	// Applied, both routes; the tenant commands within the window of 4.
	applied := track(
		g.submit(bg, "admin write", originRequest, admin, &namespace.CreateTenant{Name: "x"}),
		g.submit(bg, "expiry", originCell, admin, &namespace.ExpireSession{Session: 9}),
		g.submit(bg, "tenant a", originRequest, tenantA, &namespace.CreateSession{}),
		g.submit(bg, "tenant b", originRequest, tenantB, &namespace.CreateSession{}),
		g.submit(bg, "waiter a", originWaiter, tenantA, &namespace.Acquire{Session: 1, Path: "/a/l"}),
	)
	g.pl.dispatch()
	if len(g.proposed) != 5 {
		t.Fatalf("dispatch proposed %d commands; want 5", len(g.proposed))
	}
	if c := g.cmds[g.proposed[0]]; c.Caller != admin || c.Time != 1001 {
		t.Fatalf("first command proposed %+v; want the admin's, stamped 1001 (direct commands first)", c)
	}
	g.applyAll()
	judged += expect(t, api.OK, applied...)

	// Refused by the core.
	g.busy = true
	refusedNow := track(g.submit(bg, "refused at propose", originRequest, tenantA, &namespace.CreateSession{}))
	g.pl.dispatch()
	g.busy = false
	judged += expect(t, api.NotMaster, refusedNow...)
	preempted := track(g.submit(bg, "preempted", originRequest, tenantB, &namespace.CreateSession{}))
	g.pl.dispatch()
	g.pl.refuse([]paxos.Outcome{{ID: g.proposed[0], Err: paxos.ErrPreempted}})
	g.proposed = nil
	judged += expect(t, api.NotMaster, preempted...)

	// Canceled before it was proposed (both routes): never proposed.
	ctx, cancel := context.WithCancel(bg)
	canceled := track(
		g.submit(ctx, "canceled direct", originRequest, admin, &namespace.CreateTenant{Name: "y"}),
		g.submit(ctx, "canceled fair", originRequest, tenantA, &namespace.CreateSession{}),
	)
	cancel()
	g.pl.dispatch()
	if len(g.proposed) != 0 {
		t.Fatalf("a command canceled before dispatch was proposed")
	}
	judged += expect(t, api.Canceled, canceled...)
	// The blocking form returns the cancellation; the command is not proposed.
	if _, err := g.pl.do(ctx, g.m, originRequest, tenantA, &namespace.CreateSession{}); !errors.Is(err, &api.Error{Code: api.Canceled}) {
		t.Fatalf("do with a canceled context: %v; want Canceled", err)
	}
	g.pl.dispatch()
	if len(g.proposed) != 0 {
		t.Fatalf("do's command was proposed after its context ended")
	}
	// Canceled after it was proposed: it still gets its applied outcome.
	ctx, cancel = context.WithCancel(bg)
	late := track(g.submit(ctx, "canceled once proposed", originRequest, tenantA, &namespace.CreateSession{}))
	g.pl.dispatch()
	cancel()
	g.applyAll()
	judged += expect(t, api.OK, late...)

	// No master lease at dispatch: nothing is proposed or answered; the
	// commands wait for the lease to come back.
	g.leased = false
	unleased := track(
		g.submit(bg, "unleased direct", originCell, admin, &namespace.ExpireSession{Session: 3}),
		g.submit(bg, "unleased fair", originRequest, tenantB, &namespace.CreateSession{}),
	)
	g.pl.dispatch()
	if len(g.proposed) != 0 {
		t.Fatalf("commands were proposed without a master lease")
	}
	for _, d := range unleased {
		if d.count != 0 {
			t.Fatalf("%s: answered (%v) while the lease lapsed; want it held", d.name, d.err)
		}
	}
	g.leased = true
	g.pl.dispatch()
	if len(g.proposed) != 2 {
		t.Fatalf("%d of the 2 held commands proposed once the lease came back", len(g.proposed))
	}
	g.applyAll()
	judged += expect(t, api.OK, unleased...)

	// The window: 4 tenant commands in Paxos, the rest queued; the master
	// role stops, answering the queued ones NotMaster, while those in Paxos
	// wait for their outcome.
	var inPaxos, queued []*delivery
	for i := 0; i < 6; i++ {
		c := tenantA
		if i%2 == 1 {
			c = tenantB
		}
		d := g.submit(bg, fmt.Sprintf("window %d", i), originRequest, c, &namespace.CreateSession{})
		if i < 4 {
			inPaxos = append(inPaxos, d)
		} else {
			queued = append(queued, d)
		}
	}
	track(inPaxos...)
	track(queued...)
	g.pl.dispatch()
	if len(g.proposed) != 4 {
		t.Fatalf("dispatch proposed %d tenant commands; want the window's 4", len(g.proposed))
	}
	g.stopMaster()
	judged += expect(t, api.NotMaster, queued...)
	for _, d := range inPaxos {
		if d.count != 0 {
			t.Fatalf("%s: answered when the master role stopped while it was in Paxos", d.name)
		}
	}
	noMaster := track(
		g.submit(bg, "no master role (direct)", originRequest, admin, &namespace.CreateTenant{Name: "w"}),
		g.submit(bg, "no master role (fair)", originRequest, tenantA, &namespace.CreateSession{}),
	)
	judged += expect(t, api.NotMaster, noMaster...)
	// A command admitted by one master role is not proposed by the next.
	g.startMaster()
	earlier := track(g.submit(bg, "admitted by the previous role", originCell, admin, &namespace.ExpireSession{Session: 5}))
	g.stopMaster()
	g.startMaster()
	before := len(g.proposed) // the window's 4, still in Paxos
	g.pl.dispatch()
	if len(g.proposed) != before {
		t.Fatalf("a command admitted by an earlier master role was proposed by the next")
	}
	judged += expect(t, api.NotMaster, earlier...)
	g.stopMaster()
	// A new master role; the replica stops with commands in Paxos and
	// queued direct.
	g.startMaster()
	direct := track(g.submit(bg, "queued direct at stop", originCell, admin, &namespace.ExpireSession{Session: 4}))
	g.pl.stop()
	judged += expect(t, api.Unavailable, inPaxos...)
	judged += expect(t, api.Unavailable, direct...)
	after := track(g.submit(bg, "after stop", originRequest, admin, &namespace.CreateTenant{Name: "z"}))
	judged += expect(t, api.Unavailable, after...)
	g.stopMaster()

	// Late events change nothing.
	g.pl.answer(paxos.ProposalID{Ballot: 1, Seq: 1}, namespace.Result{})
	g.pl.stop()
	g.pl.refuse([]paxos.Outcome{{ID: paxos.ProposalID{Ballot: 1, Seq: 1}, Err: paxos.ErrPreempted}})
	for _, d := range all {
		if d.count != 1 {
			t.Errorf("%s: delivered %d times in all; want exactly once", d.name, d.count)
		}
	}
	if g.stamps != g.settled || g.stamps != g.attempts || g.attempts < 10 {
		t.Errorf("%d commands handed to the core, %d stamps taken, %d settled; want all equal (and at least 10)", g.attempts, g.stamps, g.settled)
	}
	if judged != len(all) || judged < 20 {
		t.Fatalf("judged %d deliveries of %d tracked; want all, at least 20", judged, len(all))
	}
	t.Logf("%d commands answered exactly once; %d proposed", judged, g.seq)
}

// TestPipelineWindowFreed: a tenant command's window place is freed
// exactly once with its answer, so a later command gets in.
func TestPipelineWindowFreed(t *testing.T) {
	g := newPipeRig(t)
	g.m.sched.d.queue = 100
	bg := context.Background()
	for i := 0; i < 8; i++ {
		g.submit(bg, "w", originRequest, tenantA, &namespace.CreateSession{})
	}
	proposed := 0
	for round := 0; round < 3; round++ {
		g.pl.dispatch()
		proposed += len(g.proposed)
		g.applyAll()
	}
	if proposed != 8 {
		t.Fatalf("%d of 8 commands proposed over three rounds of a window of 4; want all", proposed)
	}
	g.m.sched.mu.Lock()
	inflight := g.m.sched.mu.inflight
	g.m.sched.mu.Unlock()
	if inflight != 0 {
		t.Fatalf("window holds %d places after every command was answered; want 0", inflight)
	}
}

// submitGroup submits n CreateSessions as one group for caller and
// returns their delivery counters.
func (g *pipeRig) submitGroup(name string, c namespace.Caller, n int) []*delivery {
	ds := make([]*delivery, n)
	ops := make([]namespace.Op, n)
	for i := range ds {
		ds[i] = &delivery{name: fmt.Sprintf("%s[%d]", name, i)}
		ops[i] = &namespace.CreateSession{}
	}
	g.pl.submitGroup(context.Background(), g.m, originRequest, c, ops, func(i int, res namespace.Result, err error) { ds[i].done(res, err) })
	return ds
}

// TestPipelineGroupIsOneUnit: the commands of one call submitted as a
// group (the sessions of a CreateSessions call) take one entry of their
// tenant's queue and one place of the scheduler's window, as the one call
// they are: with a queue bound of 3 and a window of 4, three groups of 5
// are accepted and a fourth is shed whole; one dispatch proposes all 15
// commands, and another tenant's command still finds a window place. A
// group's place is freed only when its last command is answered. Every
// command is answered exactly once.
func TestPipelineGroupIsOneUnit(t *testing.T) {
	g := newPipeRig(t)
	var groups [][]*delivery
	for i := range 3 {
		groups = append(groups, g.submitGroup(fmt.Sprintf("group %d", i), tenantA, 5))
	}
	shed := g.submitGroup("group over the bound", tenantA, 5)
	judged := expect(t, api.ResourceExhausted, shed...)
	for _, ds := range groups {
		for _, d := range ds {
			if d.count != 0 {
				t.Fatalf("%s was answered at submit (%v); want its group queued as one unit", d.name, d.err)
			}
		}
	}
	other := g.submit(context.Background(), "tenant b", originRequest, tenantB, &namespace.CreateSession{})
	g.pl.dispatch()
	if len(g.proposed) != 16 {
		t.Fatalf("one dispatch proposed %d commands; want 16 (three groups of 5 and tenant b's, each group one window place)", len(g.proposed))
	}
	inflight := func() int {
		g.m.sched.mu.Lock()
		defer g.m.sched.mu.Unlock()
		return g.m.sched.mu.inflight
	}
	if n := inflight(); n != 4 {
		t.Fatalf("window places held: %d; want 4", n)
	}
	// All but the last command of the first group answered: its place is
	// still held.
	first := g.proposed[:5]
	for _, id := range first[:4] {
		g.pl.answer(id, namespace.Result{Reply: &namespace.SessionCreated{Session: id.Seq}})
	}
	if n := inflight(); n != 4 {
		t.Fatalf("window places held with one command of a group unanswered: %d; want 4", n)
	}
	g.pl.answer(first[4], namespace.Result{Reply: &namespace.SessionCreated{Session: first[4].Seq}})
	if n := inflight(); n != 3 {
		t.Fatalf("window places held after a whole group was answered: %d; want 3", n)
	}
	g.proposed = g.proposed[5:]
	g.applyAll()
	for _, ds := range groups {
		judged += expect(t, api.OK, ds...)
	}
	judged += expect(t, api.OK, other)
	if n := inflight(); n != 0 {
		t.Fatalf("window places held after every answer: %d; want 0", n)
	}
	if judged != 21 {
		t.Fatalf("judged %d outcomes; want 21", judged)
	}
}
