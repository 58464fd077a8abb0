package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// kaResult is the outcome of one KeepAlive.
type kaResult struct {
	id   uint64
	sent monotime.Time
	resp api.KeepAliveResponse
	err  error
	// redirected: the failure sends the client to a named master (see
	// Client.redirectedSince).
	redirected bool
	// replica is the replica the KeepAlive went to (0 if none).
	replica uint64
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
	// moved: the search moved the client to addr itself.
	moved bool
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
			l.s.c.log.Debug("client: master silent past its KeepAlive cadence; asking every replica who the master is",
				"session", l.s.id, "cadence", l.cadence, "master", l.s.c.connAddr())
			l.find(l.s.c.connReplica())
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
		if l.jeopardy {
			// In jeopardy, a KeepAlive unanswered past the cadence is given
			// up and sent again, so that one reaches the master well within
			// the lease the master still keeps for the session: one that
			// waited out a whole grant could arrive after that lease ended.
			ka.expires = ka.silentAt
		}
	}
	l.live[id] = ka
	req := &api.KeepAliveRequest{Header: api.Header{Session: l.s.id, Epoch: l.epoch, Token: l.s.cfg.Token}, Ack: l.ack}
	results, stop := l.results, l.s.stop
	hold := l.s.holdKA.Load()
	replica := l.s.c.connReplica() // where it goes, as far as the client knows now
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
		case results <- kaResult{id: id, sent: now, resp: resp, err: err, redirected: redirected, replica: replica}:
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
			// try them one by one, for a master other than the replica
			// that failed it.
			l.find(r.replica)
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
	l.find(0)
}

// find joins the client's search for the serving master (whois.go), or
// starts one that excludes replica except (0: none) as master, unless
// this session already waits for one. The session's interest ends when a
// master is found, when a KeepAlive is answered, or when the session ends;
// the search itself ends when nobody waits for it any more.
func (l *loop) find(except uint64) {
	if l.finding {
		return
	}
	l.finding = true
	l.findGen++
	ctx, cancel := context.WithCancel(context.Background())
	l.stopFind = cancel
	c, found, stop, gen := l.s.c, l.found, l.s.stop, l.findGen
	c.mu.Lock()
	skip := ""
	if cc := c.mu.conn; except != 0 && cc != nil && cc.ReplicaID() == except {
		skip = cc.Addr()
	}
	lk := c.joinLookupLocked(except, skip, nil)
	c.mu.Unlock()
	go func() {
		defer c.leaveLookup(lk)
		select {
		case <-lk.done:
		case <-ctx.Done():
			return
		case <-stop:
			return
		}
		select {
		case found <- foundMaster{gen: gen, addr: lk.addr, moved: lk.moved}:
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
	moved := f.moved || l.s.c.moveTo(f.addr, l.stuck >= 2, l.heardAt)
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
