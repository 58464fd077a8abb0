package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// opener joins the concurrent NewSession calls of one Client into
// CreateSessions calls (api.CreateSessionsRequest): while one such call is
// in flight, later callers queue, and when it returns the queued ones go
// together as the next call (at most api.MaxCreateSessions each; nothing
// lingers on a timer). A NewSession alone goes alone, at once.
//
// One more call may be in flight beside it, for the callers a call that
// returned is likely to bring back: a caller that opens sessions one after
// another (as a pool of workers does) comes back moments after its call
// returned, and the first of them to come back finds no call in flight and
// goes alone. Its fellows would then wait a whole call for that one
// session, and the calls would alternate between one caller and the rest.
// So once as many callers are queued as the last call that returned
// carried (less those sent since), they go at once as a second call
// (expect). If fewer come, they wait for a call to return, as before.
//
// Each caller's lease is counted from the send time of the call that
// created its session, taken before the call was sent (and before any of
// its retries), so it can only be shorter than the master's (the Session
// doc's rules hold for it as for a CreateSession of its own).
//
// A caller whose ctx ends while it is queued leaves the queue: nothing was
// asked for it. One whose call is already sent gets ctx's error at once;
// the session the call creates for it, if any, is closed at the master in
// the background (and would expire on its own if that fails). It never
// joins the Client's sessions. A call whose callers have all left is
// cancelled.
//
// To a replica that answers CreateSessions as an unknown method (one that
// predates it) the callers of that call, and every later NewSession while
// the Client uses the same connection, send CreateSession of their own.
type opener struct {
	mu struct {
		sync.Mutex
		// sending counts the CreateSessions calls in flight (at most
		// maxOpenCalls); queue holds the callers for the next one.
		sending int
		queue   []*openWait
		// expect is how many callers of the last call that returned have
		// not been sent again: while one call is in flight, a queue that
		// long goes at once as a second call.
		expect int
	}
	// legacy is the connection whose replica does not know
	// CreateSessions.
	legacy atomic.Pointer[transport.ClientConn]
	// calls counts the CreateSessions calls sent (tests).
	calls atomic.Uint64
}

// maxOpenCalls bounds a Client's CreateSessions calls in flight (see
// opener).
const maxOpenCalls = 2

// openWait is one NewSession waiting for its entry of a CreateSessions
// call. Its fields other than ctx and done are guarded by opener.mu.
type openWait struct {
	ctx context.Context
	// done is closed once res is set.
	done chan struct{}
	// b is the call it was sent in (nil while queued); gone reports that
	// its caller left after it was sent.
	b    *openBatch
	gone bool
	res  openResult
}

// openResult is what a CreateSessions call gave one caller: its session
// (as a CreateSession would have described it) or the error, and when the
// call was sent.
type openResult struct {
	sent monotime.Time
	resp api.CreateSessionResponse
	err  error
	// share is the batch's random fraction for a shed caller's pause
	// (shedPause): the same for all its callers.
	share float64
	// progress: the call created a session (for this caller or another).
	progress bool
}

// openBatch is a CreateSessions call in flight: live counts the callers
// still waiting for it; cancel ends the call when none are.
type openBatch struct {
	live   int
	cancel context.CancelFunc
}

// errNoOpenBatch reports that the replica does not know CreateSessions:
// the caller asks with a CreateSession of its own.
var errNoOpenBatch = errors.New("client: the replica does not know CreateSessions")

// openOnce asks for one session in the next CreateSessions call (see
// opener) and returns the send time of the call that created it, and the
// call's share for a shed caller's pause (shedPause).
// progress reports that the call created some session: a caller shed
// by such a call does not count it against ShedRetries.
func (c *Client) openOnce(ctx context.Context, resp *api.CreateSessionResponse) (sent monotime.Time, share float64, progress bool, err error) {
	o := &c.opens
	w := &openWait{ctx: ctx, done: make(chan struct{})}
	o.mu.Lock()
	o.mu.queue = append(o.mu.queue, w)
	var batch []*openWait
	if o.mu.sending == 0 || o.mu.sending < maxOpenCalls && o.mu.expect > 0 && len(o.mu.queue) >= o.mu.expect {
		o.mu.sending++
		batch = o.takeLocked()
	}
	o.mu.Unlock()
	if batch != nil {
		go c.sendOpens(batch)
	}
	select {
	case <-w.done:
	case <-ctx.Done():
		o.mu.Lock()
		select {
		case <-w.done:
			// Answered meanwhile: the answer stands.
			o.mu.Unlock()
		default:
			o.leaveLocked(w)
			o.mu.Unlock()
			return 0, 0, false, fmt.Errorf("client: %s: %w", api.MethodCreateSession, ctx.Err())
		}
	}
	*resp = w.res.resp
	return w.res.sent, w.res.share, w.res.progress, w.res.err
}

// takeLocked takes the next call's callers off the queue (nil if none).
// REQUIRES: o.mu held.
func (o *opener) takeLocked() []*openWait {
	n := min(len(o.mu.queue), api.MaxCreateSessions)
	if n == 0 {
		return nil
	}
	batch := o.mu.queue[:n:n]
	o.mu.queue = o.mu.queue[n:]
	o.mu.expect = max(o.mu.expect-n, 0)
	if len(o.mu.queue) == 0 {
		o.mu.queue = nil
	}
	return batch
}

// leaveLocked takes w, whose caller's ctx ended, out of its queue, or out
// of its call's count of callers (cancelling the call if it was the last).
// REQUIRES: o.mu held.
func (o *opener) leaveLocked(w *openWait) {
	if w.b == nil {
		for i, q := range o.mu.queue {
			if q == w {
				o.mu.queue = append(o.mu.queue[:i], o.mu.queue[i+1:]...)
				return
			}
		}
		return
	}
	w.gone = true
	if w.b.live--; w.b.live == 0 {
		w.b.cancel()
	}
}

// sendOpens sends batch as one CreateSessions call, answers its callers,
// and goes on with the callers queued meanwhile until none are.
func (c *Client) sendOpens(batch []*openWait) {
	o := &c.opens
	for batch != nil {
		ctx, cancel := context.WithCancel(c.ctx)
		b := &openBatch{cancel: cancel}
		o.mu.Lock()
		live := batch[:0]
		for _, w := range batch {
			if w.ctx.Err() == nil {
				w.b = b
				live = append(live, w)
				continue
			}
			// Its caller is leaving (or will find it answered).
			w.res.err = fmt.Errorf("client: %s: %w", api.MethodCreateSession, w.ctx.Err())
			close(w.done)
		}
		batch = live
		b.live = len(batch)
		o.mu.Unlock()
		if len(batch) > 0 {
			c.openBatch(ctx, batch)
		}
		cancel()
		o.mu.Lock()
		batch = o.takeLocked()
		if batch == nil {
			o.mu.sending--
		}
		o.mu.Unlock()
	}
}

// openBatch makes one CreateSessions call for batch and answers each
// caller still waiting; sessions created for callers that left are closed.
func (c *Client) openBatch(ctx context.Context, batch []*openWait) {
	o := &c.opens
	req := &api.CreateSessionsRequest{Count: len(batch), Token: c.cfg.Token}
	var resp api.CreateSessionsResponse
	sent := c.cfg.clock.Now()
	err := errNoOpenBatch // the callers queued while the replica refused the method
	if c.batchOpens() {
		o.calls.Add(1)
		err = c.call(ctx, api.MethodCreateSessions, req, &resp)
	}
	if err == nil && len(resp.Sessions) != len(batch) {
		err = fmt.Errorf("client: %s: the master answered %d sessions for %d", api.MethodCreateSessions, len(resp.Sessions), len(batch))
	}
	if err != nil && c.unknownOpenBatch(err) {
		o.legacy.Store(c.current())
		c.log.Debug("client: the replica does not know CreateSessions; one CreateSession per session", "err", err)
		err = errNoOpenBatch
	}
	var orphans []uint64
	var lease time.Duration
	share := rand.Float64()
	progress := false
	for _, e := range resp.Sessions {
		progress = progress || err == nil && e.Err == nil
	}
	o.mu.Lock()
	for i, w := range batch {
		r := openResult{sent: sent, err: err, share: share, progress: progress}
		if err == nil {
			e := resp.Sessions[i]
			if e.Err != nil {
				r.err = e.Err
			} else {
				r.resp = api.CreateSessionResponse{Session: e.Session, Epoch: resp.Epoch, LeaseTimeout: e.LeaseTimeout,
					Principal: resp.Principal, Tenant: resp.Tenant, Cadence: resp.Cadence}
			}
		}
		if w.gone {
			if r.err == nil {
				orphans = append(orphans, r.resp.Session)
				lease = max(lease, time.Duration(r.resp.LeaseTimeout))
			}
			continue
		}
		w.res = r
		close(w.done)
	}
	o.mu.expect = len(batch)
	o.mu.Unlock()
	if len(orphans) > 0 {
		go c.closeOrphans(orphans, resp.Epoch, lease)
	}
}

// unknownOpenBatch reports whether err is how a replica that predates
// CreateSessions refuses it: as an unknown method, or (to a client
// without a certificate, which it cannot tell apart before the method) as
// a call without credentials.
func (c *Client) unknownOpenBatch(err error) bool {
	var ae *api.Error
	if !errors.As(err, &ae) {
		return false
	}
	return ae.Code == api.InvalidArgument && strings.HasPrefix(ae.Msg, "unknown method") ||
		ae.Code == api.Unauthenticated && c.cfg.Token != ""
}

// current returns the connection calls use now (nil if none).
func (c *Client) current() *transport.ClientConn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.conn
}

// batchOpens reports whether NewSession may ask in a CreateSessions call:
// the current connection's replica has not refused one as unknown.
func (c *Client) batchOpens() bool {
	l := c.opens.legacy.Load()
	return l == nil || l != c.current()
}

// closeOrphans closes the sessions created for callers that left before
// the reply came. A session it fails to close expires at the master once
// its lease (at most lease from now) runs out.
func (c *Client) closeOrphans(ids []uint64, epoch uint64, lease time.Duration) {
	ctx, cancel := context.WithTimeout(c.ctx, max(lease, time.Second))
	defer cancel()
	for _, id := range ids {
		req := &api.CloseSessionRequest{Header: api.Header{Session: id, Epoch: epoch, Token: c.cfg.Token}}
		if err := c.call(ctx, api.MethodCloseSession, req, &api.Empty{}); err != nil {
			c.log.Debug("client: closing a session its caller left; it expires instead", "session", id, "err", err)
		}
	}
}
