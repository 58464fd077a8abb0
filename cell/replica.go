package cell

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
	"github.com/lockcell/lockcell/transport"
)

// tagPaxos tags Paxos messages on the peer mesh.
const tagPaxos uint16 = 1

// ErrStopped is returned by a Replica's methods once it has stopped, and by
// Err after a fatal error (wrapped with the cause).
var ErrStopped = errors.New("cell: replica stopped")

// Replica is one running replica of a cell: its Pebble store (Paxos log and
// namespace in one DB), the run loop around the Paxos core, the QUIC
// endpoint, and, while it is master, the master role that serves clients.
//
// Life cycle: Start, then Close (or watch Done when a fatal storage error
// stops it: it never carries on after one). Methods are safe for concurrent
// use.
type Replica struct {
	cfg     Config
	log     *slog.Logger
	store   *store
	db      *pebble.DB
	logdb   *paxos.PebbleStorage
	ns      *namespace.Store
	ep      *transport.Endpoint
	metrics *metrics
	httpSrv *http.Server
	httpLn  net.Listener

	// pipe is the one way commands reach Paxos (pipeline.go).
	pipe *pipeline
	ctlC chan func()

	// status is the core's status after the loop's latest step.
	status atomic.Pointer[paxos.Status]
	// leaseDeadline is the monotonic time (monotime.Time) until which the
	// master lease reported in status is certainly live; math.MinInt64 when
	// not master (not 0: a monotime.Time may be negative, as it is inside a
	// testing/synctest bubble, and 0 would then read as a live lease).
	// RPC handlers check it against the clock, so a stalled loop (a long
	// fsync, a GC pause, SIGSTOP) cannot leave a lapsed master serving.
	leaseDeadline atomic.Int64
	// master is the master role while this replica leads; nil otherwise.
	master atomic.Pointer[master]
	// kaFrames counts the KeepAlive request frames served on KeepAlive
	// streams (a batch frame counts once): Status.KeepAliveFrames.
	kaFrames atomic.Uint64
	// successor is the replica this one handed mastership to, while it
	// knows no leader since (paxos Status.Successor): NotMaster names it.
	successor atomic.Uint64
	// masterUp is closed, and replaced, whenever this replica starts a
	// master role (a handler waiting for a take-over watches it).
	masterUp atomic.Pointer[chan struct{}]
	// leaderMoved is closed, and replaced, whenever the leader this
	// replica knows of changes or it starts or stops serving as master (a
	// CellStatus long-poll waiting for a new master watches it).
	leaderMoved atomic.Pointer[chan struct{}]
	// campaigning reports that the core campaigns or leads without a
	// lease, as of the latest Ready that changed its hard or soft state:
	// set before the Ready's fsync, so that a successor told to take over
	// holds the clients that arrive while it makes its promise durable.
	campaigning atomic.Bool
	// rebuild describes the loss of state this replica started with and its
	// rebuild; nil if it started with its state.
	rebuild atomic.Pointer[RebuildStatus]
	// corrupt holds the first corruption Pebble reported while running.
	corrupt atomic.Pointer[error]
	// guardDone is closed when the guard record's syncer has stopped.
	guardDone chan struct{}
	// watch is what the run loop tells its watchdog (watchdog.go);
	// watchDone is closed when the watchdog has stopped.
	watch     loopWatch
	watchDone chan struct{}
	// clock stamps the commands this replica proposes (clock.go).
	clock *cellClock
	// progress holds the peers' latest progress reports (progress.go).
	progress progressTable
	// sums remembers recent state checksums to compare with the peers'
	// (compare.go).
	sums sumCompare
	// page is what the status page remembers (statuspage.go).
	page pageState
	// dirLock holds the data directory while the replica runs.
	dirLock *dirLock

	cancel   context.CancelFunc
	stopping <-chan struct{} // closed when Close begins (the loop's context ends)
	done     chan struct{}
	errMu    sync.Mutex
	err      error
	closeOne sync.Once

	// logw writes the Paxos log off the run loop (logwriter.go).
	logw *logWriter

	// Loop-owned state: touched only by the run loop goroutine.
	node     *paxos.Node
	lastSnap uint64
	// handing is the planned hand-over StepDown is waiting for; nil if none.
	handing *handing
	// promised is the promised ballot of the latest Ready that carried a
	// HardState.
	promised paxos.Ballot
	// members is the replica's share of membership change (membership.go):
	// the directory and the changes in flight. Set before the loop starts.
	members *membership
	// lastWrite is the WriteID of the latest write handed to the log
	// writer.
	lastWrite uint64
}

// Start opens the replica's store under cfg.DataDir, starts its endpoint
// and run loop, and returns once it is running. A replica restarted on the
// same DataDir rejoins with everything it had made durable. A replica that
// finds its durable state lost or damaged (store.go says how it tells) moves
// a damaged store aside and starts as a learner that votes in nothing until
// it has rebuilt from its peers; Status and the status page say so. Start
// returns an error wrapping ErrDataDir if DataDir belongs to another
// replica or cell, ErrDataDirInUse if a running replica holds it, and
// ErrWrongCertificate (with ErrInvalidConfig) if Certificate is not this
// replica's. A start that fails removes what it created in DataDir and
// nothing else (a directory that held a store is left as it was).
func Start(ctx context.Context, cfg Config) (*Replica, error) {
	cfg = cfg.populate()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Replica{
		cfg:  cfg,
		log:  cfg.Logger,
		ctlC: make(chan func()),
		done: make(chan struct{}),
	}
	up, moved := make(chan struct{}), make(chan struct{})
	r.masterUp.Store(&up)
	r.leaderMoved.Store(&moved)
	// A start that fails removes what it created (undo) and nothing else.
	before := recordDir(cfg.DataDir)
	failed := func(err error) (*Replica, error) {
		r.closeResources()
		if uerr := before.undo(); uerr != nil {
			r.log.Warn("removing what the failed start created", "dir", cfg.DataDir, "err", uerr)
		}
		r.dirLock.release()
		return nil, err
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		if !errors.Is(err, ErrDataDirInUse) {
			_ = before.undo()
		}
		return nil, err
	}
	r.dirLock = lock
	opener := &storeOpener{cfg: cfg, log: cfg.Logger, corrupt: r.onCorruption, openNS: func(db *pebble.DB) (*namespace.Store, error) {
		return namespace.Open(db, namespace.Config{AdminPrincipal: r.cfg.AdminPrincipal, Logger: r.log})
	}}
	st, err := opener.open()
	if err != nil {
		return failed(err)
	}
	r.store, r.db, r.logdb, r.ns = st, st.db, st.logdb, st.ns
	if err := r.open(ctx); err != nil {
		return failed(err)
	}
	r.clock = newCellClock(cfg.wallClock, monotime.Real(), r.ns.Clock)
	r.pipe = r.replicaPipeline()
	loopCtx, cancel := context.WithCancel(context.Background())
	r.cancel, r.stopping = cancel, loopCtx.Done()
	r.guardDone = make(chan struct{})
	r.watchDone = make(chan struct{})
	r.logw = newLogWriter(r.store, cfg.SyncDelay, r.metrics.fsync.Observe)
	r.logw.start()
	go r.run(loopCtx)
	go r.syncGuard(loopCtx)
	go r.watchLoop(loopCtx, r.watchDone)
	r.log.Info("replica started", "addr", r.ep.Addr().String(), "applied", r.ns.AppliedSlot(), "http", r.HTTPAddr())
	return r, nil
}

func (r *Replica) open(ctx context.Context) error {
	snap, err := r.logdb.Snapshot()
	if err != nil {
		return fmt.Errorf("cell: paxos log: %w", err)
	}
	r.lastSnap = uint64(snap.Slot)
	pids := initialVoters(r.cfg)
	r.node, err = paxos.NewNode(paxos.Config{
		ID:             paxos.ID(r.cfg.ID),
		Replicas:       pids,
		LeaseTicks:     r.cfg.LeaseTicks,
		HeartbeatTicks: r.cfg.HeartbeatTicks,
		ElectionTicks:  r.cfg.ElectionTicks,
		DriftPPM:       r.cfg.DriftPPM,
		MaxBatch:       r.cfg.MaxBatch,
		MaxInflight:    r.cfg.MaxInflight,
		Seed:           uint64(time.Now().UnixNano()) ^ r.cfg.ID<<32,
		Storage:        r.logdb,
		Applied:        paxos.Slot(r.ns.AppliedSlot()),
		Rebuild:        r.store.loss != nil,
		AsyncWrites:    true,
	})
	if err != nil {
		return fmt.Errorf("cell: paxos: %w", err)
	}
	st := r.node.Status()
	r.status.Store(&st)
	if r.members, err = r.newMembershipOf(pids); err != nil {
		return err
	}
	r.metrics = newMetrics(metricsSources{
		sums: &r.sums,
		sessions: func() int {
			if ms := r.master.Load(); ms != nil {
				return ms.sessions.Sessions()
			}
			return 0
		},
		locksHeld: r.locksHeld,
		transport: func() (transport.Stats, bool) {
			if r.ep == nil {
				return transport.Stats{}, false
			}
			return r.ep.Stats(), true
		},
	})
	r.sums.record(r.ns.AppliedSlot(), r.ns.Checksum(), r.members.checksum())
	r.reportLoss(&st)
	peers := r.members.startPeers(st.Members)
	r.ep, err = transport.Listen(ctx, transport.Config{
		ID:                  r.cfg.ID,
		Addr:                r.cfg.Replicas[r.cfg.ID],
		PacketConn:          r.cfg.PacketConn,
		Peers:               peers,
		CA:                  r.cfg.CA,
		Certificate:         r.cfg.Certificate,
		ClientHandler:       r.newHandlerDeps().serveStream,
		MaxConnsPerIP:       r.cfg.MaxConnsPerIP,
		MaxStreamsPerClient: r.cfg.MaxStreamsPerConn,
		Faults:              r.cfg.Faults,
		Logger:              r.log,
	})
	if err != nil {
		// The transport's errors name their layer and cause themselves.
		return fmt.Errorf("cell: replica %d: %w", r.cfg.ID, err)
	}
	if r.cfg.HTTPAddr != "" {
		if err := r.startHTTP(); err != nil {
			return err
		}
	}
	return nil
}

// Close stops the replica: the master role ends at once (without a
// hand-over; use StepDown first for a planned one), the loop stops, and the
// endpoint and store close. It is safe to call more than once.
func (r *Replica) Close() error {
	r.closeOne.Do(func() {
		if r.cancel != nil {
			r.cancel()
			<-r.done
			<-r.guardDone
			<-r.watchDone
		}
		r.closeResources()
		r.dirLock.release()
	})
	return nil
}

func (r *Replica) closeResources() {
	if r.httpSrv != nil {
		_ = r.httpSrv.Close()
	}
	if r.ep != nil {
		_ = r.ep.Close()
	}
	if r.store != nil {
		// Make everything durable and leave an exact guard record, so that
		// the next start can tell any write the store lost.
		if r.Err() == nil {
			if err := r.logdb.Save(paxos.HardState{}, nil, true); err == nil {
				err = r.store.recordGuard(true)
				if err != nil {
					r.log.Warn("recording the guard at close", "err", err)
				}
			}
		}
		r.store.guard.close()
	}
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			r.log.Warn("closing store", "err", err)
		}
	}
}

// Done is closed when the replica's run loop has stopped, after Close or a
// fatal error (see Err).
func (r *Replica) Done() <-chan struct{} { return r.done }

// Err returns the fatal error that stopped the replica, or nil.
func (r *Replica) Err() error {
	r.errMu.Lock()
	defer r.errMu.Unlock()
	return r.err
}

// ID returns the replica's id.
func (r *Replica) ID() uint64 { return r.cfg.ID }

// Addr returns the replica's UDP address (peers and clients).
func (r *Replica) Addr() net.Addr { return r.ep.Addr() }

// HTTPAddr returns the address of the metrics and status listener, or "".
func (r *Replica) HTTPAddr() string {
	if r.httpLn == nil {
		return ""
	}
	return r.httpLn.Addr().String()
}

// Status describes a replica as it sees itself.
type Status struct {
	ID       uint64
	Leader   uint64
	Epoch    uint64
	IsLeader bool
	// Master reports that this replica holds the master lease and serves.
	Master   bool
	Chosen   uint64
	Applied  uint64
	Checksum uint64
	// Compacted is the slot of the last snapshot: the Paxos log holds
	// nothing at or below it.
	Compacted uint64
	// Sessions and LockWaiters are the master's live sessions and blocked
	// Acquire calls (zero unless master).
	Sessions, LockWaiters int
	// Role is what the replica does (api.RoleMaster, RoleLeader for one
	// leading without a live lease, RoleCandidate, RoleFollower, or
	// RoleLearner while it rebuilds).
	Role api.Role
	// Rebuild describes the state this replica lost at start and its
	// rebuild, or is nil if it started with its state.
	Rebuild *RebuildStatus
	// LoopStuck reports that the run loop's watchdog finds it in one step
	// that has not returned for many checks in a row (watchdog.go): the
	// replica learns and applies nothing until the step returns.
	LoopStuck bool
	// KeepAliveFrames counts the KeepAlive request frames this replica
	// has served on KeepAlive streams since it started: one per batch
	// (api.KeepAliveBatchRequest), however many sessions it carries, and
	// one per per-session KeepAlive.
	KeepAliveFrames uint64
	// Voters and Learners are the cell's members as of the applied slot,
	// sorted; MembershipSlot is the slot that membership was chosen at (0:
	// the cell's first). Removed reports that this replica was a member
	// and is no longer: it serves no clients and votes in nothing.
	Voters, Learners []uint64
	MembershipSlot   uint64
	Removed          bool
	// RefusedPeers counts the replicas' handshakes and messages this
	// replica refused because they are not members
	// (transport.Stats.RefusedNotPeer).
	RefusedPeers uint64
}

// Status returns the replica's current status.
func (r *Replica) Status() Status {
	st := r.status.Load()
	m := r.master.Load()
	out := Status{
		ID:        r.cfg.ID,
		Leader:    uint64(st.Leader),
		Epoch:     uint64(st.Epoch),
		IsLeader:  st.IsLeader,
		Master:    r.serving() != nil,
		Chosen:    uint64(st.Chosen),
		Applied:   r.ns.AppliedSlot(),
		Checksum:  r.ns.Checksum(),
		Compacted: uint64(st.Compacted),
		Role:      r.role(st),
		Rebuild:   r.rebuild.Load(),
		LoopStuck: r.watch.stuck.Load(),

		KeepAliveFrames: r.kaFrames.Load(),
		RefusedPeers:    r.ep.RefusedNotPeer(),
	}
	if d := r.members.view(); d != nil {
		for _, id := range d.Members.Voters {
			out.Voters = append(out.Voters, uint64(id))
		}
		for _, id := range d.Members.Learners {
			out.Learners = append(out.Learners, uint64(id))
		}
		out.MembershipSlot = uint64(d.Members.Index)
		out.Removed = d.retired(r.cfg.ID)
	}
	if m != nil {
		out.Sessions = m.sessions.Sessions()
		out.LockWaiters = m.locks.count()
	}
	return out
}

// Serving reports whether this replica serves as master now
// (Status().Master, without computing the rest of the Status).
func (r *Replica) Serving() bool { return r.serving() != nil }

// StepDown hands mastership over without waiting out the master lease (a
// planned hand-over; see paxos.HandOver): to replica next if not 0, else
// to the most caught-up peer that answers. The master finishes the
// commands already in Paxos, holds new ones, waits until the successor
// knows every chosen slot, then stops serving and asks the successor to
// take over at once; the held commands and every parked KeepAlive are
// answered NotMaster naming the successor. StepDown returns once this
// replica no longer serves and follows another leader: until then the
// hand-over's messages may still be on their way, and a replica closed
// right after a step-down (lockcelld on SIGTERM) would drop them and leave
// the cell to wait out the master lease. If the successor has not caught
// up within an election timeout, the master steps down at once anyway
// (paxos.StepDown, still naming the successor). It returns an error
// wrapping api.ErrNotMaster on a replica that is not the leader, and ctx's
// error if ctx ends first (the hand-over goes on).
func (r *Replica) StepDown(ctx context.Context, next uint64) error {
	h := &handing{next: paxos.ID(next), done: make(chan error, 1)}
	f := func() {
		if r.handing != nil {
			r.handing.finish(errors.New("replaced by a newer step-down"))
		}
		if err := r.node.HandOver(h.next); err != nil {
			if !errors.Is(err, paxos.ErrNoSuccessor) {
				h.finish(fmt.Errorf("%w: %w", r.notMaster(), err))
				return
			}
			// Nobody answers: step down at once, naming nobody.
			h.finish(r.stepDownNow(0, "step-down (no successor answers)"))
			return
		}
		h.to = r.node.Status().HandOver
		r.handing = h
		r.log.Info("handing mastership over", "to", h.to)
	}
	select {
	case r.ctlC <- f:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrStopped
	}
	select {
	case err := <-h.done:
		if err != nil {
			return err
		}
		return r.awaitOtherLeader(ctx)
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrStopped
	}
}

// awaitOtherLeader waits until this replica follows a leader other than
// itself, which it learns only from that leader's own messages.
func (r *Replica) awaitOtherLeader(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		if st := r.status.Load(); st != nil && st.Leader != 0 && uint64(st.Leader) != r.cfg.ID {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ErrStopped
		}
	}
}

// handing is a planned hand-over that StepDown waits for.
type handing struct {
	next, to paxos.ID
	done     chan error // buffered; receives the outcome once
	once     sync.Once
}

func (h *handing) finish(err error) { h.once.Do(func() { h.done <- err }) }

// checkHandOver ends the StepDown waiting for a hand-over once this
// replica has stepped down, or, if the core abandoned the hand-over (the
// successor did not catch up in time), steps down at once. It runs on the
// loop before processReady, so that a step-down's messages leave at once.
func (r *Replica) checkHandOver() {
	h := r.handing
	if h == nil {
		return
	}
	st := r.node.Status()
	switch {
	case !st.IsLeader:
		r.handing = nil
		h.finish(nil)
	case st.HandOver == 0:
		r.handing = nil
		r.log.Warn("the successor did not catch up in time; stepping down at once", "to", h.to)
		h.finish(r.stepDownNow(h.to, "step-down (successor lagging)"))
	}
}

// stepDownNow steps down at once (paxos.StepDown), naming next, and ends
// the master role before the step-down's messages leave. Loop only.
func (r *Replica) stepDownNow(next paxos.ID, why string) error {
	if err := r.node.StepDown(next); err != nil {
		return fmt.Errorf("%w: %w", r.notMaster(), err)
	}
	r.leaseDeadline.Store(math.MinInt64)
	r.successor.Store(uint64(next))
	r.loseMaster(why)
	return nil
}

// masterGone runs on the loop when a Ready reports that this replica is no
// longer master, before any of the Ready's messages leave: it stops
// serving at once (no request is admitted from here on), so that nothing
// this replica says after a step-down (a TimeoutNow, a Release) can let a
// successor serve while this one still does. It reports whether the master
// role must end too (the replica no longer leads): processReady ends it
// once the Ready's messages are sent, so that the successor hears its
// TimeoutNow before the clients hear the redirect to it. Ending the role a
// moment later is safe: every request it still answers (a parked
// KeepAlive) was admitted before this instant, and a client counts the
// lease a reply grants from when it sent the request, so no lease the
// replica grants outlasts the full lease the successor's sessions start
// with when it becomes master, later.
func (r *Replica) masterGone(soft *paxos.SoftState) bool {
	r.leaseDeadline.Store(math.MinInt64)
	if soft.Leader == paxos.ID(r.cfg.ID) {
		return false // still leads; the lease may come back
	}
	r.successor.Store(uint64(r.node.Status().Successor))
	return r.master.Load() != nil
}

func (r *Replica) fail(err error) {
	r.errMu.Lock()
	if r.err == nil {
		r.err = fmt.Errorf("%w: %w", ErrStopped, err)
	}
	r.errMu.Unlock()
	if isCorruption(err) {
		// The store is damaged: the next start moves it aside and rebuilds
		// from the peers instead of failing on it again.
		if nerr := noteCorruption(r.cfg.DataDir, err); nerr != nil {
			r.log.Error("cannot leave the corruption note", "err", nerr)
		}
		r.log.Error("replica stopping: its store is corrupt; restart it and it will move the store aside and rebuild from its peers", "err", err)
		return
	}
	r.log.Error("replica stopping on a fatal error; it must be restarted from its store", "err", err)
}

// onCorruption is Pebble's report of damaged data found while running
// (for example by a compaction): the run loop stops on it.
func (r *Replica) onCorruption(info pebble.DataCorruptionInfo) {
	err := fmt.Errorf("%w: %s", pebble.ErrCorruption, firstLine(info.String()))
	r.corrupt.CompareAndSwap(nil, &err)
}

// syncGuard fsyncs the guard record every guardSyncInterval while the
// replica runs (the run loop writes it without fsync).
func (r *Replica) syncGuard(ctx context.Context) {
	defer close(r.guardDone)
	t := time.NewTicker(guardSyncInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := r.store.guard.sync(); err != nil {
				r.log.Error("syncing the guard record", "err", err)
				return
			}
		}
	}
}

// run is the replica's event loop: the only goroutine that touches the
// Paxos node and applies to the namespace. It hands the Paxos log's writes
// to the log writer (logwriter.go) and goes on while they are fsynced.
func (r *Replica) run(ctx context.Context) {
	defer close(r.done)
	defer r.logw.stop()
	defer r.loseMaster("stopped")
	defer r.pipe.stop()
	defer r.members.stop()
	interval := r.tickInterval()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	// lastTick is when the latest tick was due. The core counts time in
	// ticks, and a ticker drops ticks when the loop is late, so the loop
	// ticks once for every interval that really elapsed: a master's view of
	// its lease must never run slower than the clock.
	lastTick := monotime.Now()
	recv := r.ep.Recv()
	var slow slowSteps
	for {
		var caughtUp time.Duration
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			r.beginStep(&slow)
			n := slow.start.Sub(lastTick) / interval
			caughtUp = n
			for i := time.Duration(0); i < n; i++ {
				r.node.Tick()
			}
			lastTick = lastTick.Add(n * interval)
			r.maybeReportProgress(monotime.Now())
		case pm := <-recv:
			r.beginStep(&slow)
			if err := r.step(pm); err != nil {
				r.fail(err)
				return
			}
		case <-r.pipe.wake:
			r.beginStep(&slow)
			// Everything queued goes into the core together, so that
			// concurrent proposals share one slot (group commit).
			r.pipe.dispatch()
		case f := <-r.ctlC:
			r.beginStep(&slow)
			f()
		case <-r.logw.done:
			r.beginStep(&slow)
			if err := r.persisted(); err != nil {
				r.fail(err)
				return
			}
		}
		r.checkHandOver()
		if err := r.processReady(ctx); err != nil {
			if ctx.Err() != nil {
				return // Close ended a wait for the log writer: not a failure
			}
			r.fail(err)
			return
		}
		if err := r.corrupt.Load(); err != nil {
			r.fail(*err)
			return
		}
		r.afterStep(lastTick, interval)
		r.watch.end()
		slow.note(r, monotime.Now(), caughtUp)
	}
}

// beginStep marks the start of a step of the run loop, for the watchdog
// and for the log of held-up steps.
func (r *Replica) beginStep(slow *slowSteps) {
	r.watch.begin()
	slow.start = monotime.Now()
}

// slowSteps tells the log when the run loop was held up: a step that ran
// longer than a heartbeat interval (a quarter of the master lease), or
// ticks that came due in a burst (the loop or the process did not run for
// that long). Either one delays the lease renewals and heartbeats this
// replica sends and answers, and, with one under load, the master may lose
// its lease. It logs at most once a second, with how many such steps there
// were since.
type slowSteps struct {
	start    monotime.Time // of the current step
	count    int
	longest  time.Duration
	maxTicks time.Duration
	lastLog  monotime.Time
}

// note ends a step of the loop at now; ticks is how many ticks it caught
// up (0 if it did not tick).
func (s *slowSteps) note(r *Replica, now monotime.Time, ticks time.Duration) {
	took := now.Sub(s.start)
	limit := r.takeOverWait()
	if took <= limit && ticks*r.tickInterval() <= limit {
		return
	}
	s.count++
	s.longest = max(s.longest, took)
	s.maxTicks = max(s.maxTicks, ticks)
	if s.lastLog == 0 || now.Sub(s.lastLog) >= time.Second {
		r.log.Info("run loop held up", "steps", s.count, "longest_step", s.longest, "most_ticks_at_once", int64(s.maxTicks),
			"applied_slot", r.ns.AppliedSlot(), "master", r.master.Load() != nil)
		s.count, s.longest, s.maxTicks, s.lastLog = 0, 0, 0, now
	}
}

// persisted tells the core how far the log writer has carried out its
// writes, or returns the writer's error.
func (r *Replica) persisted() error {
	if err := r.logw.err(); err != nil {
		return err
	}
	if err := r.node.Persisted(r.logw.durable.Load()); err != nil {
		return fmt.Errorf("paxos core: %w", err)
	}
	return nil
}

// barrier waits until the log writer has carried out every write handed to
// it, and tells the core. The loop calls it before it writes the log
// itself (a snapshot), so that writes never overtake each other.
func (r *Replica) barrier(ctx context.Context) error {
	if _, err := r.logw.barrier(ctx, r.lastWrite); err != nil {
		return err
	}
	return r.persisted()
}

// tickInterval is this replica's tick (scaled by ClockScale in tests).
func (r *Replica) tickInterval() time.Duration {
	if r.cfg.ClockScale != 0 {
		return time.Duration(float64(r.cfg.Tick) * r.cfg.ClockScale)
	}
	return r.cfg.Tick
}

// step hands a peer message to the core. It returns an error only if the
// core has stopped (a storage error, such as a snapshot that no longer
// reads back): bad messages are counted and dropped.
func (r *Replica) step(pm transport.PeerMessage) error {
	if pm.Tag == tagProgress {
		r.stepProgress(pm.From, pm.Decode)
		return nil
	}
	if pm.Tag != tagPaxos {
		r.metrics.badPeerMessages.Inc()
		return nil
	}
	var m paxos.Message
	if err := pm.Decode(&m); err != nil {
		r.metrics.badPeerMessages.Inc()
		r.log.Debug("undecodable peer message", "from", pm.From, "err", err)
		return nil
	}
	if uint64(m.From) != pm.From {
		// The transport authenticated the sender; a message claiming to be
		// from another replica is refused.
		r.metrics.badPeerMessages.Inc()
		return nil
	}
	if err := r.node.Step(m); err != nil {
		if !errors.Is(err, paxos.ErrInvalidMessage) {
			return fmt.Errorf("paxos core stopped: %w", err)
		}
		r.metrics.badPeerMessages.Inc()
		r.log.Debug("peer message refused", "from", pm.From, "err", err)
	}
	return nil
}

// effects is what one Ready asks of the replica, gathered in one value
// (effectsOf) so that the order in which it is carried out is written in
// one function (execute).
type effects struct {
	rd paxos.Ready
	// soft is the Ready's new soft state, if any; newPromise reports a
	// promised ballot other than the last one persisted.
	soft       *paxos.SoftState
	newPromise bool
	// msgs are the messages to send: with paxos.Config.AsyncWrites every
	// one may leave at once (the core holds back the answers that depend
	// on a write in flight until it is durable).
	msgs []paxos.Message
	// write is the hard state and entries to hand to the log writer
	// (write.id 0: none), fsynced if write.sync.
	write logWrite
	// snapshot, chosen: state to install, slots to apply, in this order.
	snapshot paxos.Snapshot
	chosen   []paxos.Entry
	// refusals are the outcomes of this replica's proposals that the core
	// ended without applying them.
	refusals []paxos.Outcome
}

// effectsOf sorts a Ready into the effects it asks for.
func (r *Replica) effectsOf(rd paxos.Ready) *effects {
	fx := &effects{rd: rd, soft: rd.SoftState, snapshot: rd.Snapshot, chosen: rd.Chosen, refusals: rd.Outcomes}
	fx.newPromise = !rd.HardState.IsEmpty() && rd.HardState.Promised != r.promised
	fx.msgs = rd.Messages
	if rd.WriteID != 0 {
		fx.write = logWrite{id: rd.WriteID, hs: rd.HardState, ents: rd.Entries, sync: rd.MustSync}
	}
	return fx
}

// processReady carries out the core's Ready batches.
func (r *Replica) processReady(ctx context.Context) error {
	for r.node.HasReady() {
		if err := r.execute(ctx, r.effectsOf(r.node.Ready())); err != nil {
			return err
		}
	}
	return r.maybeSnapshot(ctx)
}

// execute carries out one Ready's effects in the order paxos/doc.go
// prescribes for a core that writes asynchronously: note the role → hand
// the write to the log writer → send (the core has held back whatever
// depends on a write in flight) → end the master role → install snapshot
// (once every write handed over is carried out) → apply, command by
// command: the master role follows the state, then the proposer gets the
// result → answer the refused proposals → Advance. The write's completion
// comes back later, on the log writer's done channel (Replica.persisted).
// It is the one place that order is written.
func (r *Replica) execute(ctx context.Context, fx *effects) error {
	rd := fx.rd
	// 0. A Ready that ends mastership stops serving before any of its
	// messages leave (masterGone).
	endRole := fx.soft != nil && !fx.soft.Master && r.masterGone(fx.soft)
	if fx.soft != nil || fx.newPromise {
		// A new promise (perhaps our own campaign's) or a new leader:
		// not on every chosen slot, which costs the master nothing.
		if !rd.HardState.IsEmpty() {
			r.promised = rd.HardState.Promised
		}
		st := r.node.Status()
		r.campaigning.Store(st.Role == paxos.Candidate || (st.IsLeader && !st.Master))
	}
	// 1. Hand the write to the log writer; the loop does not wait for it.
	if fx.write.id != 0 {
		r.logw.enqueue(fx.write)
		r.lastWrite = fx.write.id
	}
	// 2. Send. A leader's Accepts leave while its own write is in flight,
	// so that its fsync overlaps its followers'.
	for _, m := range fx.msgs {
		r.send(m)
	}
	// 3. (Answers that depend on a write leave in a later Ready, once the
	// log writer reports it durable.)
	// 4. End the master role once the successor has been told.
	if endRole {
		why := "leadership lost"
		if r.successor.Load() != 0 {
			why = "handed over"
		}
		r.loseMaster(why)
	}
	// 5. Install a snapshot, once every write handed over is carried out
	// (it replaces the log below it), then apply chosen slots in order.
	if !fx.snapshot.IsEmpty() {
		if err := r.barrier(ctx); err != nil {
			return err
		}
		if err := r.installSnapshot(fx.snapshot); err != nil {
			return err
		}
	}
	for _, e := range fx.chosen {
		results, err := r.apply(e)
		if err != nil {
			return err
		}
		m := r.master.Load()
		for i, c := range e.Value.Cmds {
			if results == nil {
				break // covered by a snapshot: the core reports the outcomes
			}
			// The master role's memory (waiters, sessions, events) follows
			// each command before its proposer hears of it, and before the
			// next command is looked at, so that an outcome handler (a lock
			// queue's) sees the state its own command left.
			if m != nil {
				m.onApplied(results[i])
			}
			r.pipe.answer(c.ID, results[i])
		}
	}
	// 6. Answer the proposals the core ended without applying them.
	r.pipe.refuse(fx.refusals)
	r.members.refuse(fx.refusals)
	// 7. Advance.
	r.node.Advance(rd)
	return nil
}

func (r *Replica) send(m paxos.Message) {
	if err := r.ep.Send(uint64(m.To), tagPaxos, m); err != nil {
		r.log.Debug("send", "to", m.To, "err", err)
	}
}

func (r *Replica) installSnapshot(snap paxos.Snapshot) error {
	if err := r.logdb.SaveSnapshot(snap); err != nil {
		return fmt.Errorf("saving snapshot: %w", err)
	}
	if err := r.store.recordGuard(false); err != nil {
		return err
	}
	dir, nsData, err := unwrapSnapshot(snap.Data)
	if err != nil {
		return fmt.Errorf("installing snapshot at slot %d: %w", snap.Slot, err)
	}
	if err := r.ns.InstallSnapshot(bytes.NewReader(nsData)); err != nil {
		return fmt.Errorf("installing snapshot at slot %d: %w", snap.Slot, err)
	}
	r.members.install(dir, snap)
	r.lastSnap = uint64(snap.Slot)
	r.sums.record(uint64(snap.Slot), r.ns.Checksum(), r.members.checksum())
	r.metrics.snapshotsInstalled.Inc()
	r.log.Info("installed snapshot", "slot", snap.Slot)
	return nil
}

// apply applies one chosen slot to the namespace and returns its commands'
// results, or nil if a snapshot already covered the slot.
//
// A membership change and the cell's own commands go to the directory
// (membership.go), never to the namespace: a slot of a membership change
// is applied to the namespace as an empty slot, and a cell command's
// result is the zero Result.
func (r *Replica) apply(e paxos.Entry) ([]namespace.Result, error) {
	cmds := make([][]byte, 0, len(e.Value.Cmds))
	cellCmds := false
	for _, c := range e.Value.Cmds {
		switch {
		case e.Value.Conf != nil:
		case isCellCommand(c.Data):
			cellCmds = true
		default:
			cmds = append(cmds, c.Data)
		}
	}
	results, err := r.ns.ApplySlot(uint64(e.Slot), cmds)
	if errors.Is(err, namespace.ErrAlreadyApplied) {
		return nil, nil // a snapshot already covered it
	}
	if err != nil {
		return nil, fmt.Errorf("applying slot %d: %w", e.Slot, err)
	}
	r.members.apply(e)
	if e.Value.Conf != nil {
		results = nil // no namespace command to answer
	} else if cellCmds {
		results = spliceResults(e.Value.Cmds, results)
	}
	r.sums.record(uint64(e.Slot), r.ns.Checksum(), r.members.checksum())
	r.metrics.batchSize.Observe(float64(len(cmds)))
	return results, nil
}

// maybeSnapshot compacts the Paxos log every SnapshotEvery applied slots.
func (r *Replica) maybeSnapshot(ctx context.Context) error {
	applied := r.ns.AppliedSlot()
	if applied < r.lastSnap+r.cfg.SnapshotEvery {
		return nil
	}
	// The snapshot's write must not overtake a write handed over before.
	if err := r.barrier(ctx); err != nil {
		return err
	}
	var buf bytes.Buffer
	slot, err := r.ns.Snapshot(&buf)
	if err != nil {
		return fmt.Errorf("taking snapshot: %w", err)
	}
	snap, err := r.members.snapshot(slot, buf.Bytes())
	if err != nil {
		return fmt.Errorf("taking snapshot: %w", err)
	}
	if err := r.logdb.SaveSnapshot(snap); err != nil {
		return fmt.Errorf("saving snapshot: %w", err)
	}
	if err := r.store.recordGuard(false); err != nil {
		return err
	}
	if err := r.node.Compact(paxos.Slot(slot)); err != nil {
		return fmt.Errorf("compacting: %w", err)
	}
	r.lastSnap = slot
	r.metrics.snapshotsTaken.Inc()
	r.log.Info("compacted the paxos log", "slot", slot, "bytes", buf.Len())
	return nil
}

// afterStep publishes the core's status and starts or ends the master role.
// lastTick is when the core's latest tick was due.
func (r *Replica) afterStep(lastTick monotime.Time, interval time.Duration) {
	st := r.node.Status()
	if invariants.Enabled {
		// Every slot the namespace applied came out of the core as chosen
		// (in a Ready's Chosen or Snapshot), so the core knows it chosen: a
		// replica applied beyond its core's chosen index has lost track of
		// what it handed out, and would wait for the core to choose a slot
		// it already applied.
		if a := r.ns.AppliedSlot(); a > uint64(st.Chosen) {
			panic(fmt.Sprintf("cell: invariant broken: replica %d applied slot %d beyond its Paxos core's chosen slot %d (core applied %d, compacted %d)",
				r.cfg.ID, a, st.Chosen, st.Applied, st.Compacted))
		}
	}
	// The core holds the lease while its tick count stays below the end
	// tick, LeaseTicksLeft ticks after the latest one; one tick less, in
	// real time from when the latest tick was due, is certain.
	deadline := monotime.Time(math.MinInt64)
	if st.Master && st.LeaseTicksLeft > 1 {
		deadline = lastTick.Add(time.Duration(st.LeaseTicksLeft-1) * interval)
	}
	r.leaseDeadline.Store(int64(deadline))
	r.successor.Store(uint64(st.Successor))
	r.members.syncPeers(st.Members)
	r.campaigning.Store(st.Role == paxos.Candidate || (st.IsLeader && !st.Master))
	prev := r.status.Swap(&st)
	r.metrics.observeStatus(prev, &st)
	r.page.noteStatus(&st)
	r.observeRebuild(&st)
	if prev.Rebuild.Phase != paxos.RebuildNone && st.Rebuild.Phase == paxos.RebuildNone {
		r.rebuilt(&st)
	}
	if st.Master && !prev.Master {
		r.pipe.poke() // commands held while the lease lapsed may go now
	}
	m := r.master.Load()
	switch {
	case m != nil && (!st.IsLeader || uint64(st.Epoch) != m.epoch):
		r.loseMaster("leadership lost")
		if st.Master {
			r.becomeMaster(st)
		}
	case m == nil && st.Master:
		r.becomeMaster(st)
	}
	if st.Leader != prev.Leader || st.Master != prev.Master || st.IsLeader != prev.IsLeader {
		moved := make(chan struct{})
		close(*r.leaderMoved.Swap(&moved))
	}
}

// masterLease is the master lease in real time: LeaseTicks ticks (scaled
// like the tick in tests).
func (r *Replica) masterLease() time.Duration {
	lease := r.cfg.LeaseTicks
	if lease == 0 {
		lease = paxos.DefaultLeaseTicks
	}
	return time.Duration(lease) * r.tickInterval()
}

// awaitOtherMaster answers a CellStatus long-poll (api.CellStatusRequest
// Except): it returns the status once this replica knows a master other
// than except (it serves itself, or its Paxos view names another leader,
// which may still be taking over: its handlers hold the client's calls
// until it serves), or once wait has passed or ctx ended, with the status
// as it is then. The leader change wakes it (leaderMoved), not a poll.
func (r *Replica) awaitOtherMaster(ctx context.Context, except uint64, wait time.Duration) *api.CellStatusResponse {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		moved := *r.leaderMoved.Load()
		st := r.cellStatus()
		if st.Master != 0 && st.Master != except {
			return st
		}
		select {
		case <-moved:
		case <-t.C:
			return r.cellStatus()
		case <-ctx.Done():
			return st
		case <-r.stopping:
			return r.cellStatus()
		}
	}
}

// serving returns the master role if this replica may serve clients now:
// it leads, and its master lease is live.
func (r *Replica) serving() *master {
	m := r.master.Load()
	if m == nil || !r.status.Load().Master || !monotime.Now().Before(monotime.Time(r.leaseDeadline.Load())) {
		return nil
	}
	return m
}

// takingOver reports whether this replica is on its way to serving: it
// campaigns, or it leads and waits for its lease or for applying what was
// chosen before its leadership (after a hand-over, a matter of round
// trips).
func (r *Replica) takingOver() bool { return r.campaigning.Load() }

// takeOverWait bounds how long a request waits at a replica that is taking
// over: a quarter of the master lease, the heartbeat's default.
func (r *Replica) takeOverWait() time.Duration {
	lease := r.cfg.LeaseTicks
	if lease == 0 {
		lease = paxos.DefaultLeaseTicks
	}
	return time.Duration(lease/4) * r.tickInterval()
}

// awaitTakeOver waits, while this replica is taking over, until it serves
// (returning its master role), takeOverWait has passed, or ctx ends (nil).
func (r *Replica) awaitTakeOver(ctx context.Context) *master {
	if !r.takingOver() {
		return nil
	}
	t := time.NewTimer(r.takeOverWait())
	defer t.Stop()
	for {
		up := *r.masterUp.Load()
		if m := r.serving(); m != nil {
			return m
		}
		if !r.takingOver() {
			return nil
		}
		select {
		case <-up:
		case <-t.C:
			return r.serving()
		case <-ctx.Done():
			return nil
		case <-r.stopping:
			return nil
		}
	}
}

func (r *Replica) becomeMaster(st paxos.Status) {
	m, err := newMaster(r.masterDeps(uint64(st.Epoch)), uint64(st.Epoch))
	if err != nil {
		r.log.Error("cannot start the master role", "err", err)
		return
	}
	r.master.Store(m)
	up := make(chan struct{})
	if old := r.masterUp.Swap(&up); old != nil {
		close(*old)
	}
	r.metrics.masterChanges.Inc()
	r.log.Info("became master", "epoch", paxos.Ballot(st.Epoch).String(), "applied", r.ns.AppliedSlot())
}

func (r *Replica) loseMaster(why string) {
	m := r.master.Swap(nil)
	if m == nil {
		return
	}
	m.stop()
	r.log.Info("master role ended", "why", why, "epoch", paxos.Ballot(m.epoch).String())
}

// quietPebbleLogger routes Pebble's logs to slog at debug level (errors at
// error level).
type quietPebbleLogger struct{ l *slog.Logger }

func (q quietPebbleLogger) Infof(format string, args ...any) {
	q.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (q quietPebbleLogger) Errorf(format string, args ...any) {
	q.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

func (q quietPebbleLogger) Fatalf(format string, args ...any) {
	q.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
	os.Exit(1)
}

// admin is the caller the cell itself uses for its own commands.
func (r *Replica) admin() namespace.Caller {
	return namespace.Caller{Principal: r.cfg.AdminPrincipal}
}

// locksHeld counts the lock grants held in the applied state (metrics and
// the status page show it).
func (r *Replica) locksHeld() int { return countLocksHeld(r.ns, r.admin()) }
