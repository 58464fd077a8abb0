package cell

import (
	"context"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// MaxStreamKeepAlives bounds the KeepAlives in flight (parked, or being
// answered) on one KeepAlive stream, so that one connection cannot make a
// replica hold goroutines without bound: a session has at most one parked
// KeepAlive, so a connection can carry this many sessions. A KeepAlive
// beyond it is answered at once with ResourceExhausted (the client retries
// after a pause).
const MaxStreamKeepAlives = 1 << 16

// serveKeepAliveStream serves a connection's KeepAlive stream (see
// api.KeepAliveStreamRequest): first, the frame already read, then every
// frame the client writes, each one KeepAlive served exactly as a KeepAlive
// on a stream of its own is (authenticated, admitted, parked by the
// session manager, timed from its own arrival), on its own goroutine, and
// answered on the shared stream when its long-poll ends. So a connection
// that carries many sessions parks one stream, not one per session.
//
// A malformed frame ends the stream with a ReplyError frame; the
// KeepAlives still parked then end with it (their sessions' leases were
// renewed on arrival, as for a KeepAlive whose client went away).
func (r *Replica) serveKeepAliveStream(ctx context.Context, s *transport.ServerStream, f transport.Frame) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	inflight := make(chan struct{}, MaxStreamKeepAlives)
	var wmu sync.Mutex
	write := func(tag uint16, v any) {
		wmu.Lock()
		defer wmu.Unlock()
		if err := s.WriteFrame(ctx, tag, v); err != nil {
			cancel() // the stream is broken: end the rest
		}
	}
	for {
		if api.Method(f.Tag) != api.MethodKeepAliveStream {
			write(api.ReplyError, errInvalid("a KeepAlive stream carries only "+api.MethodKeepAliveStream.String()+" frames, not "+api.Method(f.Tag).String()))
			return
		}
		var req api.KeepAliveStreamRequest
		if err := f.Decode(&req); err != nil {
			if s.Identity().Anonymous() {
				write(api.ReplyError, toAPIError(errNoCredentials))
			} else {
				write(api.ReplyError, errInvalid("malformed "+api.MethodKeepAliveStream.String()+" frame: "+err.Error()))
			}
			return
		}
		select {
		case inflight <- struct{}{}:
			r.serveStreamKeepAlive(ctx, s, req, inflight, &wg, write)
		default:
			write(api.ReplyOK, &api.KeepAliveStreamReply{Call: req.Call, Err: &api.Error{Code: api.ResourceExhausted,
				Msg: "too many KeepAlives in flight on one connection", RetryAfter: int64(time.Second)}})
		}
		var err error
		if f, err = s.ReadFrame(ctx); err != nil {
			// The client finished writing (its connection is closing) or
			// the stream broke: the parked KeepAlives end with it.
			return
		}
	}
}

// serveStreamKeepAlive serves one KeepAlive of a KeepAlive stream on its
// own goroutine (counted in wg; it frees its inflight slot when done) and
// writes the reply with write.
func (r *Replica) serveStreamKeepAlive(ctx context.Context, s *transport.ServerStream, req api.KeepAliveStreamRequest,
	inflight chan struct{}, wg *sync.WaitGroup, write func(uint16, any)) {
	wg.Go(func() {
		defer func() { <-inflight }()
		c := &rpcCall{r: r, method: api.MethodKeepAlive, info: endpoints[api.MethodKeepAlive].MethodInfo, id: s.Identity(), ctx: ctx}
		start := time.Now()
		resp, err := r.keepAliveCall(ctx, c, &req.KeepAlive)
		r.metrics.observeRPC(c.caller.Tenant, api.MethodKeepAlive, err, time.Since(start))
		reply := &api.KeepAliveStreamReply{Call: req.Call}
		if err != nil {
			tarpit(ctx, err)
			reply.Err = toAPIError(err)
		} else {
			reply.KeepAlive = resp
		}
		write(api.ReplyOK, reply)
	})
}

// keepAliveCall serves one KeepAlive of a KeepAlive stream as the handler
// of MethodKeepAlive does: admission as a KeepAlive, then the long-poll.
func (r *Replica) keepAliveCall(ctx context.Context, c *rpcCall, req *api.KeepAliveRequest) (*api.KeepAliveResponse, error) {
	if err := c.admit(req); err != nil {
		return nil, err
	}
	resp, err := handleKeepAlive(ctx, c, req)
	if err != nil {
		return nil, err
	}
	return resp.(*api.KeepAliveResponse), nil
}
