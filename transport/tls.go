package transport

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
)

// Who may connect, and how it is checked. We verify chains ourselves in
// VerifyConnection instead of letting crypto/tls do it (RequireAnyClientCert
// and RequestClientCert, InsecureSkipVerify on the dialing side), so that
// every refusal passes through one place that counts and logs it, and so the
// identity checks sit next to the chain check:
//
//   - ALPNPeer, server side: a certificate is required; it must chain to the
//     cell CA with the client-auth usage and name, as
//     lockcell://replica/<id>, a replica in the peer set (Config.Peers,
//     or the accepted peers of the latest SetPeers) other than ourselves. A client certificate names no replica and is refused.
//   - ALPNPeer, dialing side: the server's certificate must chain to the CA
//     with the server-auth usage and name exactly the replica we meant to
//     dial.
//   - ALPNClient, server side: a certificate is optional; if given it must
//     chain to the client CA with the client-auth usage and name a tenant
//     and principal, which become the stream's Identity.
//   - ALPNClient, dialing side: the server's certificate must chain to the
//     CA with the server-auth usage and name some replica. Host names are
//     not checked: the cell CA is private, and every certificate it issues
//     to a replica is a member of the cell.
//
// Only TLS 1.3 is offered, and never 0-RTT (early data can be replayed).
//
// Session resumption, client connections only. A fail-over sends every
// client to the replicas at once, and each full handshake costs both sides
// certificate signatures and chain checks, on the machines that are busy
// taking over. So a replica gives each client connection one session ticket
// (Config.TicketKeyRotation), and a client that keeps them
// (DialConfig.SessionCache) resumes its next connection to that replica
// with a PSK and a fresh ECDHE exchange (psk_dhe_ke only: forward secrecy
// holds if a ticket key leaks later). What keeps a resumed connection as
// trustworthy as a full one:
//
//   - Identity is re-verified, never taken on trust from the ticket.
//     crypto/tls calls VerifyConnection on resumed handshakes too (Go's
//     documentation of Config.VerifyConnection: "This callback will run
//     for all connections, including resumptions"; in Go 1.26 see
//     serverHandshakeStateTLS13.readClientCertificate and
//     clientHandshakeStateTLS13.readServerCertificate, which call it when
//     usingPSK), with PeerCertificates restored from the session. Ours
//     runs the same chain check as on a full handshake, against the pool
//     and the time of now: the tenant and principal (server side) and the
//     replica id (client side) come out of the same verified certificate,
//     and a certificate that expired, or that the pool no longer vouches
//     for, ends the handshake. crypto/tls itself also declines (falling
//     back to a full handshake) a ticket whose client certificate has
//     expired, and a client drops a cached session whose server
//     certificate has.
//   - Only the replica that issued a ticket can resume it: the ticket
//     keys are random, made by each Endpoint in process memory, never
//     written to disk or shared with other replicas; a restarted replica
//     has new keys, so its clients' next handshakes are full ones. Keys
//     rotate every TicketKeyRotation and a ticket is honoured until the
//     rotation after next, so no ticket outlives two rotations (each
//     resumption issues a new ticket, and each re-verifies the original
//     certificates as above).
//   - A client's cache is keyed by the replica's address and its own
//     certificate, so a client that changes certificate makes a full
//     handshake and presents the new one: resuming would carry the old
//     identity over. A client without a certificate resumes anonymously
//     as it connected.
//   - Peer connections (ALPNPeer) keep tickets off on both sides: a
//     handful of long-lived connections gain nothing, and a replica's
//     peer credentials stay checked in full on every dial.

// ErrBadCertificate reports a certificate refused during a handshake: not
// signed by the cell CA, of the wrong kind, or naming the wrong replica.
var ErrBadCertificate = errors.New("transport: certificate refused")

// verifyChain checks that chain[0] chains to pool for usage and returns it.
func verifyChain(pool *x509.CertPool, chain []*x509.Certificate, usage x509.ExtKeyUsage) (*x509.Certificate, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no certificate presented", ErrBadCertificate)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		// NB: %w, so that callers can name the certificate from the
		// x509 error (x509.UnknownAuthorityError.Cert).
		return nil, fmt.Errorf("%w: %w", ErrBadCertificate, err)
	}
	return chain[0], nil
}

// verifyReplica checks a replica certificate chain and returns the id it
// names; want, if nonzero, is the only id accepted.
func verifyReplica(pool *x509.CertPool, chain []*x509.Certificate, usage x509.ExtKeyUsage, want uint64) (uint64, error) {
	leaf, err := verifyChain(pool, chain, usage)
	if err != nil {
		return 0, err
	}
	id, err := certs.ReplicaID(leaf)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	if want != 0 && id != want {
		return 0, fmt.Errorf("%w: certificate names replica %d, want replica %d", ErrBadCertificate, id, want)
	}
	return id, nil
}

// Identity is what a client's certificate proved about it.
type Identity struct {
	// Tenant and Principal come from a verified client certificate
	// (lockcell://tenant/<tenant>/principal/<principal>); both are empty for
	// a client that presented none.
	Tenant, Principal string
}

// Anonymous reports whether the client presented no certificate.
func (id Identity) Anonymous() bool { return id.Tenant == "" && id.Principal == "" }

// String returns "tenant/principal", or "anonymous".
func (id Identity) String() string {
	if id.Anonymous() {
		return "anonymous"
	}
	return id.Tenant + "/" + id.Principal
}

// verifyClient checks an optional client certificate chain.
func verifyClient(pool *x509.CertPool, chain []*x509.Certificate) (Identity, error) {
	if len(chain) == 0 {
		return Identity{}, nil
	}
	leaf, err := verifyChain(pool, chain, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return Identity{}, err
	}
	c, err := certs.ClientIdentity(leaf)
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrBadCertificate, err)
	}
	return Identity{Tenant: c.Tenant, Principal: c.Principal}, nil
}

// serverTLS returns the listener's TLS config, which picks per-ALPN rules
// for each handshake.
func (e *Endpoint) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{e.cfg.Certificate},
		SessionTicketsDisabled: true,
		NextProtos:             []string{ALPNPeer, ALPNClient},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			var remote net.Addr
			if hello.Conn != nil {
				remote = hello.Conn.RemoteAddr()
			}
			switch {
			case slices.Contains(hello.SupportedProtos, ALPNPeer):
				return e.peerServerTLS(remote), nil
			case slices.Contains(hello.SupportedProtos, ALPNClient) && e.cfg.ClientHandler != nil:
				return e.clientServerTLS(remote), nil
			default:
				e.refuse(remote, fmt.Errorf("no acceptable ALPN in %q", hello.SupportedProtos))
				return nil, fmt.Errorf("transport: no acceptable application protocol")
			}
		},
	}
}

func (e *Endpoint) peerServerTLS(remote net.Addr) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{e.cfg.Certificate},
		SessionTicketsDisabled: true,
		NextProtos:             []string{ALPNPeer},
		// NB: RequestClientCert, not RequireAnyClientCert: a missing
		// certificate must reach VerifyConnection to be counted.
		ClientAuth: tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyReplica(e.cfg.CA, cs.PeerCertificates, x509.ExtKeyUsageClientAuth, 0)
			if err == nil {
				if !e.set.Load().accept[id] || id == e.cfg.ID {
					e.stats.refusedNotPeer.Add(1)
					err = fmt.Errorf("%w: replica %d is not a peer of replica %d", ErrBadCertificate, id, e.cfg.ID)
				}
			}
			if err != nil {
				e.refuse(remote, err)
			}
			return err
		},
	}
}

func (e *Endpoint) clientServerTLS(remote net.Addr) *tls.Config {
	c := e.tickets.config()
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		_, err := verifyClient(e.cfg.ClientCA, cs.PeerCertificates)
		if err != nil {
			e.refuse(remote, err)
		}
		return err
	}
	return c
}

// ticketKeys is an Endpoint's client-facing TLS config template and the
// session ticket keys set on it: the current key encrypts new tickets, it
// and the previous one decrypt. They live in this process's memory only.
//
// Keys rotate lazily, at the first handshake after a rotation is due (a
// replica without clients rotates nothing), and a key is dropped once it is
// twice the rotation old, whenever the next handshake comes: so a ticket,
// which is encrypted with the key current at its issue, never resumes a
// connection more than twice the rotation after it was issued.
type ticketKeys struct {
	rotation time.Duration // ≤ 0: tickets off
	log      *slog.Logger
	mu       struct {
		sync.Mutex
		tmpl *tls.Config
		// cur and prev are the keys, each with when it was made; prev is
		// zero once dropped.
		cur, prev ticketKey
	}
}

type ticketKey struct {
	key  [32]byte
	made time.Time
}

func newTicketKeys(cert tls.Certificate, rotation time.Duration, log *slog.Logger) (*ticketKeys, error) {
	k := &ticketKeys{rotation: rotation, log: log}
	k.mu.tmpl = &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{cert},
		SessionTicketsDisabled: rotation <= 0,
		NextProtos:             []string{ALPNClient},
		// NB: RequestClientCert, as for peers: the certificate is
		// checked in VerifyConnection (clientServerTLS).
		ClientAuth: tls.RequestClientCert,
	}
	if rotation > 0 {
		if err := k.rotateLocked(time.Now()); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// rotateLocked makes a new current key; the current one becomes the
// previous, and the previous is forgotten (its tickets no longer resume).
// REQUIRES: k.mu held.
func (k *ticketKeys) rotateLocked(now time.Time) error {
	next := ticketKey{made: now}
	if _, err := rand.Read(next.key[:]); err != nil {
		return fmt.Errorf("transport: session ticket key: %w", err)
	}
	k.mu.prev, k.mu.cur = k.mu.cur, next
	k.setKeysLocked()
	return nil
}

// setKeysLocked puts the keys in force on a new template.
// REQUIRES: k.mu held.
func (k *ticketKeys) setKeysLocked() {
	keys := [][32]byte{k.mu.cur.key}
	if !k.mu.prev.made.IsZero() {
		keys = append(keys, k.mu.prev.key)
	}
	tmpl := k.mu.tmpl.Clone()
	tmpl.SetSessionTicketKeys(keys)
	// NB: a SessionTicketKey of our own keeps crypto/tls from drawing a
	// random legacy one into every config cloned from this (it is not
	// used once SetSessionTicketKeys has set the keys).
	tmpl.SessionTicketKey = k.mu.cur.key
	k.mu.tmpl = tmpl
}

// config returns a copy of the template for one handshake, rotating the
// keys first if a rotation is due, and dropping the previous key once it
// is twice the rotation old.
func (k *ticketKeys) config() *tls.Config {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.rotation <= 0 {
		return k.mu.tmpl.Clone()
	}
	now := time.Now()
	if now.Sub(k.mu.cur.made) >= k.rotation {
		if err := k.rotateLocked(now); err != nil {
			// The old keys stay in force; the next handshake tries again.
			k.log.Warn("transport: cannot rotate the session ticket key", "err", err)
		}
	}
	if p := k.mu.prev.made; !p.IsZero() && now.Sub(p) >= 2*k.rotation {
		k.mu.prev = ticketKey{}
		k.setKeysLocked()
	}
	return k.mu.tmpl.Clone()
}

// peerDialTLS is the config for dialing replica id.
func (e *Endpoint) peerDialTLS(id uint64) *tls.Config {
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{e.cfg.Certificate},
		SessionTicketsDisabled: true,
		NextProtos:             []string{ALPNPeer},
		ServerName:             "replica-" + strconv.FormatUint(id, 10),
		InsecureSkipVerify:     true, // NB: verified in VerifyConnection, see above
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyReplica(e.cfg.CA, cs.PeerCertificates, x509.ExtKeyUsageServerAuth, id)
			if err != nil {
				e.refuse(nil, fmt.Errorf("dialing replica %d: %w", id, err))
			}
			return err
		},
	}
}

// clientDialTLS is the config a client dials addr with; *server receives
// the id of the replica reached.
func clientDialTLS(cfg DialConfig, addr string, server *uint64) *tls.Config {
	c := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: cfg.SessionCache == nil,
		NextProtos:             []string{ALPNClient},
		ServerName:             "lockcell",
		InsecureSkipVerify:     true, // NB: verified in VerifyConnection, see above
		VerifyConnection: func(cs tls.ConnectionState) error {
			// NB: on a resumed connection too: cs.PeerCertificates are
			// the ones the session was made with, checked again here.
			id, err := verifyReplica(cfg.CA, cs.PeerCertificates, x509.ExtKeyUsageServerAuth, 0)
			*server = id
			return err
		},
	}
	if cfg.SessionCache != nil {
		c.ClientSessionCache = sessionCacheFor(cfg.SessionCache, addr, cfg.Certificate)
	}
	if cfg.Certificate != nil {
		c.Certificates = []tls.Certificate{*cfg.Certificate}
	}
	return c
}

// keyedSessionCache files the sessions of one replica address and one
// client certificate under a key of their own in a shared cache. (crypto/tls
// would key them by ServerName alone, which is the same for every replica.)
type keyedSessionCache struct {
	inner tls.ClientSessionCache
	key   string
}

func sessionCacheFor(inner tls.ClientSessionCache, addr string, cert *tls.Certificate) keyedSessionCache {
	who := "anonymous"
	if cert != nil && len(cert.Certificate) > 0 {
		sum := sha256.Sum256(cert.Certificate[0])
		who = hex.EncodeToString(sum[:])
	}
	return keyedSessionCache{inner: inner, key: "lockcell " + addr + " " + who}
}

// SessionCached reports whether cache holds a session of the replica at
// addr for a client with cert (nil: none), so that a Dial to addr with
// that cache and certificate would offer to resume it.
func SessionCached(cache tls.ClientSessionCache, addr string, cert *tls.Certificate) bool {
	if cache == nil {
		return false
	}
	cs, ok := sessionCacheFor(cache, addr, cert).Get("")
	return ok && cs != nil
}

// Get returns the session of this cache's address and certificate; the
// key crypto/tls asks for is ignored.
func (k keyedSessionCache) Get(string) (*tls.ClientSessionState, bool) { return k.inner.Get(k.key) }

// Put stores (nil: deletes) the session of this cache's address and
// certificate.
func (k keyedSessionCache) Put(_ string, cs *tls.ClientSessionState) { k.inner.Put(k.key, cs) }

// identityOf returns the identity a finished handshake proved.
func identityOf(cs tls.ConnectionState) Identity {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}
	}
	c, err := certs.ClientIdentity(cs.PeerCertificates[0])
	if err != nil {
		return Identity{}
	}
	return Identity{Tenant: c.Tenant, Principal: c.Principal}
}

// peerIDOf returns the replica id a finished peer handshake proved.
func peerIDOf(cs tls.ConnectionState) (uint64, bool) {
	if len(cs.PeerCertificates) == 0 {
		return 0, false
	}
	id, err := certs.ReplicaID(cs.PeerCertificates[0])
	return id, err == nil
}
