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
// time. The master parks a KeepAlive until shortly before the lease ends and
// the loop sends the next one as soon as a reply arrives, so a healthy
// session always holds a proof of its lease. If a reply is late (shortly
// before the local lease would run out), the loop sends two KeepAlives back
// to back: the master renews the lease when each arrives and answers the one
// the other replaced at once (Aborted), which proves a renewal no earlier
// than that one's send time.
//
// When the local lease runs out the session is in jeopardy: every lock's
// context is cancelled, the cache is emptied, calls wait, and the loop looks
// for a master (any replica, following redirects) for the grace period. A
// reply then makes the session safe again; otherwise it expires.
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

	dispatch struct {
		sync.Mutex
		queue []Event
		wake  chan struct{}
	}

	mu struct {
		sync.Mutex
		state   State
		err     error
		epoch   uint64
		changed chan struct{} // closed and replaced on a state or epoch change
		locks   map[*Lock]struct{}
		watch   map[string]map[chan struct{}]struct{}
		dropped uint64
	}
}

// NewSession creates a session at the master and starts its KeepAlive loop.
func (c *Client) NewSession(ctx context.Context) (*Session, error) {
	sent := monotime.Now()
	var resp api.CreateSessionResponse
	// A lost reply leaves at most an orphan session that expires on its own,
	// so CreateSession is retried like an idempotent call.
	if err := c.call(ctx, api.MethodCreateSession, &api.CreateSessionRequest{Token: c.cfg.Token}, &resp, true); err != nil {
		return nil, err
	}
	s := &Session{
		c: c, cfg: c.cfg, id: resp.Session, tenant: resp.Tenant, princ: resp.Principal,
		events: make(chan Event, c.cfg.EventBuffer),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	s.dispatch.wake = make(chan struct{}, 1)
	s.mu.state = StateSafe
	s.mu.epoch = resp.Epoch
	s.mu.changed = make(chan struct{})
	s.mu.locks = map[*Lock]struct{}{}
	s.mu.watch = map[string]map[chan struct{}]struct{}{}
	s.cache = newCache(c.cfg.Cache)
	if !c.addSession(s) {
		return nil, ErrClosed
	}
	grant := time.Duration(resp.LeaseTimeout)
	go s.dispatchLoop()
	go s.run(sent.Add(s.shorten(grant)), grant)
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

// State returns the session's current state.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.state
}

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
	err := s.call(ctx, api.MethodCloseSession, func(h api.Header) any { return &api.CloseSessionRequest{Header: h} }, &api.Empty{}, true)
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
	locks := s.takeLocksLocked()
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

func (s *Session) takeLocksLocked() []*Lock {
	out := make([]*Lock, 0, len(s.mu.locks))
	for l := range s.mu.locks {
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
		st, err, ch := s.mu.state, s.mu.err, s.mu.changed
		h := api.Header{Session: s.id, Epoch: s.mu.epoch, Token: s.cfg.Token}
		s.mu.Unlock()
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
// refused before it took effect, and, if idempotent, any call that lost its
// reply. build makes the request for a header.
func (s *Session) call(ctx context.Context, m api.Method, build func(api.Header) any, resp any, idempotent bool) error {
	return s.callWith(ctx, m, build, resp, idempotent, nil)
}

// callWith is call with a hook run before every retry: if it reports done,
// callWith returns its error (nil for success) without another attempt.
func (s *Session) callWith(ctx context.Context, m api.Method, build func(api.Header) any, resp any, idempotent bool,
	beforeRetry func(ctx context.Context, last error) (done bool, err error)) error {
	var last error
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
		sent, err := s.c.rpcOnce(ctx, m, build(h), resp)
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
		if sent && !noEffect && !idempotent {
			return outcomeUnknown(m, err)
		}
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

func (s *Session) addLock(l *Lock) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.state != StateSafe {
		return false
	}
	s.mu.locks[l] = struct{}{}
	return true
}

func (s *Session) removeLock(l *Lock) {
	s.mu.Lock()
	delete(s.mu.locks, l)
	s.mu.Unlock()
}

// kaResult is the outcome of one KeepAlive.
type kaResult struct {
	id   uint64
	sent monotime.Time
	resp api.KeepAliveResponse
	err  error
}

// loop is the KeepAlive loop's state; only the loop goroutine touches it.
type loop struct {
	s       *Session
	results chan kaResult
	live    map[uint64]context.CancelFunc
	nextID  uint64
	ack     uint64
	epoch   uint64
	// leaseEnd is the end of the local lease; grant the lease extension the
	// master is known to grant on every KeepAlive's arrival.
	leaseEnd monotime.Time
	grant    time.Duration
	// probing: a pair of KeepAlives is out to prove a renewal.
	probing  bool
	failures int
	retryAt  monotime.Time
	graceEnd monotime.Time
	state    State
}

// run is the KeepAlive loop.
func (s *Session) run(leaseEnd monotime.Time, grant time.Duration) {
	l := &loop{s: s, results: make(chan kaResult), live: map[uint64]context.CancelFunc{},
		leaseEnd: leaseEnd, grant: grant, state: StateSafe, epoch: s.Epoch()}
	defer func() {
		for _, cancel := range l.live {
			cancel()
		}
	}()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := monotime.Now()
		l.step(now)
		if s.isFinal() {
			return
		}
		timer.Reset(max(l.nextWake(now).Sub(now), time.Millisecond))
		select {
		case r := <-l.results:
			l.handle(r)
		case <-s.kick:
			if len(l.live) < 3 {
				l.start()
			}
		case <-timer.C:
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
	switch l.state {
	case StateSafe:
		if !now.Before(l.leaseEnd) {
			l.enterJeopardy(now)
		}
	case StateJeopardy:
		if !now.Before(l.graceEnd) {
			l.s.finish(StateExpired, fmt.Errorf("%w: no master reached within the grace period (%v)", ErrSessionExpired, l.s.cfg.GracePeriod))
			return
		}
	}
	if now.Before(l.retryAt) {
		return
	}
	needProof := l.state == StateJeopardy || !now.Before(l.leaseEnd.Add(-l.probeLead()))
	switch {
	case needProof && !l.probing && len(l.live) <= 1:
		l.probing = true
		l.start()
		l.start()
	case len(l.live) == 0:
		l.start()
	}
}

// nextWake is when step has something to do next.
func (l *loop) nextWake(now monotime.Time) monotime.Time {
	next := now.Add(time.Hour)
	if l.retryAt.After(now) {
		next = min(next, l.retryAt)
	}
	switch l.state {
	case StateSafe:
		next = min(next, l.leaseEnd)
		if !l.probing {
			next = min(next, l.leaseEnd.Add(-l.probeLead()))
		}
	case StateJeopardy:
		next = min(next, l.graceEnd)
	}
	return next
}

// start sends one KeepAlive on its own goroutine.
func (l *loop) start() {
	l.nextID++
	id := l.nextID
	// The master answers a KeepAlive before the lease it renews ends, so a
	// KeepAlive outstanding longer than that is lost.
	ctx, cancel := context.WithTimeout(context.Background(), l.grant)
	l.live[id] = cancel
	req := &api.KeepAliveRequest{Header: api.Header{Session: l.s.id, Epoch: l.epoch, Token: l.s.cfg.Token}, Ack: l.ack}
	results, stop := l.results, l.s.stop
	go func() {
		defer cancel()
		sent := monotime.Now()
		var resp api.KeepAliveResponse
		_, err := l.s.c.rpcOnce(ctx, api.MethodKeepAlive, req, &resp)
		select {
		case results <- kaResult{id: id, sent: sent, resp: resp, err: err}:
		case <-stop:
		}
	}()
}

// prove extends the local lease to at least from+d.
func (l *loop) prove(from monotime.Time, d time.Duration) {
	if end := from.Add(l.s.shorten(d)); end.After(l.leaseEnd) {
		l.leaseEnd = end
	}
	l.probing = false
	l.failures = 0
	l.retryAt = 0
}

func (l *loop) handle(r kaResult) {
	if _, ok := l.live[r.id]; !ok {
		return // abandoned
	}
	delete(l.live, r.id)
	var ae *api.Error
	switch {
	case r.err == nil:
		l.grant = min(l.grant, time.Duration(r.resp.LeaseTimeout))
		l.prove(r.sent, time.Duration(r.resp.Held+r.resp.LeaseTimeout))
		if l.events(r.resp) {
			l.start() // acknowledge at once
		}
	case errors.As(r.err, &ae) && ae.Code == api.Aborted:
		// Superseded: it was parked, so the master renewed the lease when
		// it arrived, after it was sent.
		l.prove(r.sent, l.grant)
	case errors.As(r.err, &ae) && (ae.Code == api.SessionExpired || ae.Code == api.PermissionDenied || ae.Code == api.Unauthenticated):
		// Unauthenticated: the session's token was revoked; the master
		// expires the session, and no call of it can succeed again.
		l.s.finish(StateExpired, fmt.Errorf("%w: %w", ErrSessionExpired, r.err))
		return
	case errors.As(r.err, &ae) && ae.Code == api.ResourceExhausted:
		// Over the tenant's KeepAlive budget: retry when the master says
		// (the lease still runs; jeopardy comes if it runs out first).
		l.s.c.log.Debug("client: KeepAlive over budget", "session", l.s.id, "err", r.err)
		if len(l.live) == 0 {
			l.probing = false
		}
		l.backoff()
		if ra := monotime.Now().Add(time.Duration(ae.RetryAfter)); ae.RetryAfter > 0 && ra.After(l.retryAt) {
			l.retryAt = ra
		}
	case errors.As(r.err, &ae) && ae.Code == api.InvalidArgument:
		// A refused acknowledgement: start the count again.
		l.s.c.log.Warn("client: KeepAlive refused; resetting its acknowledgement", "session", l.s.id, "err", r.err)
		l.ack = 0
		l.backoff()
	case errors.Is(r.err, ErrClosed):
		return
	default:
		// NotMaster (already redirected), a lost connection, a timeout.
		l.s.c.log.Debug("client: KeepAlive failed", "session", l.s.id, "err", r.err)
		if len(l.live) == 0 {
			l.probing = false
		}
		l.backoff()
	}
	if l.state == StateJeopardy && monotime.Now().Before(l.leaseEnd) {
		l.enterSafe()
	}
}

func (l *loop) backoff() {
	l.failures++
	l.retryAt = monotime.Now().Add(l.s.c.backoff(l.failures))
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

func (l *loop) enterJeopardy(now monotime.Time) {
	l.state = StateJeopardy
	l.graceEnd = l.leaseEnd.Add(l.s.cfg.GracePeriod)
	// Whatever is outstanding may sit on a dead connection: abandon it and
	// look for a master afresh.
	for id, cancel := range l.live {
		cancel()
		delete(l.live, id)
	}
	l.probing = false
	l.failures = 0
	l.retryAt = 0
	l.s.c.dropAll("")
	l.s.setState(StateJeopardy, ErrJeopardy)
	l.s.c.log.Info("client: session in jeopardy", "session", l.s.id, "grace", l.s.cfg.GracePeriod)
}

func (l *loop) enterSafe() {
	l.state = StateSafe
	l.s.setState(StateSafe, nil)
	l.s.c.log.Info("client: session safe", "session", l.s.id)
}

// setState records a jeopardy or safe transition and tells everyone.
func (s *Session) setState(st State, cause error) {
	s.mu.Lock()
	if s.mu.state == StateExpired || s.mu.state == StateClosed {
		s.mu.Unlock()
		return
	}
	s.mu.state = st
	var locks []*Lock
	if st == StateJeopardy {
		locks = s.takeLocksLocked()
	}
	s.changedLocked()
	s.mu.Unlock()
	for _, l := range locks {
		l.lost(cause)
	}
	if st == StateJeopardy {
		s.cache.disable()
		s.emit(Event{Kind: EventJeopardy})
	} else {
		s.cache.enable()
		s.emit(Event{Kind: EventSafe})
		s.wakeWatchers("")
	}
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
