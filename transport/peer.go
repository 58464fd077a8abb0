package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/internal/invariants"
	"github.com/quic-go/quic-go"
)

// outMsg is one encoded frame waiting in a peer queue.
type outMsg struct {
	frame []byte
	// buf is the pooled buffer frame lives in, or nil: it goes back to the
	// pool once the frame is written or dropped unwritten.
	buf       *frameBuf
	due       time.Time // zero: send at once; else held back until then (Faults delay)
	duplicate bool      // write the frame twice (Faults duplicate)
}

// peer is the sending side of the mesh towards one replica: a bounded queue
// that drops its oldest message when full, and a goroutine (run) that owns
// the outgoing connection and writes batches from the queue.
type peer struct {
	e    *Endpoint
	id   uint64
	addr string
	wake chan struct{} // capacity 1: "the queue is not empty"
	// ctx ends when the peer leaves the peer set (SetPeers) or the
	// Endpoint closes; stop ends it.
	ctx  context.Context
	stop context.CancelFunc

	mu struct {
		sync.Mutex
		// q is a ring buffer of capacity cfg.PeerQueueLen: head is the
		// oldest message, n the number queued, bytes their total size.
		// INVARIANT: 0 ≤ n ≤ len(q) and bytes ≤ cfg.PeerQueueBytes (a lone
		// message fits, as PeerQueueBytes ≥ MaxPeerFrame+HeaderLen).
		q     []outMsg
		head  int
		n     int
		bytes int
	}

	connected atomic.Bool
	sent      atomic.Uint64
	dropped   atomic.Uint64
	dials     atomic.Uint64
}

func newPeer(e *Endpoint, id uint64, addr string) *peer {
	p := &peer{e: e, id: id, addr: addr, wake: make(chan struct{}, 1)}
	p.mu.q = make([]outMsg, e.cfg.PeerQueueLen)
	return p
}

// release puts m's buffer, if pooled, back. REQUIRES: m.frame is written
// (quic-go copied it) or dropped, and nothing refers to it any more.
func (m outMsg) release() {
	if m.buf != nil {
		putFrameBuf(m.buf)
	}
}

// enqueue adds one message, dropping the oldest ones while the queue is
// full by count or by bytes.
func (p *peer) enqueue(frame []byte, v verdict) { p.enqueueBuf(frame, nil, v) }

// enqueueBuf is enqueue for a frame in a pooled buffer (buf, or nil).
func (p *peer) enqueueBuf(frame []byte, buf *frameBuf, v verdict) {
	m := outMsg{frame: frame, buf: buf, duplicate: v.duplicate}
	if v.delay > 0 {
		m.due = time.Now().Add(v.delay)
	}
	p.mu.Lock()
	for p.mu.n > 0 && (p.mu.n == len(p.mu.q) || p.mu.bytes+len(frame) > p.e.cfg.PeerQueueBytes) {
		p.mu.bytes -= len(p.mu.q[p.mu.head].frame)
		p.mu.q[p.mu.head].release()
		p.mu.q[p.mu.head] = outMsg{}
		p.mu.head = (p.mu.head + 1) % len(p.mu.q)
		p.mu.n--
		p.e.stats.dropsQueueFull.Add(1)
		p.dropped.Add(1)
	}
	p.mu.q[(p.mu.head+p.mu.n)%len(p.mu.q)] = m
	p.mu.n++
	p.mu.bytes += len(frame)
	p.checkLocked()
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// takeBatch removes from the queue the messages that are due at now, up to
// about maxBatchBytes, appending them to batch. If the head of the queue is
// not yet due it returns how long until it is; later messages wait behind
// it, so a delay never reorders the stream.
func (p *peer) takeBatch(batch []outMsg, now time.Time) ([]outMsg, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := 0
	for p.mu.n > 0 && size < maxBatchBytes {
		m := p.mu.q[p.mu.head]
		if !m.due.IsZero() && m.due.After(now) {
			if len(batch) == 0 {
				return batch, m.due.Sub(now)
			}
			break
		}
		batch = append(batch, m)
		size += len(m.frame)
		p.mu.bytes -= len(m.frame)
		p.mu.q[p.mu.head] = outMsg{}
		p.mu.head = (p.mu.head + 1) % len(p.mu.q)
		p.mu.n--
	}
	p.checkLocked()
	return batch, 0
}

// checkLocked verifies the ring's bookkeeping when invariant checks are on.
//
// REQUIRES: p.mu held.
func (p *peer) checkLocked() {
	if !invariants.Enabled {
		return
	}
	if p.mu.n < 0 || p.mu.n > len(p.mu.q) || p.mu.head < 0 || p.mu.head >= len(p.mu.q) || p.mu.bytes < 0 ||
		(p.mu.n == 0 && p.mu.bytes != 0) || (p.mu.n > 0 && p.mu.bytes > p.e.cfg.PeerQueueBytes) {
		panic(fmt.Sprintf("transport: peer queue bookkeeping broken: n=%d head=%d bytes=%d cap=%d",
			p.mu.n, p.mu.head, p.mu.bytes, len(p.mu.q)))
	}
}

func (p *peer) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.n
}

// start runs the peer's sender until the peer leaves the peer set or the
// Endpoint closes. REQUIRES: e.ctx set.
func (p *peer) start() {
	p.ctx, p.stop = context.WithCancel(p.e.ctx)
	p.e.wg.Go(p.run)
}

// run dials the peer, pumps the queue into one stream, and redials with
// jittered exponential backoff when the connection fails, until the
// peer is stopped (it left the peer set) or the Endpoint closes.
func (p *peer) run() {
	e := p.e
	ctx := p.ctx
	backoff := e.cfg.ReconnectMin
	first := true
	for ctx.Err() == nil {
		conn, err := p.dial(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			e.stats.dialFailures.Add(1)
			e.log.Debug("transport: dial failed", "peer", p.id, "addr", p.addr, "err", err)
			if !sleepCtx(ctx, jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, e.cfg.ReconnectMax)
			continue
		}
		if !first {
			e.stats.reconnects.Add(1)
		}
		first = false
		backoff = e.cfg.ReconnectMin
		if !e.track(conn) {
			return
		}
		p.connected.Store(true)
		e.log.Debug("transport: peer connected", "peer", p.id, "addr", p.addr)
		err = p.pump(ctx, conn)
		p.connected.Store(false)
		_ = conn.CloseWithError(ConnCodeClosed, "")
		e.untrack(conn)
		if ctx.Err() != nil {
			return
		}
		e.log.Info("transport: peer connection lost", "peer", p.id, "err", err)
		// Pause briefly so a peer that accepts and at once drops us is not
		// hammered.
		if !sleepCtx(ctx, jitter(e.cfg.ReconnectMin)) {
			return
		}
	}
}

func (p *peer) dial(ctx context.Context) (*quic.Conn, error) {
	e := p.e
	p.dials.Add(1)
	e.stats.dials.Add(1)
	ap, err := resolve(ctx, p.addr)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 2*e.cfg.HandshakeTimeout)
	defer cancel()
	return e.tr.Dial(dctx, net.UDPAddrFromAddrPort(ap), e.peerDialTLS(p.id), &quic.Config{
		HandshakeIdleTimeout:  e.cfg.HandshakeTimeout,
		MaxIdleTimeout:        e.cfg.PeerIdleTimeout,
		KeepAlivePeriod:       e.cfg.PeerIdleTimeout / 3,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
	})
}

// pump writes batches from the queue to one stream on conn until the
// connection fails or ctx ends.
func (p *peer) pump(ctx context.Context, conn *quic.Conn) error {
	e := p.e
	s, err := conn.OpenStreamSync(ctx)
	if err != nil {
		return err
	}
	// Closing the connection is what unblocks a Write stuck on flow control.
	stop := context.AfterFunc(ctx, func() {
		if e.ctx.Err() == nil {
			_ = conn.CloseWithError(ConnCodeNotPeer, "no longer a peer")
			return
		}
		_ = conn.CloseWithError(ConnCodeShutdown, "endpoint closed")
	})
	defer stop()
	var (
		batch []outMsg
		buf   []byte
		timer *time.Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var wait time.Duration
		batch, wait = p.takeBatch(batch[:0], time.Now())
		if len(batch) == 0 {
			var timeout <-chan time.Time
			if wait > 0 {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				timeout = timer.C
			}
			select {
			case <-p.wake:
			case <-timeout:
			case <-conn.Context().Done():
				return context.Cause(conn.Context())
			case <-ctx.Done():
				return ctx.Err()
			}
			continue
		}
		frames, bytes := 0, 0
		var out []byte
		if len(batch) == 1 && !batch[0].duplicate {
			out = batch[0].frame // a lone (perhaps huge) frame is written without a copy
			frames, bytes = 1, len(out)
		} else {
			buf = buf[:0]
			for _, m := range batch {
				buf = append(buf, m.frame...)
				frames++
				if m.duplicate {
					buf = append(buf, m.frame...)
					frames++
				}
			}
			out, bytes = buf, len(buf)
		}
		if _, err := s.Write(out); err != nil {
			e.stats.dropsDisconnected.Add(uint64(len(batch)))
			p.dropped.Add(uint64(len(batch)))
			return err
		}
		for _, m := range batch {
			m.release() // written: quic-go has copied the frame
		}
		clear(batch) // drop references to the frames
		e.stats.peerFramesSent.Add(uint64(frames))
		e.stats.peerBytesSent.Add(uint64(bytes))
		p.sent.Add(uint64(frames))
		if cap(buf) > 4*maxBatchBytes {
			buf = nil // do not keep a snapshot-sized buffer around
		}
	}
}

// inboundPeer is the receiving side of one peer's connection to us.
type inboundPeer struct {
	conn *quic.Conn
	done chan struct{}
}

// servePeer reads the messages replica id sends on conn and delivers them
// to Recv. A newer connection from the same replica replaces this one; the
// old reader is stopped before the new one starts, so delivery stays in
// order per sender.
func (e *Endpoint) servePeer(conn *quic.Conn, id uint64) {
	me := &inboundPeer{conn: conn, done: make(chan struct{})}
	e.mu.Lock()
	old := e.mu.inbound[id]
	e.mu.inbound[id] = me
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		if e.mu.inbound[id] == me {
			delete(e.mu.inbound, id)
		}
		e.mu.Unlock()
		close(me.done)
	}()
	if old != nil {
		_ = old.conn.CloseWithError(ConnCodeReplaced, "replaced by a newer connection")
		select {
		case <-old.done:
		case <-e.ctx.Done():
			return
		}
	}
	e.log.Debug("transport: peer accepted", "peer", id, "remote", conn.RemoteAddr().String())
	for {
		s, err := conn.AcceptStream(e.ctx)
		if err != nil {
			return
		}
		if err := e.readPeerStream(conn, s, id); err != nil {
			return
		}
	}
}

// readPeerStream delivers the frames of one peer stream until it ends. It
// returns an error when the connection must be abandoned.
func (e *Endpoint) readPeerStream(conn *quic.Conn, s *quic.Stream, from uint64) error {
	br := bufio.NewReaderSize(s, 64<<10)
	var hdr [HeaderLen]byte // one for the stream, not one per frame
	for {
		f, err := readFrame(br, e.cfg.MaxPeerFrame, &hdr)
		if err != nil {
			if isFrameError(err) {
				e.stats.badFrames.Add(1)
				e.log.Warn("transport: bad frame from peer; closing its connection", "peer", from, "err", err)
				_ = conn.CloseWithError(ConnCodeBadFrame, trimReason(err.Error()))
				return err
			}
			if errors.Is(err, io.EOF) {
				return nil // the sender finished this stream; wait for another
			}
			return err
		}
		e.stats.peerFramesReceived.Add(1)
		e.stats.peerBytesReceived.Add(uint64(f.Size()))
		if !e.set.Load().accept[from] {
			// SetPeers took the sender out of the peer set after its
			// connection was accepted: nothing more from it is delivered.
			e.stats.refusedNotPeer.Add(1)
			_ = conn.CloseWithError(ConnCodeNotPeer, "not a peer of this replica")
			return errNotPeer
		}
		if e.faults.partitioned(from, e.cfg.ID) {
			e.stats.dropsFault.Add(1)
			continue
		}
		select {
		case e.recv <- PeerMessage{From: from, Tag: f.Tag, Body: f.Body}:
		case <-conn.Context().Done():
			return context.Cause(conn.Context())
		case <-e.ctx.Done():
			return ErrClosed
		}
	}
}

// isFrameError reports whether err is a frame error (the bytes are bad), as
// opposed to a stream or connection failure.
func isFrameError(err error) bool {
	return errors.Is(err, ErrFrameTooLarge) || errors.Is(err, ErrTruncatedFrame) || errors.Is(err, ErrMalformedFrame)
}

// trimReason bounds a close reason sent on the wire.
func trimReason(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max]
	}
	return s
}

// jitter returns a duration uniformly in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// sleepCtx sleeps for d or until ctx ends; it reports whether ctx is alive.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
