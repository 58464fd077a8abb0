// Package certs creates and reads the certificates of a lockcell cell: one
// cell certificate authority (CA), a certificate per replica, and optional
// client certificates. It uses the standard library only, so the daemon's dev
// mode, the operator CLI and tests can all generate a cell's credentials.
//
// # Identities
//
// An identity lives in a URI subject alternative name (SAN), never in the
// common name (which is set for people reading the certificate, and ignored
// by code):
//
//   - a replica certificate names its replica id as lockcell://replica/<id>
//     (decimal, no leading zeros, id ≥ 1); it carries both the server-auth
//     and client-auth extended key usages because replicas dial each other;
//   - a client certificate names its tenant and principal as
//     lockcell://tenant/<tenant>/principal/<principal>; it carries only the
//     client-auth usage.
//
// A certificate naming more than one lockcell identity is rejected as
// ambiguous. Tenant and principal names are 1 to 128 bytes of
// [A-Za-z0-9._@+-] and may not be "." or "..", so they need no escaping in
// a URI or a path.
//
// # Keys
//
// Keys are ECDSA P-256 (the default) or Ed25519, both accepted by TLS 1.3.
// Private keys are stored as PKCS #8 PEM ("PRIVATE KEY"); certificates as
// PEM "CERTIFICATE".
//
// # Errors
//
// Functions return [ErrInvalidName] for a bad tenant, principal or replica
// id, [ErrNoIdentity] when a certificate names no lockcell identity of the
// wanted kind, [ErrAmbiguousIdentity] when it names several, and
// [ErrBadPEM] for unreadable PEM input. Other errors come from crypto/x509.
package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidName reports a tenant, principal or replica id that cannot
	// be put in a certificate.
	ErrInvalidName = errors.New("certs: invalid identity name")
	// ErrNoIdentity reports a certificate that names no lockcell identity
	// of the wanted kind.
	ErrNoIdentity = errors.New("certs: certificate names no lockcell identity")
	// ErrAmbiguousIdentity reports a certificate naming several lockcell
	// identities.
	ErrAmbiguousIdentity = errors.New("certs: certificate names several lockcell identities")
	// ErrBadPEM reports PEM input that holds no usable block of the
	// expected type, or a key that does not match its certificate.
	ErrBadPEM = errors.New("certs: bad PEM input")
)

// URI scheme and hosts of lockcell identities.
const (
	// Scheme is the URI scheme of every lockcell identity.
	Scheme = "lockcell"
	// replicaHost and tenantHost are the URI hosts of the two kinds.
	replicaHost = "replica"
	tenantHost  = "tenant"
)

// Default validity periods.
const (
	// DefaultCAValidity is the validity of a CA when Options.Validity is zero.
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
	// DefaultLeafValidity is the validity of a replica or client certificate
	// when Options.Validity is zero.
	DefaultLeafValidity = 2 * 365 * 24 * time.Hour
	// backdate is how far before "now" a certificate becomes valid by
	// default, to tolerate clock skew between machines.
	backdate = time.Hour
)

// KeyType selects the key algorithm of a new certificate.
type KeyType int

const (
	// ECDSAP256 is ECDSA on the NIST P-256 curve, the default.
	ECDSAP256 KeyType = iota
	// Ed25519 is the Edwards-curve signature scheme.
	Ed25519
)

// Options tune a new certificate. The zero value is usable.
type Options struct {
	// KeyType is the key algorithm. If zero, ECDSA P-256.
	KeyType KeyType
	// NotBefore is the start of validity. If zero, one hour before Now.
	NotBefore time.Time
	// Now is the clock used for the default NotBefore. If nil, time.Now.
	// (Tests under testing/synctest run at a fake time in the year 2000 and
	// must issue certificates valid then; time.Now inside the bubble already
	// does that.)
	Now func() time.Time
	// Validity is the length of validity from NotBefore. If zero,
	// DefaultCAValidity for a CA and DefaultLeafValidity otherwise.
	Validity time.Duration
	// DNSNames and IPAddresses are extra SANs for a replica certificate, for
	// tools that check host names. lockcell itself checks the URI identity.
	DNSNames    []string
	IPAddresses []net.IP
}

func (o Options) window(def time.Duration) (time.Time, time.Time) {
	nb := o.NotBefore
	if nb.IsZero() {
		now := time.Now
		if o.Now != nil {
			now = o.Now
		}
		nb = now().Add(-backdate)
	}
	v := o.Validity
	if v <= 0 {
		v = def
	}
	return nb, nb.Add(v)
}

// CA is a cell certificate authority: it issues replica and client
// certificates. A CA is safe for concurrent use.
type CA struct {
	// Cert is the CA's self-signed certificate.
	Cert *x509.Certificate
	key  crypto.Signer
}

// NewCA creates a self-signed CA for the cell named cell (used in the
// certificate's subject only).
func NewCA(cell string, opts Options) (*CA, error) {
	key, err := newKey(opts.KeyType)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	nb, na := opts.window(DefaultCAValidity)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"lockcell"}, CommonName: "lockcell cell CA " + cell},
		NotBefore:             nb,
		NotAfter:              na,
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: parse new CA: %w", err)
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCA reads a CA from its PEM certificate and PKCS #8 PEM key, as written
// by CertPEM and KeyPEM. It returns ErrBadPEM if either is unreadable, the
// certificate is not a CA, or the key does not match.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("%w: certificate is not a CA", ErrBadPEM)
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, fmt.Errorf("%w: key does not match the CA certificate", ErrBadPEM)
	}
	return &CA{Cert: cert, key: key}, nil
}

// Pool returns a new pool holding only this CA, for tls.Config RootCAs and
// ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// CertPEM returns the CA certificate as PEM.
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw})
}

// KeyPEM returns the CA private key as PKCS #8 PEM. Keep it secret.
func (ca *CA) KeyPEM() ([]byte, error) {
	return keyPEM(ca.key)
}

// IssueReplica issues the certificate of replica id, naming it as
// lockcell://replica/<id>. It returns ErrInvalidName if id is zero.
func (ca *CA) IssueReplica(id uint64, opts Options) (tls.Certificate, error) {
	if id == 0 {
		return tls.Certificate{}, fmt.Errorf("%w: replica id 0", ErrInvalidName)
	}
	u := ReplicaURI(id)
	return ca.issue(opts, pkix.Name{Organization: []string{"lockcell"}, CommonName: "replica-" + strconv.FormatUint(id, 10)},
		u, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth})
}

// IssueClient issues a client certificate naming c as
// lockcell://tenant/<tenant>/principal/<principal>. It returns
// ErrInvalidName if either name is invalid. opts.DNSNames and
// opts.IPAddresses are ignored.
func (ca *CA) IssueClient(c ClientID, opts Options) (tls.Certificate, error) {
	u, err := ClientURI(c)
	if err != nil {
		return tls.Certificate{}, err
	}
	opts.DNSNames, opts.IPAddresses = nil, nil
	return ca.issue(opts, pkix.Name{Organization: []string{c.Tenant}, CommonName: c.Principal},
		u, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth})
}

func (ca *CA) issue(opts Options, subject pkix.Name, id *url.URL, usage []x509.ExtKeyUsage) (tls.Certificate, error) {
	key, err := newKey(opts.KeyType)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := newSerial()
	if err != nil {
		return tls.Certificate{}, err
	}
	nb, na := opts.window(DefaultLeafValidity)
	if na.After(ca.Cert.NotAfter) {
		na = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               subject,
		NotBefore:             nb,
		NotAfter:              na,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usage,
		URIs:                  []*url.URL{id},
		DNSNames:              opts.DNSNames,
		IPAddresses:           opts.IPAddresses,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: issue %s: %w", id, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("certs: parse new certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// ClientID is the identity a client certificate carries.
type ClientID struct {
	// Tenant is the tenant the client acts in.
	Tenant string
	// Principal is the user or service within the tenant.
	Principal string
}

// String returns "tenant/principal".
func (c ClientID) String() string { return c.Tenant + "/" + c.Principal }

// ReplicaURI returns lockcell://replica/<id>.
func ReplicaURI(id uint64) *url.URL {
	return &url.URL{Scheme: Scheme, Host: replicaHost, Path: "/" + strconv.FormatUint(id, 10)}
}

// ClientURI returns lockcell://tenant/<tenant>/principal/<principal>, or
// ErrInvalidName if a name is invalid.
func ClientURI(c ClientID) (*url.URL, error) {
	if err := ValidName(c.Tenant); err != nil {
		return nil, fmt.Errorf("tenant: %w", err)
	}
	if err := ValidName(c.Principal); err != nil {
		return nil, fmt.Errorf("principal: %w", err)
	}
	return &url.URL{Scheme: Scheme, Host: tenantHost, Path: "/" + c.Tenant + "/principal/" + c.Principal}, nil
}

// ValidName reports whether s may be a tenant or principal name: 1 to 128
// bytes of [A-Za-z0-9._@+-], not "." or "..". It returns ErrInvalidName
// otherwise.
func ValidName(s string) error {
	if len(s) == 0 || len(s) > 128 || s == "." || s == ".." {
		return fmt.Errorf("%w: %q", ErrInvalidName, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == '@', c == '+', c == '-':
		default:
			return fmt.Errorf("%w: %q", ErrInvalidName, s)
		}
	}
	return nil
}

// identity is one parsed lockcell URI.
type identity struct {
	replica uint64
	client  ClientID
}

// parseURI parses one lockcell identity URI. ok is false for URIs of other
// schemes (which a certificate may carry and lockcell ignores); err is set
// for a lockcell URI that is malformed.
func parseURI(u *url.URL) (id identity, ok bool, err error) {
	if u.Scheme != Scheme {
		return identity{}, false, nil
	}
	bad := func() (identity, bool, error) {
		return identity{}, true, fmt.Errorf("%w: malformed identity URI %q", ErrInvalidName, u.String())
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.RawPath != "" || u.ForceQuery {
		return bad()
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if !strings.HasPrefix(u.Path, "/") {
		return bad()
	}
	switch u.Host {
	case replicaHost:
		if len(parts) != 1 || parts[0] == "" || parts[0][0] == '0' || len(parts[0]) > 20 {
			return bad()
		}
		for _, c := range parts[0] {
			if c < '0' || c > '9' {
				return bad()
			}
		}
		n, perr := strconv.ParseUint(parts[0], 10, 64)
		if perr != nil || n == 0 {
			return bad()
		}
		return identity{replica: n}, true, nil
	case tenantHost:
		if len(parts) != 3 || parts[1] != "principal" || ValidName(parts[0]) != nil || ValidName(parts[2]) != nil {
			return bad()
		}
		return identity{client: ClientID{Tenant: parts[0], Principal: parts[2]}}, true, nil
	default:
		return bad()
	}
}

// certIdentity returns the single lockcell identity cert names.
func certIdentity(cert *x509.Certificate) (identity, error) {
	var found []identity
	for _, u := range cert.URIs {
		id, ok, err := parseURI(u)
		if err != nil {
			return identity{}, err
		}
		if ok {
			found = append(found, id)
		}
	}
	switch len(found) {
	case 0:
		return identity{}, ErrNoIdentity
	case 1:
		return found[0], nil
	default:
		return identity{}, ErrAmbiguousIdentity
	}
}

// ReplicaID returns the replica id a certificate names. It only reads the
// certificate: verifying its chain is the caller's job. It returns
// ErrNoIdentity if the certificate names no replica (for example a client
// certificate), ErrAmbiguousIdentity if it names several identities, and
// ErrInvalidName for a malformed lockcell URI.
func ReplicaID(cert *x509.Certificate) (uint64, error) {
	id, err := certIdentity(cert)
	if err != nil {
		return 0, err
	}
	if id.replica == 0 {
		return 0, fmt.Errorf("%w: not a replica certificate", ErrNoIdentity)
	}
	return id.replica, nil
}

// ClientIdentity returns the tenant and principal a client certificate
// names. Like ReplicaID it does not verify the chain. It returns
// ErrNoIdentity for a certificate naming no client (for example a replica
// certificate).
func ClientIdentity(cert *x509.Certificate) (ClientID, error) {
	id, err := certIdentity(cert)
	if err != nil {
		return ClientID{}, err
	}
	if id.replica != 0 {
		return ClientID{}, fmt.Errorf("%w: not a client certificate", ErrNoIdentity)
	}
	return id.client, nil
}

// EncodeKeyPair returns a certificate chain as PEM and its private key as
// PKCS #8 PEM, readable by tls.X509KeyPair.
func EncodeKeyPair(c tls.Certificate) (certPEM, keyPEMOut []byte, err error) {
	if len(c.Certificate) == 0 {
		return nil, nil, fmt.Errorf("%w: empty certificate", ErrBadPEM)
	}
	for _, der := range c.Certificate {
		certPEM = append(certPEM, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	signer, ok := c.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%w: private key is not a signer", ErrBadPEM)
	}
	k, err := keyPEM(signer)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, k, nil
}

// PoolFromPEM returns a pool of the certificates in pemCerts, or ErrBadPEM
// if it holds none.
func PoolFromPEM(pemCerts []byte) (*x509.CertPool, error) {
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(pemCerts) {
		return nil, fmt.Errorf("%w: no certificate found", ErrBadPEM)
	}
	return p, nil
}

func newKey(t KeyType) (crypto.Signer, error) {
	switch t {
	case ECDSAP256:
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("certs: generate key: %w", err)
		}
		return k, nil
	case Ed25519:
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("certs: generate key: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("certs: unknown key type %d", t)
	}
}

func newSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("certs: serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

func keyPEM(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("certs: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: no CERTIFICATE block", ErrBadPEM)
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadPEM, err)
		}
		return c, nil
	}
}

func parseKeyPEM(b []byte) (crypto.Signer, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: no PRIVATE KEY block", ErrBadPEM)
		}
		if blk.Type != "PRIVATE KEY" {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadPEM, err)
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("%w: key type %T is not a signer", ErrBadPEM, k)
		}
		switch s.(type) {
		case *ecdsa.PrivateKey, ed25519.PrivateKey:
		default:
			return nil, fmt.Errorf("%w: unsupported key type %T", ErrBadPEM, k)
		}
		return s, nil
	}
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	e, ok := a.(equaler)
	return ok && e.Equal(b)
}
