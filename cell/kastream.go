package cell

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/session"
	"github.com/lockcell/lockcell/transport"
)

// MaxStreamKeepAlives bounds the KeepAlives in flight (parked, or being
// answered) on one KeepAlive stream, counting each entry of a batch, so
// that one connection cannot make a replica hold state without bound: a
// session has at most one parked KeepAlive, so a connection can carry this
// many sessions. A KeepAlive beyond it (or a batch that would pass it) is
// answered at once with ResourceExhausted (the client retries after a
// pause).
const MaxStreamKeepAlives = 1 << 16

// kaStreamServer is the state of one KeepAlive stream being served.
type kaStreamServer struct {
	d        *handlerDeps
	s        *transport.ServerStream
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	inflight atomic.Int64 // KeepAlives parked or being answered
	// wmu serializes the reply frames' writes: it holds one token while a
	// frame is written. It is a channel, not a sync.Mutex, so that a
	// writer waiting for it gives up when the stream ends, and, under
	// testing/synctest, waits durably: a goroutine blocked on a mutex
	// keeps the bubble's clock from advancing, and a large frame's write
	// may wait for QUIC's timers (pacing, flow control) to let it finish,
	// so the two would wait for each other for ever.
	wmu chan struct{}

	jmu    sync.Mutex
	parked *parkedBatch // guarded by jmu; the batch later frames join
}

// write writes one reply frame; a failure ends the stream. A frame whose
// turn comes after the stream ended is not written.
func (ss *kaStreamServer) write(tag uint16, v any) {
	select {
	case ss.wmu <- struct{}{}:
	case <-ss.ctx.Done():
		return
	}
	defer func() { <-ss.wmu }()
	if err := ss.s.WriteFrame(ss.ctx, tag, v); err != nil {
		ss.cancel() // the stream is broken: end the rest
	}
}

// reserve takes n in-flight places, or reports that the stream has too
// few left.
func (ss *kaStreamServer) reserve(n int) bool {
	if ss.inflight.Add(int64(n)) > MaxStreamKeepAlives {
		ss.inflight.Add(-int64(n))
		return false
	}
	return true
}

var errTooManyKeepAlives = &api.Error{Code: api.ResourceExhausted,
	Msg: "too many KeepAlives in flight on one connection", RetryAfter: int64(time.Second)}

// serveKeepAliveStream serves a connection's KeepAlive stream (see
// api.KeepAliveStreamRequest and api.KeepAliveBatchRequest): first, the
// frame already read, then every frame the client writes. A
// MethodKeepAliveStream frame is one KeepAlive, served as a KeepAlive on a
// stream of its own is (authenticated, admitted, parked by the session
// manager, timed from its own arrival) on its own goroutine, and answered
// on the shared stream when its long-poll ends. A MethodKeepAliveBatch
// frame is the KeepAlives of many sessions, each admitted as that one is,
// parked together as one waiter (session.Manager.KeepAliveBatch) on one
// goroutine, and answered in one frame. So a connection that carries many
// sessions parks one stream, and with batches one waiter per round.
//
// A malformed frame ends the stream with a ReplyError frame; the
// KeepAlives still parked then end with it (their sessions' leases were
// renewed on arrival, as for a KeepAlive whose client went away).
func (d *handlerDeps) serveKeepAliveStream(ctx context.Context, s *transport.ServerStream, f transport.Frame) {
	ss := &kaStreamServer{d: d, s: s, wmu: make(chan struct{}, 1)}
	ss.ctx, ss.cancel = context.WithCancel(ctx)
	defer ss.wg.Wait()
	defer ss.cancel()
	for {
		method := api.Method(f.Tag)
		switch method {
		case api.MethodKeepAliveStream:
			var req api.KeepAliveStreamRequest
			if !ss.decode(f, &req) {
				return
			}
			if !ss.reserve(1) {
				ss.write(api.ReplyOK, &api.KeepAliveStreamReply{Call: req.Call, Err: errTooManyKeepAlives})
				break
			}
			ss.wg.Go(func() { ss.serveOne(req) })
		case api.MethodKeepAliveBatch:
			var req api.KeepAliveBatchRequest
			if !ss.decode(f, &req) {
				return
			}
			d.ka.frames.Add(1)
			if !ss.reserve(len(req.KeepAlives)) {
				reply := &api.KeepAliveBatchReply{Replies: make([]api.KeepAliveStreamReply, len(req.KeepAlives))}
				for i, q := range req.KeepAlives {
					reply.Replies[i] = api.KeepAliveStreamReply{Call: q.Call, Err: errTooManyKeepAlives}
				}
				ss.write(api.ReplyOK, reply)
				break
			}
			ss.wg.Go(func() { ss.serveBatch(req.KeepAlives) })
		default:
			ss.write(api.ReplyError, errInvalid("a KeepAlive stream carries only "+api.MethodKeepAliveStream.String()+" and "+
				api.MethodKeepAliveBatch.String()+" frames, not "+method.String()))
			return
		}
		var err error
		if f, err = s.ReadFrame(ss.ctx); err != nil {
			// The client finished writing (its connection is closing) or
			// the stream broke: the parked KeepAlives end with it.
			return
		}
	}
}

// decode decodes a request frame, or answers a malformed one with a
// ReplyError frame and reports false.
func (ss *kaStreamServer) decode(f transport.Frame, v any) bool {
	if err := f.Decode(v); err != nil {
		if ss.s.Identity().Anonymous() {
			ss.write(api.ReplyError, toAPIError(errNoCredentials))
		} else {
			ss.write(api.ReplyError, errInvalid("malformed "+api.Method(f.Tag).String()+" frame: "+err.Error()))
		}
		return false
	}
	return true
}

// serveOne serves one KeepAlive of a KeepAlive stream and writes its
// reply.
func (ss *kaStreamServer) serveOne(req api.KeepAliveStreamRequest) {
	d := ss.d
	defer ss.inflight.Add(-1)
	c := &rpcCall{d: d, method: api.MethodKeepAlive, info: endpoints[api.MethodKeepAlive].MethodInfo, id: ss.s.Identity(), ctx: ss.ctx}
	d.ka.frames.Add(1)
	start := time.Now()
	resp, err := d.keepAliveCall(ss.ctx, c, &req.KeepAlive)
	d.metrics.observeRPC(c.caller.Tenant, api.MethodKeepAlive, err, time.Since(start))
	reply := &api.KeepAliveStreamReply{Call: req.Call}
	if err != nil {
		tarpit(ss.ctx, err)
		reply.Err = toAPIError(err)
	} else {
		reply.KeepAlive = resp
	}
	ss.write(api.ReplyOK, reply)
}

// serveBatch serves the KeepAlives of one batch frame: each is admitted
// as keepAliveCall admits one, and the admitted ones join the batch this
// stream has parked, if there is one not yet answered, or else are parked
// as a new batch by the session manager, which this goroutine waits for
// and answers, with every entry that joined it, in one frame. So batches
// that arrive apart (sessions started at different times) are answered
// together, and their sessions re-send together: after a round a
// connection's KeepAlives travel in one frame each way. An entry's
// refusal is its own reply's error; it does not delay the others, and
// nothing is tarpitted (a refused entry's RetryAfter tells its session
// when to try again).
func (ss *kaStreamServer) serveBatch(reqs []api.KeepAliveStreamRequest) {
	d := ss.d
	start := time.Now()
	c := &rpcCall{d: d, method: api.MethodKeepAlive, info: endpoints[api.MethodKeepAlive].MethodInfo, id: ss.s.Identity(), ctx: ss.ctx}
	refused := make([]api.KeepAliveStreamReply, 0)
	m, entries, calls, err := d.admitKeepAliveBatch(c, reqs, &refused)
	if err != nil {
		ae := toAPIError(err)
		for _, q := range reqs {
			refused = append(refused, api.KeepAliveStreamReply{Call: q.Call, Err: ae})
		}
	}
	if len(entries) == 0 {
		ss.inflight.Add(-int64(len(reqs)))
		d.metrics.observeRPC(c.caller.Tenant, api.MethodKeepAliveBatch, err, time.Since(start))
		ss.write(api.ReplyOK, &api.KeepAliveBatchReply{Replies: refused})
		return
	}
	d.metrics.keepalives.Add(float64(len(entries)))

	ss.jmu.Lock()
	if pb := ss.parked; pb != nil && pb.m == m && pb.b.Join(entries) {
		pb.calls = append(pb.calls, calls...)
		ss.jmu.Unlock()
		// The batch answers the joined entries and frees their places.
		ss.inflight.Add(-int64(len(reqs) - len(entries)))
		if len(refused) > 0 {
			ss.write(api.ReplyOK, &api.KeepAliveBatchReply{Replies: refused})
		}
		return
	}
	b, err := m.sessions.ParkBatch(entries)
	var pb *parkedBatch
	if err == nil {
		pb = &parkedBatch{m: m, b: b, calls: calls}
		ss.parked = pb
	}
	ss.jmu.Unlock()
	var res []session.BatchResult
	if err == nil {
		res, err = b.Wait(ss.ctx)
		ss.jmu.Lock()
		if ss.parked == pb {
			ss.parked = nil
		}
		calls = pb.calls // with every joined entry's: b is closed to joining
		ss.jmu.Unlock()
	}
	ss.inflight.Add(-int64(len(reqs) - len(entries) + len(calls)))
	d.metrics.observeRPC(c.caller.Tenant, api.MethodKeepAliveBatch, err, time.Since(start))
	replies := refused
	if err != nil {
		ae := d.sessionError(err)
		for _, call := range calls {
			replies = append(replies, api.KeepAliveStreamReply{Call: call, Err: ae})
		}
	} else {
		if len(res) != len(calls) {
			panic("cell: invariant broken: a KeepAlive batch answered a different number of entries than it holds")
		}
		// One allocation for every entry's response, not one each: an
		// idle connection's round is this loop over all its sessions.
		resps := make([]api.KeepAliveResponse, len(res))
		replies = slices.Grow(replies, len(res))
		for j, res := range res {
			reply := api.KeepAliveStreamReply{Call: calls[j]}
			if res.Err != nil {
				reply.Err = d.sessionError(res.Err)
			} else {
				resps[j] = keepAliveResponseOf(res.Reply)
				reply.KeepAlive = &resps[j]
			}
			replies = append(replies, reply)
		}
	}
	ss.writeBatchReplies(replies)
}

// parkedBatch is the batch a KeepAlive stream has parked, which later
// batch frames of the stream join while it is not answered.
type parkedBatch struct {
	m     *master
	b     *session.Batch
	calls []uint64 // the Call of each entry of b, in b's order
}

// kaReplyFrameBytes bounds the estimated size of one batch reply frame,
// well below a client's 1 MiB limit on reply frames; a larger answer is
// spread over several frames (api.KeepAliveBatchReply allows it).
const kaReplyFrameBytes = 512 << 10

// writeBatchReplies writes replies in as few batch reply frames as the
// frame size allows.
func (ss *kaStreamServer) writeBatchReplies(replies []api.KeepAliveStreamReply) {
	from, size := 0, 0
	for i, rp := range replies {
		n := 64 // a reply without events, generously
		if rp.KeepAlive != nil {
			for _, ev := range rp.KeepAlive.Events {
				n += 64 + len(ev.Path) + len(ev.Child)
			}
		}
		if rp.Err != nil {
			n += len(rp.Err.Msg)
		}
		if i > from && size+n > kaReplyFrameBytes {
			ss.write(api.ReplyOK, &api.KeepAliveBatchReply{Replies: replies[from:i]})
			from, size = i, 0
		}
		size += n
	}
	ss.write(api.ReplyOK, &api.KeepAliveBatchReply{Replies: replies[from:]})
}

// admitKeepAliveBatch admits each KeepAlive of reqs with keepAliveCall's
// checks (authentication, ownership of the session, the tenant's
// KeepAlive budget, the epoch): it returns the master and the admitted
// entries with their Calls, and appends a reply with its error for each
// refused one to refused. It returns an error that applies to every entry
// (this replica does not serve).
func (d *handlerDeps) admitKeepAliveBatch(c *rpcCall, reqs []api.KeepAliveStreamRequest, refused *[]api.KeepAliveStreamReply) (
	*master, []session.BatchEntry, []uint64, error) {
	m, err := c.needMaster()
	if err != nil {
		return nil, nil, nil, err
	}
	entries := make([]session.BatchEntry, 0, len(reqs))
	calls := make([]uint64, 0, len(reqs))
	owners := m.owners.ownersOf(reqs)
	var authed bool
	var authErr error
	var authToken string
	for i := range reqs {
		req := &reqs[i].KeepAlive
		// Most entries of a batch carry the same credential: check it once.
		if tok := req.Credential(); !authed || tok != authToken {
			authed, authToken = true, tok
			c.caller, c.tokenID = namespace.Caller{}, ""
			authErr = c.authenticate(req)
		}
		err := authErr
		var ack uint64
		if err == nil {
			ack, err = c.admitBatchKeepAlive(m, owners[i], req)
		}
		if err != nil {
			*refused = append(*refused, api.KeepAliveStreamReply{Call: reqs[i].Call, Err: toAPIError(err)})
			continue
		}
		entries = append(entries, session.BatchEntry{Session: session.ID(req.Session), Ack: ack})
		calls = append(calls, reqs[i].Call)
	}
	return m, entries, calls, nil
}

// admitBatchKeepAlive is the admission of one KeepAlive of an
// authenticated caller at master m (charge, as admit does after
// authenticating) and handleKeepAlive's checks, the session's owner looked
// up already (ok false: no such session): the session must be the
// caller's. It returns the acknowledgement to pass on (zero if the request
// names another master's epoch).
func (c *rpcCall) admitBatchKeepAlive(m *master, owner ownerOf, req *api.KeepAliveRequest) (uint64, error) {
	if err := c.charge(); err != nil {
		return 0, err
	}
	if !owner.ok {
		return 0, apiErr(api.SessionExpired, "no such session")
	}
	if owner.caller != c.caller {
		return 0, apiErr(api.PermissionDenied, "the session belongs to another principal")
	}
	if c.tokenID != "" {
		m.owners.bindToken(req.Session, c.tokenID)
	}
	if req.Epoch != m.epoch {
		return 0, nil // sequence numbers restart with each master
	}
	return req.Ack, nil
}

// ownerOf is a session's owner as master.owner reports it.
type ownerOf struct {
	caller namespace.Caller
	ok     bool
}

// ownersOf looks up the owner of every request's session under one lock.
func (o *sessionOwners) ownersOf(reqs []api.KeepAliveStreamRequest) []ownerOf {
	out := make([]ownerOf, len(reqs))
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range reqs {
		out[i].caller, out[i].ok = o.mu.owners[reqs[i].KeepAlive.Session]
	}
	return out
}

// keepAliveResponse is the wire form of a session manager's reply. Held
// and LeaseTimeout are both measured on the session manager's clock, from
// the request's arrival at the manager.
func keepAliveResponse(reply session.Reply) *api.KeepAliveResponse {
	resp := keepAliveResponseOf(reply)
	return &resp
}

// keepAliveResponseOf is keepAliveResponse's value.
func keepAliveResponseOf(reply session.Reply) api.KeepAliveResponse {
	return api.KeepAliveResponse{LeaseTimeout: int64(reply.LeaseTimeout), Held: int64(reply.Held), Epoch: reply.Epoch,
		Events: reply.Events, Cadence: int64(reply.Cadence)}
}

// keepAliveCall serves one KeepAlive of a KeepAlive stream as the handler
// of MethodKeepAlive does: admission as a KeepAlive, then the long-poll.
func (d *handlerDeps) keepAliveCall(ctx context.Context, c *rpcCall, req *api.KeepAliveRequest) (*api.KeepAliveResponse, error) {
	if err := c.admit(req); err != nil {
		return nil, err
	}
	resp, err := handleKeepAlive(ctx, c, req)
	if err != nil {
		return nil, err
	}
	return resp.(*api.KeepAliveResponse), nil
}
