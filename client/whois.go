package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// Finding the master when it goes silent.
//
// Over UDP nothing tells a client that its master died (a dead machine
// sends no reset), and the connection's idle timeout would take seconds.
// So the client watches its calls. A call the master leaves unanswered for
// half the master lease (suspectAfter; the cell reports the lease in
// api.CellStatusResponse.MasterLease) makes the master suspect; a
// long-poll (an Acquire that may wait for its lock) says nothing by its
// wait, so a quarter of the lease into one, with nothing else heard on the
// connection, a probe (a plain CellStatus) asks the master whether it is
// there, and the probe's silence makes it suspect (probeSilent). A
// session's KeepAlive, which the master parks for its cadence
// (api.KeepAliveResponse.Cadence), makes it suspect when unanswered past
// the cadence and SilenceMargin, and so does a KeepAlive that fails
// without naming a successor (a master that stepped down or lost its lease
// answers its parked KeepAlives NotMaster at once).
//
// A suspect master starts a look-up: a replica (one at a time, as few as
// it takes: findServingMaster) is asked "who is master, other than X?"
// (api.CellStatusRequest.Except), and holds the question until it knows
// another master, which it learns from Paxos at the election. The first
// answer moves the client there and sends every session's KeepAlive at
// once, so the client reaches a new master within a round trip of its
// election, although the old one was suspected long before. A master that
// is merely slow costs one parked question, never a move: a reply heard
// from it ends the look-up, and there is one look-up per client at a
// time, however many calls and sessions have reason to look.
//
// None of this touches the lease rules: the lease is still counted from a
// KeepAlive's send, shortened by the drift bound, and only a reply extends
// it. Finding the master sooner only means the next reply comes sooner.

// SilenceMargin is how long past its master's KeepAlive cadence c a
// session waits for a reply before it looks for the master: a quarter of
// c, at least 250 ms (a network round trip and the master's scheduling).
func SilenceMargin(c time.Duration) time.Duration { return max(c/4, 250*time.Millisecond) }

// whoisTimeout bounds each dial and each question of a search while the
// cell's master lease is unknown (a replica that predates
// api.CellStatusResponse.MasterLease); otherwise the bound is half the
// master lease (lookupDialTimeout). A replica that has not answered by
// then is asked again.
const whoisTimeout = 500 * time.Millisecond

// whoisPauseMax bounds the pause between two questions to one replica
// while no serving master is found (an election is under way). The pauses
// start at Config.ReconnectMin and double.
const whoisPauseMax = 200 * time.Millisecond

// lookupWait is how long a replica holds a "who is master, other than X"
// question (api.CellStatusRequest.Except) before answering with the
// status as it is; the search then asks again at once.
const lookupWait = 5 * time.Second

// errNoServingMaster: no replica has answered as serving master yet.
var errNoServingMaster = errors.New("client: no replica answers as serving master")

// statusAnswer is one replica's answer to a question of a search.
type statusAnswer struct {
	addr string
	st   api.CellStatusResponse
	err  error
	// cc is the connection the answer came on (nil after a failure).
	cc *transport.ClientConn
}

// noteStatus learns what a replica's status tells every connection: the
// cell's master lease.
func (c *Client) noteStatus(st *api.CellStatusResponse) {
	if st.MasterLease > 0 {
		c.masterLease.Store(st.MasterLease)
	}
}

// suspectAfter is how long a call to the master may go unanswered before
// the client suspects the master and looks it up: half the cell's master
// lease. A live master renews its lease every quarter of it and answers an
// ordinary call within a Paxos round, so a master silent this long is
// likely dead, frozen or cut off, and a new one will be elected about a
// lease after its last renewal: the look-up is then parked at every
// replica before the election ends. Zero (no suspicion) while the lease
// is unknown.
func (c *Client) suspectAfter() time.Duration {
	return time.Duration(c.masterLease.Load()) / 2
}

// lookupDialTimeout bounds each dial and each plain question of a
// look-up: half the master lease (whoisTimeout while it is unknown), at
// least 50 ms.
func (c *Client) lookupDialTimeout() time.Duration {
	if d := c.suspectAfter(); d > 0 {
		return max(d, 50*time.Millisecond)
	}
	return whoisTimeout
}

// Looking up the master: one search per client at a time.
//
// A search (findServingMaster) costs the cell a handshake, so a client
// runs at most one at a time, however many of its sessions or
// calls have reason to look: the first starts it, the others join it, and
// all of them learn its result. It ends when it finds the master, when
// the last party that waits for it leaves, or (for one started because a
// call went unanswered) as soon as anything is heard from the suspected
// connection: a master that is merely slow costs one parked question per
// replica, and no move.

// lookup is a search for the master in progress (Client.mu.look).
type lookup struct {
	// except is the replica no longer trusted as master (0: none).
	except uint64
	// suspect is the connection whose silence started the look-up (nil
	// for a session's KeepAlive trouble): a reply on it ends the look-up.
	suspect *transport.ClientConn
	// refs counts the parties waiting for the result (the suspicion
	// counts as one until a reply on suspect arrives).
	refs   int
	cancel context.CancelFunc
	done   chan struct{}
	// addr is the master found ("" if the look-up ended without one),
	// moved whether the client moved there; both are set before done
	// closes.
	addr  string
	moved bool
}

// joinLookupLocked joins the look-up under way, or starts one that
// excludes replica except as master (and does not ask the address skip:
// the suspected master's). The caller must leave it (leaveLookup).
// REQUIRES: c.mu held.
func (c *Client) joinLookupLocked(except uint64, skip string, suspect *transport.ClientConn) *lookup {
	if lk := c.mu.look; lk != nil {
		lk.refs++
		return lk
	}
	ctx, cancel := context.WithCancel(c.ctx)
	lk := &lookup{except: except, suspect: suspect, refs: 1, cancel: cancel, done: make(chan struct{})}
	c.mu.look = lk
	c.mu.lookups++
	go func() {
		addr, cc, err := c.findServingMaster(ctx, except, skip)
		moved := false
		if err == nil {
			moved = c.adoptOrMove(addr, cc)
			if moved {
				c.log.Info("client: moved to the master the replicas named", "master", addr, "was", except)
				c.nudgeSessions()
			}
		}
		c.mu.Lock()
		if c.mu.look == lk {
			c.mu.look = nil
		}
		lk.addr, lk.moved = addr, moved
		c.mu.Unlock()
		cancel()
		close(lk.done)
	}()
	return lk
}

// leaveLookup drops one party's interest in lk; the last one ends it.
func (c *Client) leaveLookup(lk *lookup) {
	c.mu.Lock()
	c.leaveLookupLocked(lk)
	c.mu.Unlock()
}

// REQUIRES: c.mu held.
func (c *Client) leaveLookupLocked(lk *lookup) {
	lk.refs--
	if lk.refs <= 0 {
		if c.mu.look == lk {
			c.mu.look = nil
		}
		lk.cancel()
	}
}

// suspect starts a look-up because a call on cc, sent at sent, has gone
// unanswered for suspectAfter: unless cc is no longer the current
// connection, something was heard on it since the call was sent, or a
// look-up is already under way.
func (c *Client) suspect(cc *transport.ClientConn, sent monotime.Time) {
	c.mu.Lock()
	if c.mu.conn != cc || c.mu.look != nil || (c.mu.heard && c.mu.heardAt.After(sent)) || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.joinLookupLocked(cc.ReplicaID(), cc.Addr(), cc)
	c.mu.Unlock()
	c.log.Info("client: a call to the master went unanswered for half the master lease; asking the replicas who the master is",
		"master", cc.Addr(), "after", c.suspectAfter())
}

// probeSilent asks the master on cc whether it is there, because a
// long-poll call sent on cc at sent (an Acquire that may wait for its
// lock) has gone unanswered for a while and nothing else was heard on cc
// since: if the probe, a plain CellStatus that any live replica answers at
// once, is not answered within wait either, the master is suspect
// (suspect). One probe at a time per client, and none while a look-up is
// under way.
func (c *Client) probeSilent(cc *transport.ClientConn, sent monotime.Time, wait time.Duration) {
	c.mu.Lock()
	if c.mu.conn != cc || c.mu.probe != nil || c.mu.look != nil || (c.mu.heard && c.mu.heardAt.After(sent)) || c.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.mu.probe = cc
	c.mu.probes++
	c.mu.Unlock()
	go func() {
		defer func() {
			c.mu.Lock()
			c.mu.probe = nil
			c.mu.Unlock()
		}()
		t := time.AfterFunc(wait, func() { c.suspect(cc, sent) })
		defer t.Stop()
		ctx, cancel := context.WithTimeout(c.ctx, 2*wait)
		defer cancel()
		var st api.CellStatusResponse
		err := callOn(ctx, cc, api.MethodCellStatus, &api.CellStatusRequest{Token: c.cfg.Token}, &st)
		var ae *api.Error
		if err == nil || errors.As(err, &ae) {
			c.heardFrom(cc)
		}
	}()
}

// nudgeSessions has every session send a KeepAlive now (after a move, to
// re-establish them at the new master at once).
func (c *Client) nudgeSessions() {
	c.mu.Lock()
	ss := make([]*Session, 0, len(c.mu.sessions))
	for s := range c.mu.sessions {
		ss = append(ss, s)
	}
	c.mu.Unlock()
	for _, s := range ss {
		s.nudge()
	}
}

// searchStagger is how long a search waits for the replica it asked to
// answer before it asks the next one too: a replica that is down (its
// handshake is never answered) costs a search this much.
const searchStagger = 250 * time.Millisecond

// findServingMaster looks for the serving master and returns the address
// it was reached at, with the search's connection to it if the search
// asked the master itself (the caller owns it then; nil otherwise).
//
// It asks as few replicas as it can, each on one connection that lasts
// the search: first the client's own connection, if it has one that is
// not to the master it distrusts; then the replica whose answer named the
// master last time (it was in touch with the cell then); then the others,
// from a random one on, those it can resume a TLS session with first.
// The next is asked when none asked so far can help: the one asked last
// has not answered within searchStagger (down, or too busy to
// handshake), failed, or answered that it is out of touch with a quorum
// of the cell (not counting except), so that it could not learn of a new
// master. A replica in touch with a quorum is asked again
// and again, alone. So a search costs the cell one handshake, or none
// (and a resumed one, transport.DialConfig.SessionCache), rather than one
// per replica: in a fail-over of a thousand clients that is the
// difference between a thousand handshakes and five thousand, on
// machines busy taking over.
//
// What was tried: asking every replica at once. It found the master a
// round trip sooner in the rare case where the first replica asked was
// down, and otherwise cost every replica, the new master too, a full
// handshake per client per fail-over.
//
// With except set (the master the client no longer trusts), the first
// question to a replica is answered at once, and the next ones are
// long-polls (api.CellStatusRequest.Except) that the replica answers as
// soon as it knows a master other than except, so the client hears of
// the new master within a round trip of the election. The first answer
// naming one decides. The address skip (except's) is not asked.
//
// Without except, the first replica that answers that it serves as master
// decides. No majority of answers is waited for: a claim that is out of
// date (a master that lost its lease since it answered) costs only the
// client's next call, which that replica answers "not master", and the
// search that follows. One that names another replica as master has that
// one asked at once.
//
// Replicas are Config.Addrs and every address the answers list, so a
// client given only some of the replicas still finds a master among the
// others. It returns ctx's error (wrapped) if ctx ends first, ErrClosed
// once the client is closed.
func (c *Client) findServingMaster(ctx context.Context, except uint64, skip string) (string, *transport.ClientConn, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan statusAnswer, 16)
	// keep is the connection the caller takes over: the askers do not
	// close it when the search ends.
	var keep atomic.Pointer[transport.ClientConn]
	own, order := c.searchOrder(except, skip)
	// helps holds the replicas asked: true once one answered that it is
	// in touch with a quorum (it is asked again and again, alone).
	helps := map[string]bool{}
	queue := order // known, not asked yet, in order (searchOrder has no repeats)
	known := func(a string) bool {
		_, asked := helps[a]
		return a == "" || asked || slices.Contains(queue, a)
	}
	askNext := func() bool {
		if len(queue) == 0 {
			return false
		}
		a := queue[0]
		queue = queue[1:]
		helps[a] = false
		var borrowed *transport.ClientConn
		if own != nil && own.Addr() == a {
			borrowed = own
		}
		go c.pollStatus(sctx, a, except, answers, borrowed, &keep)
		return true
	}
	// askFirst moves a (a master named by an answer) to the head of the
	// queue and asks it now.
	askFirst := func(a string) {
		if _, asked := helps[a]; asked {
			return
		}
		queue = slices.DeleteFunc(queue, func(q string) bool { return q == a })
		queue = append([]string{a}, queue...)
		askNext()
	}
	anyHelps := func() bool {
		for _, h := range helps {
			if h {
				return true
			}
		}
		return false
	}
	stagger := max(min(searchStagger, c.lookupDialTimeout()/2), 50*time.Millisecond)
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	askNext()
	var last error = errNoServingMaster
	for {
		var a statusAnswer
		select {
		case a = <-answers:
		case <-timer.C:
			if !anyHelps() {
				askNext()
			}
			timer.Reset(stagger)
			continue
		case <-ctx.Done():
			return "", nil, fmt.Errorf("client: looking for the master: %w (last: %w)", ctx.Err(), last)
		case <-c.ctx.Done():
			return "", nil, ErrClosed
		}
		if a.err != nil {
			last = a.err
		} else {
			c.noteStatus(&a.st)
		}
		for _, r := range a.st.Replicas {
			if !known(r.Addr) && !(except != 0 && r.Addr == skip) {
				queue = append(queue, r.Addr)
			}
		}
		var found string
		if except != 0 {
			found, _ = otherMaster(a, except)
		} else if a.err == nil && servesAsMaster(&a.st) {
			found = a.addr
		}
		if found != "" {
			var cc *transport.ClientConn
			// NB: not the client's own connection (own): the client has
			// it already, or has moved on from it.
			if found == a.addr && a.cc != nil && a.cc != own && a.cc.Context().Err() == nil {
				cc = a.cc
				keep.Store(cc)
			}
			c.mu.Lock()
			c.mu.lastNamer = a.addr
			c.mu.Unlock()
			c.log.Debug("client: the search found the master", "master", found, "named_by", a.addr,
				"replicas_asked", len(helps), "search_conn_kept", cc != nil)
			return found, cc, nil
		}
		if except == 0 && a.err == nil && a.st.Master != 0 && a.st.Master != a.st.Replica {
			for _, r := range a.st.Replicas {
				if r.ID == a.st.Master && r.Addr != "" {
					askFirst(r.Addr)
				}
			}
		}
		if a.err == nil && c.inQuorum(&a.st, except) {
			helps[a.addr] = true
			continue
		}
		helps[a.addr] = false
		if !anyHelps() && askNext() {
			timer.Reset(stagger)
		}
	}
}

// searchOrder returns the connection a search may ask on (the client's
// own, unless it goes to except or skip; nil if none) and the addresses
// to ask, in order: that connection's, the replica that named the master
// last, then Config.Addrs from a random one on, those the client holds a
// TLS session of first. With except set, skip (except's address) is left
// out.
func (c *Client) searchOrder(except uint64, skip string) (*transport.ClientConn, []string) {
	c.mu.Lock()
	own, namer := c.mu.conn, c.mu.lastNamer
	c.mu.Unlock()
	var order []string
	add := func(a string) {
		if a != "" && !(except != 0 && a == skip) && !slices.Contains(order, a) {
			order = append(order, a)
		}
	}
	if own != nil && (own.Context().Err() != nil || (except != 0 && own.ReplicaID() == except) || own.Addr() == skip) {
		own = nil
	}
	if own != nil {
		add(own.Addr())
	}
	add(namer)
	addrs := c.cfg.Addrs
	start := rand.N(len(addrs))
	// NB: replicas the client holds a TLS session of first: asking them
	// costs a resumed handshake, not a full one.
	for _, resumable := range []bool{true, false} {
		for i := range addrs {
			a := addrs[(start+i)%len(addrs)]
			if transport.SessionCached(c.cfg.sessions, a, c.cfg.Certificate) == resumable {
				add(a)
			}
		}
	}
	return own, order
}

// inQuorum reports whether the replica that answered st is in touch with
// enough of the cell to learn of a new master: itself and the peers it
// heard from lately (within twice the master lease, at least a second;
// replicas report to each other ten times a second), except not counted,
// make more than half of the voters. An answer that lists no replicas
// (an older replica's) is taken as in touch.
func (c *Client) inQuorum(st *api.CellStatusResponse, except uint64) bool {
	recent := max(2*time.Duration(c.masterLease.Load()), time.Second)
	voters, heard := 0, 0
	for _, r := range st.Replicas {
		if r.Learner {
			continue
		}
		voters++
		if r.ID == except {
			continue
		}
		if r.ID == st.Replica || (r.HeardMillis >= 0 && time.Duration(r.HeardMillis)*time.Millisecond <= recent) {
			heard++
		}
	}
	return voters == 0 || heard > voters/2
}

// otherMaster decides a look-up that excludes replica except from one
// answer: the address of the master it names, if that is not except (the
// address the answer came from, if the replica names itself and serves).
func otherMaster(a statusAnswer, except uint64) (string, bool) {
	st := &a.st
	if a.err != nil || st.Master == 0 || st.Master == except {
		return "", false
	}
	if st.Master == st.Replica {
		return a.addr, true
	}
	for _, r := range st.Replicas {
		if r.ID == st.Master && r.Addr != "" {
			return r.Addr, true
		}
	}
	return "", false
}

// pollStatus asks the replica at addr for the cell's status until ctx
// ends, sending each answer (or failure) to answers. It asks on own if
// given (the client's connection, which it never closes), else on one
// connection of its own for all the questions, which it closes at the end
// unless keep holds it. With except set, once the replica has answered
// that it is in touch with a quorum, each question waits at the replica
// for a master other than except (lookupWait at most); otherwise, and
// after a failure, it asks again after a pause, longer each time.
func (c *Client) pollStatus(ctx context.Context, addr string, except uint64, answers chan<- statusAnswer, own *transport.ClientConn, keep *atomic.Pointer[transport.ClientConn]) {
	cc := own
	defer func() {
		if cc != nil && cc != own && keep.Load() != cc {
			_ = cc.Close()
		}
	}()
	hold := false
	for n := 0; ctx.Err() == nil; n++ {
		a := statusAnswer{addr: addr}
		if cc != nil && cc.Context().Err() != nil {
			if cc != own {
				_ = cc.Close()
			}
			cc, hold = nil, false
		}
		if cc == nil {
			dctx, cancel := context.WithTimeout(ctx, c.lookupDialTimeout())
			cc, a.err = dialReplica(dctx, c.cfg, addr)
			cancel()
			if a.err == nil {
				c.cfg.counts.searchDials.Add(1)
			}
		}
		asked := time.Now()
		if a.err == nil {
			req := &api.CellStatusRequest{Token: c.cfg.Token}
			timeout := c.lookupDialTimeout()
			if hold {
				req.Except, req.Wait = except, int64(lookupWait)
				timeout += lookupWait
			}
			qctx, cancel := context.WithTimeout(ctx, timeout)
			var resp api.CellStatusResponse
			if a.err = callOn(qctx, cc, api.MethodCellStatus, req, &resp); a.err == nil {
				a.st, a.cc = resp, cc
			}
			cancel()
		}
		select {
		case answers <- a:
		case <-ctx.Done():
			return
		}
		if a.err == nil && except != 0 {
			held := hold
			hold = c.inQuorum(&a.st, except)
			if hold && (!held || time.Since(asked) >= lookupWait/2) {
				n = -1 // in touch: ask (again) at once, and let the replica hold the question
				continue
			}
		}
		t := time.NewTimer(min(c.cfg.ReconnectMin<<min(n, 10), whoisPauseMax))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// askStatus asks the replica at addr for the cell's status on a
// connection of its own.
func (c *Client) askStatus(ctx context.Context, addr string) (api.CellStatusResponse, error) {
	st, _, err := cellStatusAt(ctx, c.cfg, addr)
	if err != nil {
		return api.CellStatusResponse{}, err
	}
	return *st, nil
}

// connAddr returns the address of the current connection ("" if none).
func (c *Client) connAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.conn == nil {
		return ""
	}
	return c.mu.conn.Addr()
}

// connReplica returns the replica of the current connection (0 if none).
func (c *Client) connReplica() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.conn == nil {
		return 0
	}
	return c.mu.conn.ReplicaID()
}

// adoptOrMove points the client at the master a search found at addr
// (moveTo), and makes cc, the search's connection to it (nil if the
// search did not ask the master itself), the client's connection instead
// of dialing the master anew. cc is closed if the client does not take
// it: it is already on its way (a dial in progress, or a live connection
// to addr), or cc has closed meanwhile. It reports whether the client
// moved.
func (c *Client) adoptOrMove(addr string, cc *transport.ClientConn) bool {
	if cc == nil {
		return c.moveTo(addr, false, 0) // since matters only with force
	}
	c.mu.Lock()
	cur := c.mu.conn
	if cur == cc {
		c.mu.Unlock()
		return false // the search asked on the client's own connection
	}
	// NB: not while a dial is in progress: the dial's end would install
	// its own connection over this one.
	if c.mu.dial != nil || c.ctx.Err() != nil || cc.Context().Err() != nil ||
		(cur != nil && cur.Addr() == addr && cur.Context().Err() == nil) {
		c.mu.Unlock()
		_ = cc.Close()
		return c.moveTo(addr, false, 0)
	}
	c.mu.conn = cc
	c.mu.heard = false
	c.mu.hint = addr
	c.mu.notBefore = time.Time{}
	c.mu.moves++
	// Calls that fail because this closes their connection retry at
	// once, as after a redirect (redirectedSince).
	c.mu.redirects++
	c.mu.Unlock()
	if cur != nil {
		_ = cur.Close()
	}
	c.log.Debug("client: moving to the master on the search's connection", "master", addr)
	return true
}

// moveTo points the client at the master found at addr: if the current
// connection goes elsewhere (or force is set and nothing was heard on it
// after since: see dropIfSilent) it is closed (calls in flight on it fail
// and are retried) and the next call dials addr. A dial in progress to
// another address gives way; one to addr itself is kept, and the client
// does not move (it is on its way there already: a search that found the
// master it is dialing must not start that dial over). It reports whether
// it moved.
func (c *Client) moveTo(addr string, force bool, since monotime.Time) bool {
	c.mu.Lock()
	cc := c.mu.conn
	if force && c.mu.heard && c.mu.heardAt.After(since) {
		force = false // others are answered on it: the trouble is not the connection's
	}
	if !force && cc != nil && cc.Addr() == addr && cc.Context().Err() == nil {
		c.mu.Unlock()
		return false
	}
	if d := c.mu.dial; cc == nil && d != nil && d.addr == addr {
		c.mu.Unlock()
		return false
	}
	c.mu.conn = nil
	c.mu.hint = addr
	// The master is known to serve there: no backoff before dialing it,
	// and a dial in progress elsewhere (perhaps to a dead replica, which
	// takes a whole handshake timeout to fail) gives way.
	c.mu.notBefore = time.Time{}
	c.mu.moves++
	// Calls that fail because this closes their connection retry at
	// once, as after a redirect (redirectedSince).
	c.mu.redirects++
	d := c.mu.dial
	if d != nil {
		d.cancel()
	}
	c.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
	from := ""
	if cc != nil {
		from = cc.Addr()
	}
	c.log.Debug("client: moving to the master", "master", addr, "from", from, "force", force, "cancelled_dial", d != nil)
	return true
}
