package cell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// membership is a replica's share of membership change (directory.go says
// what is replicated): the directory as of the applied slot, published for
// every goroutine (view); the transport's peer set, which follows the
// membership (syncPeers); and, at the master, the changes AddReplica,
// RemoveReplica and ReplaceReplica make, each a sequence of single-replica
// changes through the log (paxos.ProposeConfChange). It reaches the rest
// of the replica only through its membershipDeps, so it is built and
// tested without a Replica.
//
// Concurrency: view, addrOf, response and the changes (add, remove,
// replace) are safe from any goroutine; the methods marked "Loop only" run
// on the run loop (or before it starts), which owns the fields below cur.
type membership struct {
	deps membershipDeps
	// cur is the directory as of the applied slot, for any goroutine.
	cur atomic.Pointer[directory]

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

// membershipDeps is what membership needs of its replica.
type membershipDeps struct {
	// self is this replica's ID. first maps the cell's first replicas to
	// their addresses (Config.Replicas), which the directory does not
	// record. initial is the membership the Paxos core starts from when its
	// store holds none (initialVoters).
	self    uint64
	first   map[uint64]string
	initial []paxos.ID
	log     *slog.Logger
	// onLoop runs f on the run loop and returns once it has run, or an
	// error if ctx ends or the replica stops first; stopped is closed once
	// the run loop has stopped.
	onLoop  func(ctx context.Context, f func()) error
	stopped <-chan struct{}
	// propose and proposeConf hand a cell command or a membership change to
	// the Paxos core. Loop only.
	propose     func(data []byte) (paxos.ProposalID, error)
	proposeConf func(cc paxos.ConfChange) (paxos.ProposalID, error)
	// serving returns the master role if this replica serves now;
	// notMaster is the error for a replica that does not; refused maps a
	// Paxos refusal that is not the change's own (proposeError).
	serving   func() *master
	notMaster func() *api.Error
	refused   func(error) *api.Error
	// gate refuses a change that needs f while a member not in except has
	// not advertised f to the master role m (features.go).
	gate func(ctx context.Context, m *master, f Features, except ...uint64) error
	// stepDown hands mastership over (Replica.StepDown): the master does so
	// before its own removal.
	stepDown func(ctx context.Context, next uint64) error
	// setPeers sets the transport's peer set (transport.Endpoint.SetPeers).
	setPeers func(ctx context.Context, peers, sendOnly map[uint64]string) error
	// retry is how often add asks the core again to promote a learner that
	// has not caught up: a tick, since the learner's progress is judged by
	// the latest acknowledgement it sent.
	retry time.Duration
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
func initialVoters(cfg Config) []paxos.ID {
	var out []paxos.ID
	for _, id := range cfg.replicaIDs() {
		if cfg.Join && id == cfg.ID {
			continue
		}
		out = append(out, paxos.ID(id))
	}
	return out
}

// newMembership derives the directory at the applied slot from the stored
// log (loadDirectory) and publishes it.
func newMembership(deps membershipDeps, logdb paxos.Storage, applied uint64) (*membership, error) {
	d, err := loadDirectory(logdb, deps.initial, applied)
	if err != nil {
		return nil, err
	}
	ms := &membership{deps: deps, waiters: map[paxos.ProposalID]chan memberOutcome{}, former: map[uint64]string{}}
	ms.publish(d)
	return ms, nil
}

// publish makes d the directory. Loop only.
func (ms *membership) publish(d *directory) {
	d.sum = d.checksum()
	ms.dir = d
	ms.cur.Store(d)
}

// view returns the directory as of the applied slot (nil before the
// replica has loaded it). Never modify it.
func (ms *membership) view() *directory {
	if ms == nil {
		return nil
	}
	return ms.cur.Load()
}

// checksum returns the checksum of the directory as of the applied slot
// (0 before the replica has loaded it).
func (ms *membership) checksum() uint64 {
	if d := ms.view(); d != nil {
		return d.sum
	}
	return 0
}

// addrOf returns the address of replica id as this replica knows it, or "".
func (ms *membership) addrOf(id uint64) string {
	if ms == nil {
		return ""
	}
	if d := ms.cur.Load(); d != nil {
		return d.addr(id, ms.deps.first)
	}
	return ms.deps.first[id]
}

// wantPeers returns the transport's peer set for membership m: every
// other member at its address, and the replicas removed since this one
// started, to be sent to only. Loop only.
func (ms *membership) wantPeers(m paxos.Membership) (peers, sendOnly map[uint64]string) {
	peers = map[uint64]string{}
	for _, id := range members(m) {
		if id == ms.deps.self {
			continue
		}
		if a := ms.dir.addr(id, ms.deps.first); a != "" {
			peers[id] = a
		}
	}
	if len(peers) == 0 {
		// Not (or no longer) a member, and no member known: keep the
		// replicas of the configuration, so as to hear from the cell.
		for id, a := range ms.deps.first {
			if id != ms.deps.self {
				peers[id] = a
			}
		}
	}
	sendOnly = map[uint64]string{}
	for id, a := range ms.former {
		if _, ok := peers[id]; !ok {
			sendOnly[id] = a
		}
	}
	return peers, sendOnly
}

// startPeers returns the peer set the transport starts with, for the
// membership m the core starts from, and records it as the one last
// synced. Before the loop starts.
func (ms *membership) startPeers(m paxos.Membership) map[uint64]string {
	peers, _ := ms.wantPeers(m)
	ms.synced = paxos.Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners), Index: m.Index}
	ms.syncedDir = ms.dir
	return peers
}

// syncPeers makes the transport's peer set follow membership m (the one
// the core knows chosen) and the directory's addresses: a replica added is
// dialled and heard; one removed is refused from then on (DESIGN.md
// "Tenancy and membership"), though still sent to, so that it learns of
// its removal. Loop only.
func (ms *membership) syncPeers(m paxos.Membership) {
	if m.Index == ms.synced.Index && ms.dir == ms.syncedDir {
		return
	}
	for _, id := range members(ms.synced) {
		if !isMember(m, id) && id != ms.deps.self && ms.synced.Index <= m.Index {
			// The address it had (the directory forgets a removed
			// replica's).
			if a := ms.syncedDir.addr(id, ms.deps.first); a != "" {
				ms.former[id] = a
			}
		}
	}
	peers, sendOnly := ms.wantPeers(m)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := ms.deps.setPeers(ctx, peers, sendOnly); err != nil {
		ms.deps.log.Warn("cannot follow the membership in the peer set", "members", m.String(), "err", err)
	}
	ms.synced = paxos.Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners), Index: m.Index}
	ms.syncedDir = ms.dir
}

// apply applies chosen entry e to the directory if it changes it, and
// answers this replica's waiter for it. Loop only.
func (ms *membership) apply(e paxos.Entry) {
	conf := e.Value.Conf != nil
	if !conf && !slices.ContainsFunc(e.Value.Cmds, func(c paxos.Command) bool { return isCellCommand(c.Data) }) {
		return
	}
	d := ms.dir.clone()
	d.applyEntry(e)
	d.Slot = uint64(e.Slot)
	ms.publish(d)
	if conf {
		ms.deps.log.Info("membership changed", "slot", e.Slot, "members", d.Members.String())
		if !isMember(d.Members, ms.deps.self) && d.wasMember(ms.deps.self) {
			ms.deps.log.Warn("this replica was removed from the cell: it serves no clients and votes in nothing; stop it", "slot", e.Slot)
		}
	}
	for _, c := range e.Value.Cmds {
		if ch, ok := ms.waiters[c.ID]; ok {
			delete(ms.waiters, c.ID)
			ch <- memberOutcome{slot: uint64(e.Slot)}
		}
	}
}

// install takes the directory of an installed snapshot (nil if it carries
// none: the cell's membership never changed before it). Loop only.
func (ms *membership) install(d *directory, snap paxos.Snapshot) {
	if d == nil {
		d = newDirectory(ms.deps.initial)
		if m := snap.Members; m != nil {
			d.applyConf(*m, uint64(m.Index))
		}
	}
	d.Slot = uint64(snap.Slot)
	ms.publish(d)
}

// snapshot is the snapshot of slot for the namespace stream ns: the
// directory and membership ride along (directory.go). Loop only.
func (ms *membership) snapshot(slot uint64, ns []byte) (paxos.Snapshot, error) {
	d := ms.dir.clone()
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

// refuse ends the waiters whose proposals the core ended without applying
// them. Loop only.
func (ms *membership) refuse(outcomes []paxos.Outcome) {
	for _, o := range outcomes {
		if o.Err == nil {
			continue
		}
		if ch, ok := ms.waiters[o.ID]; ok {
			delete(ms.waiters, o.ID)
			ch <- memberOutcome{err: o.Err}
		}
	}
}

// stop ends every waiter when the loop stops. Loop only.
func (ms *membership) stop() {
	for id, ch := range ms.waiters {
		delete(ms.waiters, id)
		ch <- memberOutcome{err: ErrStopped}
	}
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

// propose puts a membership change (cc) or a cell command (cmd) into the
// log as master and waits until it is applied, returning its slot. The
// core's refusals come back as they are (paxos errors), for the caller to
// tell apart; memberError maps them for the wire.
func (ms *membership) propose(ctx context.Context, cc *paxos.ConfChange, cmd []byte) (uint64, error) {
	ch := make(chan memberOutcome, 1)
	var perr error
	err := ms.deps.onLoop(ctx, func() {
		if ms.deps.serving() == nil {
			perr = ms.deps.notMaster()
			return
		}
		var id paxos.ProposalID
		if cc != nil {
			id, perr = ms.deps.proposeConf(*cc)
		} else {
			id, perr = ms.deps.propose(cmd)
		}
		if perr == nil {
			ms.waiters[id] = ch
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
	case <-ms.deps.stopped:
		return 0, errUnavailable("the replica stopped; the change may or may not have been made")
	}
}

// memberError maps what propose returns to the wire.
func (ms *membership) memberError(err error) error {
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
	return ms.deps.refused(err)
}

// response describes the membership in force (as of the applied slot),
// with the steps this request took.
func (ms *membership) response(steps []string) *api.MembershipResponse {
	d := ms.cur.Load()
	resp := &api.MembershipResponse{Addrs: map[uint64]string{}, Slot: uint64(d.Members.Index), Steps: steps}
	for _, id := range d.Members.Voters {
		resp.Voters = append(resp.Voters, uint64(id))
	}
	for _, id := range d.Members.Learners {
		resp.Learners = append(resp.Learners, uint64(id))
	}
	for _, id := range members(d.Members) {
		resp.Addrs[id] = d.addr(id, ms.deps.first)
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

// add is Replica.AddReplica, whose doc says what it does and returns;
// replacing, if not 0, is the replica the new one replaces, which the
// feature gate does not wait for (it is leaving, and is often down). The
// steps it takes are appended to steps.
func (ms *membership) add(ctx context.Context, id uint64, addr string, replacing uint64, steps *[]string) error {
	if err := checkReplicaID("new", id); err != nil {
		return err
	}
	if err := checkReplicaAddr(addr); err != nil {
		return err
	}
	m := ms.deps.serving()
	if m == nil {
		return ms.deps.notMaster()
	}
	d := ms.cur.Load()
	for _, other := range members(d.Members) {
		if other != id && d.addr(other, ms.deps.first) == addr {
			return errInvalid(fmt.Sprintf("address %s is replica %d's", addr, other))
		}
	}
	switch {
	case isMember(d.Members, id):
		if have := d.addr(id, ms.deps.first); have != addr {
			return errInvalid(fmt.Sprintf("replica %d is a member at %s, not %s", id, have, addr))
		}
	case d.wasMember(id):
		return errInvalid(fmt.Sprintf("replica ID %d was a member of this cell before; IDs are never reused, pick a new one", id))
	default:
		if err := ms.deps.gate(ctx, m, FeatureMembership, replacing); err != nil {
			return err
		}
		if d.Addrs[id] != addr {
			cmd, err := encodeCellCommand(cellCommand{SetAddr: &setAddr{ID: id, Addr: addr}})
			if err != nil {
				return apiErr(api.Internal, err.Error())
			}
			if _, err := ms.propose(ctx, nil, cmd); err != nil {
				return ms.memberError(err)
			}
		}
		slot, err := ms.propose(ctx, &paxos.ConfChange{Type: paxos.ConfAddLearner, ID: paxos.ID(id)}, nil)
		if err != nil {
			return ms.memberError(err)
		}
		*steps = append(*steps, fmt.Sprintf("add-learner %d at slot %d", id, slot))
		ms.deps.log.Info("replica added as a learner", "replica", id, "addr", addr, "slot", slot)
	}
	if isVoter(ms.cur.Load().Members, id) {
		return nil
	}
	// The learner itself applies membership changes already: it was
	// added by one.
	if err := ms.deps.gate(ctx, m, FeatureMembership, replacing, id); err != nil {
		return err
	}
	return ms.promote(ctx, id, steps)
}

// promote promotes learner id once it has caught up (see
// Replica.AddReplica).
func (ms *membership) promote(ctx context.Context, id uint64, steps *[]string) error {
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
		slot, err := ms.propose(ctx, &paxos.ConfChange{Type: paxos.ConfPromote, ID: paxos.ID(id)}, nil)
		if errors.Is(err, paxos.ErrNotCaughtUp) {
			last = err
			t.Reset(ms.deps.retry)
			continue
		}
		if err != nil {
			return ms.memberError(err)
		}
		*steps = append(*steps, fmt.Sprintf("promote %d at slot %d", id, slot))
		ms.deps.log.Info("replica promoted to voter", "replica", id, "slot", slot)
		return nil
	}
}

// remove is Replica.RemoveReplica, whose doc says what it does and
// returns. The steps it takes are appended to steps.
func (ms *membership) remove(ctx context.Context, id uint64, steps *[]string) error {
	if err := checkReplicaID("", id); err != nil {
		return err
	}
	m := ms.deps.serving()
	if m == nil {
		return ms.deps.notMaster()
	}
	d := ms.cur.Load()
	switch {
	case d.retired(id):
		return nil
	case !isMember(d.Members, id):
		return errInvalid(fmt.Sprintf("replica %d is not a member of the cell (members: %s)", id, d.Members.String()))
	case id == ms.deps.self:
		// The master removes itself: hand over first; the successor,
		// which the client follows, removes it.
		ms.deps.log.Info("handing mastership over before this replica's removal")
		if err := ms.deps.stepDown(ctx, 0); err != nil {
			return apiErr(api.FailedPrecondition, "handing over before removing this replica (the master): "+err.Error())
		}
		e := ms.deps.notMaster()
		e.Msg = "this replica was the master and handed over before its removal; its successor removes it"
		return e
	}
	if err := ms.deps.gate(ctx, m, FeatureMembership, id); err != nil {
		return err
	}
	slot, err := ms.propose(ctx, &paxos.ConfChange{Type: paxos.ConfRemove, ID: paxos.ID(id)}, nil)
	if err != nil {
		return ms.memberError(err)
	}
	*steps = append(*steps, fmt.Sprintf("remove %d at slot %d", id, slot))
	ms.deps.log.Info("replica removed", "replica", id, "slot", slot)
	return nil
}

// replace is Replica.ReplaceReplica, whose doc says what it does and
// returns.
func (ms *membership) replace(ctx context.Context, oldID, newID uint64, addr string) (*api.MembershipResponse, error) {
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
	d := ms.cur.Load()
	switch {
	case !d.wasMember(oldID):
		return nil, errInvalid(fmt.Sprintf("replica %d is not a member of the cell (members: %s)", oldID, d.Members.String()))
	case d.retired(oldID) && !isVoter(d.Members, newID):
		return nil, errInvalid(fmt.Sprintf("replica %d was removed already; add replica %d with add-replica", oldID, newID))
	}
	var steps []string
	if err := ms.add(ctx, newID, addr, oldID, &steps); err != nil {
		return nil, err
	}
	if err := ms.remove(ctx, oldID, &steps); err != nil {
		return nil, err
	}
	return ms.response(steps), nil
}

// addReplica is Replica.AddReplica: add, then the membership it left.
func (ms *membership) addReplica(ctx context.Context, id uint64, addr string) (*api.MembershipResponse, error) {
	var steps []string
	if err := ms.add(ctx, id, addr, 0, &steps); err != nil {
		return nil, err
	}
	return ms.response(steps), nil
}

// removeReplica is Replica.RemoveReplica: remove, then the membership it
// left.
func (ms *membership) removeReplica(ctx context.Context, id uint64) (*api.MembershipResponse, error) {
	var steps []string
	if err := ms.remove(ctx, id, &steps); err != nil {
		return nil, err
	}
	return ms.response(steps), nil
}
