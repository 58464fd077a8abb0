package cell

import (
	"context"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
	"github.com/lockcell/lockcell/session"
)

// The one place the replica wires its parts that serve beside the run
// loop: each is built from narrow dependencies, and what a part needs of
// the replica is written here as a function of the replica's state, not
// reached for through a *Replica inside the part. The replica's exported
// calls that a part serves (CreateTenant, AddReplica, RemoveReplica,
// ReplaceReplica) are here too, each a call into its part.

// newMembershipOf builds the replica's membership (membership.go) from
// its stored log. initial is the membership its Paxos core starts from.
func (r *Replica) newMembershipOf(initial []paxos.ID) (*membership, error) {
	return newMembership(membershipDeps{
		self:        r.cfg.ID,
		first:       r.cfg.Replicas,
		initial:     initial,
		log:         r.log,
		onLoop:      r.onLoop,
		stopped:     r.done,
		propose:     func(data []byte) (paxos.ProposalID, error) { return r.node.Propose(data) },
		proposeConf: func(cc paxos.ConfChange) (paxos.ProposalID, error) { return r.node.ProposeConfChange(cc) },
		serving:     r.serving,
		notMaster:   r.notMaster,
		refused:     r.proposeError,
		gate:        r.featureGate,
		stepDown:    r.StepDown,
		setPeers: func(ctx context.Context, peers, sendOnly map[uint64]string) error {
			return r.ep.SetPeers(ctx, peers, sendOnly)
		},
		retry: r.tickInterval(),
	}, r.logdb, r.ns.AppliedSlot())
}

// replicaPipeline wires the pipeline to r.
func (r *Replica) replicaPipeline() *pipeline {
	return newPipeline(pipelineEnv{
		master: func() (*master, bool) {
			m := r.master.Load()
			return m, m != nil && r.node.Status().Master
		},
		propose:   r.node.Propose,
		stamp:     r.clock.stamp,
		notMaster: func() error { return r.notMaster() },
		refused:   func(err error) error { return r.proposeError(err) },
		proposed:  r.metrics.proposals.Inc,
		applied:   func(d time.Duration) { r.metrics.commitLatency.Observe(d.Seconds()) },
	})
}

// masterDeps is what the master role of epoch needs of this replica
// (master.go); becomeMaster builds a role with it.
func (r *Replica) masterDeps(epoch uint64) masterDeps {
	return masterDeps{
		log:          r.log,
		metrics:      r.metrics,
		state:        r.ns,
		cellCaller:   r.admin(),
		submit:       r.pipe.submit,
		wake:         r.pipe.poke,
		load:         r.pipe.load,
		notMaster:    r.notMaster,
		sessionError: r.sessionError,
		rebase:       r.clock.rebase,
		now:          r.clock.now,
		sessions: session.Config{Lease: r.cfg.SessionLease, MaxLease: r.cfg.MaxSessionLease,
			KeepAliveCadence: max(r.cfg.KeepAliveCadence, 0), Epoch: epoch, Logger: r.log},
		maxExtension: r.cfg.MaxSessionLease - r.cfg.SessionLease,
		readCap:      r.cfg.TenantReadConcurrency,
		queue:        r.cfg.TenantQueue,
		window:       r.cfg.ProposalWindow,
		hook:         r.cfg.headOutcomeHook,
		twoRound: func(m *master) bool {
			return r.cfg.twoRoundHandOver || len(r.featureMissing(m, FeatureHandOver)) > 0
		},
		handOverRuns: func(m *master) bool {
			return len(r.featureMissing(m, FeatureHandOverRun)) == 0
		},
	}
}

// newHandlerDeps builds what the RPC handlers reach the replica by
// (rpc.go). It needs the namespace, the membership and the metrics; the
// pipeline is reached at each call, since the handlers are built before
// it.
func (r *Replica) newHandlerDeps() *handlerDeps {
	return &handlerDeps{
		roleDeps: roleDeps{
			serving:        r.serving,
			awaitTakeOver:  r.awaitTakeOver,
			notMaster:      r.notMaster,
			sessionError:   r.sessionError,
			adminPrincipal: r.cfg.AdminPrincipal,
		},
		state: r.ns,
		propose: func(ctx context.Context, m *master, caller namespace.Caller, op namespace.Op) (namespace.Result, error) {
			return r.pipe.do(ctx, m, originRequest, caller, op)
		},
		submit: func(ctx context.Context, m *master, caller namespace.Caller, op namespace.Op, done func(namespace.Result, error)) {
			r.pipe.submit(ctx, m, originRequest, caller, op, done)
		},
		submitGroup: func(ctx context.Context, m *master, caller namespace.Caller, ops []namespace.Op, done func(int, namespace.Result, error)) {
			r.pipe.submitGroup(ctx, m, originRequest, caller, ops, done)
		},
		seq: sequencerKey{cell: r.cfg.Cell, key: r.cfg.SigningKey},
		ka:  keepAliveDeps{cadence: r.cfg.KeepAliveCadence, frames: &r.kaFrames},
		admin: adminDeps{
			self:             r.cfg.ID,
			cellStatus:       r.cellStatus,
			awaitOtherMaster: r.awaitOtherMaster,
			stepDown:         r.StepDown,
			leader: func() uint64 {
				if st := r.status.Load(); st != nil {
					return uint64(st.Leader)
				}
				return 0
			},
			successor: r.successor.Load,
			backup:    r.Backup,
		},
		members: r.members,
		metrics: r.metrics,
		log:     r.log,
	}
}

// CreateTenant creates a tenant as the cell administrator, through Paxos
// (for operators' tooling and the dev cell). It fails with NotMaster on a
// replica that is not master.
func (r *Replica) CreateTenant(ctx context.Context, name string, quota api.TenantQuota) (api.TenantInfo, error) {
	m := r.serving()
	if m == nil {
		return api.TenantInfo{}, r.notMaster()
	}
	reply, err := result(r.pipe.do(ctx, m, originRequest, r.admin(), &namespace.CreateTenant{Name: name, Quota: quota}))
	if err != nil {
		return api.TenantInfo{}, err
	}
	return reply.(*namespace.TenantReply).Tenant, nil
}

// onLoop runs f on the run loop and returns once it has run.
func (r *Replica) onLoop(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case r.ctlC <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctxError(ctx)
	case <-r.done:
		return errUnavailable("the replica stopped")
	}
	select {
	case <-done:
		return nil
	case <-r.done:
		return errUnavailable("the replica stopped")
	}
}

// AddReplica adds replica id, listening at addr, to the cell, as the
// master: it records the address, adds the replica as a learner, waits
// until it has caught up, and promotes it to voter, each step one change
// through the log. Caught up means what the Paxos core demands of a
// promotion (paxos.ErrNotCaughtUp): the learner has told this master, in
// its acknowledgements, that it knows the log chosen to within MaxInflight
// slots of the master's chosen slot, and past the master's compaction
// point, so that it holds every chosen value a Promise of its must
// report. A learner reports that only after installing the snapshot and
// learning the log above it.
//
// A request for a replica that is already a learner at addr resumes at
// the promotion; for a voter at addr it reports the membership. It
// returns an *api.Error: InvalidArgument for a bad ID or address, an ID
// that was ever a member of the cell (IDs are never reused: ballots carry
// them), or an address another member uses; FailedPrecondition while
// another change is under way, or while a member has not reported that
// its binary can apply membership changes (features.go), naming it;
// NotMaster on a replica that is not master; and DeadlineExceeded naming
// the learner's progress if ctx ends before it caught up. Bad input
// changes nothing.
func (r *Replica) AddReplica(ctx context.Context, id uint64, addr string) (*api.MembershipResponse, error) {
	return r.members.addReplica(ctx, id, addr)
}

// RemoveReplica removes replica id (a voter or a learner) from the cell,
// as the master. If id is this replica, it hands mastership over first
// (StepDown) and returns NotMaster naming the successor, which the client
// follows and which removes it: the sessions survive as in any hand-over.
// A request for a replica already removed reports the membership. It
// returns an *api.Error: InvalidArgument for an ID that is not a member,
// or the last voter; FailedPrecondition while another change is under
// way, while a member other than id has not reported that its binary can
// apply membership changes (features.go), or if the hand-over fails;
// NotMaster on a replica that is not master.
func (r *Replica) RemoveReplica(ctx context.Context, id uint64) (*api.MembershipResponse, error) {
	return r.members.removeReplica(ctx, id)
}

// ReplaceReplica replaces replica oldID by the new replica newID at addr,
// as the master: AddReplica(newID, addr), then RemoveReplica(oldID), four
// changes in all (add learner, catch up, promote, remove). A request
// interrupted at any step (a fail-over, a deadline) and repeated with the
// same arguments continues from the step it reached. Its errors are
// AddReplica's and RemoveReplica's, and InvalidArgument if the IDs are the
// same or oldID was never a member.
func (r *Replica) ReplaceReplica(ctx context.Context, oldID, newID uint64, addr string) (*api.MembershipResponse, error) {
	return r.members.replace(ctx, oldID, newID, addr)
}
