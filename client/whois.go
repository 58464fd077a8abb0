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
// A suspect master starts a look-up: every replica is asked at once, on a
// connection of its own, "who is master, other than X?"
// (api.CellStatusRequest.Except), and each holds the question until it
// knows another master, which it learns from Paxos at the election. The
// first answer moves the client there and sends every session's KeepAlive
// at once, so the client reaches a new master within a round trip of its
// election, although the old one was suspected long before. A master that
// is merely slow costs one parked question per replica, never a move: a
// reply heard from it ends the look-up, and there is one look-up per
// client at a time, however many calls and sessions have reason to look.
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
// A search (findServingMaster) costs a connection to every replica, so a
// client runs at most one at a time, however many of its sessions or
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
		addr, err := c.findServingMaster(ctx, except, skip)
		moved := false
		if err == nil {
			moved = c.moveTo(addr, false, 0) // since matters only with force
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
	c.log.Info("client: a call to the master went unanswered for half the master lease; asking every replica who the master is",
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

// findServingMaster asks every replica in parallel, again and again, until
// one answers that it serves as master, and returns the address it was
// reached at. Each replica is asked on a connection of its own that lasts
// the search, so a search costs one handshake per replica.
//
// With except set (the master the client no longer trusts), each question
// is a long-poll (api.CellStatusRequest.Except) that the replica answers
// as soon as it knows a master other than except, and the first answer
// naming one decides: the client hears of the new master within a round
// trip of the election. The address skip (except's) is not asked.
//
// Without except, the answer is taken once a majority of the replicas
// have answered (so that a newer master known to the majority is not
// missed), or every replica has answered or failed; among several
// claiming to serve (an old master that has not yet noticed its lease
// ended) the highest epoch wins.
//
// Replicas are Config.Addrs and every address the answers list, so a
// client given only some of the replicas still finds a master among the
// others. It returns ctx's error (wrapped) if ctx ends first, ErrClosed
// once the client is closed.
func (c *Client) findServingMaster(ctx context.Context, except uint64, skip string) (string, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan statusAnswer, 16)
	var addrs []string
	ask := func(a string) {
		if except != 0 && a == skip {
			return
		}
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
			go c.pollStatus(sctx, a, except, answers)
		}
	}
	for _, a := range c.cfg.Addrs {
		ask(a)
	}
	latest := map[string]statusAnswer{}
	var last error = errNoServingMaster
	for {
		var a statusAnswer
		select {
		case a = <-answers:
		case <-ctx.Done():
			return "", fmt.Errorf("client: looking for the master: %w (last: %w)", ctx.Err(), last)
		case <-c.ctx.Done():
			return "", ErrClosed
		}
		latest[a.addr] = a
		if a.err != nil {
			last = a.err
		} else {
			c.noteStatus(&a.st)
		}
		for _, r := range a.st.Replicas {
			if r.Addr != "" {
				ask(r.Addr)
			}
		}
		if except != 0 {
			if addr, ok := otherMaster(a, except); ok {
				return addr, nil
			}
			continue
		}
		if addr, ok := servingMaster(latest, len(addrs)); ok {
			return addr, nil
		}
	}
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

// servingMaster decides a search from the latest answer of each of the
// known replica addresses (known of them): the address of the serving
// master with the highest epoch, once more than half of the cell's
// replicas (as the answers count them) answered, or every known address
// answered or failed.
func servingMaster(latest map[string]statusAnswer, known int) (string, bool) {
	var best statusAnswer
	heard, cell := 0, 0
	for _, a := range latest {
		if a.err != nil {
			continue
		}
		heard++
		cell = max(cell, len(a.st.Replicas))
		if a.st.Master != 0 && a.st.Master == a.st.Replica && a.st.Role == api.RoleMaster &&
			(best.addr == "" || a.st.Epoch > best.st.Epoch) {
			best = a
		}
	}
	if cell == 0 {
		cell = known
	}
	if best.addr == "" || (heard <= cell/2 && len(latest) < known) {
		return "", false
	}
	return best.addr, true
}

// pollStatus asks the replica at addr for the cell's status until ctx
// ends, sending each answer (or failure) to answers; it keeps one
// connection for all the questions. With except set each question waits
// at the replica for a master other than except (lookupWait at most); a
// replica that answers at once (one that predates the long-poll) is asked
// again after a pause, longer each time, as is one that failed.
func (c *Client) pollStatus(ctx context.Context, addr string, except uint64, answers chan<- statusAnswer) {
	var cc *transport.ClientConn
	defer func() {
		if cc != nil {
			_ = cc.Close()
		}
	}()
	req := &api.CellStatusRequest{Token: c.cfg.Token}
	if except != 0 {
		req.Except, req.Wait = except, int64(lookupWait)
	}
	for n := 0; ctx.Err() == nil; n++ {
		var a statusAnswer
		a.addr = addr
		if cc != nil && cc.Context().Err() != nil {
			_ = cc.Close()
			cc = nil
		}
		if cc == nil {
			dctx, cancel := context.WithTimeout(ctx, c.lookupDialTimeout())
			cc, a.err = dialReplica(dctx, c.cfg, addr)
			cancel()
		}
		asked := time.Now()
		if a.err == nil {
			timeout := c.lookupDialTimeout()
			if except != 0 {
				timeout += lookupWait
			}
			qctx, cancel := context.WithTimeout(ctx, timeout)
			var resp api.CellStatusResponse
			if a.err = callOn(qctx, cc, api.MethodCellStatus, req, &resp); a.err == nil {
				a.st = resp
			}
			cancel()
		}
		select {
		case answers <- a:
		case <-ctx.Done():
			return
		}
		if a.err == nil && except != 0 && time.Since(asked) >= lookupWait/2 {
			n = -1 // the replica held the question: ask again at once
			continue
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
