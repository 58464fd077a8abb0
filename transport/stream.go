package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// stream is what ServerStream and ClientStream share: frames over one
// bidirectional QUIC stream, with contexts that cancel the stream.
//
// Contexts. A read or write must reset the stream when its context ends
// while it blocks, and the obvious way, a context.AfterFunc around every
// read and write, costs a registration with the context (allocations and
// the context's lock) per frame, which a unary call pays four times over
// both ends. So:
//
//   - A context that cannot be canceled (Done returns nil) is not watched
//     at all.
//   - The first cancelable context a stream's reads and writes use becomes
//     its home context (home), watched by one AfterFunc for the stream's
//     life (until Close or Cancel). Reads and writes under a context with
//     the same Done channel only count themselves in busy, and the
//     AfterFunc resets the stream if the home context ends while busy is
//     not zero. A home context that ends while nothing is in flight does
//     nothing, as before: the next read or write sees it ended and resets
//     the stream then.
//   - Any other context gets its own AfterFunc for the one read or write,
//     as before.
//
// A server stream's home is its handler's context, set by runHandler,
// which calls homeEnded itself when it cancels that context (see there), so
// it registers no AfterFunc at all.
//
// What was tried: quic-go's SetReadDeadline/SetWriteDeadline from the
// context's deadline. They start a timer per blocked read (quic-go's own),
// cover only deadlines, not cancellation, and report their own error, which
// then races the context's timer to say which error the caller sees.
type stream struct {
	qs  *quic.Stream
	max int       // largest frame body accepted
	st  *counters // client-path counters, nil on the dialing side

	// busy counts the reads and writes in flight under the home context.
	// INVARIANT: a read or write adds itself to busy before it looks at
	// its context's Err, and homeEnded reads busy only after the home
	// context's Err is set; so either the read or write sees the end, or
	// homeEnded sees it in flight (both atomics are sequentially
	// consistent).
	busy atomic.Int32
	mu   struct {
		sync.Mutex
		// home is the Done channel of the home context; nil until the first
		// cancelable read or write, and again after release.
		home <-chan struct{}
		// stop unregisters the AfterFunc that watches home; nil on a server
		// stream, whose runHandler calls homeEnded instead.
		stop func() bool
		// released says Close or Cancel ran: no new home is adopted, so
		// nothing more is registered with any context.
		released bool
	}
	// hdr is ReadFrame's room for a frame header, here so that it does not
	// escape to the heap on every read. One goroutine reads at a time.
	hdr [HeaderLen]byte
}

// streamOp is how one read or write watches its context: not at all (a
// context that cannot end), through the home context's AfterFunc (home),
// or with an AfterFunc of its own (stop).
type streamOp struct {
	home bool
	stop func() bool
}

// begin prepares a read or write under ctx. If ctx has ended already it
// resets the stream (StreamCodeCanceled) and returns ctx's error.
func (s *stream) begin(ctx context.Context) (streamOp, error) {
	done := ctx.Done()
	if done == nil {
		return streamOp{}, nil
	}
	if s.adoptHome(ctx, done) {
		s.busy.Add(1)
		if err := ctx.Err(); err != nil {
			s.busy.Add(-1)
			s.reset(StreamCodeCanceled)
			return streamOp{}, err
		}
		return streamOp{home: true}, nil
	}
	if err := ctx.Err(); err != nil {
		s.reset(StreamCodeCanceled)
		return streamOp{}, err
	}
	return streamOp{stop: context.AfterFunc(ctx, func() { s.reset(StreamCodeCanceled) })}, nil
}

// end finishes a read or write that begin prepared. It reports whether ctx
// ended during it: its error, if it failed, is then ctx's.
func (s *stream) end(ctx context.Context, op streamOp) (ended bool) {
	switch {
	case op.home:
		s.busy.Add(-1)
		return ctx.Err() != nil
	case op.stop != nil:
		return !op.stop() && ctx.Err() != nil
	}
	return false
}

// adoptHome makes ctx (whose Done channel is done) the stream's home
// context if it has none, and reports whether done is the home's.
func (s *stream) adoptHome(ctx context.Context, done <-chan struct{}) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.home == nil && !s.mu.released {
		s.mu.home = done
		s.mu.stop = context.AfterFunc(ctx, s.homeEnded)
	}
	return s.mu.home == done
}

// homeEnded runs when the home context ends: it resets the stream if a
// read or write is in flight under it.
func (s *stream) homeEnded() {
	if s.busy.Load() > 0 {
		s.reset(StreamCodeCanceled)
	}
}

// release stops watching the home context, for good.
func (s *stream) release() {
	s.mu.Lock()
	stop := s.mu.stop
	s.mu.home, s.mu.stop, s.mu.released = nil, nil, true
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// ReadFrame reads the next frame. It returns io.EOF when the other side has
// finished writing; ErrFrameTooLarge, ErrTruncatedFrame or ErrMalformedFrame
// (wrapped) for a bad frame, after resetting the stream with
// StreamCodeBadFrame (the connection and its other streams carry on);
// ErrStreamCanceled, ErrFrameRejected or ErrConnClosed (wrapped) when the
// stream or connection failed; and ctx's error if ctx ended first, after
// resetting the stream with StreamCodeCanceled.
func (s *stream) ReadFrame(ctx context.Context) (Frame, error) {
	op, err := s.begin(ctx)
	if err != nil {
		return Frame{}, err
	}
	f, err := readFrame(s.qs, s.max, &s.hdr)
	if s.end(ctx, op) && err != nil {
		return Frame{}, ctx.Err()
	}
	if err != nil {
		if isFrameError(err) {
			if s.st != nil {
				s.st.badFrames.Add(1)
			}
			s.reset(StreamCodeBadFrame)
			return Frame{}, err
		}
		return Frame{}, streamErr(err)
	}
	if s.st != nil {
		s.st.clientFramesReceived.Add(1)
		s.st.clientBytesReceived.Add(uint64(f.Size()))
	}
	return f, nil
}

// WriteFrame encodes v with msgpack and writes it as one frame with tag. It
// returns an error wrapping ErrEncode if v cannot be encoded (nothing is
// written then), a stream or connection error as ReadFrame does, or ctx's
// error if ctx ended first, after resetting the stream with
// StreamCodeCanceled.
func (s *stream) WriteFrame(ctx context.Context, tag uint16, v any) error {
	fb := getFrameBuf()
	b, err := AppendFrame(fb.b, tag, v, 0)
	fb.b = b
	if err != nil {
		putFrameBuf(fb)
		return err
	}
	if err := s.writeRaw(ctx, b); err != nil {
		// NB: not put back: quic-go may still hold a buffer whose write
		// failed half-way.
		return err
	}
	putFrameBuf(fb)
	return nil
}

func (s *stream) writeRaw(ctx context.Context, b []byte) error {
	op, err := s.begin(ctx)
	if err != nil {
		return err
	}
	_, err = s.qs.Write(b)
	if s.end(ctx, op) && err != nil {
		return ctx.Err()
	}
	if err != nil {
		return streamErr(err)
	}
	if s.st != nil {
		s.st.clientFramesSent.Add(1)
		s.st.clientBytesSent.Add(uint64(len(b)))
	}
	return nil
}

// CloseWrite finishes the sending side: the other side reads io.EOF after
// the last frame. Reading stays possible.
func (s *stream) CloseWrite() error { return s.qs.Close() }

// Cancel abandons the stream in both directions with code; the other side's
// reads and writes fail with ErrStreamCanceled (or ErrFrameRejected for
// StreamCodeBadFrame). The connection is unaffected.
func (s *stream) Cancel(code StreamErrorCode) {
	s.release()
	s.reset(code)
}

// reset abandons the stream in both directions with code, as Cancel does,
// but leaves the home context watched: reads and writes go on failing
// under it.
func (s *stream) reset(code StreamErrorCode) {
	s.qs.CancelRead(code)
	s.qs.CancelWrite(code)
}

// StreamID returns the QUIC stream id, unique within the connection.
func (s *stream) StreamID() int64 { return int64(s.qs.StreamID()) }

// streamErr maps quic-go stream and connection errors onto ours, keeping
// the original wrapped.
func streamErr(err error) error {
	if errors.Is(err, ErrConnClosed) || errors.Is(err, ErrStreamCanceled) || errors.Is(err, ErrFrameRejected) {
		return err // classified already; wrapping again repeats the prefix
	}
	var se *quic.StreamError
	if errors.As(err, &se) {
		if se.Remote && se.ErrorCode == StreamCodeBadFrame {
			return fmt.Errorf("%w: %w", ErrFrameRejected, err)
		}
		return fmt.Errorf("%w: %w", ErrStreamCanceled, err)
	}
	var (
		ae *quic.ApplicationError
		te *quic.TransportError
		ie *quic.IdleTimeoutError
		he *quic.HandshakeTimeoutError
		re *quic.StatelessResetError
	)
	if errors.As(err, &ae) && ae.Remote && ae.ErrorCode == ConnCodeTooManyConns {
		return fmt.Errorf("%w: %w: %s", ErrConnClosed, ErrTooManyConns, ae.ErrorMessage)
	}
	if errors.As(err, &ae) || errors.As(err, &te) || errors.As(err, &ie) || errors.As(err, &he) || errors.As(err, &re) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("%w: %w", ErrConnClosed, err)
	}
	return err
}

// ServerStream is one stream a client opened, as its handler sees it: frames
// in and out (ReadFrame, WriteFrame, CloseWrite, Cancel) and who the client
// is. A handler may keep a stream open for a long-poll, writing a frame
// whenever it has news. When the handler returns, the stream's sending side
// is finished and its unread receiving side reset (StreamCodeDone).
//
// The handler's context ends when the connection or the Endpoint closes, or
// when the client resets the stream (canceling a Call or a long-poll), so a
// handler parked on a long-poll learns its client left.
//
// A bad frame read from a client resets only that stream
// (StreamCodeBadFrame); the client's connection and other streams carry on.
// One goroutine at a time may read, and one may write.
type ServerStream struct {
	stream
	conn     *quic.Conn
	identity Identity
	connID   uint64
}

// Identity returns what the client's certificate proved; it is anonymous if
// the client presented none.
func (s *ServerStream) Identity() Identity { return s.identity }

// RemoteAddr returns the client's address.
func (s *ServerStream) RemoteAddr() net.Addr { return s.conn.RemoteAddr() }

// ConnID identifies the stream's connection among all client connections
// this Endpoint has accepted (a counter from 1), so the cell can tie
// streams to a connection.
func (s *ServerStream) ConnID() uint64 { return s.connID }

// ConnDone returns a channel closed when the stream's connection closes.
func (s *ServerStream) ConnDone() <-chan struct{} { return s.conn.Context().Done() }

// serveClient accepts the streams of one client connection, each served by
// the ClientHandler on its own goroutine.
func (e *Endpoint) serveClient(conn *quic.Conn, id Identity) {
	e.stats.clientConns.Add(1)
	defer e.stats.clientConns.Add(-1)
	connID := e.connIDs.Add(1)
	e.log.Debug("transport: client connected", "conn", connID, "remote", conn.RemoteAddr().String(), "identity", id.String())
	for {
		qs, err := conn.AcceptStream(e.ctx)
		if err != nil {
			return
		}
		ss := &ServerStream{
			stream:   stream{qs: qs, max: e.cfg.MaxClientFrame, st: &e.stats},
			conn:     conn,
			identity: id,
			connID:   connID,
		}
		// NB: Add and go rather than wg.Go, whose wrapping closure is one
		// more allocation per stream.
		e.wg.Add(1)
		go e.runHandler(ss)
	}
}

// runHandler runs the ClientHandler on one stream, then finishes the
// stream. REQUIRES: e.wg.Add(1) for it.
//
// The handler's context ends when the connection closes or when the
// client resets the stream. It is also the stream's home context (see
// stream), watched by no AfterFunc of its own: the AfterFunc on the quic
// stream's context, which cancels the handler's context when the client
// resets the stream, calls homeEnded too. When the connection closes,
// every read and write on its streams fails by itself.
func (e *Endpoint) runHandler(ss *ServerStream) {
	defer e.wg.Done()
	e.stats.clientStreams.Add(1)
	defer e.stats.clientStreams.Add(-1)
	ctx, cancel := context.WithCancel(ss.conn.Context())
	defer cancel()
	ss.mu.Lock()
	ss.mu.home = ctx.Done() // no stop: the AfterFunc below calls homeEnded
	ss.mu.Unlock()
	// The quic stream's context ends when its sending side is closed or
	// reset, locally or by the client (STOP_SENDING). A client giving up
	// on a long-poll must reach the handler; the handler's own CloseWrite
	// must not cancel it.
	sctx := ss.qs.Context()
	stop := context.AfterFunc(sctx, func() {
		if !errors.Is(context.Cause(sctx), quic.ErrStreamClosed) {
			cancel()
			ss.homeEnded()
		}
	})
	e.cfg.ClientHandler(ctx, ss)
	// Unregistered before the Close below ends sctx, which would start the
	// AfterFunc's goroutine only to find the cause is ErrStreamClosed.
	stop()
	ss.release()
	_ = ss.qs.Close()
	ss.qs.CancelRead(StreamCodeDone)
}
