package session

import (
	"container/heap"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/invariants"
	"github.com/lockcell/lockcell/internal/monotime"
)

// ID identifies a session. The namespace assigns it when a CreateSession
// command is applied (api.SessionInfo.ID); the Manager only keys on it.
type ID uint64

// Decision is a verdict the Manager hands to the cell to make durable: the
// lease of Session ran out, at LeaseEnd on this master's clock, without a
// renewal. The cell proposes an ExpireSession command for it and calls
// Remove once that command is applied. A decision is final: from the moment
// it is made the session's KeepAlives fail with ErrExpired, even if the
// proposal is still in flight.
type Decision struct {
	Session  ID
	LeaseEnd monotime.Time
}

// Stats is a snapshot of the Manager's counters, for metrics.
type Stats struct {
	// Sessions is the number of sessions known, including expiring ones.
	Sessions int
	// Expiring is the number of sessions whose expiry is decided but not yet
	// removed.
	Expiring int
	// Parked is the number of KeepAlives currently parked.
	Parked int
	// EventsQueued is the number of unacknowledged events over all sessions.
	EventsQueued int
	// FailoverPending is the number of sessions that have neither
	// acknowledged their fail-over event nor expired.
	FailoverPending int
	// LeaseExtension is the current load extension (SetLeaseExtension).
	LeaseExtension time.Duration
	// KeepAlives counts KeepAlive calls accepted since New.
	KeepAlives uint64
	// Expiries counts expiry decisions made since New.
	Expiries uint64
	// Overflows counts event queues that overflowed since New.
	Overflows uint64
}

type state uint8

const (
	stateNew state = iota
	stateServing
	stateStopped
)

// sess is one session's liveness state. All fields are guarded by the
// Manager's mu.
type sess struct {
	id       ID
	leaseEnd monotime.Time // INVARIANT: never moves backwards
	heapIdx  int           // position in Manager.mu.leases; -1 once expiring
	// heapKey is the lease end s is filed under in Manager.mu.leases; it
	// lags leaseEnd after a renewal (see leaseIndex).
	// INVARIANT: heapKey <= leaseEnd while s is in the index.
	heapKey monotime.Time
	// expiring is set when the expiry decision is made; it is final.
	expiring bool
	q        queue
	// failoverSeq is the Seq of this session's fail-over event while it is
	// unacknowledged, 0 otherwise.
	failoverSeq uint64
	// parked is the batch in which the session's KeepAlive is parked, at
	// slot; nil if none is.
	parked *waiter
	slot   int
}

// waiter is a parked batch of KeepAlives (KeepAliveBatch; KeepAlive parks
// a batch of one). Its fields other than wake are guarded by the
// Manager's mu.
type waiter struct {
	wake  chan struct{} // buffer of one; a send means "look again"
	slots []slot        // one per entry, in the order accepted
	// open counts the slots not yet done; when it drops to zero the
	// batch's goroutine is woken to return.
	open int
	// stopped is set when Stop ended the term while the batch was parked.
	stopped bool
	// closed is set once the batch is answered or ended: no entry may
	// join it any more (Batch.Join).
	closed bool
	// early is set when an entry was superseded: the batch is answered at
	// once, so that the superseded entry's proof of lease (a client's
	// quickest) is not held back until the cadence.
	early bool
}

// slot is one entry of a parked batch.
type slot struct {
	s       *sess         // nil if the entry was refused at arrival
	arrived monotime.Time // when the entry arrived: its Held counts from it
	done    bool          // answered, superseded, or ended with err
	// reply is the answer once done, unless err is set.
	reply Reply
	err   error
}

// Manager keeps the sessions of one master term. See the package doc for its
// life cycle.
//
// Its methods return ErrNotServing before Start and after Stop;
// ErrUnknownSession for an ID it does not know; ErrExpired for a session
// whose expiry is decided; ErrDuplicateSession, ErrBadAck, ErrBadEvent and
// ErrBadConfig for bad input, which changes nothing.
//
// Design. Leases of all sessions sit in one heap ordered by lease end, and
// one goroutine sleeps until the earliest end and decides the expiries that
// are due; a parked KeepAlive waits on its own timer for its answer time.
// One timer per session for expiry was tried first: it costs a runtime timer
// per session, re-armed on every KeepAlive, and makes "which sessions are
// expired at t" a question about timer goroutines rather than a pure
// function of state. With the heap, Expired(now) and NextDeadline(now) are
// pure reads, and the loop is "decide(now), sleep until NextDeadline".
//
// An expiry is decided on the master alone, and decided once: the session is
// marked expiring and leaves the heap, so a KeepAlive that arrives between
// the decision and the applied ExpireSession cannot revive a session whose
// locks the cell is already releasing.
type Manager struct {
	cfg   Config
	clock monotime.Clock
	log   *slog.Logger

	decisions    chan Decision
	wake         chan struct{} // buffer of one; pokes the expiry loop
	stop         chan struct{} // closed by Stop
	loopDone     chan struct{} // closed when the expiry loop returns
	failoverDone chan struct{} // closed when no fail-over ack is pending
	stopOnce     sync.Once
	keepalives   sync.WaitGroup // KeepAlive calls that parked

	mu struct {
		sync.Mutex
		state          state
		sessions       map[ID]*sess
		leases         leaseIndex
		extension      time.Duration
		failoverCount  int // sessions with failoverSeq != 0
		failoverClosed bool
		keepalives     uint64
		expiries       uint64
		overflows      uint64
		// ackChanged is closed (and cleared) when an acknowledgement, a
		// removal or an expiry decision may end an Invalidate wait.
		ackChanged chan struct{}
	}
}

// New returns a Manager for one master term, not yet serving. It returns an
// error wrapping ErrBadConfig if cfg contradicts itself.
func New(cfg Config) (*Manager, error) {
	cfg = cfg.populate()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:          cfg,
		clock:        cfg.Clock,
		log:          cfg.Logger,
		decisions:    make(chan Decision),
		wake:         make(chan struct{}, 1),
		stop:         make(chan struct{}),
		loopDone:     make(chan struct{}),
		failoverDone: make(chan struct{}),
	}
	m.mu.sessions = map[ID]*sess{}
	return m, nil
}

// Start makes the Manager serve the sessions in existing, the sessions
// present in the applied state when this replica became master, and starts
// the expiry goroutine.
//
// Every existing session gets a lease of Config.MaxLease from now: the new
// master expires nobody before its client had a full lease to reach it
// (Chubby §2.9: "Session leases are extended to the maximum that the
// previous master may have been using"). If failover is true, each session
// also gets an api.EventMasterFailover carrying Config.Epoch, and
// FailoverDone is closed once every one of them is acknowledged or expired.
// If failover is false (a cell's first master) FailoverDone is closed at
// once.
//
// Start returns ErrAlreadyStarted if called twice, ErrNotServing after Stop,
// and an error wrapping ErrDuplicateSession if an ID repeats; on error the
// Manager is unchanged.
func (m *Manager) Start(failover bool, existing []ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch m.mu.state {
	case stateServing:
		return ErrAlreadyStarted
	case stateStopped:
		return ErrNotServing
	}
	// IDs in ascending order (a new master's scan of the session records
	// yields them so) cannot repeat; only others need a set to tell.
	asc := ascending(existing)
	if !asc {
		seen := make(map[ID]struct{}, len(existing))
		for _, id := range existing {
			if _, dup := seen[id]; dup {
				return fmt.Errorf("%w: session %d listed twice", ErrDuplicateSession, id)
			}
			seen[id] = struct{}{}
		}
	}
	now := m.clock.Now()
	end := now.Add(m.cfg.MaxLease)
	if len(m.mu.sessions) == 0 {
		m.mu.sessions = make(map[ID]*sess, len(existing))
	}
	// NB: the sessions, and their fail-over events, are allocated in one
	// block each rather than one by one: at 100,000 sessions that is
	// 200,000 allocations fewer on the new master's run loop. A block is
	// freed once the last session in it is gone (each session's queue
	// starts as one place of the event block with no room to grow, so a
	// later push moves it out, and ack clears only its own event).
	block := make([]sess, len(existing))
	var events []api.Event
	if failover {
		events = make([]api.Event, len(existing))
	}
	filed := len(m.mu.leases)
	m.mu.leases = slices.Grow(m.mu.leases, len(existing))
	for i, id := range existing {
		s := &block[i]
		*s = sess{id: id, leaseEnd: end, heapKey: end, heapIdx: len(m.mu.leases)}
		if failover {
			s.q.events = events[i : i : i+1] // the place push fills
			s.q.push(api.Event{Kind: api.EventMasterFailover, Epoch: m.cfg.Epoch}, m.cfg.MaxEvents)
			s.failoverSeq = s.q.last
		}
		m.mu.sessions[id] = s
		m.mu.leases = append(m.mu.leases, s)
	}
	if failover {
		m.mu.failoverCount += len(existing)
	}
	// Every session taken over shares one lease end, so sessions filed in
	// ascending ID order after none already form a heap; otherwise the
	// index is built in one pass (O(n)) rather than by n pushes.
	if filed > 0 || !asc {
		heap.Init(&m.mu.leases)
	}
	m.maybeCloseFailoverLocked()
	m.mu.state = stateServing
	m.checkLocked(nil)
	m.log.Info("session manager serving", "epoch", api.Epoch(m.cfg.Epoch).String(), "failover", failover,
		"sessions", len(existing), "failover_lease", m.cfg.MaxLease)
	go m.run()
	return nil
}

// Stop ends the term: every parked KeepAlive returns ErrNotServing at once,
// every later call returns ErrNotServing, the expiry goroutine ends and
// Decisions is closed. The in-memory sessions are discarded (Chubby §2.9);
// the next master rebuilds them from the applied state. Stop waits for the
// expiry goroutine and for every KeepAlive in progress to return. It may be
// called more than once and before Start.
//
// NB: FailoverDone is not closed by Stop; a caller waiting on it should also
// watch its own shutdown.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() {
		m.mu.Lock()
		wasServing := m.mu.state == stateServing
		m.mu.state = stateStopped
		for _, s := range m.mu.sessions {
			if w := s.parked; w != nil {
				w.stopped = true
				m.releaseLocked(s, ErrNotServing)
				w.signal()
			}
		}
		m.mu.sessions = map[ID]*sess{}
		m.mu.leases = nil
		m.mu.Unlock()

		close(m.stop)
		if wasServing {
			<-m.loopDone
		}
		m.keepalives.Wait()
		close(m.decisions)
		m.log.Info("session manager stopped", "epoch", api.Epoch(m.cfg.Epoch).String())
	})
}

// ascending reports whether ids are in strictly ascending order.
func ascending(ids []ID) bool {
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return false
		}
	}
	return true
}

// Decisions returns the channel on which the expiry goroutine hands out
// expiry decisions, in lease-end order. The cell must keep receiving from it
// while the Manager serves; it is closed by Stop.
func (m *Manager) Decisions() <-chan Decision { return m.decisions }

// FailoverDone returns a channel closed once every session present at a
// fail-over Start has acknowledged its api.EventMasterFailover or had its
// expiry decided or been removed (Chubby §2.9 step 6: "The master waits
// until each session acknowledges the fail-over event or lets its session
// expire"). Until then the cell allows only KeepAlives.
func (m *Manager) FailoverDone() <-chan struct{} { return m.failoverDone }

// Add starts the lease of a session whose CreateSession command was just
// applied, and returns the lease it grants (relative, for the reply). It
// returns ErrNotServing or an error wrapping ErrDuplicateSession.
func (m *Manager) Add(id ID) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.state != stateServing {
		return 0, ErrNotServing
	}
	if _, ok := m.mu.sessions[id]; ok {
		return 0, fmt.Errorf("%w: session %d", ErrDuplicateSession, id)
	}
	now := m.clock.Now()
	s := &sess{id: id, leaseEnd: now.Add(m.grantLocked())}
	m.mu.sessions[id] = s
	m.mu.leases.add(s)
	m.checkLocked(s)
	// The new lease may end before the one the expiry loop sleeps for (after
	// a fail-over the others end at MaxLease): then it is the index's root.
	// Otherwise the loop already wakes in time: it sleeps until the root's
	// key as of its last look, and keys only grow (refiling, removals) or
	// arrive here. Opening thousands of sessions a second no longer wakes
	// the loop for each.
	if s.heapIdx == 0 {
		m.pokeLoop()
	}
	return s.leaseEnd.Sub(now), nil
}

// Remove forgets a session whose CloseSession or ExpireSession command was
// applied. A KeepAlive parked for it returns ErrExpired. It returns
// ErrNotServing or ErrUnknownSession.
func (m *Manager) Remove(id ID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.lookupLocked(id)
	if err != nil {
		return err
	}
	if s.parked != nil {
		m.releaseLocked(s, ErrExpired)
	}
	if !s.expiring {
		m.mu.leases.remove(s)
	}
	m.clearFailoverLocked(s)
	delete(m.mu.sessions, id)
	m.broadcastAckLocked()
	return nil
}

// Lease returns how long the session's lease has left on this master, so the
// cell can refuse requests of sessions that are not live. It returns
// ErrNotServing, ErrUnknownSession or ErrExpired.
func (m *Manager) Lease(id ID) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.liveLocked(id)
	if err != nil {
		return 0, err
	}
	// NB: a lease that ran out a moment ago, before the expiry goroutine
	// decided it, reads as zero rather than negative.
	return max(s.leaseEnd.Sub(m.clock.Now()), 0), nil
}

// Publish queues ev for the session and wakes its parked KeepAlive, which
// answers at once. The Manager assigns ev.Seq; the cell decides which
// sessions may see which events. Kinds the Manager creates itself
// (api.EventMasterFailover, api.EventOverflow) and unknown kinds are refused
// with ErrBadEvent. It also returns ErrNotServing, ErrUnknownSession or
// ErrExpired; on error nothing is queued.
func (m *Manager) Publish(id ID, ev api.Event) error {
	_, err := m.publish(id, ev)
	return err
}

// SetLeaseExtension lengthens every grant from now on by d, for a master
// under load (Chubby §3: longer leases mean fewer KeepAlives to process).
// Zero restores Config.Lease. Leases already granted are never shortened:
// "The master is free to advance this timeout further into the future, but
// may not move it backwards in time" (Chubby §2.8). It returns an error
// wrapping ErrBadConfig if d is negative or Lease+d exceeds MaxLease.
func (m *Manager) SetLeaseExtension(d time.Duration) error {
	if d < 0 || m.cfg.Lease+d > m.cfg.MaxLease {
		return fmt.Errorf("%w: lease extension %v outside [0, MaxLease-Lease = %v]",
			ErrBadConfig, d, m.cfg.MaxLease-m.cfg.Lease)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.extension = d
	return nil
}

// Expired returns the sessions whose lease ended at or before now and whose
// expiry is not yet decided, ordered by lease end then ID. It is a pure read:
// the expiry goroutine makes the decisions.
func (m *Manager) Expired(now monotime.Time) []ID {
	m.mu.Lock()
	defer m.mu.Unlock()
	due := m.mu.leases.due(now)
	if len(due) == 0 {
		return nil
	}
	ids := make([]ID, len(due))
	for i, s := range due {
		ids[i] = s.id
	}
	return ids
}

// NextDeadline returns when the next expiry decision falls due: the earliest
// lease end among sessions whose expiry is not decided, or now if that has
// passed. ok is false when there is no such session. It is a pure read.
func (m *Manager) NextDeadline(now monotime.Time) (at monotime.Time, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.leases.next(now)
}

// Sessions returns the number of sessions known, including expiring ones
// (Stats.Sessions), without walking them: for callers that ask often.
func (m *Manager) Sessions() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.mu.sessions)
}

// Stats returns a snapshot of the counters. It walks every session: a
// caller that asks often and needs only the count uses Sessions.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := Stats{
		Sessions:        len(m.mu.sessions),
		FailoverPending: m.mu.failoverCount,
		LeaseExtension:  m.mu.extension,
		KeepAlives:      m.mu.keepalives,
		Expiries:        m.mu.expiries,
		Overflows:       m.mu.overflows,
	}
	for _, s := range m.mu.sessions {
		if s.expiring {
			st.Expiring++
		}
		if s.parked != nil {
			st.Parked++
		}
		st.EventsQueued += len(s.q.events)
	}
	return st
}

// grantLocked is the lease a grant gives now.
// REQUIRES: m.mu held.
func (m *Manager) grantLocked() time.Duration {
	return m.cfg.Lease + m.mu.extension
}

// lookupLocked finds a session of a serving Manager.
// REQUIRES: m.mu held.
func (m *Manager) lookupLocked(id ID) (*sess, error) {
	if m.mu.state != stateServing {
		return nil, ErrNotServing
	}
	s, ok := m.mu.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %d", ErrUnknownSession, id)
	}
	return s, nil
}

// liveLocked finds a session whose expiry is not decided.
// REQUIRES: m.mu held.
func (m *Manager) liveLocked(id ID) (*sess, error) {
	s, err := m.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	if s.expiring {
		return nil, fmt.Errorf("%w: %d", ErrExpired, id)
	}
	return s, nil
}

// renewLocked extends the session's lease to a full grant from now, never
// moving it backwards.
// REQUIRES: m.mu held; s live.
func (m *Manager) renewLocked(s *sess, now monotime.Time) {
	old := s.leaseEnd
	s.leaseEnd = max(s.leaseEnd, now.Add(m.grantLocked()))
	if invariants.Enabled && s.leaseEnd.Before(old) {
		panic("session: invariant broken: lease moved backwards")
	}
	// The lease index is lazy: s stays filed under its earlier key until
	// that key comes up (see leaseIndex).
}

// releaseLocked ends the session's parked KeepAlive with err; the rest of
// its batch stays parked.
// REQUIRES: m.mu held; s.parked != nil.
func (m *Manager) releaseLocked(s *sess, err error) {
	m.settleLocked(s, Reply{}, err)
}

// settleLocked ends the session's parked KeepAlive with r or err, and
// wakes its batch if that was the batch's last open entry.
// REQUIRES: m.mu held; s.parked != nil.
func (m *Manager) settleLocked(s *sess, r Reply, err error) {
	w := s.parked
	s.parked = nil
	sl := &w.slots[s.slot]
	if sl.done || sl.s != s {
		panic("session: invariant broken: a session parked in a slot that is not its own")
	}
	sl.reply, sl.err, sl.done = r, err, true
	w.open--
	if w.open == 0 {
		w.signal()
	}
}

// clearFailoverLocked counts the session's fail-over event as settled.
// REQUIRES: m.mu held.
func (m *Manager) clearFailoverLocked(s *sess) {
	if s.failoverSeq == 0 {
		return
	}
	s.failoverSeq = 0
	m.mu.failoverCount--
	m.maybeCloseFailoverLocked()
}

// REQUIRES: m.mu held.
func (m *Manager) maybeCloseFailoverLocked() {
	if m.mu.failoverCount == 0 && !m.mu.failoverClosed {
		m.mu.failoverClosed = true
		close(m.failoverDone)
	}
}

func (m *Manager) pokeLoop() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// checkLocked verifies the invariants of s, and now and then of the whole
// Manager, when invariant checks are compiled in.
// REQUIRES: m.mu held.
func (m *Manager) checkLocked(s *sess) {
	if !invariants.Enabled {
		return
	}
	if s != nil {
		s.q.check(m.cfg.MaxEvents)
		if s.expiring != (s.heapIdx < 0) {
			panic("session: invariant broken: expiring flag disagrees with leaseIndex membership")
		}
		if w := s.parked; w != nil && (s.slot >= len(w.slots) || w.slots[s.slot].s != s || w.slots[s.slot].done) {
			panic("session: invariant broken: a parked session's slot is not its own or is done")
		}
	}
	if !invariants.Sometimes(10) {
		return
	}
	m.mu.leases.check()
	live, pending := 0, 0
	for _, s := range m.mu.sessions {
		s.q.check(m.cfg.MaxEvents)
		if !s.expiring {
			live++
		}
		if s.failoverSeq != 0 {
			pending++
		}
	}
	if live != len(m.mu.leases) {
		panic("session: invariant broken: leaseIndex does not hold exactly the live sessions")
	}
	if pending != m.mu.failoverCount {
		panic("session: invariant broken: fail-over count out of date")
	}
}
