package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// State is a session's state as the client library sees it (Chubby §2.8).
type State uint8

// The session states.
const (
	// StateSafe: the local lease runs; calls go through.
	StateSafe State = iota + 1
	// StateJeopardy: the local lease ran out without a KeepAlive reply. The
	// cache is emptied and off, every held lock's context is cancelled,
	// calls wait, and the library looks for a master for the grace period.
	// The session is in jeopardy from the instant the lease runs out on the
	// session's monotonic clock, whether or not any goroutine has run since.
	StateJeopardy
	// StateExpired: the session ended (the master expired it, or the grace
	// period ran out). Final.
	StateExpired
	// StateClosed: the owner closed the session. Final.
	StateClosed
)

// String returns "safe", "jeopardy", "expired" or "closed".
func (s State) String() string {
	switch s {
	case StateSafe:
		return "safe"
	case StateJeopardy:
		return "jeopardy"
	case StateExpired:
		return "expired"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// EventKind says what an Event reports.
type EventKind uint8

// The event kinds. Jeopardy, Safe and Expired are the library's own; the
// others come from the master.
const (
	// EventJeopardy: the local lease ran out; the session is in jeopardy.
	EventJeopardy EventKind = iota + 1
	// EventSafe: the session survived jeopardy.
	EventSafe
	// EventExpired: the session ended (expired or closed).
	EventExpired
	// EventFailover: a new master took over; Node.Epoch is its epoch. Events
	// may have been lost: re-read what you watch.
	EventFailover
	// EventNode: a node event (Node says which), including
	// api.EventHandleInvalid and api.EventOverflow.
	EventNode
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case EventJeopardy:
		return "jeopardy"
	case EventSafe:
		return "safe"
	case EventExpired:
		return "expired"
	case EventFailover:
		return "failover"
	case EventNode:
		return "node"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one session event.
type Event struct {
	Kind EventKind
	// Node is the master's event for EventNode and EventFailover.
	Node api.Event
}

// String returns a short human form.
func (e Event) String() string {
	if e.Kind == EventNode || e.Kind == EventFailover {
		return e.Kind.String() + " " + e.Node.String()
	}
	return e.Kind.String()
}

// Session is a Chubby session: a lease on the master kept alive by a
// KeepAlive loop, the handles and locks opened in it, and its events.
//
// The local lease is conservative: a KeepAlive reply that the master held
// for h and that grants d proves the lease lasts h+d from some moment after
// the request was sent, so the client counts (h+d)×(1−Drift) from the send
// time. The master parks a KeepAlive for its cadence (or until shortly
// before the lease ends, if it announced none) and the loop sends the next
// one as soon as a reply arrives, so a healthy session always holds a
// proof of its lease. A KeepAlive unanswered past the master's cadence and
// SilenceMargin sends the loop looking for the master among all replicas
// (see whois.go); the lease rules do not change with it. If a reply is
// late (shortly before the local lease would run out), the loop sends two
// KeepAlives back to back: the master renews the lease when each arrives
// and answers the one the other replaced at once (Aborted), which proves a
// renewal no earlier than that one's send time.
//
// When the local lease runs out the session is in jeopardy: every lock's
// context is cancelled, the cache is emptied, calls wait, and the loop looks
// for a master (any replica, following redirects) for the grace period. A
// reply then makes the session safe again; otherwise it expires.
//
// The lease deadline is exact: State, every Lock's context (Err, Done,
// context.Cause), the cache and every call compare the deadline with the
// monotonic clock when asked, and the first of them to find it passed moves
// the session to jeopardy there and then. A process paused past its lease
// (SIGSTOP, a long GC pause, a frozen VM) therefore learns at its very first
// look after resuming that its locks may be lost, however the scheduler
// orders its goroutines; the KeepAlive loop's timer only makes the same
// transition for those who are not looking.
//
// Methods are safe for concurrent use. Calls return ErrSessionExpired
// (wrapped) once the session expired, ErrClosed after Close, ctx's error if
// ctx ends first (also while waiting out jeopardy), and *api.Error values
// from the cell.
type Session struct {
	c        *Client
	cfg      Config
	id       uint64
	tenant   string
	princ    string
	events   chan Event
	kick     chan struct{}
	stop     chan struct{} // closed to end the loop
	stopOnce sync.Once
	closing  atomic.Bool   // Close has begun: the end is a close, not an expiry
	done     chan struct{} // closed when the session is finished
	ctx      context.Context
	cancel   context.CancelCauseFunc
	cache    *cache
	clock    monotime.Clock
	subs     subscriptions // the handles subscribed to events, by path
	// holdKA makes this session lose the replies to its KeepAlives: each
	// waits, unanswered, until it is given up (only this package's tests
	// set it: HoldKeepAlives).
	holdKA atomic.Bool

	dispatch struct {
		sync.Mutex
		queue []Event
		wake  chan struct{}
	}

	mu struct {
		sync.Mutex
		state State
		err   error
		// leaseEnd is the end of the local lease on clock. Only the
		// KeepAlive loop moves it, and only forward.
		leaseEnd monotime.Time
		epoch    uint64
		changed  chan struct{} // closed and replaced on a state or epoch change
		// locks are the locks held as far as the session knows; a lock
		// leaves the set (with Lock.gone set) the moment it may be lost.
		locks   map[*Lock]struct{}
		watch   map[string]map[chan struct{}]struct{}
		dropped uint64
	}
}

// NewSession creates a session at the master and starts its KeepAlive loop.
func (c *Client) NewSession(ctx context.Context) (*Session, error) {
	sent := c.cfg.clock.Now()
	var resp api.CreateSessionResponse
	if err := c.call(ctx, api.MethodCreateSession, &api.CreateSessionRequest{Token: c.cfg.Token}, &resp); err != nil {
		return nil, err
	}
	s := &Session{
		c: c, cfg: c.cfg, id: resp.Session, tenant: resp.Tenant, princ: resp.Principal,
		events: make(chan Event, c.cfg.EventBuffer),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
		clock:  c.cfg.clock,
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.dispatch.wake = make(chan struct{}, 1)
	grant := time.Duration(resp.LeaseTimeout)
	s.mu.state = StateSafe
	s.mu.leaseEnd = sent.Add(s.shorten(grant))
	s.mu.epoch = resp.Epoch
	s.mu.changed = make(chan struct{})
	s.mu.locks = map[*Lock]struct{}{}
	s.mu.watch = map[string]map[chan struct{}]struct{}{}
	s.cache = newCache(c.cfg.Cache)
	if !c.addSession(s) {
		return nil, ErrClosed
	}
	go s.dispatchLoop()
	go s.run(grant, time.Duration(resp.Cadence))
	return s, nil
}

// ID returns the session's id.
func (s *Session) ID() uint64 { return s.id }

// Tenant returns the tenant of the session's principal ("" for a cell
// administrator).
func (s *Session) Tenant() string { return s.tenant }

// Principal returns the session's principal.
func (s *Session) Principal() string { return s.princ }

// Client returns the client the session was opened through.
func (s *Session) Client() *Client { return s.c }

// Events returns the channel of session events. Events that find it full
// are dropped (counted by DroppedEvents); Config.OnEvent sees every event.
func (s *Session) Events() <-chan Event { return s.events }

// DroppedEvents returns how many events found Events full.
func (s *Session) DroppedEvents() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.dropped
}

// State returns the session's current state. It is never StateSafe once
// the local lease has run out on the session's clock: the first look after
// the deadline moves the session to jeopardy.
func (s *Session) State() State {
	s.mu.Lock()
	lapsed := s.lapseIfDueLocked()
	st := s.mu.state
	s.mu.Unlock()
	s.afterLapse(lapsed)
	return st
}

// lapseIfDueLocked moves a safe session whose local lease has run out into
// jeopardy and returns the locks it held (nil if nothing changed); the
// caller must pass them to afterLapse once s.mu is released. Everything
// that answers "is the session safe" or "is this lock held" calls it first,
// so that the answer does not wait for the KeepAlive loop to run.
// REQUIRES: s.mu held.
func (s *Session) lapseIfDueLocked() []*Lock {
	if !exactLease || s.mu.state != StateSafe || s.clock.Now().Before(s.mu.leaseEnd) {
		return nil
	}
	return s.jeopardyLocked()
}

// jeopardyLocked makes the move from safe to jeopardy: the held locks leave
// the session (their contexts must be cancelled by afterLapse), the cache
// is emptied and off, waiters wake and the event is queued. It returns the
// locks, never nil. The cache and the event change under s.mu, so that a
// concurrent return to safe (extendLease) cannot overtake them.
// REQUIRES: s.mu held; s.mu.state is StateSafe.
func (s *Session) jeopardyLocked() []*Lock {
	s.mu.state = StateJeopardy
	locks := s.takeLocksLocked(ErrJeopardy)
	s.changedLocked()
	s.cache.disable()
	s.emit(Event{Kind: EventJeopardy})
	return locks
}

// afterLapse finishes a move to jeopardy that jeopardyLocked made (locks is
// its result; nil means there was none): it cancels the locks' contexts and
// wakes the loop, which then looks for a master.
func (s *Session) afterLapse(locks []*Lock) {
	if locks == nil {
		return
	}
	for _, l := range locks {
		l.lost(ErrJeopardy)
	}
	s.nudge()
}

// safe reports whether the session is safe now (exactly: see State).
func (s *Session) safe() bool { return s.State() == StateSafe }

// Epoch returns the master epoch the session last learned.
func (s *Session) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.epoch
}

// Done is closed when the session has expired or been closed.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err returns nil while the session lives, then ErrSessionExpired or
// ErrClosed (wrapped).
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.err
}

// Ctx returns a context cancelled when the session ends; its cause is Err.
func (s *Session) Ctx() context.Context { return s.ctx }

func (s *Session) shorten(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - s.cfg.Drift))
}

// Close ends the session at the master — its locks are released without
// lock-delay and its ephemeral nodes deleted — and stops its loop. If ctx
// ends first the loop stops anyway and the session expires at the master
// when its lease runs out.
func (s *Session) Close(ctx context.Context) error {
	if err := s.Err(); err != nil {
		return err
	}
	s.closing.Store(true)
	err := s.call(ctx, api.MethodCloseSession, func(h api.Header) any { return &api.CloseSessionRequest{Header: h} }, &api.Empty{})
	if errors.Is(err, api.ErrSessionExpired) || errors.Is(err, ErrSessionExpired) {
		err = nil // a retried close whose first attempt took effect
	}
	s.finish(StateClosed, ErrClosed)
	return err
}

// abandon ends the session locally (Client.Close).
func (s *Session) abandon() { s.finish(StateClosed, ErrClosed) }

// finish moves the session to a final state: locks' contexts are cancelled,
// the loop stops, Done closes.
func (s *Session) finish(st State, cause error) {
	if st == StateExpired && s.closing.Load() {
		// The master ended the session because we asked it to.
		st, cause = StateClosed, ErrClosed
	}
	s.mu.Lock()
	if s.mu.state == StateExpired || s.mu.state == StateClosed {
		s.mu.Unlock()
		return
	}
	s.mu.state = st
	s.mu.err = cause
	locks := s.takeLocksLocked(cause)
	s.changedLocked()
	s.mu.Unlock()
	for _, l := range locks {
		l.lost(cause)
	}
	s.cache.disable()
	s.cancel(cause)
	s.stopOnce.Do(func() { close(s.stop) })
	s.c.removeSession(s)
	s.emit(Event{Kind: EventExpired})
	s.wakeWatchers("")
	close(s.done)
}

// changedLocked wakes everyone waiting for a state or epoch change.
// REQUIRES: s.mu held.
func (s *Session) changedLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

// takeLocksLocked empties the session's set of held locks, recording cause
// as the reason each may be lost, and returns them (never nil).
// REQUIRES: s.mu held.
func (s *Session) takeLocksLocked(cause error) []*Lock {
	out := make([]*Lock, 0, len(s.mu.locks))
	for l := range s.mu.locks {
		l.gone = cause
		out = append(out, l)
	}
	clear(s.mu.locks)
	return out
}

// emit queues an event for OnEvent and the Events channel.
func (s *Session) emit(ev Event) {
	s.dispatch.Lock()
	s.dispatch.queue = append(s.dispatch.queue, ev)
	s.dispatch.Unlock()
	select {
	case s.dispatch.wake <- struct{}{}:
	default:
	}
}

// dispatchLoop delivers events in order; a slow OnEvent delays only later
// events, never the KeepAlive loop.
func (s *Session) dispatchLoop() {
	for {
		s.dispatch.Lock()
		q := s.dispatch.queue
		s.dispatch.queue = nil
		s.dispatch.Unlock()
		for _, ev := range q {
			if s.cfg.OnEvent != nil {
				s.cfg.OnEvent(s, ev)
			}
			select {
			case s.events <- ev:
			default:
				s.mu.Lock()
				s.mu.dropped++
				s.mu.Unlock()
			}
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-s.dispatch.wake:
		case <-s.done:
			s.dispatch.Lock()
			empty := len(s.dispatch.queue) == 0
			s.dispatch.Unlock()
			if empty {
				return
			}
		}
	}
}

// watchPath returns a channel that receives a signal after every event on
// path and every session-wide event (fail-over, overflow, safe, expiry),
// and a function that stops it.
func (s *Session) watchPath(path string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	m := s.mu.watch[path]
	if m == nil {
		m = map[chan struct{}]struct{}{}
		s.mu.watch[path] = m
	}
	m[ch] = struct{}{}
	s.mu.Unlock()
	return ch, func() {
		s.mu.Lock()
		delete(s.mu.watch[path], ch)
		if len(s.mu.watch[path]) == 0 {
			delete(s.mu.watch, path)
		}
		s.mu.Unlock()
	}
}

// wakeWatchers signals the watchers of path, or of every path if path is
// empty.
func (s *Session) wakeWatchers(path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, m := range s.mu.watch {
		if path != "" && p != path {
			continue
		}
		for ch := range m {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// ready waits until the session is safe and returns the header to send
// and the channel that closes on the next state or epoch change.
func (s *Session) ready(ctx context.Context) (api.Header, <-chan struct{}, error) {
	for {
		s.mu.Lock()
		lapsed := s.lapseIfDueLocked()
		st, err, ch := s.mu.state, s.mu.err, s.mu.changed
		h := api.Header{Session: s.id, Epoch: s.mu.epoch, Token: s.cfg.Token}
		s.mu.Unlock()
		s.afterLapse(lapsed)
		switch st {
		case StateSafe:
			return h, ch, nil
		case StateExpired, StateClosed:
			return h, nil, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return h, nil, fmt.Errorf("client: waiting out jeopardy: %w", ctx.Err())
		}
	}
}

// call makes a call within the session: it waits out jeopardy, carries the
// session's epoch, re-establishes after a fail-over and retries any call
// refused before it took effect, and any call that lost its reply if the
// api method table says a repeat is harmless (api.MethodInfo.Retryable);
// otherwise such a call fails with ErrOutcomeUnknown. build makes the
// request for a header.
func (s *Session) call(ctx context.Context, m api.Method, build func(api.Header) any, resp any) error {
	return s.callWith(ctx, m, build, resp, nil)
}

// callWith is call with a hook run before every retry: if it reports done,
// callWith returns its error (nil for success) without another attempt.
func (s *Session) callWith(ctx context.Context, m api.Method, build func(api.Header) any, resp any,
	beforeRetry func(ctx context.Context, last error) (done bool, err error)) error {
	info, _ := m.Info() // an unknown method's zero entry is not idempotent
	var last error
	redirected := false
	for attempt := 0; ; attempt++ {
		if attempt > 0 && beforeRetry != nil {
			if done, err := beforeRetry(ctx, last); done {
				return err
			}
		}
		h, changed, err := s.ready(ctx)
		if err != nil {
			return err
		}
		before := s.c.redirectCount()
		req := build(h)
		sent, err := s.c.rpcOnce(ctx, m, req, resp)
		if err == nil {
			return nil
		}
		last = err
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s: %w", m, ctx.Err())
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		if errors.Is(err, api.ErrSessionExpired) {
			s.finish(StateExpired, fmt.Errorf("%w: %w", ErrSessionExpired, err))
			return s.Err()
		}
		if errors.Is(err, api.ErrFailover) {
			// The master changed: the KeepAlive loop learns the new epoch
			// (and acknowledges the fail-over event); then retry.
			s.nudge()
			select {
			case <-changed:
			case <-ctx.Done():
				return fmt.Errorf("client: %s: %w (after %w)", m, ctx.Err(), err)
			}
			continue
		}
		retry, noEffect := classify(err)
		if !retry {
			return err
		}
		if sent && !noEffect && !info.Retryable(req) {
			return outcomeUnknown(m, err)
		}
		if s.c.redirectedSince(before, err) && !redirected {
			// Redirected to a named master (a hand-over's successor), by
			// this call's reply or another's: go there at once, but only
			// once in a row (two replicas may name each other).
			redirected = true
			continue
		}
		redirected = false
		if perr := s.c.pause(ctx); perr != nil {
			return fmt.Errorf("client: %s: %w (last error: %v)", m, perr, err)
		}
	}
}

// nudge asks the loop for a KeepAlive now.
func (s *Session) nudge() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// addLock records a granted lock as held. If the session is not safe (as
// of now) the lock may already be lost: it is not added, and the reason is
// returned.
func (s *Session) addLock(l *Lock) error {
	s.mu.Lock()
	lapsed := s.lapseIfDueLocked()
	var cause error
	switch s.mu.state {
	case StateSafe:
		s.mu.locks[l] = struct{}{}
	case StateJeopardy:
		cause = ErrJeopardy
	default:
		cause = s.mu.err
	}
	if cause != nil {
		l.gone = cause
	}
	s.mu.Unlock()
	s.afterLapse(lapsed)
	return cause
}

// removeLock forgets a lock that is no longer held, for cause.
func (s *Session) removeLock(l *Lock, cause error) {
	s.mu.Lock()
	if _, ok := s.mu.locks[l]; ok {
		delete(s.mu.locks, l)
		l.gone = cause
	}
	s.mu.Unlock()
}

// lockLoss returns nil while l is held as far as the session knows as of
// now, and otherwise why it may be lost. It is what makes a Lock's context
// exact: it lapses the session first if its lease has run out.
func (s *Session) lockLoss(l *Lock) error {
	s.mu.Lock()
	lapsed := s.lapseIfDueLocked()
	_, held := s.mu.locks[l]
	cause := l.gone
	s.mu.Unlock()
	if !held && cause == nil {
		// INVARIANT: a lock leaves the set only with its reason recorded.
		cause = ErrJeopardy
	}
	if !held {
		// Cancel this lock before the others, so that the caller sees the
		// loss however the rest of afterLapse is delayed.
		l.lost(cause)
	}
	s.afterLapse(lapsed)
	if held {
		return nil
	}
	return cause
}

// kaResult is the outcome of one KeepAlive.
type kaResult struct {
	id   uint64
	sent monotime.Time
	resp api.KeepAliveResponse
	err  error
	// redirected: the failure sends the client to a named master (see
	// Client.redirectedSince).
	redirected bool
}

// liveKA is a KeepAlive in flight.
type liveKA struct {
	cancel context.CancelFunc
	// expires is when the loop gives it up: the master answers a KeepAlive
	// before the lease it renews ends, so one outstanding longer than the
	// grant is lost.
	expires monotime.Time
	// given: it was given up (cancelled) and its result is on the way.
	given bool
	// watched: the master announced a cadence, and silentAt is when, if
	// still unanswered, it shows the master silent past it; silent: that
	// was noticed. (A monotime.Time has no "unset" value: the clock may
	// read zero or negative, as it does inside a testing/synctest bubble.)
	watched  bool
	silentAt monotime.Time
	silent   bool
}

// loop is the KeepAlive loop's state; only the loop goroutine touches it.
// The session's state (safe or jeopardy) and lease end live in s.mu, since
// any goroutine may find the lease run out; the loop extends the lease and
// does the work that follows a lapse (looking for a master).
type loop struct {
	s       *Session
	clock   monotime.Clock
	results chan kaResult
	live    map[uint64]liveKA
	nextID  uint64
	ack     uint64
	epoch   uint64
	// leaseEnd mirrors s.mu.leaseEnd (only the loop changes it); grant is
	// the lease extension the master is known to grant on every
	// KeepAlive's arrival.
	leaseEnd monotime.Time
	grant    time.Duration
	// probing: a pair of KeepAlives is out to prove a renewal.
	probing  bool
	failures int
	// waiting: no KeepAlive is sent before retryAt unless kicked.
	waiting bool
	retryAt monotime.Time
	// jeopardy: the loop has seen the current lapse and is looking for a
	// master until graceEnd.
	jeopardy bool
	graceEnd monotime.Time
	// kicked: someone asked for a KeepAlive now (nudge).
	kicked bool
	// cadence is the longest the master parks a KeepAlive (zero: unknown).
	cadence time.Duration
	// finding: a search for the serving master is under way; stopFind
	// ends it, and its result comes on found tagged with findGen.
	finding  bool
	stopFind context.CancelFunc
	findGen  uint64
	found    chan foundMaster
	// movedAt is when the last search moved the client: KeepAlives sent
	// before then went to the old connection, and their failure says
	// nothing new (moved: there was such a search). stuck counts searches
	// in a row that found the master where the client already was,
	// although a KeepAlive there was silent.
	moved   bool
	movedAt monotime.Time
	stuck   int
	// heardAt is when the last reply to this session's KeepAlives came
	// (the loop's start, before any): the shared connection is closed on
	// this session's account only if nothing was heard on it since.
	heardAt monotime.Time
}

// foundMaster is the result of one search for the serving master.
type foundMaster struct {
	gen  uint64
	addr string // "" if the search gave up
}

// run is the KeepAlive loop.
func (s *Session) run(grant, cadence time.Duration) {
	s.mu.Lock()
	leaseEnd := s.mu.leaseEnd
	s.mu.Unlock()
	l := &loop{s: s, clock: s.clock, results: make(chan kaResult), live: map[uint64]liveKA{},
		leaseEnd: leaseEnd, grant: grant, epoch: s.Epoch(), cadence: cadence, found: make(chan foundMaster, 1),
		retryAt: s.clock.Now(), heardAt: s.clock.Now()}
	defer func() {
		for _, ka := range l.live {
			ka.cancel()
		}
		l.endFind()
	}()
	timer := l.clock.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := l.clock.Now()
		l.step(now)
		if s.isFinal() {
			return
		}
		timer.Reset(max(l.nextWake(now).Sub(now), time.Millisecond))
		select {
		case r := <-l.results:
			l.handle(r)
		case <-s.kick:
			// step sends it, after looking at the session's state: a kick
			// that follows a lapse must not go out on the old connection.
			l.kicked = true
		case f := <-l.found:
			l.moveTo(f)
		case <-timer.C():
		case <-s.stop:
			return
		}
	}
}

func (s *Session) isFinal() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// probeLead is how long before the local lease ends a renewal is proved
// by a pair of KeepAlives, if the parked one has not been answered. The
// master answers a parked KeepAlive Lease/8 before the lease it renews
// ends, so on a healthy session no pair is needed.
func (l *loop) probeLead() time.Duration { return l.grant / 16 }

// step makes the time-driven transitions and starts KeepAlives.
func (l *loop) step(now monotime.Time) {
	for id, ka := range l.live {
		if !ka.given && !now.Before(ka.expires) {
			// Its goroutine reports the cancellation as a failure.
			ka.cancel()
			ka.given = true
			l.live[id] = ka
		}
		if !ka.given && !ka.silent && ka.watched && !now.Before(ka.silentAt) {
			// The master has been silent past its cadence: it is dead,
			// deposed or cut off. Look for the master everywhere; the
			// KeepAlive stays out in case this one answers after all.
			ka.silent = true
			l.live[id] = ka
			l.s.c.log.Info("client: master silent past its KeepAlive cadence; asking every replica who the master is",
				"session", l.s.id, "cadence", l.cadence, "master", l.s.c.connAddr())
			l.find()
		}
	}
	switch l.s.loopState() {
	case StateSafe:
		l.jeopardy = false
	case StateJeopardy:
		if !l.jeopardy {
			l.enterJeopardy()
		}
		if !now.Before(l.graceEnd) {
			l.s.finish(StateExpired, fmt.Errorf("%w: no master reached within the grace period (%v)", ErrSessionExpired, l.s.cfg.GracePeriod))
			return
		}
	default:
		return
	}
	// A kick is served at once, even during a backoff.
	kicked := l.kicked
	l.kicked = false
	if l.waiting && now.Before(l.retryAt) && !kicked {
		return
	}
	needProof := l.jeopardy || !now.Before(l.leaseEnd.Add(-l.probeLead()))
	switch {
	case needProof && !l.probing && len(l.live) <= 1:
		l.probing = true
		l.start(now)
		l.start(now)
	case len(l.live) == 0, kicked && len(l.live) < 3:
		l.start(now)
	}
}

// loopState returns the session's state for the loop: like State, it
// lapses the session if the lease has run out (in every build: this is the
// KeepAlive goroutine's own timer-driven transition).
func (s *Session) loopState() State {
	s.mu.Lock()
	var lapsed []*Lock
	if s.mu.state == StateSafe && !s.clock.Now().Before(s.mu.leaseEnd) {
		lapsed = s.jeopardyLocked()
	}
	st := s.mu.state
	s.mu.Unlock()
	s.afterLapse(lapsed)
	return st
}

// nextWake is when step has something to do next.
func (l *loop) nextWake(now monotime.Time) monotime.Time {
	next := now.Add(time.Hour)
	if l.waiting && l.retryAt.After(now) {
		next = min(next, l.retryAt)
	}
	for _, ka := range l.live {
		if !ka.given {
			next = min(next, ka.expires)
			if ka.watched && !ka.silent {
				next = min(next, ka.silentAt)
			}
		}
	}
	if l.jeopardy {
		next = min(next, l.graceEnd)
	} else {
		next = min(next, l.leaseEnd)
		if !l.probing {
			next = min(next, l.leaseEnd.Add(-l.probeLead()))
		}
	}
	return next
}

// start sends one KeepAlive on its own goroutine. Its send time, from
// which a reply's lease is counted, is now: the instant the loop last found
// the session's state (a little before the request actually leaves, which
// only shortens the lease it proves). A pause between that look and the
// send therefore cannot make the KeepAlive look sent while the lease ran.
func (l *loop) start(now monotime.Time) {
	l.nextID++
	id := l.nextID
	ctx, cancel := context.WithCancel(context.Background())
	ka := liveKA{cancel: cancel, expires: now.Add(l.grant)}
	if l.cadence > 0 {
		ka.watched = true
		ka.silentAt = now.Add(l.cadence + SilenceMargin(l.cadence))
	}
	l.live[id] = ka
	req := &api.KeepAliveRequest{Header: api.Header{Session: l.s.id, Epoch: l.epoch, Token: l.s.cfg.Token}, Ack: l.ack}
	results, stop := l.results, l.s.stop
	hold := l.s.holdKA.Load()
	go func() {
		defer cancel()
		var resp api.KeepAliveResponse
		var err error
		before := l.s.c.redirectCount()
		if hold {
			// The master gets it (and renews the lease); the reply is lost.
			_ = l.s.c.keepAliveOnce(ctx, req, &resp)
			<-ctx.Done()
			err = ctx.Err()
		} else {
			err = l.s.c.keepAliveOnce(ctx, req, &resp)
		}
		redirected := err != nil && l.s.c.redirectedSince(before, err)
		select {
		case results <- kaResult{id: id, sent: now, resp: resp, err: err, redirected: redirected}:
		case <-stop:
		}
	}()
}

// prove records a KeepAlive reply that proves the lease lasts d (shortened
// by the drift bound) from from, the request's send time: see extendLease
// for when it extends the session's lease and when the session lapses
// first. A session in jeopardy whose lease now runs again is safe.
func (l *loop) prove(from monotime.Time, d time.Duration) {
	if end := from.Add(l.s.shorten(d)); end.After(l.leaseEnd) {
		l.leaseEnd = end
	}
	l.probing = false
	l.failures = 0
	l.waiting = false
	if l.s.extendLease(from, l.leaseEnd) {
		l.jeopardy = false
		l.s.c.log.Info("client: session safe", "session", l.s.id)
	}
}

// extendLease records a proof, sent at from, that the lease runs until
// end: it moves the local lease end forward to end; if the session was in
// jeopardy and the lease now runs, it is safe again, and extendLease
// reports true. Locks lost in jeopardy stay lost.
//
// A proof extends a safe session's lease only if the lease is continuous:
// it had not run out when the proof's request was sent, nor has it now. If
// it had — the process was paused past the lease end, or the reply came
// after it, and nobody happened to look in between — the session lapsed at
// that deadline whatever the reply says: extendLease first makes the move
// to jeopardy that the first look would have made (every held lock lost
// for good, its context cancelled with ErrJeopardy) and only then takes
// the session back to safe on the fresh lease. So the answers to "is the
// session safe, is the lock held" depend on the clock alone, never on
// whether anyone asked while the lease had run out: a lock context that
// was Done by its deadline stays Done.
func (s *Session) extendLease(from, end monotime.Time) bool {
	s.mu.Lock()
	var lapsed []*Lock
	if exactLease && s.mu.state == StateSafe {
		if now := s.clock.Now(); !from.Before(s.mu.leaseEnd) || !now.Before(s.mu.leaseEnd) {
			lapsed = s.jeopardyLocked()
		}
	}
	if end.After(s.mu.leaseEnd) {
		s.mu.leaseEnd = end
	}
	again := s.mu.state == StateJeopardy && s.clock.Now().Before(s.mu.leaseEnd)
	if again {
		s.mu.state = StateSafe
		s.changedLocked()
		s.cache.enable()
		s.emit(Event{Kind: EventSafe})
	}
	s.mu.Unlock()
	if lapsed != nil {
		for _, l := range lapsed {
			l.lost(ErrJeopardy)
		}
		s.c.log.Info("client: session lapsed before a late KeepAlive reply", "session", s.id)
	}
	if again {
		s.wakeWatchers("")
	}
	return again
}

func (l *loop) handle(r kaResult) {
	if _, ok := l.live[r.id]; !ok {
		return // abandoned
	}
	delete(l.live, r.id)
	var ae *api.Error
	switch {
	case r.err == nil:
		// The master answered: it is alive (or a newer one is).
		l.heardAt = l.clock.Now()
		l.endFind()
		l.stuck = 0
		l.cadence = time.Duration(r.resp.Cadence)
		l.grant = min(l.grant, time.Duration(r.resp.LeaseTimeout))
		l.prove(r.sent, time.Duration(r.resp.Held+r.resp.LeaseTimeout))
		if l.events(r.resp) {
			l.start(l.clock.Now()) // acknowledge at once
		}
	case errors.As(r.err, &ae) && ae.Code == api.Aborted:
		// Superseded, from a master that answers a replaced KeepAlive with
		// an error (current masters answer it with a lease): the master
		// renewed the lease when it arrived, but by how much it does not
		// say, and a load extension may have ended since the grant this
		// client last saw, so it proves nothing. The newer KeepAlive's
		// answer will.
		l.heardAt = l.clock.Now()
		l.stuck = 0
	case errors.As(r.err, &ae) && (ae.Code == api.SessionExpired || ae.Code == api.PermissionDenied || ae.Code == api.Unauthenticated):
		// Unauthenticated: the session's token was revoked; the master
		// expires the session, and no call of it can succeed again.
		l.s.finish(StateExpired, fmt.Errorf("%w: %w", ErrSessionExpired, r.err))
	case errors.As(r.err, &ae) && ae.Code == api.ResourceExhausted:
		// Over the tenant's KeepAlive budget: retry when the master says
		// (the lease still runs; jeopardy comes if it runs out first).
		l.s.c.log.Debug("client: KeepAlive over budget", "session", l.s.id, "err", r.err)
		if len(l.live) == 0 {
			l.probing = false
		}
		l.backoff()
		if ra := l.clock.Now().Add(time.Duration(ae.RetryAfter)); ae.RetryAfter > 0 && ra.After(l.retryAt) {
			l.retryAt = ra
		}
	case errors.As(r.err, &ae) && ae.Code == api.InvalidArgument:
		// A refused acknowledgement: start the count again.
		l.s.c.log.Warn("client: KeepAlive refused; resetting its acknowledgement", "session", l.s.id, "err", r.err)
		l.ack = 0
		l.backoff()
	case errors.Is(r.err, ErrClosed):
	default:
		// NotMaster, a lost connection, a timeout.
		l.s.c.log.Debug("client: KeepAlive failed", "session", l.s.id, "err", r.err)
		if len(l.live) == 0 {
			l.probing = false
		}
		named := r.redirected
		if named && l.failures == 0 {
			// A deposed master named its successor (rpcOnce pointed the
			// client there), in this reply or in another call's that
			// closed this one's connection: go there at once, without a
			// backoff (but only once in a row: two replicas may name
			// each other).
			l.failures = 1
			l.kicked = true
			break
		}
		l.backoff()
		if !named && (!l.moved || !r.sent.Before(l.movedAt)) {
			// No successor named: ask every replica at once rather than
			// try them one by one.
			l.find()
		}
	}
}

func (l *loop) backoff() {
	l.failures++
	l.waiting = true
	l.retryAt = l.clock.Now().Add(l.s.c.backoff(l.failures))
}

// events processes a reply's events in order and reports whether any was
// new (and so needs acknowledging).
func (l *loop) events(resp api.KeepAliveResponse) bool {
	switch {
	case resp.Epoch < l.epoch:
		return false // a late reply of an older master: its events are stale
	case resp.Epoch > l.epoch:
		l.epoch = resp.Epoch
		l.ack = 0
		l.s.setEpoch(resp.Epoch)
	}
	evs := slices.Clone(resp.Events)
	slices.SortFunc(evs, func(a, b api.Event) int { return int(a.Seq) - int(b.Seq) })
	news := false
	for _, ev := range evs {
		if ev.Seq <= l.ack {
			continue
		}
		l.ack = ev.Seq
		news = true
		l.s.nodeEvent(ev)
	}
	return news
}

// enterJeopardy starts the search for a master after the session lapsed
// (by the loop's timer or at anyone's look): grace runs from the lease end.
func (l *loop) enterJeopardy() {
	l.jeopardy = true
	l.graceEnd = l.leaseEnd.Add(l.s.cfg.GracePeriod)
	// Whatever is outstanding may sit on a dead connection: abandon it and
	// look for a master afresh.
	for id, ka := range l.live {
		ka.cancel()
		delete(l.live, id)
	}
	l.probing = false
	l.failures = 0
	l.waiting = false
	// The connection is shared with the client's other sessions: it is
	// closed only if it fell silent for them too (nothing heard on it since
	// this session's last reply); otherwise the trouble is this session's
	// and the search below finds its master.
	dropped := l.s.c.dropIfSilent(l.heardAt)
	l.s.c.log.Info("client: session in jeopardy", "session", l.s.id, "grace", l.s.cfg.GracePeriod, "connection_closed", dropped)
	l.find()
}

// find starts a search for the serving master (Client.findServingMaster),
// unless one is under way. It ends when a master is found, when a
// KeepAlive is answered, or when the session ends.
func (l *loop) find() {
	if l.finding {
		return
	}
	l.finding = true
	l.findGen++
	ctx, cancel := context.WithCancel(context.Background())
	l.stopFind = cancel
	c, found, stop, gen := l.s.c, l.found, l.s.stop, l.findGen
	go func() {
		addr, err := c.findServingMaster(ctx)
		if err != nil {
			addr = ""
		}
		select {
		case found <- foundMaster{gen: gen, addr: addr}:
		case <-ctx.Done():
		case <-stop:
		}
	}()
}

// endFind ends the search for the master, if one is under way; a result
// it may still deliver is ignored.
func (l *loop) endFind() {
	if l.finding {
		l.stopFind()
		l.finding = false
	}
}

// moveTo takes the result of a search for the master: the client moves to
// the master found ("" if the search gave up), and a KeepAlive goes there
// at once. If the master is where the client already is, the connection
// is kept (the master may only be slow), unless that happened twice before
// with no reply in between: then the connection itself is suspect and is
// replaced.
func (l *loop) moveTo(f foundMaster) {
	if f.gen != l.findGen || !l.finding {
		return // a search that was ended
	}
	l.endFind()
	if f.addr == "" {
		return
	}
	moved := l.s.c.moveTo(f.addr, l.stuck >= 2, l.heardAt)
	if moved {
		l.stuck = 0
		l.moved = true
		l.movedAt = l.clock.Now()
		l.s.c.log.Info("client: moved to the serving master", "session", l.s.id, "master", f.addr)
	} else {
		l.stuck++
	}
	l.kicked = true
	l.waiting = false
}

func (s *Session) setEpoch(e uint64) {
	s.mu.Lock()
	s.mu.epoch = e
	s.changedLocked()
	s.mu.Unlock()
}

// nodeEvent applies one master event: cache invalidation, lost locks,
// watchers, and delivery to the user.
func (s *Session) nodeEvent(ev api.Event) {
	switch ev.Kind {
	case api.EventMasterFailover:
		s.cache.flush()
		s.emit(Event{Kind: EventFailover, Node: ev})
		s.wakeWatchers("")
		return
	case api.EventOverflow:
		s.cache.flush()
		s.wakeWatchers("")
	case api.EventHandleInvalid:
		s.cache.invalidate(ev.Path)
		s.mu.Lock()
		var lost []*Lock
		for l := range s.mu.locks {
			if l.h.h.Path == ev.Path && (ev.Instance == 0 || l.h.h.Instance == ev.Instance) {
				lost = append(lost, l)
				delete(s.mu.locks, l)
				l.gone = ErrHandleInvalid
			}
		}
		s.mu.Unlock()
		for _, l := range lost {
			l.lost(ErrHandleInvalid)
		}
		s.wakeWatchers(ev.Path)
	case api.EventContentsModified, api.EventChildAdded, api.EventChildRemoved:
		s.cache.invalidate(ev.Path)
		s.wakeWatchers(ev.Path)
	default:
		s.wakeWatchers(ev.Path)
	}
	s.emit(Event{Kind: EventNode, Node: ev})
}
