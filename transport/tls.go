package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"

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
// Only TLS 1.3 is offered. Session tickets are off, so there is no
// resumption and no 0-RTT: every handshake presents and checks certificates.

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
	return &tls.Config{
		MinVersion:             tls.VersionTLS13,
		Certificates:           []tls.Certificate{e.cfg.Certificate},
		SessionTicketsDisabled: true,
		NextProtos:             []string{ALPNClient},
		ClientAuth:             tls.RequestClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := verifyClient(e.cfg.ClientCA, cs.PeerCertificates)
			if err != nil {
				e.refuse(remote, err)
			}
			return err
		},
	}
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

// clientDialTLS is the config a client dials with; *server receives the id
// of the replica reached.
func clientDialTLS(cfg DialConfig, server *uint64) *tls.Config {
	c := &tls.Config{
		MinVersion:             tls.VersionTLS13,
		SessionTicketsDisabled: true,
		NextProtos:             []string{ALPNClient},
		ServerName:             "lockcell",
		InsecureSkipVerify:     true, // NB: verified in VerifyConnection, see above
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := verifyReplica(cfg.CA, cs.PeerCertificates, x509.ExtKeyUsageServerAuth, 0)
			*server = id
			return err
		},
	}
	if cfg.Certificate != nil {
		c.Certificates = []tls.Certificate{*cfg.Certificate}
	}
	return c
}

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
