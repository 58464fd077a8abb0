package transport

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/quic-go/quic-go"
)

// stream is what ServerStream and ClientStream share: frames over one
// bidirectional QUIC stream, with contexts that cancel the stream.
type stream struct {
	qs  *quic.Stream
	max int       // largest frame body accepted
	st  *counters // client-path counters, nil on the dialing side
}

// ReadFrame reads the next frame. It returns io.EOF when the other side has
// finished writing; ErrFrameTooLarge, ErrTruncatedFrame or ErrMalformedFrame
// (wrapped) for a bad frame, after resetting the stream with
// StreamCodeBadFrame (the connection and its other streams carry on);
// ErrStreamCanceled, ErrFrameRejected or ErrConnClosed (wrapped) when the
// stream or connection failed; and ctx's error if ctx ended first, after
// resetting the stream with StreamCodeCanceled.
func (s *stream) ReadFrame(ctx context.Context) (Frame, error) {
	if err := ctx.Err(); err != nil {
		s.Cancel(StreamCodeCanceled)
		return Frame{}, err
	}
	stop := context.AfterFunc(ctx, func() { s.Cancel(StreamCodeCanceled) })
	f, err := ReadFrame(s.qs, s.max)
	stopped := stop()
	if err != nil {
		if !stopped && ctx.Err() != nil {
			return Frame{}, ctx.Err()
		}
		if isFrameError(err) {
			if s.st != nil {
				s.st.badFrames.Add(1)
			}
			s.Cancel(StreamCodeBadFrame)
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
	b, err := AppendFrame(nil, tag, v, 0)
	if err != nil {
		return err
	}
	return s.writeRaw(ctx, b)
}

func (s *stream) writeRaw(ctx context.Context, b []byte) error {
	if err := ctx.Err(); err != nil {
		s.Cancel(StreamCodeCanceled)
		return err
	}
	stop := context.AfterFunc(ctx, func() { s.Cancel(StreamCodeCanceled) })
	_, err := s.qs.Write(b)
	stopped := stop()
	if err != nil {
		if !stopped && ctx.Err() != nil {
			return ctx.Err()
		}
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
		e.wg.Go(func() { e.runHandler(conn, ss) })
	}
}

func (e *Endpoint) runHandler(conn *quic.Conn, ss *ServerStream) {
	e.stats.clientStreams.Add(1)
	defer e.stats.clientStreams.Add(-1)
	ctx, cancel := context.WithCancel(conn.Context())
	defer cancel()
	// The stream's context ends when its sending side is closed or reset,
	// locally or by the client (STOP_SENDING). A client giving up on a
	// long-poll must reach the handler; the handler's own CloseWrite must
	// not cancel it.
	sctx := ss.qs.Context()
	stop := context.AfterFunc(sctx, func() {
		if !errors.Is(context.Cause(sctx), quic.ErrStreamClosed) {
			cancel()
		}
	})
	defer stop()
	e.cfg.ClientHandler(ctx, ss)
	_ = ss.qs.Close()
	ss.qs.CancelRead(StreamCodeDone)
}
