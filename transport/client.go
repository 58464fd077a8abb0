package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
)

// ClientConn is a client's connection to one replica, made by Dial. It
// carries one stream per request (Call) and long-lived streams for
// long-polls (OpenStream). Canceling a call's context resets that call's
// stream only. A ClientConn does not redial: when it fails, Context is done
// and the caller dials again (perhaps another replica). All methods are safe
// for concurrent use.
type ClientConn struct {
	conn      *quic.Conn
	tr        *quic.Transport
	pc        net.PacketConn
	addr      string
	replica   uint64
	resumed   bool
	max       int
	closed    atomic.Bool
	closeOnce sync.Once
}

// Dial connects to the first replica in cfg.Addrs (starting at cfg.Start)
// whose handshake succeeds: its certificate must chain to cfg.CA and name a
// replica. It returns an error wrapping ErrInvalidConfig for a bad
// DialConfig, and one wrapping ErrNoReplica, joined with each attempt's
// error, if no replica could be reached.
func Dial(ctx context.Context, cfg DialConfig) (*ClientConn, error) {
	cfg, err := cfg.populate()
	if err != nil {
		if cfg.PacketConn != nil {
			_ = cfg.PacketConn.Close()
		}
		return nil, err
	}
	pc := cfg.PacketConn
	if pc == nil {
		var lc net.ListenConfig
		local := cfg.LocalAddr
		if local == "" {
			local = ":0"
		}
		if pc, err = lc.ListenPacket(ctx, "udp", local); err != nil {
			return nil, fmt.Errorf("transport: dial: %w", err)
		}
	}
	tr := &quic.Transport{Conn: pc}
	qconf := &quic.Config{
		HandshakeIdleTimeout:  cfg.HandshakeTimeout,
		MaxIdleTimeout:        cfg.IdleTimeout,
		KeepAlivePeriod:       cfg.IdleTimeout / 3,
		MaxIncomingStreams:    -1,
		MaxIncomingUniStreams: -1,
	}
	conn, replica, addr, err := dialStaggered(ctx, tr, cfg, qconf)
	if err != nil {
		_ = tr.Close()
		_ = pc.Close()
		return nil, err
	}
	resumed := conn.ConnectionState().TLS.DidResume
	cfg.Logger.Debug("transport: connected", "addr", addr, "replica", replica, "resumed", resumed)
	return &ClientConn{conn: conn, tr: tr, pc: pc, addr: addr, replica: replica, resumed: resumed, max: cfg.MaxFrame}, nil
}

// DialStagger is how long Dial waits for a handshake before it also tries
// the next address (at most a quarter of the handshake timeout): a replica
// that is down (a UDP port that answers nothing) costs a client that much,
// not a whole handshake timeout.
const DialStagger = 250 * time.Millisecond

// dialStaggered dials cfg.Addrs in order from cfg.Start, starting the next
// dial whenever the previous ones have not succeeded within the stagger or
// have failed; the first handshake that succeeds wins and the others are
// cancelled (any that completed anyway are closed).
func dialStaggered(ctx context.Context, tr *quic.Transport, cfg DialConfig, qconf *quic.Config) (*quic.Conn, uint64, string, error) {
	type result struct {
		conn    *quic.Conn
		replica uint64
		addr    string
		err     error
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()
	n := len(cfg.Addrs)
	results := make(chan result, n)
	launched, pending := 0, 0
	launch := func() {
		addr := cfg.Addrs[(cfg.Start+launched)%n]
		launched++
		pending++
		go func() {
			conn, replica, err := dialOne(dctx, tr, addr, cfg, qconf)
			results <- result{conn, replica, addr, err}
		}()
	}
	stagger := min(DialStagger, cfg.HandshakeTimeout/4)
	timer := time.NewTimer(stagger)
	defer timer.Stop()
	var errs []error
	launch()
	for pending > 0 {
		select {
		case r := <-results:
			pending--
			if r.err == nil {
				cancel()
				for ; pending > 0; pending-- {
					if late := <-results; late.conn != nil {
						_ = late.conn.CloseWithError(quic.ApplicationErrorCode(ConnCodeClosed), "another replica answered first")
					}
				}
				return r.conn, r.replica, r.addr, nil
			}
			errs = append(errs, fmt.Errorf("%s: %w", r.addr, r.err))
			if launched < n && ctx.Err() == nil {
				launch()
				timer.Reset(stagger)
			}
		case <-timer.C:
			if launched < n {
				launch()
				timer.Reset(stagger)
			}
		}
	}
	return nil, 0, "", fmt.Errorf("%w: %w", ErrNoReplica, errors.Join(errs...))
}

func dialOne(ctx context.Context, tr *quic.Transport, addr string, cfg DialConfig, qconf *quic.Config) (*quic.Conn, uint64, error) {
	ap, err := resolve(ctx, addr)
	if err != nil {
		return nil, 0, err
	}
	var replica uint64
	dctx, cancel := context.WithTimeout(ctx, 2*cfg.HandshakeTimeout)
	defer cancel()
	conn, err := tr.Dial(dctx, net.UDPAddrFromAddrPort(ap), clientDialTLS(cfg, addr, &replica), qconf)
	if err != nil {
		return nil, 0, err
	}
	return conn, replica, nil
}

// Resumed reports whether the handshake resumed a TLS session the replica
// gave this client on an earlier connection (DialConfig.SessionCache), in
// place of a full handshake. Either way the replica's certificate was
// verified (on resumption, the one the session carries).
func (c *ClientConn) Resumed() bool { return c.resumed }

// Addr returns the address of the replica this connection reached.
func (c *ClientConn) Addr() string { return c.addr }

// ReplicaID returns the id of the replica this connection reached, as its
// certificate proved.
func (c *ClientConn) ReplicaID() uint64 { return c.replica }

// LocalAddr returns the local UDP address.
func (c *ClientConn) LocalAddr() net.Addr { return c.conn.LocalAddr() }

// Context returns a context done when the connection closes, for whatever
// reason.
func (c *ClientConn) Context() context.Context { return c.conn.Context() }

// Call sends one request on a new stream and returns the one frame the
// replica answers with; the caller looks at its Tag and Decodes it. ctx
// bounds the whole call; canceling it resets the stream (StreamCodeCanceled)
// and leaves the connection usable. Call waits for a free stream when the
// replica's limit of concurrent streams is reached. It returns an error
// wrapping ErrEncode if req cannot be encoded or exceeds the frame limit,
// and otherwise the errors of ClientStream's methods.
func (c *ClientConn) Call(ctx context.Context, tag uint16, req any) (Frame, error) {
	fb := getFrameBuf()
	b, err := AppendFrame(fb.b, tag, req, c.max)
	fb.b = b
	if err != nil {
		putFrameBuf(fb)
		return Frame{}, err
	}
	s, err := c.OpenStream(ctx)
	if err != nil {
		putFrameBuf(fb)
		return Frame{}, err
	}
	defer s.Close()
	if err := s.writeRaw(ctx, b); err != nil {
		return Frame{}, err // fb not put back: quic-go may still hold it
	}
	putFrameBuf(fb)
	// NB: the replica may answer and stop reading (STOP_SENDING) before our
	// FIN leaves, which makes CloseWrite fail although the answer is on its
	// way: read it regardless, and report the close error only without one.
	closeErr := s.CloseWrite()
	f, err := s.ReadFrame(ctx)
	if err != nil && closeErr != nil {
		return Frame{}, streamErr(closeErr)
	}
	return f, err
}

// OpenStream opens a stream for a long-poll or any exchange of several
// frames, waiting for a free stream if the replica's limit is reached. It
// returns ctx's error if ctx ends first (wrapped with ErrStreamLimit if it
// ended while OpenStream waited for a free stream), ErrConnClosed (wrapped)
// if the connection has failed, and ErrClosed after Close.
func (c *ClientConn) OpenStream(ctx context.Context) (*ClientStream, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	qs, err := c.conn.OpenStream()
	if err != nil && isStreamLimit(err) {
		qs, err = c.conn.OpenStreamSync(ctx)
		if err != nil && ctx.Err() != nil {
			return nil, fmt.Errorf("%w (waited for a free stream): %w", ErrStreamLimit, ctx.Err())
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if c.closed.Load() {
			return nil, ErrClosed
		}
		return nil, streamErr(err)
	}
	return &ClientStream{stream: stream{qs: qs, max: c.max}}, nil
}

// isStreamLimit reports whether err says the replica's limit of concurrent
// streams is reached. (Apart from OpenStream so that the target of
// errors.As escapes to the heap only on this rare path.)
func isStreamLimit(err error) bool {
	var full *quic.StreamLimitReachedError
	return errors.As(err, &full)
}

// Close closes the connection (ConnCodeClosed) and its socket. Streams in
// flight fail with ErrConnClosed.
func (c *ClientConn) Close() error { return c.CloseWithError(ConnCodeClosed, "") }

// CloseWithError closes the connection, telling the replica code and msg.
// Only the first call has an effect.
func (c *ClientConn) CloseWithError(code ApplicationErrorCode, msg string) error {
	var err error
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		err = c.conn.CloseWithError(code, msg)
		_ = c.tr.Close()
		_ = c.pc.Close()
	})
	return err
}

// ClientStream is a stream a client opened: frames out and in (WriteFrame,
// ReadFrame, CloseWrite, Cancel). For a long-poll, write the request, then
// read frames as the replica sends them; a context ending during a read
// resets the stream, so use one context for the stream's life. One goroutine
// at a time may read, and one may write.
type ClientStream struct {
	stream
}

// Close finishes the sending side and resets the unread receiving side
// (StreamCodeDone): the stream is abandoned without harming the connection.
// Until Close or Cancel, the stream stays registered with the first
// cancelable context its reads and writes used (so that it need not
// register for every frame): close every stream once done with it.
func (s *ClientStream) Close() error {
	s.release()
	err := s.qs.Close()
	s.qs.CancelRead(StreamCodeDone)
	return err
}
