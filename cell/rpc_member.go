package cell

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// Membership change at the master: AddReplica, RemoveReplica and
// ReplaceReplica, each a sequence of single-replica changes through the
// log (paxos.ProposeConfChange), and what the run loop does for them.

// memberState is a replica's share of membership change.
type memberState struct {
	// view is the directory as of the applied slot, for any goroutine.
	view atomic.Pointer[directory]

	// Loop-owned.
	dir *directory
	// waiters are this replica's membership changes and cell commands in
	// the Paxos core, by proposal id.
	waiters map[paxos.ProposalID]chan memberOutcome
	// former maps the replicas removed while this replica runs to their
	// addresses: the transport still sends to them (so that they hear of
	// their removal) but refuses what they send.
	former map[uint64]string
	// synced is the membership and directory the transport's peer set
	// was last made from.
	synced    paxos.Membership
	syncedDir *directory
}

// memberOutcome is the end of a membership change or cell command: the
// slot it was applied at, or why it was not.
type memberOutcome struct {
	slot uint64
	err  error
}

// initialVoters is the membership the Paxos core starts from when its
// store holds none: the cell's first replicas, the keys of
// Config.Replicas; for a replica that joined a running cell
// (Config.Join), the other replicas of Config.Replicas, so that it starts
// outside the membership and votes in nothing until the cell adds it
// (its store then holds the real membership).
func (r *Replica) initialVoters() []paxos.ID {
	var out []paxos.ID
	for _, id := range r.cfg.replicaIDs() {
		if r.cfg.Join && id == r.cfg.ID {
			continue
		}
		out = append(out, paxos.ID(id))
	}
	return out
}

// loadMembers derives the directory at start (loadDirectory).
func (r *Replica) loadMembers(initial []paxos.ID) error {
	d, err := loadDirectory(r.logdb, initial, r.ns.AppliedSlot())
	if err != nil {
		return err
	}
	r.mem.waiters = map[paxos.ProposalID]chan memberOutcome{}
	r.mem.former = map[uint64]string{}
	r.publishDirectory(d)
	return nil
}

func (r *Replica) publishDirectory(d *directory) {
	r.mem.dir = d
	r.mem.view.Store(d)
}

// addrOf returns the address of replica id as this replica knows it, or "".
func (r *Replica) addrOf(id uint64) string {
	if d := r.mem.view.Load(); d != nil {
		return d.addr(id, r.cfg.Replicas)
	}
	return r.cfg.Replicas[id]
}

// wantPeers returns the transport's peer set for membership m: every
// other member at its address, and the replicas removed since this one
// started, to be sent to only. Loop only (or before the loop starts).
func (r *Replica) wantPeers(m paxos.Membership) (peers, sendOnly map[uint64]string) {
	peers = map[uint64]string{}
	for _, id := range members(m) {
		if id == r.cfg.ID {
			continue
		}
		if a := r.mem.dir.addr(id, r.cfg.Replicas); a != "" {
			peers[id] = a
		}
	}
	if len(peers) == 0 {
		// Not (or no longer) a member, and no member known: keep the
		// replicas of the configuration, so as to hear from the cell.
		for id, a := range r.cfg.Replicas {
			if id != r.cfg.ID {
				peers[id] = a
			}
		}
	}
	sendOnly = map[uint64]string{}
	for id, a := range r.mem.former {
		if _, ok := peers[id]; !ok {
			sendOnly[id] = a
		}
	}
	return peers, sendOnly
}

// syncPeers makes the transport's peer set follow membership m (the one
// the core knows chosen) and the directory's addresses: a replica added is
// dialled and heard; one removed is refused from then on (DESIGN.md
// "Tenancy and membership"), though still sent to, so that it learns of
// its removal. Loop only.
func (r *Replica) syncPeers(m paxos.Membership) {
	if m.Index == r.mem.synced.Index && r.mem.dir == r.mem.syncedDir {
		return
	}
	for _, id := range members(r.mem.synced) {
		if !isMember(m, id) && id != r.cfg.ID && r.mem.synced.Index <= m.Index {
			// The address it had (the directory forgets a removed
			// replica's).
			if a := r.mem.syncedDir.addr(id, r.cfg.Replicas); a != "" {
				r.mem.former[id] = a
			}
		}
	}
	peers, sendOnly := r.wantPeers(m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := r.ep.SetPeers(ctx, peers, sendOnly); err != nil {
		r.log.Warn("cannot follow the membership in the peer set", "members", m.String(), "err", err)
	}
	r.mem.synced = paxos.Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners), Index: m.Index}
	r.mem.syncedDir = r.mem.dir
}

// applyMembers applies chosen entry e to the directory if it changes it,
// and answers this replica's waiter for it. Loop only.
func (r *Replica) applyMembers(e paxos.Entry) {
	conf := e.Value.Conf != nil
	if !conf && !slices.ContainsFunc(e.Value.Cmds, func(c paxos.Command) bool { return isCellCommand(c.Data) }) {
		return
	}
	d := r.mem.dir.clone()
	d.applyEntry(e)
	d.Slot = uint64(e.Slot)
	r.publishDirectory(d)
	if conf {
		r.log.Info("membership changed", "slot", e.Slot, "members", d.Members.String())
		if !isMember(d.Members, r.cfg.ID) && d.wasMember(r.cfg.ID) {
			r.log.Warn("this replica was removed from the cell: it serves no clients and votes in nothing; stop it", "slot", e.Slot)
		}
	}
	for _, c := range e.Value.Cmds {
		if ch, ok := r.mem.waiters[c.ID]; ok {
			delete(r.mem.waiters, c.ID)
			ch <- memberOutcome{slot: uint64(e.Slot)}
		}
	}
}

// installDirectory takes the directory of an installed snapshot (nil if
// it carries none: the cell's membership never changed before it).
func (r *Replica) installDirectory(d *directory, snap paxos.Snapshot) {
	if d == nil {
		d = newDirectory(r.initialVoters())
		if m := snap.Members; m != nil {
			d.applyConf(*m, uint64(m.Index))
		}
	}
	d.Slot = uint64(snap.Slot)
	r.publishDirectory(d)
}

// snapshotWithMembers is the snapshot of slot for the namespace stream
// ns: the directory and membership ride along (membership.go).
func (r *Replica) snapshotWithMembers(slot uint64, ns []byte) (paxos.Snapshot, error) {
	d := r.mem.dir.clone()
	d.Slot = slot
	data, err := wrapSnapshot(d, ns)
	if err != nil {
		return paxos.Snapshot{}, err
	}
	snap := paxos.Snapshot{Slot: paxos.Slot(slot), Data: data}
	if d.Members.Index != 0 {
		m := d.Members
		snap.Members = &m
	}
	return snap, nil
}

// spliceResults returns one result per command of cmds: the namespace's
// results in order, and the zero Result for each cell command.
func spliceResults(cmds []paxos.Command, ns []namespace.Result) []namespace.Result {
	out := make([]namespace.Result, len(cmds))
	j := 0
	for i, c := range cmds {
		if isCellCommand(c.Data) {
			continue
		}
		out[i] = ns[j]
		j++
	}
	return out
}

// refuseMemberWaiters ends the waiters whose proposals the core ended
// without applying them. Loop only.
func (r *Replica) refuseMemberWaiters(outcomes []paxos.Outcome) {
	for _, o := range outcomes {
		if o.Err == nil {
			continue
		}
		if ch, ok := r.mem.waiters[o.ID]; ok {
			delete(r.mem.waiters, o.ID)
			ch <- memberOutcome{err: o.Err}
		}
	}
}

// stopMemberWaiters ends every waiter when the loop stops.
func (r *Replica) stopMemberWaiters() {
	for id, ch := range r.mem.waiters {
		delete(r.mem.waiters, id)
		ch <- memberOutcome{err: ErrStopped}
	}
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

// propose puts a membership change (cc) or a cell command (cmd) into the
// log as master and waits until it is applied, returning its slot. The
// core's refusals come back as they are (paxos errors), for the caller to
// tell apart; memberError maps them for the wire.
func (r *Replica) proposeMember(ctx context.Context, cc *paxos.ConfChange, cmd []byte) (uint64, error) {
	ch := make(chan memberOutcome, 1)
	var perr error
	err := r.onLoop(ctx, func() {
		if r.serving() == nil {
			perr = r.notMaster()
			return
		}
		var id paxos.ProposalID
		if cc != nil {
			id, perr = r.node.ProposeConfChange(*cc)
		} else {
			id, perr = r.node.Propose(cmd)
		}
		if perr == nil {
			r.mem.waiters[id] = ch
		}
	})
	if err != nil {
		return 0, err
	}
	if perr != nil {
		return 0, perr
	}
	select {
	case o := <-ch:
		return o.slot, o.err
	case <-ctx.Done():
		return 0, fmt.Errorf("%w (the change may still be made; repeat the request to see)", ctxError(ctx))
	case <-r.done:
		return 0, errUnavailable("the replica stopped; the change may or may not have been made")
	}
}

// memberError maps what proposeMember returns to the wire.
func (r *Replica) memberError(err error) error {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, paxos.ErrConfChangePending):
		return apiErr(api.FailedPrecondition, "another membership change is under way; repeat the request once it is done")
	case errors.Is(err, paxos.ErrInvalidConfChange):
		return errInvalid(err.Error())
	case errors.Is(err, ErrStopped):
		return errUnavailable("the replica stopped; the change may or may not have been made")
	}
	return r.proposeError(err)
}

// memberResponse describes the membership in force (as of the applied
// slot), with the steps this request took.
func (r *Replica) memberResponse(steps []string) *api.MembershipResponse {
	d := r.mem.view.Load()
	resp := &api.MembershipResponse{Addrs: map[uint64]string{}, Slot: uint64(d.Members.Index), Steps: steps}
	for _, id := range d.Members.Voters {
		resp.Voters = append(resp.Voters, uint64(id))
	}
	for _, id := range d.Members.Learners {
		resp.Learners = append(resp.Learners, uint64(id))
	}
	for _, id := range members(d.Members) {
		resp.Addrs[id] = d.addr(id, r.cfg.Replicas)
	}
	return resp
}

// checkReplicaID refuses a replica ID out of range.
func checkReplicaID(what string, id uint64) error {
	if id == 0 || id > uint64(paxos.MaxID) {
		return errInvalid(fmt.Sprintf("%s replica ID %d is out of range 1..%d", what, id, paxos.MaxID))
	}
	return nil
}

// checkReplicaAddr refuses an address that is not "host:port".
func checkReplicaAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return errInvalid(fmt.Sprintf("replica address %q is not host:port", addr))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return errInvalid(fmt.Sprintf("replica address %q has no valid port", addr))
	}
	return nil
}

// catchUpRetry is how often AddReplica asks the core again to promote a
// learner that has not caught up: every tick, since the learner's progress
// is judged by the latest acknowledgement it sent.
func (r *Replica) catchUpRetry() time.Duration { return r.tickInterval() }

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
	var steps []string
	if err := r.addReplica(ctx, id, addr, 0, &steps); err != nil {
		return nil, err
	}
	return r.memberResponse(steps), nil
}

// addReplica is AddReplica; replacing, if not 0, is the replica the new
// one replaces, which the feature gate does not wait for (it is leaving,
// and is often down).
func (r *Replica) addReplica(ctx context.Context, id uint64, addr string, replacing uint64, steps *[]string) error {
	if err := checkReplicaID("new", id); err != nil {
		return err
	}
	if err := checkReplicaAddr(addr); err != nil {
		return err
	}
	m := r.serving()
	if m == nil {
		return r.notMaster()
	}
	d := r.mem.view.Load()
	for _, other := range members(d.Members) {
		if other != id && d.addr(other, r.cfg.Replicas) == addr {
			return errInvalid(fmt.Sprintf("address %s is replica %d's", addr, other))
		}
	}
	switch {
	case isMember(d.Members, id):
		if have := d.addr(id, r.cfg.Replicas); have != addr {
			return errInvalid(fmt.Sprintf("replica %d is a member at %s, not %s", id, have, addr))
		}
	case d.wasMember(id):
		return errInvalid(fmt.Sprintf("replica ID %d was a member of this cell before; IDs are never reused, pick a new one", id))
	default:
		if err := r.featureGate(ctx, m, FeatureMembership, replacing); err != nil {
			return err
		}
		if d.Addrs[id] != addr {
			cmd, err := encodeCellCommand(cellCommand{SetAddr: &setAddr{ID: id, Addr: addr}})
			if err != nil {
				return apiErr(api.Internal, err.Error())
			}
			if _, err := r.proposeMember(ctx, nil, cmd); err != nil {
				return r.memberError(err)
			}
		}
		slot, err := r.proposeMember(ctx, &paxos.ConfChange{Type: paxos.ConfAddLearner, ID: paxos.ID(id)}, nil)
		if err != nil {
			return r.memberError(err)
		}
		*steps = append(*steps, fmt.Sprintf("add-learner %d at slot %d", id, slot))
		r.log.Info("replica added as a learner", "replica", id, "addr", addr, "slot", slot)
	}
	if isVoter(r.mem.view.Load().Members, id) {
		return nil
	}
	// The learner itself applies membership changes already: it was
	// added by one.
	if err := r.featureGate(ctx, m, FeatureMembership, replacing, id); err != nil {
		return err
	}
	return r.promote(ctx, id, steps)
}

// promote promotes learner id once it has caught up (see AddReplica).
func (r *Replica) promote(ctx context.Context, id uint64, steps *[]string) error {
	t := time.NewTimer(0)
	defer t.Stop()
	var last error
	for {
		select {
		case <-t.C:
		case <-ctx.Done():
			msg := "the request's deadline passed"
			if last != nil {
				msg += " before replica " + strconv.FormatUint(id, 10) + " caught up: " + last.Error() + "; it stays a learner, repeat the request to promote it"
			}
			return apiErr(api.DeadlineExceeded, msg)
		}
		slot, err := r.proposeMember(ctx, &paxos.ConfChange{Type: paxos.ConfPromote, ID: paxos.ID(id)}, nil)
		if errors.Is(err, paxos.ErrNotCaughtUp) {
			last = err
			t.Reset(r.catchUpRetry())
			continue
		}
		if err != nil {
			return r.memberError(err)
		}
		*steps = append(*steps, fmt.Sprintf("promote %d at slot %d", id, slot))
		r.log.Info("replica promoted to voter", "replica", id, "slot", slot)
		return nil
	}
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
	var steps []string
	if err := r.removeReplica(ctx, id, &steps); err != nil {
		return nil, err
	}
	return r.memberResponse(steps), nil
}

func (r *Replica) removeReplica(ctx context.Context, id uint64, steps *[]string) error {
	if err := checkReplicaID("", id); err != nil {
		return err
	}
	m := r.serving()
	if m == nil {
		return r.notMaster()
	}
	d := r.mem.view.Load()
	switch {
	case d.retired(id):
		return nil
	case !isMember(d.Members, id):
		return errInvalid(fmt.Sprintf("replica %d is not a member of the cell (members: %s)", id, d.Members.String()))
	case id == r.cfg.ID:
		// The master removes itself: hand over first; the successor,
		// which the client follows, removes it.
		r.log.Info("handing mastership over before this replica's removal")
		if err := r.StepDown(ctx, 0); err != nil {
			return apiErr(api.FailedPrecondition, "handing over before removing this replica (the master): "+err.Error())
		}
		e := r.notMaster()
		e.Msg = "this replica was the master and handed over before its removal; its successor removes it"
		return e
	}
	if err := r.featureGate(ctx, m, FeatureMembership, id); err != nil {
		return err
	}
	slot, err := r.proposeMember(ctx, &paxos.ConfChange{Type: paxos.ConfRemove, ID: paxos.ID(id)}, nil)
	if err != nil {
		return r.memberError(err)
	}
	*steps = append(*steps, fmt.Sprintf("remove %d at slot %d", id, slot))
	r.log.Info("replica removed", "replica", id, "slot", slot)
	return nil
}

// ReplaceReplica replaces replica oldID by the new replica newID at addr,
// as the master: AddReplica(newID, addr), then RemoveReplica(oldID), four
// changes in all (add learner, catch up, promote, remove). A request
// interrupted at any step (a fail-over, a deadline) and repeated with the
// same arguments continues from the step it reached. Its errors are
// AddReplica's and RemoveReplica's, and InvalidArgument if the IDs are the
// same or oldID was never a member.
func (r *Replica) ReplaceReplica(ctx context.Context, oldID, newID uint64, addr string) (*api.MembershipResponse, error) {
	if err := checkReplicaID("old", oldID); err != nil {
		return nil, err
	}
	if err := checkReplicaID("new", newID); err != nil {
		return nil, err
	}
	if oldID == newID {
		return nil, errInvalid(fmt.Sprintf("replica %d cannot replace itself: the new replica needs a new ID", oldID))
	}
	if err := checkReplicaAddr(addr); err != nil {
		return nil, err
	}
	d := r.mem.view.Load()
	switch {
	case !d.wasMember(oldID):
		return nil, errInvalid(fmt.Sprintf("replica %d is not a member of the cell (members: %s)", oldID, d.Members.String()))
	case d.retired(oldID) && !isVoter(d.Members, newID):
		return nil, errInvalid(fmt.Sprintf("replica %d was removed already; add replica %d with add-replica", oldID, newID))
	}
	var steps []string
	if err := r.addReplica(ctx, newID, addr, oldID, &steps); err != nil {
		return nil, err
	}
	if err := r.removeReplica(ctx, oldID, &steps); err != nil {
		return nil, err
	}
	return r.memberResponse(steps), nil
}

func handleAddReplica(ctx context.Context, c *rpcCall, req *api.AddReplicaRequest) (any, error) {
	return c.r.AddReplica(ctx, req.ID, req.Addr)
}

func handleRemoveReplica(ctx context.Context, c *rpcCall, req *api.RemoveReplicaRequest) (any, error) {
	return c.r.RemoveReplica(ctx, req.ID)
}

func handleReplaceReplica(ctx context.Context, c *rpcCall, req *api.ReplaceReplicaRequest) (any, error) {
	return c.r.ReplaceReplica(ctx, req.Old, req.New, req.Addr)
}
