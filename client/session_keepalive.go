package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// kaResult is the outcome of one KeepAlive.
type kaResult struct {
	l    *loop
	id   uint64
	sent monotime.Time
	resp api.KeepAliveResponse
	err  error
	// redirected: the failure sends the client to a named master (see
	// Client.redirectedSince).
	redirected bool
	// replica is the replica the KeepAlive went to (0 if none).
	replica uint64
	// expired: the loop gave the KeepAlive up at its expiry (the failure
	// is the loop's own, not the stream's or the master's).
	expired bool
}

// liveKA is a KeepAlive in flight.
type liveKA struct {
	id uint64
	kc *kaCall
	// expires is when the loop gives it up: the master answers a KeepAlive
	// before the lease it renews ends, so one outstanding longer than the
	// grant is lost.
	expires monotime.Time
	// given: it was given up and its failure is on the way.
	given bool
	// resend: it was started in jeopardy, and is sent again if unanswered
	// past the master's cadence (expires is then silentAt).
	resend bool
	// watched: the master announced a cadence, and silentAt is when, if
	// still unanswered, it shows the master silent past it; silent: that
	// was noticed. (A monotime.Time has no "unset" value: the clock may
	// read zero or negative, as it does inside a testing/synctest bubble.)
	watched  bool
	silentAt monotime.Time
	silent   bool
}

// loop is a session's KeepAlive state machine. It is a plain struct that
// only the client's KeepAlive loop goroutine touches (kaloop.go): the
// session's state (safe or jeopardy) and lease end live in s.mu, since
// any goroutine may find the lease run out; the loop extends the lease and
// does the work that follows a lapse (looking for a master).
type loop struct {
	s     *Session
	clock monotime.Clock
	// live are the KeepAlives in flight (at most three).
	live []liveKA
	// late are KeepAlives the loop stopped waiting for (given up at their
	// expiry or when the session lapsed) that are still on a stream: a
	// reply to one, however late, proves the lease from its send time
	// (keepLate). At most maxLate; the oldest is forgotten first.
	late   []*kaCall
	nextID uint64
	ack    uint64
	epoch  uint64
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
	// finding: the session waits for the client's search for the serving
	// master, look (whois.go).
	finding bool
	look    *lookup
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
	// The client loop's bookkeeping: wakeAt is when the session next has
	// something to do, idx its place in the heap (-1: not in it), dirty
	// that it runs in the current round, stopped that its KeepAlives were
	// forgotten after it ended.
	wakeAt  monotime.Time
	idx     int
	dirty   bool
	stopped bool
}

// foundMaster is the result of one search for the serving master.
type foundMaster struct {
	addr string // "" if the search gave up
	// moved: the search moved the client to addr itself.
	moved bool
}

// newLoop returns the KeepAlive state of a session just created, whose
// lease the master granted for grant, parking KeepAlives for cadence.
func newLoop(s *Session, grant, cadence time.Duration) *loop {
	now := s.clock.Now()
	return &loop{s: s, clock: s.clock, leaseEnd: s.mu.leaseEnd, grant: grant, epoch: s.mu.epoch, cadence: cadence,
		retryAt: now, heardAt: now, idx: -1}
}

// stop forgets the KeepAlives in flight and the search for the master of
// a session that ended.
func (l *loop) stop() {
	l.stopped = true
	for _, ka := range l.live {
		ka.kc.giveUp(l.s.c)
	}
	l.live = nil
	for _, kc := range l.late {
		kc.giveUp(l.s.c)
	}
	l.late = nil
	l.endFind()
}

// maxLate bounds a session's late KeepAlives (loop.late): a session in
// jeopardy re-sends about every cadence, and a reply to any of the last
// few is as good a proof as the newest one's.
const maxLate = 4

// keepLate stops waiting for kc but keeps its reply, should one come, as
// a proof of the lease: the master renewed the lease when the KeepAlive
// arrived and again when it answered, both after kc.sent, so the reply
// proves Held+LeaseTimeout from kc.sent (shortened by the drift bound)
// however long it took to arrive, exactly as an answer on time does. A
// KeepAlive still waiting for the sender (not on a stream) is given up
// instead: it never left, and the KeepAlive that replaces it goes in its
// place. So a session in jeopardy whose master answers, but slower than
// its cadence, is safe again at the first reply instead of re-sending
// until one reply happens to beat its own deadline.
func (l *loop) keepLate(kc *kaCall) {
	if kc.ks.Load() == nil {
		kc.giveUp(l.s.c)
		// The sender may have put it on a stream meanwhile (giveUp took
		// it off again): either way it is forgotten.
		return
	}
	if len(l.late) == maxLate {
		l.late[0].giveUp(l.s.c)
		l.late = slices.Delete(l.late, 0, 1)
	}
	l.late = append(l.late, kc)
}

// isFinal reports whether the session ended (its KeepAlives stop).
func (s *Session) isFinal() bool { return s.stopped.Load() }

// probeLead is how long before the local lease ends a renewal is proved
// by a pair of KeepAlives, if the parked one has not been answered. The
// master answers a parked KeepAlive Lease/8 before the lease it renews
// ends, so on a healthy session no pair is needed.
func (l *loop) probeLead() time.Duration { return l.grant / 16 }

// step makes the time-driven transitions and starts KeepAlives.
func (l *loop) step(now monotime.Time) {
	for i := range l.live {
		ka := &l.live[i]
		if !ka.given && !now.Before(ka.expires) {
			// No longer waited for (a late reply still counts, keepLate);
			// its failure is handled in the client loop's next round, as
			// if it had come from the stream.
			l.keepLate(ka.kc)
			ka.given = true
			l.s.c.ka.local = append(l.s.c.ka.local, kaResult{l: l, id: ka.id, sent: ka.kc.sent, err: context.Canceled,
				redirected: l.s.c.redirectedSince(ka.kc.before, context.Canceled), replica: ka.kc.replica, expired: true})
		}
		if !ka.given && !ka.silent && ka.watched && !now.Before(ka.silentAt) && l.s.c.dialing() {
			// Not silence: the client is still connecting (a master busy
			// with a fail-over handshakes slowly), and the KeepAlive waits
			// for that. A search now would only cost every replica a
			// handshake and find the master being dialed; look again a
			// margin later (the dial's own failure says if it fails).
			ka.silentAt = now.Add(SilenceMargin(l.cadence))
		}
		if !ka.given && !ka.silent && ka.watched && !now.Before(ka.silentAt) {
			// The master has been silent past its cadence: it is dead,
			// deposed or cut off. Look for the master everywhere; the
			// KeepAlive stays out in case this one answers after all.
			ka.silent = true
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

// start sends one KeepAlive: it is handed to the client's sender at the
// end of the loop's round. Its send time, from which a reply's lease is
// counted, is now: the instant the loop last found the session's state (a
// little before the request actually leaves, which only shortens the lease
// it proves). A pause between that look and the send therefore cannot make
// the KeepAlive look sent while the lease ran.
func (l *loop) start(now monotime.Time) {
	l.nextID++
	ka := liveKA{id: l.nextID, expires: now.Add(l.grant)}
	if l.cadence > 0 {
		ka.watched = true
		ka.silentAt = now.Add(l.cadence + SilenceMargin(l.cadence))
		if l.jeopardy {
			// In jeopardy, a KeepAlive unanswered past the cadence is sent
			// again, so that one reaches the master well within the lease
			// the master still keeps for the session: one that waited out
			// a whole grant could arrive after that lease ended. The loop
			// stops waiting for it then, but its reply still counts
			// (keepLate).
			ka.expires = ka.silentAt
			ka.resend = true
		}
	}
	c := l.s.c
	ka.kc = &kaCall{l: l, id: ka.id, sent: now, deadline: ka.expires,
		req:  api.KeepAliveRequest{Header: api.Header{Session: l.s.id, Epoch: l.epoch, Token: l.s.cfg.Token}, Ack: l.ack},
		hold: l.s.holdKA.Load(),
		// Where it goes, as far as the client knows now.
		replica: c.connReplica(), before: c.redirectCount()}
	l.live = append(l.live, ka)
	c.ka.out = append(c.ka.out, ka.kc)
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
	i := slices.IndexFunc(l.live, func(ka liveKA) bool { return ka.id == r.id })
	if i < 0 {
		l.handleLate(r)
		return
	}
	l.live = slices.Delete(l.live, i, i+1)
	var ae *api.Error
	switch {
	case r.err == nil:
		l.answered(r)
		if l.events(r.resp) {
			l.start(l.clock.Now()) // acknowledge at once
		}
	case r.expired && l.heardAt.After(r.sent):
		// Given up at its expiry, but the master answered another
		// KeepAlive of the session since this one left: not a sign of
		// silence. Its reply may still come (keepLate); step sends the
		// next KeepAlive if none is out.
		if len(l.live) == 0 {
			l.probing = false
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

// answered takes the lease proof and cadence of a reply: the master (or
// a newer one) is alive.
func (l *loop) answered(r kaResult) {
	l.heardAt = l.clock.Now()
	l.endFind()
	l.stuck = 0
	l.cadence = time.Duration(r.resp.Cadence)
	l.grant = min(l.grant, time.Duration(r.resp.LeaseTimeout))
	l.prove(r.sent, time.Duration(r.resp.Held+r.resp.LeaseTimeout))
	// KeepAlives sent in jeopardy need not be re-sent at the cadence any
	// more: the session's lease runs again. They wait for their replies as
	// any KeepAlive does.
	for i := range l.live {
		if ka := &l.live[i]; ka.resend && !ka.given {
			ka.resend = false
			ka.expires = max(ka.expires, ka.kc.sent.Add(l.grant))
		}
	}
}

// handleLate takes the result of a KeepAlive the loop no longer waits for
// (keepLate): a reply proves the lease from its send time, as an answer on
// time does; the master's word that the session ended ends it; any other
// failure says nothing the loop has not handled already.
func (l *loop) handleLate(r kaResult) {
	if r.expired {
		return // the loop's own failure of it, handled when it was live
	}
	j := slices.IndexFunc(l.late, func(kc *kaCall) bool { return kc.l == r.l && kc.id == r.id })
	if j < 0 {
		return // forgotten
	}
	l.late = slices.Delete(l.late, j, j+1)
	var ae *api.Error
	switch {
	case r.err == nil:
		l.s.c.log.Debug("client: a late KeepAlive reply proves the lease", "session", l.s.id, "sent", r.sent, "held", time.Duration(r.resp.Held))
		l.answered(r)
		// New events are acknowledged by the next KeepAlive: at once if
		// none is out (one that is out is answered with them again).
		if l.events(r.resp) && len(l.live) == 0 {
			l.start(l.clock.Now())
		}
	case errors.As(r.err, &ae) && (ae.Code == api.SessionExpired || ae.Code == api.PermissionDenied || ae.Code == api.Unauthenticated):
		l.s.finish(StateExpired, fmt.Errorf("%w: %w", ErrSessionExpired, r.err))
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
	// Whatever is outstanding may sit on a dead connection: stop waiting
	// for it (a reply that comes after all still counts, keepLate) and
	// look for a master afresh.
	for _, ka := range l.live {
		if !ka.given {
			l.keepLate(ka.kc)
		}
	}
	l.live = l.live[:0]
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
	c := l.s.c
	c.mu.Lock()
	skip := ""
	if cc := c.mu.conn; except != 0 && cc != nil && cc.ReplicaID() == except {
		skip = cc.Addr()
	}
	lk := c.joinLookupLocked(except, skip, nil)
	c.mu.Unlock()
	l.finding, l.look = true, lk
	c.ka.watch(lk)
}

// endFind ends the session's wait for the search for the master, if it
// waits.
func (l *loop) endFind() {
	if l.finding {
		l.s.c.leaveLookup(l.look)
		l.finding, l.look = false, nil
	}
}

// moveTo takes the result of the search for the master the session waited
// for: the client moves to the master found ("" if the search gave up),
// and a KeepAlive goes there at once, unless one already does
// (headingFor). If the master is where the client
// already is, the connection is kept (the master may only be slow), unless
// that happened twice before with no reply in between: then the connection
// itself is suspect and is replaced.
func (l *loop) moveTo(f foundMaster) {
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
	if !l.headingFor(moved) {
		l.kicked = true
	}
	l.waiting = false
}

// headingFor reports whether a KeepAlive of the session already heads for
// the master: one still waiting for the sender, which sends it on the
// client's connection as it is when sent, or, if onConn, one out on the
// client's current connection. A second one sent at once would only
// supersede it at the master: an extra round trip per session in a
// fail-over's storm. After a search that kept the client's connection,
// a KeepAlive out on it is not counted (onConn false): it was silent,
// and the search's answer is to send another (the master may have lost
// it).
func (l *loop) headingFor(onConn bool) bool {
	var cur *transport.ClientConn
	if onConn {
		c := l.s.c
		c.mu.Lock()
		cur = c.mu.conn
		c.mu.Unlock()
	}
	for _, ka := range l.live {
		if ka.given {
			continue
		}
		ks := ka.kc.ks.Load()
		if ks == nil || (cur != nil && ks.cc == cur && ks.ctx.Err() == nil) {
			return true
		}
	}
	return false
}
