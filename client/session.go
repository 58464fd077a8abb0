package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// Session is a Chubby session: a lease on the master kept alive by the
// Client's KeepAlive loop (one for all its sessions: kaloop.go), the
// handles and locks opened in it, and its events.
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
	c       *Client
	cfg     Config
	id      uint64
	tenant  string
	princ   string
	ka      *loop         // the session's KeepAlive state (kaloop.go)
	stopped atomic.Bool   // the session ended: the loop forgets it
	closing atomic.Bool   // Close has begun: the end is a close, not an expiry
	done    chan struct{} // closed when the session is finished
	ctx     context.Context
	cancel  context.CancelCauseFunc
	cache   *cache
	clock   monotime.Clock
	subs    subscriptions // the handles subscribed to events, by path
	// holdKA makes this session lose the replies to its KeepAlives: each
	// waits, unanswered, until it is given up (only this package's tests
	// set it: HoldKeepAlives).
	holdKA atomic.Bool

	dispatch struct {
		sync.Mutex
		queue []Event
		// running: a goroutine delivers the queue (one at a time, so
		// events keep their order; none while the queue is empty).
		running bool
		// events is the Events channel, made at the first call of Events;
		// early holds the events before that (at most EventBuffer).
		events chan Event
		early  []Event
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
		// It and watch (the watchers by path) are made at their first
		// entry: most sessions hold no lock and watch nothing.
		locks   map[*Lock]struct{}
		watch   map[string]map[chan struct{}]struct{}
		dropped uint64
	}
	// orphans gives back grants that cancelled Acquires left behind
	// (client/lock.go).
	orphans orphanGrants
}

// NewSession creates a session at the master and hands it to the client's
// KeepAlive loop. NewSession calls made while another is waiting for the
// master go together in one CreateSessions call (createbatch.go); each
// session's lease is counted from when that call was sent.
//
// A master that sheds the CreateSession (api.ErrResourceExhausted with a
// RetryAfter: the tenant's queue at the master is full, or its rate is
// spent) created nothing, so NewSession asks again after that pause, up to
// ShedRetries times (see there) or until ctx ends; it then returns the last
// refusal, or ctx's error.
func (c *Client) NewSession(ctx context.Context) (*Session, error) {
	var resp api.CreateSessionResponse
	sent, err := c.createSession(ctx, &resp)
	if err != nil {
		return nil, err
	}
	s := &Session{
		c: c, cfg: c.cfg, id: resp.Session, tenant: resp.Tenant, princ: resp.Principal,
		done:  make(chan struct{}),
		clock: c.cfg.clock,
	}
	s.ctx, s.cancel = context.WithCancelCause(context.Background())
	grant := time.Duration(resp.LeaseTimeout)
	s.mu.state = StateSafe
	s.mu.leaseEnd = sent.Add(s.shorten(grant))
	s.mu.epoch = resp.Epoch
	s.mu.changed = make(chan struct{})
	s.cache = newCache(c.cfg.Cache)
	s.ka = newLoop(s, grant, time.Duration(resp.Cadence))
	if !c.addSession(s) {
		return nil, ErrClosed
	}
	c.ka.add(s.ka)
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
// The channel is made at the first call, with the events so far in it.
func (s *Session) Events() <-chan Event {
	s.dispatch.Lock()
	defer s.dispatch.Unlock()
	if s.dispatch.events == nil {
		s.dispatch.events = make(chan Event, s.cfg.EventBuffer)
		for _, ev := range s.dispatch.early {
			s.dispatch.events <- ev // fits: early holds at most EventBuffer
		}
		s.dispatch.early = nil
	}
	return s.dispatch.events
}

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
	s.stopped.Store(true)
	s.nudge() // the loop forgets its KeepAlives
	s.c.removeSession(s)
	// Done closes before the event is queued: whoever sees the event finds
	// Done closed.
	close(s.done)
	s.emit(Event{Kind: EventExpired})
	s.wakeWatchers("")
}

// changedLocked wakes everyone waiting for a state or epoch change.
// REQUIRES: s.mu held.
func (s *Session) changedLocked() {
	close(s.mu.changed)
	s.mu.changed = make(chan struct{})
}

func (s *Session) setEpoch(e uint64) {
	s.mu.Lock()
	s.mu.epoch = e
	s.changedLocked()
	s.mu.Unlock()
	s.orphans.newEpoch(s, e)
}

// ShedRetries is how many times NewSession asks again for a session after
// the master shed its request (api.ErrResourceExhausted with a RetryAfter).
// Each retry waits the RetryAfter the refusal named plus a random share of
// as much again, so that callers shed together do not return together.
const ShedRetries = 16

// createSession asks the master for a session, and again after each
// refusal that shed it (see NewSession). It asks in a CreateSessions call
// shared with the NewSession calls made meanwhile (createbatch.go), or,
// of a replica that does not know that method, with a CreateSession of
// its own. It returns the send time of the request that succeeded: the
// lease the reply grants is counted from it.
func (c *Client) createSession(ctx context.Context, resp *api.CreateSessionResponse) (monotime.Time, error) {
	var req *api.CreateSessionRequest
	for retries := 0; ; retries++ {
		var sent monotime.Time
		var err error
		share := rand.Float64()
		if c.batchOpens() {
			// Callers shed in one batch wait alike, so that they ask
			// again together, in one batch.
			var progress bool
			sent, share, progress, err = c.openOnce(ctx, resp)
			if errors.Is(err, errNoOpenBatch) {
				retries-- // nothing was asked of the master
				continue
			}
			if progress {
				// Shed from a batch that made progress: a master that
				// takes some of each batch is no reason to give up.
				retries = min(retries, 0) - 1
			}
		} else {
			if req == nil {
				req = &api.CreateSessionRequest{Token: c.cfg.Token}
			}
			sent = c.cfg.clock.Now()
			err = c.call(ctx, api.MethodCreateSession, req, resp)
		}
		wait, shed := shedPause(err, share)
		if !shed || retries == ShedRetries {
			return sent, err
		}
		c.log.Debug("client: CreateSession shed by the master; retrying", "after", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return sent, fmt.Errorf("client: %s: %w (shed by the master: %w)", api.MethodCreateSession, ctx.Err(), err)
		case <-c.ctx.Done():
			t.Stop()
			return sent, ErrClosed
		}
	}
}

// shedPause reports whether err is a refusal that shed the call before
// it did anything (ResourceExhausted with a RetryAfter), and how long to
// wait before asking again: the RetryAfter plus share (a random fraction
// in [0, 1)) of as much.
func shedPause(err error, share float64) (time.Duration, bool) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || ae.RetryAfter <= 0 {
		return 0, false
	}
	d := time.Duration(ae.RetryAfter)
	return d + time.Duration(share*float64(d)), true
}
