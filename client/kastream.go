package client

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// kaStream is a connection's KeepAlive stream (api.KeepAliveStreamRequest):
// the KeepAlives of every session of the Client go out on it, each
// numbered, and their replies come back on it as each long-poll ends, so a
// connection parks one stream however many sessions it carries.
//
// What was tried: one stream per KeepAlive (a long-poll each) parked a
// stream per session, so past the replica's stream limit KeepAlives queued
// behind each other and sessions fell into jeopardy although the master
// was healthy. Batching every session into one request per connection
// (Chubby's shape) would have tied each session's lease proof to the
// slowest of them; numbered KeepAlives on one stream keep each one's send
// time, Held and reply its own, so the lease rules (lease_exact.go, the
// Session doc) apply to each exactly as before.
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
	wlock  chan struct{} // held (full) while a frame is written

	mu    sync.Mutex
	next  uint64
	calls map[uint64]chan api.KeepAliveStreamReply
}

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
	ks := &kaStream{cc: cc, s: s, wlock: make(chan struct{}, 1), calls: map[uint64]chan api.KeepAliveStreamReply{}}
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
			var r api.KeepAliveStreamReply
			if err := f.Decode(&r); err != nil {
				ks.fail(fmt.Errorf("client: decoding a KeepAlive stream reply: %w", err))
				return
			}
			c.heardFrom(ks.cc)
			ks.mu.Lock()
			ch := ks.calls[r.Call]
			delete(ks.calls, r.Call)
			ks.mu.Unlock()
			if ch != nil {
				ch <- r // buffered: one reply per call
			}
		case api.ReplyError:
			ae := &api.Error{}
			if err := f.Decode(ae); err != nil {
				ks.fail(fmt.Errorf("client: decoding a KeepAlive stream error: %w", err))
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
	ks, err := c.kaStreamOn(ctx, cc)
	if err != nil {
		c.dropIfBroken(ctx, cc, err)
		return err
	}
	ch := make(chan api.KeepAliveStreamReply, 1)
	ks.mu.Lock()
	ks.next++
	call := ks.next
	ks.calls[call] = ch
	ks.mu.Unlock()
	defer func() {
		ks.mu.Lock()
		delete(ks.calls, call)
		ks.mu.Unlock()
	}()
	select {
	case ks.wlock <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-ks.ctx.Done():
		return c.kaStreamFailed(ctx, ks)
	}
	err = ks.s.WriteFrame(ks.ctx, uint16(api.MethodKeepAliveStream), &api.KeepAliveStreamRequest{Call: call, KeepAlive: *req})
	<-ks.wlock
	if errors.Is(err, transport.ErrEncode) {
		return err
	}
	if err != nil {
		ks.fail(err)
		return c.kaStreamFailed(ctx, ks)
	}
	select {
	case r := <-ch:
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
	case <-ks.ctx.Done():
		return c.kaStreamFailed(ctx, ks)
	case <-ctx.Done():
		return ctx.Err()
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
