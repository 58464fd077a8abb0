package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// Client is a connection to a cell: it finds the master, follows NotMaster
// redirects, and reconnects with backoff. It makes the calls that need no
// session (Status, tenants, listings) and opens Sessions. All methods are
// safe for concurrent use.
//
// Errors: ErrInvalidConfig from Dial; ErrClosed after Close; *api.Error
// values from the cell; ErrOutcomeUnknown for a call that is not safe to
// repeat and lost its reply; ctx's error when ctx ends first.
type Client struct {
	cfg Config
	log *slog.Logger

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		conn *transport.ClientConn
		// hint is where the master is believed to be ("" if unknown).
		hint string
		// next is the index of the address to try first without a hint.
		next int
		// dial is the dial in progress (nil if none). moves counts the
		// times a search for the master pointed the client elsewhere
		// (whois.go): a dial it interrupted is not a failure.
		dial  *dialAttempt
		moves uint64
		// redirects counts the NotMaster replies that named the master
		// (drop with a hint): a call whose connection another call closed
		// to follow one retries at once.
		redirects uint64
		// failures counts consecutive failed dials, for backoff.
		failures int
		// notBefore is the earliest time of the next dial.
		notBefore time.Time
		sessions  map[*Session]struct{}
		// heard: a reply arrived on conn, the last at heardAt (on the
		// sessions' clock). A session whose own KeepAlives go unanswered
		// closes the shared connection only if nothing was heard on it
		// since its own last reply (dropIfSilent): then the connection,
		// not the session, is in trouble.
		heard   bool
		heardAt monotime.Time
		// inflight counts the calls under way on each connection that has
		// any (use and its release). draining holds the connections
		// retired by a redirect that still carry calls, each with the
		// timer that closes it after drainGrace at the latest; the last
		// call's release closes it sooner.
		inflight map[*transport.ClientConn]int
		draining map[*transport.ClientConn]*time.Timer
		// drains counts the connections retired with calls still on them;
		// onDrain, if set (tests only), is told of each.
		drains  uint64
		onDrain func(*transport.ClientConn)
		// look is the search for the master under way (nil if none;
		// whois.go), lookups the number of searches started.
		look    *lookup
		lookups uint64
		// lastNamer is the address of the replica whose answer named the
		// master at the last search's end: the next search asks it first.
		lastNamer string
		// probe is the connection a liveness probe is under way on (nil
		// if none; whois.go), probes the number of probes sent.
		probe  *transport.ClientConn
		probes uint64
	}
	// masterLease is the cell's master lease in nanoseconds, as replicas
	// report it (0 until one does): the suspicion threshold of calls and
	// the look-up's timeouts derive from it (whois.go).
	masterLease atomic.Int64
	// kas holds the KeepAlive stream of the current connection (cur,
	// guarded by lock: a channel, so that waiting for it heeds a context).
	kas struct {
		lock chan struct{}
		cur  *kaStream
		// legacy is the connection whose replica does not know KeepAlive
		// batches (see kaStream).
		legacy atomic.Pointer[transport.ClientConn]
	}
	// ka runs the KeepAlive state machines of all the client's sessions
	// (kaloop.go).
	ka kaLoop
	// opens joins concurrent NewSession calls into CreateSessions calls
	// (createbatch.go).
	opens opener
}

// Dial connects to the cell's master. It returns once it has reached a
// replica that serves as master, or an error when ctx ends first (the
// client is then closed) or cfg is invalid.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	cfg, err := cfg.populate()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: cfg.Logger}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.sessions = map[*Session]struct{}{}
	c.mu.inflight = map[*transport.ClientConn]int{}
	c.mu.draining = map[*transport.ClientConn]*time.Timer{}
	c.kas.lock = make(chan struct{}, 1)
	if err := c.findMaster(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// findMaster asks replicas for the cell's status until one names a master,
// and connects to it. Meanwhile explainNoMaster probes every replica; if
// their answers explain why there is no master, that error ends the search.
func (c *Client) findMaster(ctx context.Context) error {
	if c.cfg.DialPatience < 0 {
		return c.searchMaster(ctx)
	}
	fctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go c.explainNoMaster(fctx, cancel)
	err := c.searchMaster(fctx)
	if err != nil && ctx.Err() == nil {
		if cause := context.Cause(fctx); cause != nil && !errors.Is(cause, context.Canceled) {
			return cause
		}
	}
	return err
}

// explainNoMaster probes every replica at once and ends the search (cancel
// with the explaining error) when the answers say why there is no master. A
// refused certificate or credential ends it at once; no master and no
// answer only once DialPatience has passed since the search began, on
// answers gathered after that (a cell may be electing its first master).
//
// It first gives the search an eighth of the patience on its own: a client
// that finds its master at once (nearly always) opens no probe connections,
// which would otherwise double its connections to the master while it
// dials and count against the replica's limit per address.
func (c *Client) explainNoMaster(ctx context.Context, cancel context.CancelCauseFunc) {
	patience := c.cfg.DialPatience
	begin := time.Now()
	head := time.NewTimer(patience / 8)
	select {
	case <-head.C:
	case <-ctx.Done():
		head.Stop()
		return
	}
	for ctx.Err() == nil {
		pctx, pcancel := context.WithTimeout(ctx, patience)
		answers := c.probe(pctx)
		pcancel()
		if ctx.Err() != nil {
			return
		}
		err := c.diagnose(answers, patience)
		switch {
		case err == nil:
		case errors.Is(err, ErrCertificate) || errors.Is(err, ErrUnauthenticated):
			cancel(err)
			return
		case time.Since(begin) >= patience:
			cancel(err)
			return
		}
		// Look again once patience has passed (since the search began,
		// then since this probe).
		wait := time.Until(begin.Add(patience))
		if wait <= 0 {
			wait = patience
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// searchMaster is findMaster's loop: it asks replicas in turn until one
// names a master, and connects to it, until ctx ends.
func (c *Client) searchMaster(ctx context.Context) error {
	hops := 0 // redirects followed at once, without a pause
	for {
		var st api.CellStatusResponse
		_, err := c.rpcOnce(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: c.cfg.Token}, &st)
		if errors.Is(err, api.ErrUnauthenticated) {
			// Bad or missing credentials: no replica will think otherwise.
			return fmt.Errorf("%w: the cell refused the client %s: %w", ErrUnauthenticated, c.credential(), err)
		}
		if errors.Is(err, api.ErrInvalidArgument) {
			return fmt.Errorf("client: dial: %w", err)
		}
		if errors.Is(err, ErrTooManyConns) {
			// A limit of the replica's, not a fault to wait out.
			return fmt.Errorf("client: dial: %w", err)
		}
		if err == nil {
			c.noteStatus(&st)
		}
		if err == nil && st.Master != 0 {
			for _, r := range st.Replicas {
				if r.ID == st.Master && r.Addr != "" {
					if r.ID == st.Replica {
						if servesAsMaster(&st) {
							return nil
						}
						err = fmt.Errorf("replica %d leads but does not serve as master (%s)", st.Replica, st.Role)
						break
					}
					c.redirect(r.Addr)
					break
				}
			}
			var cc *transport.ClientConn
			if err != nil {
				// Ask again after a pause.
			} else if cc, err = c.conn(ctx); err == nil {
				if cc.ReplicaID() == st.Master {
					if hops < 3 {
						// Ask the master itself at once: that it serves,
						// and that it keeps the connection (a replica
						// closes one over its limit per address just
						// after the handshake).
						hops++
						continue
					}
					return nil
				}
				// The named master did not answer; another replica did.
				err = fmt.Errorf("replica %d answered, master %d did not", cc.ReplicaID(), st.Master)
			}
		}
		if err == nil {
			// Connected, but the replica knows no master yet.
			c.dropAll("")
		}
		if ctx.Err() != nil {
			if err == nil {
				err = errors.New("no master elected")
			}
			return fmt.Errorf("client: dial: %w (last: %w)", ctx.Err(), err)
		}
		if err := c.pause(ctx); err != nil {
			return err
		}
	}
}

// Close closes the connection and every session opened through the client
// (without telling the cell: their leases run out; use Session.Close to end
// a session at once).
func (c *Client) Close() error {
	c.cancel()
	c.mu.Lock()
	conn := c.mu.conn
	c.mu.conn = nil
	sessions := c.mu.sessions
	c.mu.sessions = map[*Session]struct{}{}
	draining := c.mu.draining
	c.mu.draining = map[*transport.ClientConn]*time.Timer{}
	c.mu.Unlock()
	for s := range sessions {
		s.abandon()
	}
	for dc, t := range draining {
		t.Stop()
		_ = dc.Close()
	}
	if conn != nil {
		_ = conn.Close()
	}
	return nil
}

// backoff returns the pause after n consecutive failures: exponential from
// ReconnectMin to ReconnectMax, with jitter.
func (c *Client) backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := c.cfg.ReconnectMin << min(n-1, 20)
	if d > c.cfg.ReconnectMax || d <= 0 {
		d = c.cfg.ReconnectMax
	}
	return d/2 + rand.N(d/2+1)
}

// pause waits a backoff step (for callers retrying a failed call).
func (c *Client) pause(ctx context.Context) error {
	c.mu.Lock()
	d := c.backoff(c.mu.failures + 1)
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// conn returns the current connection, dialing (with backoff) if there is
// none. Concurrent callers share one dial.
//
// The dial is the client's, not the caller's: it runs on its own
// goroutine, bounded by the handshake timeout, and ctx bounds only the
// caller's wait for it. A dial bound to the context of the call that
// happened to start it ended with that call: a KeepAlive in jeopardy
// gives itself a cadence and a margin, so a master whose handshakes took
// longer than that (one busy with a fail-over's storm of clients) could
// never be reached, every dial being cancelled by the KeepAlive that
// started it before its handshake finished.
func (c *Client) conn(ctx context.Context) (*transport.ClientConn, error) {
	for {
		c.mu.Lock()
		if c.ctx.Err() != nil {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if cc := c.mu.conn; cc != nil {
			c.mu.Unlock()
			if cc.Context().Err() == nil {
				return cc, nil
			}
			c.drop(cc, "")
			continue
		}
		d := c.mu.dial
		mine := d == nil
		if mine {
			d = c.startDialLocked()
		}
		c.mu.Unlock()
		select {
		case <-d.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
		if d.err != nil && mine {
			return nil, d.err
		}
		// Connected (or another caller's dial failed, or gave way to a
		// move): look again.
	}
}

// dialing reports whether the client has no connection and is dialing
// one.
func (c *Client) dialing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.conn == nil && c.mu.dial != nil
}

// dialAttempt is a dial in progress (Client.mu.dial).
type dialAttempt struct {
	// addr is the master the dial goes to alone, if it goes to a hinted
	// master; "" for a dial that tries the replicas in turn.
	addr   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the dial ended; err is set then
	// err is the dial's failure (nil if it connected, or if it gave way
	// to a search that found the master elsewhere).
	err error
}

// startDialLocked starts a dial on a goroutine of its own: to the hinted
// master alone if there is a hint, else to the replicas in turn, after the
// backoff's pause. The connection it makes becomes the current one.
// REQUIRES: c.mu held; no dial in progress.
func (c *Client) startDialLocked() *dialAttempt {
	addrs, start := c.dialOrderLocked()
	dctx, cancel := context.WithCancel(c.ctx)
	d := &dialAttempt{cancel: cancel, done: make(chan struct{})}
	if len(addrs) == 1 && c.mu.hint != "" {
		d.addr = addrs[0]
	}
	c.mu.dial = d
	delay := time.Until(c.mu.notBefore)
	moves := c.mu.moves
	go func() {
		cc, err := c.dial(dctx, addrs, start, delay)
		cancel()
		c.mu.Lock()
		defer close(d.done)
		defer c.mu.Unlock()
		c.mu.dial = nil
		switch {
		case c.ctx.Err() != nil:
			if cc != nil {
				_ = cc.Close()
			}
			d.err = ErrClosed
		case c.mu.moves != moves:
			// The master was found elsewhere meanwhile (moveTo cancelled
			// this dial, perhaps after it had connected): the next call
			// dials there, not on to the place this one reached.
			if cc != nil {
				_ = cc.Close()
			}
		case err != nil:
			c.mu.failures++
			c.mu.notBefore = time.Now().Add(c.backoff(c.mu.failures))
			c.mu.hint = ""
			d.err = err
		default:
			c.mu.conn = cc
			c.mu.heard = false
		}
	}()
	return d
}

// dialOrderLocked returns the addresses to dial and where to start: the
// hinted master alone, else every replica from the next in rotation.
//
// A hint is what a replica said a moment ago (a search's answer, a
// NotMaster that named the master), and only the master can serve: so the
// dial goes there alone, for as long as its handshake takes. Staggering
// on to the other replicas, as a dial without a hint does, lost exactly
// when it mattered: a new master busy with a fail-over's storm handshakes
// slower than its idle followers, so a follower's handshake won, its
// NotMaster sent the client round again, and whole clients missed their
// leases. A hint that turns out wrong costs one failed dial (the hint is
// then forgotten and the next dial tries every replica).
// REQUIRES: c.mu held.
func (c *Client) dialOrderLocked() ([]string, int) {
	addrs := c.cfg.Addrs
	if c.mu.hint != "" {
		return []string{c.mu.hint}, 0
	}
	start := c.mu.next % len(addrs)
	c.mu.next++
	return addrs, start
}

func (c *Client) dial(ctx context.Context, addrs []string, start int, delay time.Duration) (*transport.ClientConn, error) {
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, ErrClosed
		}
	}
	return c.dialConfig(ctx, transport.DialConfig{Addrs: addrs, Start: start})
}

// dialConfig dials with dc completed from the client's Config.
func (c *Client) dialConfig(ctx context.Context, dc transport.DialConfig) (*transport.ClientConn, error) {
	return c.cfg.dial(ctx, dc, c.log)
}

// dial dials with dc completed from cfg (CA, credentials, timeouts, local
// address, socket, TLS session cache), logging to log, and counts the
// connection made (ConnStats).
func (cfg *Config) dial(ctx context.Context, dc transport.DialConfig, log *slog.Logger) (*transport.ClientConn, error) {
	dc.CA, dc.Certificate, dc.Logger = cfg.CA, cfg.Certificate, log
	dc.HandshakeTimeout, dc.IdleTimeout = cfg.HandshakeTimeout, cfg.IdleTimeout
	dc.LocalAddr, dc.SessionCache = cfg.LocalAddr, cfg.sessions
	if cfg.PacketConn != nil {
		pc, err := cfg.PacketConn()
		if err != nil {
			return nil, fmt.Errorf("client: opening a socket: %w", err)
		}
		dc.PacketConn = pc
	}
	cc, err := transport.Dial(ctx, dc)
	cfg.counts.dialed(cc)
	return cc, err
}

// drainGrace bounds how long a connection retired by a redirect stays
// open for the calls still under way on it: the replica that redirected
// answers those at once (it refuses what it no longer serves), so the
// bound only matters for a replica that stops answering, and keeps at
// most the redirects of the last drainGrace open.
const drainGrace = 2 * time.Second

// use returns the current connection (dialing as conn does) with a call
// counted as under way on it; the caller must call release(cc) when the
// call is over. A connection that a redirect retires is closed only once
// its calls are over (retire).
func (c *Client) use(ctx context.Context) (*transport.ClientConn, error) {
	for {
		cc, err := c.conn(ctx)
		if err != nil {
			return nil, err
		}
		c.mu.Lock()
		if c.mu.conn == cc {
			c.mu.inflight[cc]++
			c.mu.Unlock()
			return cc, nil
		}
		// Retired or dropped between conn and now: take the next one.
		c.mu.Unlock()
	}
}

// release ends a call that use counted on cc, closing cc if a redirect
// retired it and this was its last call.
func (c *Client) release(cc *transport.ClientConn) {
	c.mu.Lock()
	n := c.mu.inflight[cc] - 1
	if n > 0 {
		c.mu.inflight[cc] = n
		c.mu.Unlock()
		return
	}
	delete(c.mu.inflight, cc)
	t, retired := c.mu.draining[cc]
	delete(c.mu.draining, cc)
	c.mu.Unlock()
	if retired {
		t.Stop()
		_ = cc.Close()
	}
}

// drop forgets cc (if it is still current) and closes it at once, ending
// every call on it: for a connection that failed. hint, if not empty, is
// where to look for the master next.
func (c *Client) drop(cc *transport.ClientConn, hint string) {
	c.mu.Lock()
	c.forgetLocked(cc, hint)
	if t, ok := c.mu.draining[cc]; ok {
		t.Stop()
		delete(c.mu.draining, cc)
	}
	c.mu.Unlock()
	_ = cc.Close()
}

// retire forgets cc (if it is still current) after its replica redirected
// a call to hint, the master it names: new calls go to a new connection at
// once, while cc stays open until the calls under way on it are over (or
// drainGrace has passed), so that a call the replica is about to refuse
// gets that refusal, not a closed connection that leaves its outcome
// unknown.
func (c *Client) retire(cc *transport.ClientConn, hint string) {
	c.mu.Lock()
	c.forgetLocked(cc, hint)
	if _, ok := c.mu.draining[cc]; ok {
		c.mu.Unlock()
		return
	}
	if c.mu.inflight[cc] == 0 || c.ctx.Err() != nil {
		c.mu.Unlock()
		_ = cc.Close()
		return
	}
	c.mu.drains++
	if c.mu.onDrain != nil {
		c.mu.onDrain(cc)
	}
	c.mu.draining[cc] = time.AfterFunc(drainGrace, func() {
		c.mu.Lock()
		delete(c.mu.draining, cc)
		c.mu.Unlock()
		_ = cc.Close()
	})
	c.mu.Unlock()
}

// forgetLocked makes cc no longer the current connection, pointing the
// next dial at hint.
// REQUIRES: c.mu held.
func (c *Client) forgetLocked(cc *transport.ClientConn, hint string) {
	if c.mu.conn == cc {
		c.mu.conn = nil
		c.mu.hint = hint
		if hint != "" {
			c.mu.redirects++
		}
	}
}

// dropAll closes the current connection, whatever it is, so that the next
// call dials again (rotating through the replicas unless hint is set).
func (c *Client) dropAll(hint string) {
	c.mu.Lock()
	cc := c.mu.conn
	c.mu.conn = nil
	c.mu.hint = hint
	c.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
}

// heardFrom records that a reply arrived on cc now. A reply on the
// connection whose silence started the look-up under way proves its
// replica alive, and one on the current connection (which replaced it)
// proves that the client reaches a replica that answers: either way the
// suspicion's share in the look-up ends.
func (c *Client) heardFrom(cc *transport.ClientConn) {
	now := c.cfg.clock.Now()
	c.mu.Lock()
	if c.mu.conn == cc {
		c.mu.heard, c.mu.heardAt = true, now
	}
	if lk := c.mu.look; lk != nil && lk.suspect != nil && (lk.suspect == cc || c.mu.conn == cc) {
		lk.suspect = nil
		c.leaveLookupLocked(lk)
	}
	c.mu.Unlock()
}

// dropIfSilent closes the current connection unless a reply arrived on it
// after since, and reports whether it did. One session's KeepAlives going
// unanswered is no proof that the connection failed: while other calls
// (its neighbours' KeepAlives) are answered on it, it stays, and the
// session looks for the master on its own. A connection that died shows
// in its context (conn redials) or in silence towards everyone.
func (c *Client) dropIfSilent(since monotime.Time) bool {
	c.mu.Lock()
	cc := c.mu.conn
	if cc == nil || (c.mu.heard && c.mu.heardAt.After(since) && cc.Context().Err() == nil) {
		c.mu.Unlock()
		return false
	}
	c.mu.conn = nil
	c.mu.hint = ""
	c.mu.Unlock()
	_ = cc.Close()
	return true
}

// dropIfBroken drops cc after a failed call if the failure is the
// connection's (it closed or timed out), not only that call's stream (a
// reset, a bad frame): one call's trouble must not end its neighbours'
// calls on the shared connection. Nothing is dropped if ctx ended (the
// caller gave up).
func (c *Client) dropIfBroken(ctx context.Context, cc *transport.ClientConn, err error) {
	if ctx.Err() != nil {
		return
	}
	if errors.Is(err, transport.ErrConnClosed) || errors.Is(err, transport.ErrClosed) || cc.Context().Err() != nil {
		c.drop(cc, "")
	}
}

// redirect closes the current connection and points the next dial at addr.
func (c *Client) redirect(addr string) { c.dropAll(addr) }

// redirectCount returns the number of redirects followed so far.
func (c *Client) redirectCount() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.redirects
}

// redirectedSince reports whether err sends the caller to the master at
// once: it names the master, or the call failed on a connection that a
// redirect (counted since before the call, at before) closed meanwhile.
func (c *Client) redirectedSince(before uint64, err error) bool {
	if namesMaster(err) {
		return true
	}
	var ae *api.Error
	return !errors.As(err, &ae) && c.redirectCount() != before
}

// succeeded resets the backoff after a call reached a serving master.
func (c *Client) succeeded() {
	c.mu.Lock()
	c.mu.failures = 0
	c.mu.notBefore = time.Time{}
	c.mu.Unlock()
}

// rpcOnce makes one attempt of method m. sent reports whether the request
// may have reached a replica (false: it certainly did not). An error reply
// is returned as *api.Error; NotMaster (retire) and failures of the
// connection (drop) take it out of use so that the next attempt dials the
// master (a failure of the call's
// stream alone leaves the connection to the other calls on it).
func (c *Client) rpcOnce(ctx context.Context, m api.Method, req, resp any) (sent bool, err error) {
	cc, err := c.use(ctx)
	if err != nil {
		return false, err
	}
	defer c.release(cc)
	s, sent, err := c.exchange(ctx, cc, m, req, resp)
	if s != nil {
		defer s.Close()
	}
	if err != nil {
		return sent, err
	}
	if info, _ := m.Info(); info.NeedsMaster {
		// Only the master answers this method: the client reached it.
		c.succeeded()
	}
	return true, nil
}

// exchange sends one request of method m on a new stream of cc and reads
// the first reply frame: an OK reply is decoded into resp, an error reply
// is returned as *api.Error once errorReply has acted on it, and a failure
// of the stream or the connection drops a broken connection. sent reports
// whether the request may have reached the replica. The stream, if one was
// opened, is returned for the caller to read on (a streamed reply) and
// close.
func (c *Client) exchange(ctx context.Context, cc *transport.ClientConn, m api.Method, req, resp any) (_ *transport.ClientStream, sent bool, err error) {
	s, err := cc.OpenStream(ctx)
	if err != nil {
		c.dropIfBroken(ctx, cc, err)
		return nil, false, err
	}
	if err := s.WriteFrame(ctx, uint16(m), req); err != nil {
		if errors.Is(err, transport.ErrEncode) {
			return s, false, err
		}
		c.dropIfBroken(ctx, cc, err)
		return s, true, err
	}
	// NB: finishing the sending side fails if the replica has already
	// answered and stopped reading (it does once its handler returns),
	// which a fast reply makes common; the reply is still there to read,
	// and a broken stream or connection shows in ReadFrame.
	_ = s.CloseWrite()
	if d := c.suspectAfter(); d > 0 {
		// A master that leaves a call unanswered this long is suspect: look
		// for the master while the call waits. A long-poll's wait says
		// nothing of the master, so half-way through a probe asks it
		// whether it is there (whois.go).
		sent := c.cfg.clock.Now()
		var t *time.Timer
		switch info, _ := m.Info(); {
		case !info.LongPoll:
			t = time.AfterFunc(d, func() { c.suspect(cc, sent) })
		case info.Admission != api.AdmitKeepAlive:
			t = time.AfterFunc(d/2, func() { c.probeSilent(cc, sent, d/2) })
		}
		if t != nil {
			defer t.Stop()
		}
	}
	f, err := s.ReadFrame(ctx)
	if err != nil {
		c.dropIfBroken(ctx, cc, err)
		return s, true, err
	}
	c.heardFrom(cc)
	switch f.Tag {
	case api.ReplyOK:
		if err := f.Decode(resp); err != nil {
			return s, true, fmt.Errorf("client: decoding %s reply: %w", m, err)
		}
		return s, true, nil
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return s, true, fmt.Errorf("client: decoding %s error reply: %w", m, err)
		}
		c.errorReply(cc, ae)
		return s, true, ae
	default:
		c.drop(cc, "")
		return s, true, fmt.Errorf("client: %s: unexpected reply tag %#x", m, f.Tag)
	}
}

// errorReply acts on an error reply that cc carried: NotMaster points the
// client at the master it names and retires the connection (it closes once
// its calls are over: the replica works, it only no longer serves),
// Unavailable (the replica is stopping) drops the connection.
func (c *Client) errorReply(cc *transport.ClientConn, ae *api.Error) {
	switch ae.Code {
	case api.NotMaster:
		c.retire(cc, ae.Master)
	case api.Unavailable:
		c.drop(cc, "")
	}
}

// call makes a sessionless call, retrying across fail-overs until ctx ends:
// any call refused before it took effect, and also a call whose reply was
// lost if the api method table says a repeat is harmless
// (api.MethodInfo.Retryable).
func (c *Client) call(ctx context.Context, m api.Method, req, resp any) error {
	info, _ := m.Info() // an unknown method's zero entry is not idempotent
	redirected := false
	for {
		before := c.redirectCount()
		sent, err := c.rpcOnce(ctx, m, req, resp)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("client: %s: %w", m, ctx.Err())
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		retry, noEffect := classify(err)
		if !retry {
			return err
		}
		if sent && !noEffect && !info.Retryable(req) {
			return outcomeUnknown(m, err)
		}
		if c.redirectedSince(before, err) && !redirected {
			redirected = true // once in a row, as in Session.callWith
			continue
		}
		redirected = false
		if perr := c.pause(ctx); perr != nil {
			return fmt.Errorf("client: %s: %w (last error: %v)", m, perr, err)
		}
	}
}

func (c *Client) addSession(s *Session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		return false
	}
	c.mu.sessions[s] = struct{}{}
	return true
}

func (c *Client) removeSession(s *Session) {
	c.mu.Lock()
	delete(c.mu.sessions, s)
	c.mu.Unlock()
}
