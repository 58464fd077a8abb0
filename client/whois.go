package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockcell/lockcell/api"
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

// whoisRoundTimeout bounds one round of asking every replica: a replica
// that has not answered by then is taken to be down for this round.
const whoisRoundTimeout = 500 * time.Millisecond

// whoisPauseMax bounds the pause between rounds that found no serving
// master (an election is under way).
const whoisPauseMax = 250 * time.Millisecond

// errNoServingMaster: a round of asking every replica found none that
// serves as master.
var errNoServingMaster = errors.New("client: no replica answers as serving master")

// statusAnswer is one replica's answer to a round.
type statusAnswer struct {
	addr string
	st   api.CellStatusResponse
	err  error
}

// findServingMaster asks every replica in parallel, round after round,
// until one answers that it serves as master, and returns the address it
// was reached at. Among several (an old master that has not yet noticed
// its lease ended), the one with the highest epoch wins. It returns ctx's
// error (wrapped) if ctx ends first, ErrClosed once the client is closed.
func (c *Client) findServingMaster(ctx context.Context) (string, error) {
	for round := 1; ; round++ {
		addr, err := c.whoisRound(ctx)
		if err == nil {
			return addr, nil
		}
		if errors.Is(err, ErrClosed) || ctx.Err() != nil {
			return "", err
		}
		pause := min(c.cfg.ReconnectMin<<min(round-1, 10), whoisPauseMax)
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("client: looking for the master: %w (last: %w)", ctx.Err(), err)
		case <-c.ctx.Done():
			t.Stop()
			return "", ErrClosed
		}
	}
}

// whoisRound asks every replica once, in parallel. It returns as soon as a
// replica answered as serving master and a majority of the replicas have
// answered (so that a newer master known to the majority is not missed),
// or when every replica has answered or the round timed out.
func (c *Client) whoisRound(ctx context.Context) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, whoisRoundTimeout)
	defer cancel()
	addrs := c.cfg.Addrs
	answers := make(chan statusAnswer, len(addrs))
	for _, a := range addrs {
		go func() {
			st, err := c.askStatus(rctx, a)
			answers <- statusAnswer{addr: a, st: st, err: err}
		}()
	}
	var best statusAnswer
	heard, errs := 0, 0
	for range addrs {
		var a statusAnswer
		select {
		case a = <-answers:
		case <-c.ctx.Done():
			return "", ErrClosed
		}
		if a.err != nil {
			errs++
		} else {
			heard++
			if a.st.Master != 0 && a.st.Master == a.st.Replica && a.st.Role == "master" &&
				(best.addr == "" || a.st.Epoch > best.st.Epoch) {
				best = a
			}
		}
		if best.addr != "" && heard > len(addrs)/2 {
			break
		}
	}
	if best.addr == "" {
		return "", fmt.Errorf("%w (%d answered, %d did not)", errNoServingMaster, heard, errs)
	}
	return best.addr, nil
}

// askStatus asks the replica at addr for the cell's status on a
// connection of its own.
func (c *Client) askStatus(ctx context.Context, addr string) (api.CellStatusResponse, error) {
	var st api.CellStatusResponse
	cc, err := transport.Dial(ctx, transport.DialConfig{
		Addrs: []string{addr}, CA: c.cfg.CA, Certificate: c.cfg.Certificate,
		HandshakeTimeout: c.cfg.HandshakeTimeout, IdleTimeout: c.cfg.IdleTimeout, Logger: c.log,
	})
	if err != nil {
		return st, err
	}
	defer cc.Close()
	f, err := cc.Call(ctx, uint16(api.MethodCellStatus), &api.CellStatusRequest{Token: c.cfg.Token})
	if err != nil {
		return st, err
	}
	if f.Tag != api.ReplyOK {
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return st, fmt.Errorf("client: decoding CellStatus error reply: %w", err)
		}
		return st, ae
	}
	if err := f.Decode(&st); err != nil {
		return st, fmt.Errorf("client: decoding CellStatus reply: %w", err)
	}
	return st, nil
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
// connection goes elsewhere (or force is set) it is closed (calls in
// flight on it fail and are retried) and the next call dials addr. It
// reports whether it moved.
func (c *Client) moveTo(addr string, force bool) bool {
	c.mu.Lock()
	cc := c.mu.conn
	if !force && cc != nil && cc.Addr() == addr && cc.Context().Err() == nil {
		c.mu.Unlock()
		return false
	}
	c.mu.conn = nil
	c.mu.hint = addr
	// The master is known to serve there: no backoff before dialing it.
	c.mu.notBefore = time.Time{}
	c.mu.Unlock()
	if cc != nil {
		_ = cc.Close()
	}
	return true
}
