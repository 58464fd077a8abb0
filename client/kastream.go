package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/transport"
)

// kaStream is a connection's KeepAlive stream: the KeepAlives of every
// session of the Client go out on it, and their replies come back on it as
// the master answers them, so a connection parks one stream however many
// sessions it carries.
//
// It speaks batches (api.KeepAliveBatchRequest) to a replica that knows
// them: the client's KeepAlive loop (kaloop.go) hands the KeepAlives that
// its sessions start in one round to the sender as one lot, and the sender
// writes each lot as one frame (or a few, if it is large); the master parks
// the frame as one long-poll and answers it in one frame. Sessions answered
// together are handled in one round of the loop and re-send together, so in
// steady state a connection exchanges one pair of frames per cadence,
// however many sessions it carries. Each KeepAlive keeps its own number
// (Call), reply and lease proof: its send time is taken by the loop before
// it is handed over, so the frame leaves after it, which can only shorten
// the lease it proves; the lease rules (lease_exact.go, the Session doc)
// apply to each exactly as to a KeepAlive of its own.
//
// To a replica that answers the batch method with "unknown method" (one
// that predates it) the KeepAlives go as one numbered frame each
// (api.KeepAliveStreamRequest) on a stream opened for them, and the
// connection keeps that form.
//
// Nobody waits for a reply: the stream's reader turns each reply into a
// result for the loop, and a failure of the stream into a failure of every
// KeepAlive on it, so a KeepAlive in flight costs an entry in calls and no
// goroutine.
//
// What was tried: one stream per KeepAlive (a long-poll each) parked a
// stream per session, so past the replica's stream limit KeepAlives queued
// behind each other and sessions fell into jeopardy although the master
// was healthy. Numbered KeepAlives on one stream, one frame each, fixed
// that but cost the master a frame, a goroutine and a timer per session
// per cadence. Batches written by whichever session's goroutine came first,
// lingering a few milliseconds for the sessions answered together, worked
// but kept a goroutine parked per session for its reply.
//
// The stream lives as long as it works: a write or read failure ends it
// (every KeepAlive on it fails with that error) and the next KeepAlive
// opens another. One session's KeepAlive given up never touches the
// stream: its entry is forgotten, and a late reply to it is dropped.
type kaStream struct {
	cc     *transport.ClientConn
	s      *transport.ClientStream
	ctx    context.Context // done when the stream failed; the cause says why
	cancel context.CancelCauseFunc
	// batch: the stream carries MethodKeepAliveBatch frames; otherwise one
	// MethodKeepAliveStream frame per KeepAlive.
	batch bool

	mu   sync.Mutex
	next uint64
	// calls are the KeepAlives written (or being written) on the stream
	// and not yet answered, failed or given up, by call number. Each holds
	// a use of cc (Client.use) that its removal releases.
	calls map[uint64]*kaCall
	// dead: the stream failed and its calls were failed; nothing more may
	// join it.
	dead bool
	// answered: a batch reply came, so the replica knows the method.
	answered bool
}

// kaCall is one KeepAlive from the moment a session's loop starts it until
// its result reaches the loop: it waits for the sender, then in a
// stream's calls for the reply.
type kaCall struct {
	l       *loop
	id      uint64
	req     api.KeepAliveRequest
	sent    monotime.Time
	replica uint64 // where it was meant to go, as far as the client knew
	// before is the client's redirect count when the KeepAlive started
	// (see Client.redirectedSince).
	before uint64
	// hold: the reply is to be lost (HoldKeepAlives).
	hold bool
	// deadline is when the loop gives the KeepAlive up: the sender waits
	// for a connection no longer than that on its behalf.
	deadline monotime.Time
	// given is set when the loop gave it up; ks and call say where it
	// went (set by the sender under ks.mu).
	given atomic.Bool
	ks    atomic.Pointer[kaStream]
	call  uint64
}

// giveUp forgets kc wherever it is: the sender skips it, and a stream it
// is on drops its entry (and the reply, if one comes). Only the loop calls
// it; the loop makes the KeepAlive's failure itself.
func (kc *kaCall) giveUp(c *Client) {
	kc.given.Store(true)
	if ks := kc.ks.Load(); ks != nil {
		ks.mu.Lock()
		mine := ks.calls[kc.call] == kc
		if mine {
			delete(ks.calls, kc.call)
		}
		ks.mu.Unlock()
		if mine {
			c.release(ks.cc)
		}
	}
}

const (
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
	ks := &kaStream{cc: cc, s: s, batch: c.kas.legacy.Load() != cc, calls: map[uint64]*kaCall{}}
	ks.ctx, ks.cancel = context.WithCancelCause(cc.Context())
	c.kas.cur = ks
	go ks.read(c)
	return ks, nil
}

// fail ends the stream with err (the first call wins); its reader then
// fails the KeepAlives on it.
func (ks *kaStream) fail(err error) {
	if ks.ctx.Err() == nil {
		ks.cancel(err)
	}
	ks.s.Cancel(transport.StreamCodeCanceled)
}

// read turns replies into results for the KeepAlive loop until the stream
// fails, and then fails the KeepAlives still on it.
func (ks *kaStream) read(c *Client) {
	defer ks.failCalls(c)
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
				ks.deliver(c, []api.KeepAliveStreamReply{r})
				continue
			}
			var r api.KeepAliveBatchReply
			if err := f.Decode(&r); err != nil {
				ks.fail(fmt.Errorf("client: decoding a KeepAlive batch reply: %w", err))
				return
			}
			c.heardFrom(ks.cc)
			ks.mu.Lock()
			ks.answered = true
			ks.mu.Unlock()
			ks.deliver(c, r.Replies)
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

// deliver turns replies into results for the KeepAlive loop, with
// rpcOnce's treatment of error replies (NotMaster retires the connection,
// Unavailable drops it). A reply to a KeepAlive given up is dropped.
func (ks *kaStream) deliver(c *Client, replies []api.KeepAliveStreamReply) {
	kcs := make([]*kaCall, len(replies))
	ks.mu.Lock()
	for i, r := range replies {
		if kc := ks.calls[r.Call]; kc != nil {
			delete(ks.calls, r.Call)
			kcs[i] = kc
		}
	}
	ks.mu.Unlock()
	out := make([]kaResult, 0, len(replies))
	ok := false
	for i, kc := range kcs {
		if kc == nil {
			continue
		}
		r := &replies[i]
		res := kaResult{l: kc.l, id: kc.id, sent: kc.sent, replica: kc.replica}
		switch {
		case r.Err != nil:
			c.errorReply(ks.cc, r.Err)
			res.err = r.Err
		case r.KeepAlive == nil:
			res.err = errors.New("client: a KeepAlive stream reply with neither response nor error")
		default:
			res.resp = *r.KeepAlive
			ok = true
		}
		if res.err != nil {
			res.redirected = c.redirectedSince(kc.before, res.err)
		}
		c.release(ks.cc)
		if !kc.hold {
			out = append(out, res)
		}
	}
	if ok {
		c.succeeded()
	}
	c.ka.post(out)
}

// failCalls fails every KeepAlive left on the failed stream, once: the
// connection is dropped if it failed too (or retired, for an error reply
// that says so), and each KeepAlive's failure goes to the loop. On a
// stream that ended because its replica does not know batches, the
// KeepAlives go back to the sender instead, for a stream of their own
// frames.
func (ks *kaStream) failCalls(c *Client) {
	err := context.Cause(ks.ctx)
	ks.mu.Lock()
	ks.dead = true
	kcs := make([]*kaCall, 0, len(ks.calls))
	for _, kc := range ks.calls {
		kcs = append(kcs, kc)
	}
	clear(ks.calls)
	ks.mu.Unlock()
	slices.SortFunc(kcs, func(a, b *kaCall) int { return cmp.Compare(a.call, b.call) })
	for range kcs {
		c.release(ks.cc)
	}
	if errors.Is(err, errNoBatch) {
		for _, kc := range kcs {
			kc.ks.Store(nil)
		}
		c.ka.resend(kcs)
		return
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		c.errorReply(ks.cc, ae)
	} else {
		c.dropIfBroken(c.ctx, ks.cc, err)
	}
	c.ka.fail(kcs, err)
}

// sendKeepAlives sends kcs (the sender's lot) on the current connection's
// KeepAlive stream, dialing if there is no connection; ctx bounds the
// wait for a connection and a stream. A KeepAlive that cannot be sent
// fails to the loop with the reason.
func (c *Client) sendKeepAlives(ctx context.Context, kcs []*kaCall) {
	for len(kcs) > 0 {
		cc, err := c.use(ctx)
		if err != nil {
			c.ka.fail(kcs, err)
			return
		}
		if !c.useMore(cc, len(kcs)-1) {
			c.release(cc)
			continue // replaced meanwhile: take the next one
		}
		ks, err := c.kaStreamOn(ctx, cc)
		if err != nil {
			for range kcs {
				c.release(cc)
			}
			c.dropIfBroken(ctx, cc, err)
			c.ka.fail(kcs, err)
			return
		}
		var frames [][]api.KeepAliveStreamRequest
		ks.mu.Lock()
		if ks.dead {
			ks.mu.Unlock()
			for range kcs {
				c.release(cc)
			}
			continue // it failed meanwhile: the next one is opened
		}
		var batch []api.KeepAliveStreamRequest
		var given []*kaCall
		size := 0
		for _, kc := range kcs {
			ks.next++
			kc.call = ks.next
			ks.calls[kc.call] = kc
			kc.ks.Store(ks)
			if kc.given.Load() {
				// Given up before it was on the stream, or just now:
				// giveUp may have missed the entry.
				delete(ks.calls, kc.call)
				given = append(given, kc)
				continue
			}
			entry := kaEntryBytes + len(kc.req.Token)
			if len(batch) == kaBatchMax || (len(batch) > 0 && size+entry > kaBatchBytes) || (!ks.batch && len(batch) == 1) {
				frames = append(frames, batch)
				batch, size = nil, 0
			}
			batch = append(batch, api.KeepAliveStreamRequest{Call: kc.call, KeepAlive: kc.req})
			size += entry
		}
		if len(batch) > 0 {
			frames = append(frames, batch)
		}
		ks.mu.Unlock()
		for range given {
			c.release(cc)
		}
		for _, f := range frames {
			var err error
			if ks.batch {
				err = ks.s.WriteFrame(ks.ctx, uint16(api.MethodKeepAliveBatch), &api.KeepAliveBatchRequest{KeepAlives: f})
			} else {
				err = ks.s.WriteFrame(ks.ctx, uint16(api.MethodKeepAliveStream), &f[0])
			}
			if err != nil {
				// The KeepAlives on it fail with the stream (its reader
				// fails them).
				ks.fail(err)
				break
			}
		}
		return
	}
}

// useMore counts n more calls under way on cc, as use does, if cc is still
// the current connection; otherwise it counts none and reports false.
func (c *Client) useMore(cc *transport.ClientConn, n int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.mu.conn != cc {
		return false
	}
	c.mu.inflight[cc] += n
	return true
}
