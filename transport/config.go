package transport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"
)

// ALPN protocol names. One UDP port serves both; the ALPN a dialer offers
// decides which rules its handshake meets.
const (
	// ALPNPeer is offered by replicas dialing each other.
	ALPNPeer = "lockcell-peer/1"
	// ALPNClient is offered by clients.
	ALPNClient = "lockcell-client/1"
)

// Defaults, chosen against Chubby's 12 s session lease and a master lease of
// a few seconds.
const (
	// DefaultHandshakeTimeout bounds a QUIC+TLS handshake. quic-go aborts a
	// handshake after this long without a packet, or twice this long in all.
	DefaultHandshakeTimeout = 3 * time.Second
	// DefaultPeerIdleTimeout is how long a silent peer connection lives. Peer
	// connections send keep-alives every third of it, so only a dead or cut
	// peer reaches it; 6 s lets a replica notice within one master lease
	// renewal period and redial.
	DefaultPeerIdleTimeout = 6 * time.Second
	// DefaultClientIdleTimeout is how long a silent client connection lives.
	// Both ends send keep-alives every third of it, so it only fires for a
	// dead or cut connection; 8 s is shorter than the 12 s session lease, so a
	// client learns its connection died while its lease still runs and can
	// redial another replica.
	DefaultClientIdleTimeout = 8 * time.Second
	// DefaultPeerQueueLen is the per-peer send queue length.
	DefaultPeerQueueLen = 4096
	// DefaultPeerQueueBytes bounds the bytes queued per peer: 128 MiB, two
	// snapshots of the largest size.
	DefaultPeerQueueBytes = 128 << 20
	// DefaultRecvQueueLen is the buffer of the Recv channel.
	DefaultRecvQueueLen = 1024
	// DefaultMaxStreamsPerClient is the number of concurrent streams a client
	// connection may have open; further OpenStream calls wait (and fail
	// with ErrStreamLimit if their context ends first). A stream is one
	// call in flight (a blocking Acquire parks one); the client library
	// sends the KeepAlives of all the sessions on a connection on one
	// stream, so this bounds concurrent calls, not sessions.
	DefaultMaxStreamsPerClient = 256
	// DefaultMaxConnsPerIP is the number of connections (handshaking or
	// open) one source IP may hold. Replicas, known by address, are exempt.
	// It is sized for a host that runs hundreds of client processes behind
	// one address (NAT, a Kubernetes node), each with one connection to the
	// master and brief ones to the other replicas while it looks for it;
	// with DefaultMaxStreamsPerClient it still bounds what one address can
	// park at a replica (1024 × 256 streams).
	DefaultMaxConnsPerIP = 1024
	// overLimitSlack is how many connections over MaxConnsPerIP one IP may
	// have in their handshake at once: each is completed only to be closed
	// with ConnCodeTooManyConns, so its client learns which limit it hit.
	// Beyond that, further attempts are refused before the handshake
	// (CONNECTION_REFUSED), so the cost of a flood stays bounded.
	overLimitSlack = 16
	// DefaultReconnectMin and DefaultReconnectMax bound the jittered
	// exponential backoff between dials to a peer.
	DefaultReconnectMin = 50 * time.Millisecond
	// DefaultReconnectMax is the longest pause between dials to a peer.
	DefaultReconnectMax = 2 * time.Second
	// maxBatchBytes caps the bytes one peer write gathers from the queue.
	maxBatchBytes = 256 << 10
	// DefaultTicketKeyRotation is how often an Endpoint replaces the key
	// that encrypts the TLS session tickets it gives clients; a ticket is
	// honoured until the rotation after next, so for at most twice this.
	DefaultTicketKeyRotation = time.Hour
)

// ErrInvalidConfig reports a Config or DialConfig that cannot work.
var ErrInvalidConfig = errors.New("transport: invalid config")

// Config configures an Endpoint, one per replica. Zero values of the
// optional fields select the documented defaults.
type Config struct {
	// ID is this replica's id, ≥ 1. Its certificate must name it (see
	// package certs: lockcell://replica/<ID>).
	ID uint64
	// Addr is the UDP address to listen on, "host:port". Ignored when
	// PacketConn is set.
	Addr string
	// PacketConn, if set, is used instead of listening on Addr, so tests can
	// plug in an in-process network (see transport/memnet). Listen takes
	// ownership: it is closed by Close, or by Listen if it fails.
	PacketConn net.PacketConn
	// Peers maps each other replica's id to its address. An entry for ID is
	// ignored. The set is fixed for the Endpoint's life.
	Peers map[uint64]string
	// CA is the pool of the cell CA. Peer certificates, and the certificates
	// of the replicas this endpoint dials, must chain to it. Required.
	CA *x509.CertPool
	// ClientCA is the pool client certificates must chain to. If nil, CA.
	ClientCA *x509.CertPool
	// Certificate is this replica's certificate and key, issued by the cell
	// CA and naming ID. It serves clients and peers, and authenticates this
	// replica when it dials peers. Required.
	Certificate tls.Certificate
	// MaxPeerFrame is the largest peer frame body accepted or sent. If zero,
	// DefaultMaxPeerFrame (64 MiB).
	MaxPeerFrame int
	// MaxClientFrame is the largest client frame body accepted. If zero,
	// DefaultMaxClientFrame (1 MiB).
	MaxClientFrame int
	// PeerQueueLen is the length of each per-peer send queue; when it is full
	// Send drops the oldest message. If zero, DefaultPeerQueueLen.
	PeerQueueLen int
	// PeerQueueBytes bounds the bytes queued for each peer; past it Send
	// drops the oldest messages too. If zero, the larger of
	// DefaultPeerQueueBytes and MaxPeerFrame+HeaderLen; it may not be
	// smaller than that sum.
	PeerQueueBytes int
	// RecvQueueLen is the buffer of the channel Recv returns. If zero,
	// DefaultRecvQueueLen.
	RecvQueueLen int
	// MaxStreamsPerClient limits concurrent streams per client connection:
	// a client's further streams wait for one to end. If zero,
	// DefaultMaxStreamsPerClient (256).
	MaxStreamsPerClient int
	// MaxConnsPerIP limits connections per source IP, replicas exempt. A
	// connection over the limit is closed right after its handshake with
	// ConnCodeTooManyConns (its client sees ErrTooManyConns); a flood
	// beyond that is refused before the handshake. If zero,
	// DefaultMaxConnsPerIP (1024); if negative, unlimited.
	MaxConnsPerIP int
	// HandshakeTimeout bounds handshakes. If zero, DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// TicketKeyRotation is how often the key that encrypts the TLS session
	// tickets given to clients is replaced (see tls.go: tickets let a
	// client's next connection skip the certificates' signatures). A ticket
	// is honoured for at most twice this. If zero,
	// DefaultTicketKeyRotation (1 h); if negative, clients get no tickets
	// and every client handshake is a full one. Peer connections never use
	// tickets.
	TicketKeyRotation time.Duration
	// PeerIdleTimeout is the idle timeout of peer connections. If zero,
	// DefaultPeerIdleTimeout.
	PeerIdleTimeout time.Duration
	// ClientIdleTimeout is the idle timeout of client connections. If zero,
	// DefaultClientIdleTimeout.
	ClientIdleTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the jittered backoff between
	// dials to a peer. If zero, DefaultReconnectMin and DefaultReconnectMax.
	ReconnectMin, ReconnectMax time.Duration
	// ClientHandler serves client streams: it is called on its own goroutine
	// for every stream a client opens, with a context cancelled when the
	// client resets the stream or the stream's connection or the Endpoint
	// closes. When it returns, the stream is closed. If nil, client
	// connections are refused.
	ClientHandler func(ctx context.Context, s *ServerStream)
	// Faults, if set, injects faults for tests (see Faults). Several
	// Endpoints may share one.
	Faults *Faults
	// Logger receives connection events. If nil, slog.Default().
	Logger *slog.Logger
}

// populate returns a copy of c with defaults filled in, or an error wrapping
// ErrInvalidConfig.
func (c Config) populate() (Config, error) {
	if c.ID == 0 {
		return c, fmt.Errorf("%w: ID must be ≥ 1", ErrInvalidConfig)
	}
	if c.CA == nil {
		return c, fmt.Errorf("%w: CA is required", ErrInvalidConfig)
	}
	if len(c.Certificate.Certificate) == 0 || c.Certificate.PrivateKey == nil {
		return c, fmt.Errorf("%w: Certificate is required", ErrInvalidConfig)
	}
	if c.PacketConn == nil && c.Addr == "" {
		return c, fmt.Errorf("%w: Addr or PacketConn is required", ErrInvalidConfig)
	}
	if c.ClientCA == nil {
		c.ClientCA = c.CA
	}
	for id, addr := range c.Peers {
		if id == 0 {
			return c, fmt.Errorf("%w: peer id 0", ErrInvalidConfig)
		}
		if addr == "" && id != c.ID {
			return c, fmt.Errorf("%w: peer %d has no address", ErrInvalidConfig, id)
		}
	}
	var err error
	if c.MaxPeerFrame, err = frameLimit("MaxPeerFrame", c.MaxPeerFrame, DefaultMaxPeerFrame); err != nil {
		return c, err
	}
	if c.MaxClientFrame, err = frameLimit("MaxClientFrame", c.MaxClientFrame, DefaultMaxClientFrame); err != nil {
		return c, err
	}
	ints := []struct {
		name string
		p    *int
		def  int
	}{
		{"PeerQueueLen", &c.PeerQueueLen, DefaultPeerQueueLen},
		{"RecvQueueLen", &c.RecvQueueLen, DefaultRecvQueueLen},
		{"MaxStreamsPerClient", &c.MaxStreamsPerClient, DefaultMaxStreamsPerClient},
	}
	for _, f := range ints {
		switch {
		case *f.p == 0:
			*f.p = f.def
		case *f.p < 0:
			return c, fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	switch minBytes := c.MaxPeerFrame + HeaderLen; {
	case c.PeerQueueBytes == 0:
		c.PeerQueueBytes = max(DefaultPeerQueueBytes, minBytes)
	case c.PeerQueueBytes < minBytes:
		return c, fmt.Errorf("%w: PeerQueueBytes %d below MaxPeerFrame+HeaderLen %d", ErrInvalidConfig, c.PeerQueueBytes, minBytes)
	}
	if c.MaxConnsPerIP == 0 {
		c.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	durs := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"HandshakeTimeout", &c.HandshakeTimeout, DefaultHandshakeTimeout},
		{"PeerIdleTimeout", &c.PeerIdleTimeout, DefaultPeerIdleTimeout},
		{"ClientIdleTimeout", &c.ClientIdleTimeout, DefaultClientIdleTimeout},
		{"ReconnectMin", &c.ReconnectMin, DefaultReconnectMin},
		{"ReconnectMax", &c.ReconnectMax, DefaultReconnectMax},
	}
	for _, f := range durs {
		switch {
		case *f.p == 0:
			*f.p = f.def
		case *f.p < 0:
			return c, fmt.Errorf("%w: %s is negative", ErrInvalidConfig, f.name)
		}
	}
	if c.ReconnectMax < c.ReconnectMin {
		return c, fmt.Errorf("%w: ReconnectMax %v is below ReconnectMin %v", ErrInvalidConfig, c.ReconnectMax, c.ReconnectMin)
	}
	if c.TicketKeyRotation == 0 {
		c.TicketKeyRotation = DefaultTicketKeyRotation
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

func frameLimit(name string, v, def int) (int, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 0 || v > MaxFrameLimit:
		return 0, fmt.Errorf("%w: %s %d outside 1..%d", ErrInvalidConfig, name, v, MaxFrameLimit)
	default:
		return v, nil
	}
}

// DialConfig configures a client connection made by Dial.
type DialConfig struct {
	// Addrs are replica addresses ("host:port"), tried in order starting at
	// Start (modulo len(Addrs)) until one handshake succeeds. Required.
	Addrs []string
	// Start is the index of the first address to try, so a caller can
	// rotate through the cell on successive dials.
	Start int
	// CA is the pool of the cell CA; the replica's certificate must chain
	// to it and name a replica. Required.
	CA *x509.CertPool
	// Certificate, if set, is presented to the cell; its identity (see
	// package certs) becomes the client's principal.
	Certificate *tls.Certificate
	// MaxFrame is the largest response frame body accepted. If zero,
	// DefaultMaxClientFrame.
	MaxFrame int
	// HandshakeTimeout bounds each handshake. If zero,
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout is the connection's idle timeout; keep-alives go out every
	// third of it. If zero, DefaultClientIdleTimeout.
	IdleTimeout time.Duration
	// LocalAddr, if set, is the local address the new UDP socket binds:
	// an IP ("127.0.0.2") or "ip:port" (port 0 or none: any free port).
	// One machine can so stand in for many hosts (127.0.0.2, 127.0.0.3, …
	// are all loopback on Linux). Ignored when PacketConn is set.
	LocalAddr string
	// SessionCache, if set, keeps a TLS session ticket of each replica this
	// client reached, so that its next Dial to the same address with the
	// same Certificate resumes the session (ClientConn.Resumed): neither
	// side signs or sends a certificate again, though both re-verify the
	// ones the session carries (see tls.go). Entries are keyed by address
	// and certificate, never shared between them; use one cache per CA.
	// If nil, every handshake is a full one.
	SessionCache tls.ClientSessionCache
	// PacketConn, if set, carries the connection instead of a new UDP
	// socket (for tests with an in-process network). Dial takes ownership:
	// it is closed when Dial fails or the ClientConn closes, so use a fresh
	// one per Dial.
	PacketConn net.PacketConn
	// Logger receives connection events. If nil, slog.Default().
	Logger *slog.Logger
}

func (c DialConfig) populate() (DialConfig, error) {
	if len(c.Addrs) == 0 {
		return c, fmt.Errorf("%w: no addresses to dial", ErrInvalidConfig)
	}
	if c.CA == nil {
		return c, fmt.Errorf("%w: CA is required", ErrInvalidConfig)
	}
	if c.Start < 0 {
		return c, fmt.Errorf("%w: Start is negative", ErrInvalidConfig)
	}
	var err error
	if c.MaxFrame, err = frameLimit("MaxFrame", c.MaxFrame, DefaultMaxClientFrame); err != nil {
		return c, err
	}
	if c.HandshakeTimeout < 0 || c.IdleTimeout < 0 {
		return c, fmt.Errorf("%w: negative timeout", ErrInvalidConfig)
	}
	if c.LocalAddr != "" {
		la, err := localAddr(c.LocalAddr)
		if err != nil {
			return c, fmt.Errorf("%w: LocalAddr: %w", ErrInvalidConfig, err)
		}
		c.LocalAddr = la
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultClientIdleTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c, nil
}

// localAddr turns an IP or "ip:port" into the "ip:port" to bind.
func localAddr(a string) (string, error) {
	if ip, err := netip.ParseAddr(a); err == nil {
		return netip.AddrPortFrom(ip, 0).String(), nil
	}
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return "", fmt.Errorf("%q is neither an IP nor ip:port", a)
	}
	return ap.String(), nil
}
