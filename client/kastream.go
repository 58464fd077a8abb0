package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// kaStream is a connection's KeepAlive stream: the KeepAlives of every
// session of the Client go out on it, and their replies come back on it as
// the master answers them, so a connection parks one stream however many
// sessions it carries.
//
// It speaks batches (api.KeepAliveBatchRequest) to a replica that knows
// them: the KeepAlives that sessions issue while a frame is being written,
// or while the sessions just answered together are still re-sending, go
// out together as one frame, and the master parks the frame as one
// long-poll and answers it in one frame. Sessions answered together re-send
// together, so in steady state a connection exchanges one pair of frames
// per cadence, however many sessions it carries. Each KeepAlive keeps its
// own number (Call), reply and lease proof: its send time is taken by the
// session before it is queued, so the frame leaves after it, which can only
// shorten the lease it proves; the lease rules (lease_exact.go, the
// Session doc) apply to each exactly as to a KeepAlive of its own.
//
// To a replica that answers the batch method with "unknown method" (one
// that predates it) the KeepAlives go as one numbered frame each
// (api.KeepAliveStreamRequest) on a stream opened for them, and the
// connection keeps that form.
//
// What was tried: one stream per KeepAlive (a long-poll each) parked a
// stream per session, so past the replica's stream limit KeepAlives queued
// behind each other and sessions fell into jeopardy although the master
// was healthy. Numbered KeepAlives on one stream, one frame each, fixed
// that but cost the master a frame, a goroutine and a timer per session
// per cadence. A batch that waits for its slowest member was avoided: a
// batch is written as soon as its expected members are in (or after
// kaLinger), and nobody waits for a reply to another session's KeepAlive.
//
// The stream lives as long as it works: a write or read failure ends it
// (every KeepAlive waiting on it fails with that error) and the next
// KeepAlive opens another. One session's KeepAlive giving up (its
// context ending) never touches the stream: writes use the stream's own
// context.
type kaStream struct {
	cc     *transport.ClientConn
	s      *transport.ClientStream
	ctx    context.Context // done when the stream failed; the cause says why
	cancel context.CancelCauseFunc
	// batch: the stream carries MethodKeepAliveBatch frames; otherwise one
	// MethodKeepAliveStream frame per KeepAlive.
	batch bool
	wlock chan struct{} // held (full) while a per-session frame is written
	more  chan struct{} // buffer of one; poked when a KeepAlive is queued

	mu    sync.Mutex
	next  uint64
	calls map[uint64]chan api.KeepAliveStreamReply
	// Batch streams only:
	queue   []api.KeepAliveStreamRequest // waiting for the next frame
	writing bool                         // a caller is writing frames
	// expect counts the sessions answered by reply frames whose next
	// KeepAlive has not been queued yet: the writer waits (at most
	// kaLinger) for them, so that they go out in one frame.
	expect int
	// answered: a batch reply came, so the replica knows the method.
	answered bool
}

const (
	// kaLinger bounds how long a batch's writer waits for the KeepAlives
	// of sessions that were answered together with those it has.
	kaLinger = 5 * time.Millisecond
	// kaBatchMax and kaBatchBytes bound one batch frame (well below the
	// replica's 1 MiB limit on request frames); a larger batch goes out
	// as several frames.
	kaBatchMax   = 16384
	kaBatchBytes = 512 << 10
	// kaEntryBytes is a generous size of one encoded batch entry, beside
	// its token.
	kaEntryBytes = 48
)

// errNoBatch ends a batch stream whose replica does not know the batch
// method; the KeepAlives on it are sent again one frame each.
var errNoBatch = errors.New("client: the replica does not know " + api.MethodKeepAliveBatch.String())

// kaStreamOn returns the KeepAlive stream on cc, opening one if there is
// none that works.
func (c *Client) kaStreamOn(ctx context.Context, cc *transport.ClientConn) (*kaStream, error) {
	select {
	case c.kas.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.kas.lock }()
	if ks := c.kas.cur; ks != nil && ks.cc == cc && ks.ctx.Err() == nil {
		return ks, nil
	}
	s, err := cc.OpenStream(ctx)
	if err != nil {
		return nil, err
	}
	ks := &kaStream{cc: cc, s: s, batch: c.kas.legacy.Load() != cc, wlock: make(chan struct{}, 1), more: make(chan struct{}, 1),
		calls: map[uint64]chan api.KeepAliveStreamReply{}}
	ks.ctx, ks.cancel = context.WithCancelCause(cc.Context())
	c.kas.cur = ks
	go ks.read(c)
	return ks, nil
}

// fail ends the stream with err (the first call wins).
func (ks *kaStream) fail(err error) {
	if ks.ctx.Err() == nil {
		ks.cancel(err)
	}
	ks.s.Cancel(transport.StreamCodeCanceled)
}

// read delivers replies to the KeepAlives waiting for them, until the
// stream fails.
func (ks *kaStream) read(c *Client) {
	for {
		f, err := ks.s.ReadFrame(ks.ctx)
		if err != nil {
			ks.fail(fmt.Errorf("client: KeepAlive stream: %w", err))
			return
		}
		switch f.Tag {
		case api.ReplyOK:
			if !ks.batch {
				var r api.KeepAliveStreamReply
				if err := f.Decode(&r); err != nil {
					ks.fail(fmt.Errorf("client: decoding a KeepAlive stream reply: %w", err))
					return
				}
				c.heardFrom(ks.cc)
				ks.deliver(r)
				continue
			}
			var r api.KeepAliveBatchReply
			if err := f.Decode(&r); err != nil {
				ks.fail(fmt.Errorf("client: decoding a KeepAlive batch reply: %w", err))
				return
			}
			c.heardFrom(ks.cc)
			// Count the sessions this frame answers before any of them
			// can re-send, so that the first to re-send waits for the rest.
			chs := make([]chan api.KeepAliveStreamReply, len(r.Replies))
			ks.mu.Lock()
			ks.answered = true
			for i, e := range r.Replies {
				if chs[i] = ks.calls[e.Call]; chs[i] != nil {
					delete(ks.calls, e.Call)
					if e.Err == nil {
						ks.expect++
					}
				}
			}
			ks.mu.Unlock()
			for i, ch := range chs {
				if ch != nil {
					ch <- r.Replies[i] // buffered: one reply per call
				}
			}
		case api.ReplyError:
			ae := &api.Error{}
			if err := f.Decode(ae); err != nil {
				ks.fail(fmt.Errorf("client: decoding a KeepAlive stream error: %w", err))
				return
			}
			if ks.batch && ks.unknownMethod(ae) {
				c.kas.legacy.Store(ks.cc)
				c.log.Debug("client: the replica does not know KeepAlive batches; one frame per KeepAlive", "err", ae)
				ks.fail(errNoBatch)
				return
			}
			ks.fail(ae)
			return
		default:
			ks.fail(fmt.Errorf("client: KeepAlive stream: unexpected reply tag %#x", f.Tag))
			return
		}
	}
}

// unknownMethod reports whether ae, on a batch stream that has had no
// batch reply, is how a replica that predates batches refuses one: as an
// unknown method, or (to a client without a certificate, which it cannot
// tell apart before the method) as a call without credentials.
func (ks *kaStream) unknownMethod(ae *api.Error) bool {
	ks.mu.Lock()
	answered := ks.answered
	ks.mu.Unlock()
	if answered {
		return false
	}
	return ae.Code == api.InvalidArgument && strings.HasPrefix(ae.Msg, "unknown method") || ae.Code == api.Unauthenticated
}

// deliver hands r to the KeepAlive waiting for it and reports whether one
// was.
func (ks *kaStream) deliver(r api.KeepAliveStreamReply) bool {
	ks.mu.Lock()
	ch := ks.calls[r.Call]
	delete(ks.calls, r.Call)
	ks.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- r // buffered: one reply per call
	return true
}

// keepAliveOnce sends one KeepAlive on the connection's KeepAlive stream
// and waits for its reply, with rpcOnce's treatment of failures: an error
// reply is returned as *api.Error (NotMaster retires the connection,
// Unavailable drops it), and a failure of the connection drops it.
func (c *Client) keepAliveOnce(ctx context.Context, req *api.KeepAliveRequest, resp *api.KeepAliveResponse) error {
	cc, err := c.use(ctx)
	if err != nil {
		return err
	}
	defer c.release(cc)
	for {
		ks, err := c.kaStreamOn(ctx, cc)
		if err != nil {
			c.dropIfBroken(ctx, cc, err)
			return err
		}
		r, err := ks.call(ctx, req)
		switch {
		case err == nil:
		case ks.batch && errors.Is(context.Cause(ks.ctx), errNoBatch):
			continue // again, on a stream of per-session frames
		case errors.Is(err, transport.ErrEncode), ctx.Err() != nil:
			return err
		default:
			return c.kaStreamFailed(ctx, ks)
		}
		if r.Err != nil {
			c.errorReply(cc, r.Err)
			return r.Err
		}
		if r.KeepAlive == nil {
			return errors.New("client: a KeepAlive stream reply with neither response nor error")
		}
		*resp = *r.KeepAlive
		c.succeeded()
		return nil
	}
}

// call sends one KeepAlive on ks and waits for its reply. A failure of the
// stream is returned as ks.ctx's error (kaStreamFailed says why); an
// encoding failure as itself.
func (ks *kaStream) call(ctx context.Context, req *api.KeepAliveRequest) (api.KeepAliveStreamReply, error) {
	ch := make(chan api.KeepAliveStreamReply, 1)
	ks.mu.Lock()
	ks.next++
	call := ks.next
	ks.calls[call] = ch
	write := true
	if ks.batch {
		ks.queue = append(ks.queue, api.KeepAliveStreamRequest{Call: call, KeepAlive: *req})
		ks.expect = max(ks.expect-1, 0)
		write = !ks.writing
		ks.writing = true
	}
	ks.mu.Unlock()
	defer func() {
		ks.mu.Lock()
		delete(ks.calls, call)
		ks.mu.Unlock()
	}()
	if ks.batch {
		select {
		case ks.more <- struct{}{}:
		default:
		}
		if write {
			if err := ks.writeBatches(); err != nil {
				return api.KeepAliveStreamReply{}, err
			}
		}
	} else if err := ks.writeOne(ctx, call, req); err != nil {
		return api.KeepAliveStreamReply{}, err
	}
	select {
	case r := <-ch:
		return r, nil
	case <-ks.ctx.Done():
		return api.KeepAliveStreamReply{}, ks.ctx.Err()
	case <-ctx.Done():
		ks.unqueue(call)
		return api.KeepAliveStreamReply{}, ctx.Err()
	}
}

// writeOne writes one KeepAlive as a frame of its own.
func (ks *kaStream) writeOne(ctx context.Context, call uint64, req *api.KeepAliveRequest) error {
	select {
	case ks.wlock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-ks.ctx.Done():
		return ks.ctx.Err()
	}
	err := ks.s.WriteFrame(ks.ctx, uint16(api.MethodKeepAliveStream), &api.KeepAliveStreamRequest{Call: call, KeepAlive: *req})
	<-ks.wlock
	if err != nil && !errors.Is(err, transport.ErrEncode) {
		ks.fail(err)
		return ks.ctx.Err()
	}
	return err
}

// writeBatches writes what is queued, as batch frames, until the queue is
// empty; the caller became the writer (ks.writing). Before each frame it
// waits, at most kaLinger, for the sessions answered together with those
// queued to queue theirs too.
func (ks *kaStream) writeBatches() error {
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	for {
		ks.mu.Lock()
		if ks.expect > 0 && len(ks.queue) < kaBatchMax {
			ks.mu.Unlock()
			if linger == nil {
				linger = time.NewTimer(kaLinger)
			} else {
				linger.Reset(kaLinger)
			}
		wait:
			for {
				select {
				case <-ks.more:
					ks.mu.Lock()
					done := ks.expect == 0 || len(ks.queue) >= kaBatchMax
					ks.mu.Unlock()
					if done {
						break wait
					}
				case <-linger.C:
					break wait
				case <-ks.ctx.Done():
					break wait
				}
			}
			ks.mu.Lock()
		}
		batch := ks.takeLocked()
		if len(batch) == 0 {
			ks.writing = false
			ks.mu.Unlock()
			return nil
		}
		ks.mu.Unlock()
		err := ks.s.WriteFrame(ks.ctx, uint16(api.MethodKeepAliveBatch), &api.KeepAliveBatchRequest{KeepAlives: batch})
		if err != nil {
			ks.mu.Lock()
			ks.writing = false
			ks.mu.Unlock()
			ks.fail(err) // the callers whose entries it carried wait on ks.ctx
			return ks.ctx.Err()
		}
	}
}

// takeLocked takes the next frame's worth of queued KeepAlives; the
// expectation of more is settled by the frame.
// REQUIRES: ks.mu held.
func (ks *kaStream) takeLocked() []api.KeepAliveStreamRequest {
	n, size := 0, 0
	for n < len(ks.queue) && n < kaBatchMax && size < kaBatchBytes {
		size += kaEntryBytes + len(ks.queue[n].KeepAlive.Token)
		n++
	}
	batch := ks.queue[:n:n]
	if n == len(ks.queue) {
		ks.queue = nil
	} else {
		ks.queue = ks.queue[n:]
	}
	ks.expect = 0
	return batch
}

// unqueue drops call's KeepAlive from the queue if it has not been written.
func (ks *kaStream) unqueue(call uint64) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	for i, q := range ks.queue {
		if q.Call == call {
			ks.queue = append(ks.queue[:i:i], ks.queue[i+1:]...)
			return
		}
	}
}

// kaStreamFailed returns why ks failed, dropping its connection if that
// failed too.
func (c *Client) kaStreamFailed(ctx context.Context, ks *kaStream) error {
	err := context.Cause(ks.ctx)
	var ae *api.Error
	if errors.As(err, &ae) {
		c.errorReply(ks.cc, ae)
		return err
	}
	c.dropIfBroken(ctx, ks.cc, err)
	return err
}
