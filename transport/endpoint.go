package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"
)

// Errors of Endpoint and ClientConn methods. Match them with errors.Is.
var (
	// ErrClosed reports a call on a closed Endpoint or ClientConn.
	ErrClosed = errors.New("transport: closed")
	// ErrUnknownPeer reports a Send to an id not in the peer set.
	ErrUnknownPeer = errors.New("transport: unknown peer")
	// ErrConnClosed reports a stream whose connection closed (the peer
	// closed it, it timed out, or it was refused). The quic-go error is
	// wrapped too, for errors.As.
	ErrConnClosed = errors.New("transport: connection closed")
	// ErrStreamCanceled reports a stream the other side canceled; a
	// *quic.StreamError with the code is wrapped too.
	ErrStreamCanceled = errors.New("transport: stream canceled by peer")
	// ErrFrameRejected reports a stream the other side canceled because a
	// frame we sent was too large or malformed.
	ErrFrameRejected = errors.New("transport: peer rejected our frame")
	// ErrNoReplica reports a Dial that reached no replica; the error of
	// each attempt is joined to it.
	ErrNoReplica = errors.New("transport: no replica reachable")
	// ErrTooManyConns reports a connection the replica closed because its
	// source address already holds Config.MaxConnsPerIP connections there
	// (the replica's message, naming the limit, is in the error). It also
	// matches ErrConnClosed.
	ErrTooManyConns = errors.New("transport: too many connections from this address")
	// ErrStreamLimit reports an OpenStream (or Call) whose context ended
	// while it waited for a free stream: the connection had as many streams
	// open as the replica allows (Config.MaxStreamsPerClient). ctx's error
	// is wrapped too.
	ErrStreamLimit = errors.New("transport: the replica's limit of concurrent streams per connection (max_streams_per_conn) is reached")
	// ErrListen reports a Listen that could not bind or open its address;
	// the error is a *ListenError, which names the address and the cause.
	ErrListen = errors.New("transport: cannot listen")
)

// ListenError reports a Listen that could not bind or open Config.Addr.
// It matches ErrListen with errors.Is, and unwraps to the system's error,
// so errors.Is(err, syscall.EADDRINUSE) holds for a port in use.
type ListenError struct {
	// Addr is the address Listen was asked to bind.
	Addr string
	// Err is the cause, as the network stack or quic-go returned it.
	Err error
}

// Error says once what failed and why: "transport: listen on ADDR (QUIC):
// CAUSE", where CAUSE is the system's own words (e.g. "address already in
// use") without the layers of net's wrapping, which repeat the address.
func (e *ListenError) Error() string {
	cause := e.Err
	var sc *os.SyscallError
	if errors.As(cause, &sc) {
		cause = sc.Err
	} else {
		var op *net.OpError
		if errors.As(cause, &op) && op.Err != nil {
			cause = op.Err
		}
	}
	return fmt.Sprintf("transport: listen on %s (QUIC): %v", e.Addr, cause)
}

// Unwrap returns the cause.
func (e *ListenError) Unwrap() error { return e.Err }

// Is reports whether target is ErrListen.
func (e *ListenError) Is(target error) bool { return target == ErrListen }

// StreamErrorCode and ApplicationErrorCode are quic-go's stream and
// connection error codes, aliased so callers need not import quic-go.
type (
	// StreamErrorCode is carried by a stream reset (Cancel).
	StreamErrorCode = quic.StreamErrorCode
	// ApplicationErrorCode is carried by a connection close.
	ApplicationErrorCode = quic.ApplicationErrorCode
)

// Stream and connection error codes used by transport. Codes from 0x100 up
// are left to the layers above (api maps its error codes there).
const (
	// StreamCodeCanceled resets a stream whose context was canceled.
	StreamCodeCanceled StreamErrorCode = 0x1
	// StreamCodeBadFrame resets a client stream that carried an oversize,
	// truncated or malformed frame.
	StreamCodeBadFrame StreamErrorCode = 0x2
	// StreamCodeDone resets the unread side of a stream whose handler
	// returned.
	StreamCodeDone StreamErrorCode = 0x3

	// ConnCodeClosed closes a connection normally.
	ConnCodeClosed ApplicationErrorCode = 0x0
	// ConnCodeShutdown closes connections of an Endpoint that is closing.
	ConnCodeShutdown ApplicationErrorCode = 0x1
	// ConnCodeBadFrame closes a peer connection that carried a bad frame.
	ConnCodeBadFrame ApplicationErrorCode = 0x2
	// ConnCodeReplaced closes a peer connection superseded by a newer one
	// from the same replica.
	ConnCodeReplaced ApplicationErrorCode = 0x3
	// ConnCodeTooManyConns closes a client connection over MaxConnsPerIP.
	ConnCodeTooManyConns ApplicationErrorCode = 0x4
	// ConnCodeNotPeer closes the connections of a replica that SetPeers
	// took out of the peer set (a replica removed from the cell).
	ConnCodeNotPeer ApplicationErrorCode = 0x5
)

// PeerMessage is one message received from a peer.
type PeerMessage struct {
	// From is the sending replica, as its certificate proved.
	From uint64
	// Tag is the tag the sender gave.
	Tag uint16
	// Body is the msgpack body; the receiver owns it.
	Body []byte
}

// Decode unmarshals the body into v, as Frame.Decode does.
func (m PeerMessage) Decode(v any) error { return decodeBody(m.Body, v) }

// Endpoint is one replica's QUIC endpoint: one UDP port serving both the
// peer mesh (ALPNPeer) and clients (ALPNClient).
//
// Peer mesh. For each peer the Endpoint keeps one outgoing connection and,
// on it, one long-lived stream; Send queues a message for the peer and
// returns at once, and a goroutine per peer writes batches of queued
// messages to the stream, redialing with jittered backoff when the
// connection dies. Each replica sends to a peer on the connection it dialed
// and receives from the peer on the connection the peer dialed; the two
// directions are independent, so one side restarting never confuses the
// other's ordering. Messages from one sender are delivered through Recv in
// the order that sender's Send calls made, minus any that were dropped:
// when a peer's queue is full the oldest message goes, and the messages in a
// batch whose connection breaks are lost (both counted in Stats). Paxos
// retransmits, so losing a message is acceptable; blocking a replica on a
// slow peer is not.
//
// What was tried: a single connection per pair (the lower id dials) halves
// the handshakes but makes reconnection depend on which side noticed the
// failure, and ordering across a replaced connection then needs sequence
// numbers; two one-way connections need neither.
//
// Clients. Every stream a client opens is served by Config.ClientHandler on
// its own goroutine; see ServerStream.
//
// Life cycle: Listen, then Send/Recv and serve clients, then Close. All
// methods are safe for concurrent use.
type Endpoint struct {
	cfg    Config
	log    *slog.Logger
	faults *Faults
	tr     *quic.Transport
	ln     *quic.Listener
	conn   net.PacketConn // what tr reads, perhaps wrapped by faultConn
	// set is the peer set in force (peerset.go): who is dialled, whose
	// connections are accepted, and the peers' resolved addresses. It is
	// replaced whole by SetPeers, never modified.
	set atomic.Pointer[peerSet]
	// setMu serialises SetPeers.
	setMu   sync.Mutex
	recv    chan PeerMessage
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	connIDs atomic.Uint64
	stats   counters
	// tickets makes the TLS configs of client handshakes and holds their
	// session ticket keys (tls.go).
	tickets *ticketKeys

	mu struct {
		sync.Mutex
		closed  bool
		inbound map[uint64]*inboundPeer
		conns   map[*quic.Conn]struct{}
		perIP   map[netip.Addr]int
		// overIP counts, per IP, the connections over MaxConnsPerIP that
		// are being completed only to be closed with ConnCodeTooManyConns.
		overIP map[netip.Addr]int
	}
	closeOnce sync.Once
}

// Listen starts the Endpoint described by cfg: it binds the UDP port (or
// takes cfg.PacketConn), starts accepting connections and starts dialing
// every peer. ctx bounds the start only (resolving addresses and binding);
// the Endpoint lives until Close. It returns an error wrapping
// ErrInvalidConfig for a bad Config. Listen owns cfg.PacketConn from the
// start: it closes it on error as well as in Close.
func Listen(ctx context.Context, cfg Config) (*Endpoint, error) {
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
		if pc, err = lc.ListenPacket(ctx, "udp", cfg.Addr); err != nil {
			return nil, &ListenError{Addr: cfg.Addr, Err: err}
		}
	}
	e := &Endpoint{
		cfg:    cfg,
		log:    cfg.Logger.With("replica", cfg.ID),
		faults: cfg.Faults,
		recv:   make(chan PeerMessage, cfg.RecvQueueLen),
	}
	if e.tickets, err = newTicketKeys(cfg.Certificate, cfg.TicketKeyRotation, e.log); err != nil {
		pc.Close()
		return nil, err
	}
	e.mu.inbound = map[uint64]*inboundPeer{}
	e.mu.conns = map[*quic.Conn]struct{}{}
	e.mu.perIP = map[netip.Addr]int{}
	e.mu.overIP = map[netip.Addr]int{}
	set := &peerSet{peers: map[uint64]*peer{}, accept: map[uint64]bool{}, addrs: map[netip.AddrPort]bool{}}
	for id, addr := range cfg.Peers {
		if id == cfg.ID {
			continue
		}
		ap, err := resolve(ctx, addr)
		if err != nil {
			pc.Close()
			return nil, fmt.Errorf("%w: peer %d: %v", ErrInvalidConfig, id, err)
		}
		set.addrs[ap] = true
		set.accept[id] = true
		set.peers[id] = newPeer(e, id, addr)
	}
	e.set.Store(set)
	e.conn = pc
	if e.faults != nil {
		e.conn = &faultConn{PacketConn: pc, e: e}
	}
	e.tr = &quic.Transport{Conn: e.conn, ConnContext: e.connContext}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	keepAlive := min(cfg.PeerIdleTimeout, cfg.ClientIdleTimeout) / 3
	e.ln, err = e.tr.Listen(e.serverTLS(), &quic.Config{
		HandshakeIdleTimeout:  cfg.HandshakeTimeout,
		MaxIdleTimeout:        max(cfg.PeerIdleTimeout, cfg.ClientIdleTimeout),
		KeepAlivePeriod:       keepAlive,
		MaxIncomingStreams:    int64(cfg.MaxStreamsPerClient),
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		e.cancel()
		e.tr.Close()
		pc.Close()
		return nil, &ListenError{Addr: pc.LocalAddr().String(), Err: err}
	}
	e.wg.Go(e.acceptLoop)
	for _, p := range set.peers {
		p.start()
	}
	e.log.Debug("transport: listening", "addr", pc.LocalAddr().String(), "peers", len(set.peers))
	return e, nil
}

// resolve turns "host:port" into an address, looking the host up if it is
// not a literal.
func resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, err
	}
	p, err := net.DefaultResolver.LookupPort(ctx, "udp", port)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("no address for %q", host)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(p)), nil
}

// Addr returns the local UDP address.
func (e *Endpoint) Addr() net.Addr { return e.conn.LocalAddr() }

// ID returns this replica's id.
func (e *Endpoint) ID() uint64 { return e.cfg.ID }

// Recv returns the channel of messages from peers, in order per sender. It
// is closed by Close. A consumer that stops reading stalls delivery, and in
// turn (through QUIC flow control) the peers' streams to this replica,
// whose queues then drop their oldest messages.
func (e *Endpoint) Recv() <-chan PeerMessage { return e.recv }

// Send queues msg, with tag, for replica to and returns without blocking on
// the network. msg is encoded with msgpack before Send returns, so the
// caller may reuse it. A nil error means queued, not delivered: the message
// may still be dropped (queue overflow, a broken connection, injected
// faults). It returns ErrUnknownPeer for an id not in the peer set
// (Config.Peers, or the latest SetPeers), an
// error wrapping ErrEncode if msg cannot be encoded or exceeds MaxPeerFrame,
// and ErrClosed after Close.
func (e *Endpoint) Send(to uint64, tag uint16, msg any) error {
	p, ok := e.set.Load().peers[to]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownPeer, to)
	}
	if e.ctx.Err() != nil {
		return ErrClosed
	}
	fb := getFrameBuf()
	frame, err := AppendFrame(fb.b, tag, msg, e.cfg.MaxPeerFrame)
	fb.b = frame
	if err != nil {
		putFrameBuf(fb)
		return err
	}
	v := e.faults.onSend(e.cfg.ID, to)
	if v.drop {
		putFrameBuf(fb)
		e.stats.dropsFault.Add(1)
		p.dropped.Add(1)
		return nil
	}
	p.enqueueBuf(frame, fb, v)
	return nil
}

// Close shuts the Endpoint down: it closes every connection (telling the
// other side, with ConnCodeShutdown), stops the peer senders, waits for the
// client handlers to return and closes the socket and the Recv channel.
// Queued messages are discarded. Close is idempotent and returns nil.
func (e *Endpoint) Close() error {
	e.closeOnce.Do(func() {
		// Under setMu, so that no SetPeers starts a sender after this.
		e.setMu.Lock()
		e.cancel()
		e.setMu.Unlock()
		e.mu.Lock()
		e.mu.closed = true
		conns := make([]*quic.Conn, 0, len(e.mu.conns))
		for c := range e.mu.conns {
			conns = append(conns, c)
		}
		e.mu.Unlock()
		for _, c := range conns {
			_ = c.CloseWithError(ConnCodeShutdown, "endpoint closed")
		}
		_ = e.ln.Close()
		e.wg.Wait()
		_ = e.tr.Close()
		_ = e.conn.Close()
		close(e.recv)
	})
	return nil
}

// track registers c so Close can close it; it reports false (and closes c)
// if the Endpoint is already closing.
func (e *Endpoint) track(c *quic.Conn) bool {
	e.mu.Lock()
	closed := e.mu.closed
	if !closed {
		e.mu.conns[c] = struct{}{}
	}
	e.mu.Unlock()
	if closed {
		_ = c.CloseWithError(ConnCodeShutdown, "endpoint closed")
	}
	return !closed
}

func (e *Endpoint) untrack(c *quic.Conn) {
	e.mu.Lock()
	delete(e.mu.conns, c)
	e.mu.Unlock()
}

// overLimitKey marks the context of a connection admitted over
// MaxConnsPerIP; its value is the message to close it with.
type overLimitKey struct{}

// connContext runs before the handshake of every incoming connection and
// enforces MaxConnsPerIP; peers, known by address, are exempt. A connection
// over the limit is admitted (up to overLimitSlack of them per IP at once)
// only so that acceptLoop can close it with ConnCodeTooManyConns and a
// message naming the limit; beyond the slack it is refused outright.
func (e *Endpoint) connContext(ctx context.Context, info *quic.ClientInfo) (context.Context, error) {
	ap, ok := addrPort(info.RemoteAddr)
	if !ok || e.set.Load().addrs[ap] || e.cfg.MaxConnsPerIP < 0 {
		return ctx, nil
	}
	ip := ap.Addr()
	limit := e.cfg.MaxConnsPerIP
	counts := e.mu.perIP
	e.mu.Lock()
	if e.mu.perIP[ip] >= limit {
		counts = e.mu.overIP
		if e.mu.overIP[ip] >= overLimitSlack {
			e.mu.Unlock()
			e.stats.refusedConnLimit.Add(1)
			return nil, fmt.Errorf("transport: too many connections from %s", ip)
		}
		ctx = context.WithValue(ctx, overLimitKey{}, fmt.Sprintf(
			"too many connections from %s: this replica allows %d per address (max_conns_per_ip)", ip, limit))
	}
	counts[ip]++
	e.mu.Unlock()
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		if counts[ip]--; counts[ip] <= 0 {
			delete(counts, ip)
		}
		e.mu.Unlock()
	})
	return ctx, nil
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	case nil:
		return netip.AddrPort{}, false
	default:
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return netip.AddrPort{}, false
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
	}
}

// refuse counts and logs a refused handshake.
func (e *Endpoint) refuse(remote net.Addr, err error) {
	e.stats.refusedHandshakes.Add(1)
	attrs := []any{"err", err}
	if remote != nil {
		attrs = append(attrs, "remote", remote.String())
	}
	e.log.Warn("transport: handshake refused", attrs...)
}

func (e *Endpoint) acceptLoop() {
	for {
		c, err := e.ln.Accept(e.ctx)
		if err != nil {
			return
		}
		if !e.track(c) {
			return
		}
		if msg, over := c.Context().Value(overLimitKey{}).(string); over {
			e.untrack(c)
			e.stats.refusedConnLimit.Add(1)
			e.log.Warn("transport: connection closed: too many from one address",
				"remote", c.RemoteAddr().String(), "limit", e.cfg.MaxConnsPerIP)
			_ = c.CloseWithError(ConnCodeTooManyConns, msg)
			continue
		}
		e.wg.Go(func() {
			defer e.untrack(c)
			cs := c.ConnectionState().TLS
			switch cs.NegotiatedProtocol {
			case ALPNPeer:
				id, ok := peerIDOf(cs)
				if !ok { // INVARIANT: VerifyConnection checked the certificate
					_ = c.CloseWithError(ConnCodeClosed, "no replica identity")
					return
				}
				e.servePeer(c, id)
			case ALPNClient:
				if cs.DidResume {
					e.stats.clientResumed.Add(1)
				} else {
					e.stats.clientFullHandshakes.Add(1)
				}
				e.serveClient(c, identityOf(cs))
			default:
				_ = c.CloseWithError(ConnCodeClosed, "unknown protocol")
			}
		})
	}
}

// faultConn drops the client traffic of a replica named in
// Faults.ClientsCut: every datagram to or from an address that is not a
// peer's.
type faultConn struct {
	net.PacketConn
	e *Endpoint
}

func (c *faultConn) cut(a net.Addr) bool {
	if !c.e.faults.clientsCut(c.e.cfg.ID) {
		return false
	}
	ap, ok := addrPort(a)
	return !ok || !c.e.set.Load().addrs[ap]
}

func (c *faultConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, a, err := c.PacketConn.ReadFrom(p)
		if err != nil || !c.cut(a) {
			return n, a, err
		}
		c.e.stats.dropsClientCut.Add(1)
	}
}

func (c *faultConn) WriteTo(p []byte, a net.Addr) (int, error) {
	if c.cut(a) {
		c.e.stats.dropsClientCut.Add(1)
		return len(p), nil
	}
	return c.PacketConn.WriteTo(p, a)
}

// SetReadBuffer and SetWriteBuffer pass through, so quic-go can size the
// socket's buffers.
func (c *faultConn) SetReadBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetReadBuffer(int) error }); ok {
		return s.SetReadBuffer(n)
	}
	return nil
}

func (c *faultConn) SetWriteBuffer(n int) error {
	if s, ok := c.PacketConn.(interface{ SetWriteBuffer(int) error }); ok {
		return s.SetWriteBuffer(n)
	}
	return nil
}

// sortedPeerIDs returns the ids of peers in increasing order.
func sortedPeerIDs(peers map[uint64]*peer) []uint64 {
	ids := make([]uint64, 0, len(peers))
	for id := range peers {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}
