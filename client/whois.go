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
// A master answers every KeepAlive within its cadence
// (api.KeepAliveResponse.Cadence), so a KeepAlive unanswered for the
// cadence plus SilenceMargin means the master is dead, deposed, or cut off
// from this client: over UDP nothing else says so (a dead machine sends no
// reset), and the connection's idle timeout would take seconds. The
// session's KeepAlive loop then asks every replica at once who the master
// is (each knows from Paxos) and moves the client to the one that answers
// as serving master. It does the same when a KeepAlive fails without
// naming a successor (a master that stepped down or lost its lease answers
// its parked KeepAlives NotMaster at once).
//
// None of this touches the lease rules: the lease is still counted from a
// KeepAlive's send, shortened by the drift bound, and only a reply extends
// it. Finding the master sooner only means the next reply comes sooner.

// SilenceMargin is how long past its master's KeepAlive cadence c a
// session waits for a reply before it looks for the master: a quarter of
// c, at least 250 ms (a network round trip and the master's scheduling).
func SilenceMargin(c time.Duration) time.Duration { return max(c/4, 250*time.Millisecond) }

// whoisTimeout bounds each dial and each question of a search: a replica
// that has not answered by then is asked again.
const whoisTimeout = 500 * time.Millisecond

// whoisPauseMax bounds the pause between two questions to one replica
// while no serving master is found (an election is under way). The pauses
// start at Config.ReconnectMin and double.
const whoisPauseMax = 200 * time.Millisecond

// errNoServingMaster: no replica has answered as serving master yet.
var errNoServingMaster = errors.New("client: no replica answers as serving master")

// statusAnswer is one replica's answer to a question of a search.
type statusAnswer struct {
	addr string
	st   api.CellStatusResponse
	err  error
}

// findServingMaster asks every replica in parallel, again and again, until
// one answers that it serves as master, and returns the address it was
// reached at. Each replica is asked on a connection of its own that lasts
// the search, so a search costs one handshake per replica. The answer is
// taken once a majority of the replicas have answered (so that a newer
// master known to the majority is not missed), or every replica has
// answered or failed; among several claiming to serve (an old master that
// has not yet noticed its lease ended) the highest epoch wins. Replicas
// are Config.Addrs and every address the answers list, so a client given
// only some of the replicas still finds a master among the others. It
// returns ctx's error (wrapped) if ctx ends first, ErrClosed once the
// client is closed.
func (c *Client) findServingMaster(ctx context.Context) (string, error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan statusAnswer, 16)
	var addrs []string
	ask := func(a string) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
			go c.pollStatus(sctx, a, answers)
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
		}
		for _, r := range a.st.Replicas {
			if r.Addr != "" {
				ask(r.Addr)
			}
		}
		if addr, ok := servingMaster(latest, len(addrs)); ok {
			return addr, nil
		}
	}
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
// connection for all the questions, and pauses between them, longer each
// time.
func (c *Client) pollStatus(ctx context.Context, addr string, answers chan<- statusAnswer) {
	var cc *transport.ClientConn
	defer func() {
		if cc != nil {
			_ = cc.Close()
		}
	}()
	for n := 0; ctx.Err() == nil; n++ {
		var a statusAnswer
		a.addr = addr
		if cc != nil && cc.Context().Err() != nil {
			_ = cc.Close()
			cc = nil
		}
		if cc == nil {
			dctx, cancel := context.WithTimeout(ctx, whoisTimeout)
			cc, a.err = dialReplica(dctx, c.cfg, addr)
			cancel()
		}
		if a.err == nil {
			qctx, cancel := context.WithTimeout(ctx, whoisTimeout)
			var st *api.CellStatusResponse
			if st, a.err = cellStatusOn(qctx, cc, c.cfg.Token); a.err == nil {
				a.st = *st
			}
			cancel()
		}
		select {
		case answers <- a:
		case <-ctx.Done():
			return
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

// moveTo points the client at the master found at addr: if the current
// connection goes elsewhere (or force is set and nothing was heard on it
// after since: see dropIfSilent) it is closed (calls in flight on it fail
// and are retried) and the next call dials addr. It reports whether it
// moved.
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
	c.mu.conn = nil
	c.mu.hint = addr
	// The master is known to serve there: no backoff before dialing it,
	// and a dial in progress (perhaps to a dead replica, which takes a
	// whole handshake timeout to fail) gives way.
	c.mu.notBefore = time.Time{}
	c.mu.moves++
	if c.mu.dialCancel != nil {
		c.mu.dialCancel()
	}
	c.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
	return true
}
