package client

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
	"github.com/lockcell/lockcell/internal/monotime"
)

// Defaults. The grace period is Chubby's (§2.8).
const (
	// DefaultGracePeriod is how long a session in jeopardy looks for a
	// master before it gives up and reports expired.
	DefaultGracePeriod = 45 * time.Second
	// DefaultDrift is the clock-rate difference the local lease allows for:
	// the client believes a lease of d lasts d×(1−DefaultDrift).
	DefaultDrift = 0.01
	// DefaultReconnectMin and DefaultReconnectMax bound the jittered
	// exponential backoff between attempts to reach the cell.
	DefaultReconnectMin = 20 * time.Millisecond
	// DefaultReconnectMax is the longest pause between attempts.
	DefaultReconnectMax = time.Second
	// DefaultEventBuffer is the capacity of Session.Events.
	DefaultEventBuffer = 256
	// DefaultDialPatience is how long Dial looks for a master before it
	// asks every replica why there is none.
	DefaultDialPatience = 3 * time.Second
)

// Config configures a Client and the sessions it opens. Addrs and CA are
// required; every other zero value selects the default its doc names.
type Config struct {
	// Addrs are the replicas' addresses ("host:port"). Required.
	Addrs []string
	// CA is the cell CA pool that replica certificates must chain to.
	// Required.
	CA *x509.CertPool
	// Certificate is the client certificate naming the tenant and principal
	// (lockcell://tenant/<t>/principal/<p>). Without it the cell refuses
	// every call. A client without a certificate may authenticate with
	// Token instead; setting both is an error.
	Certificate *tls.Certificate
	// Token is a tenant token issued by the cell administrator (lockctl
	// tenant token), for a client without a certificate. It is sent with
	// every request; the cell refuses every call once it is revoked, and
	// sessions opened with it then expire.
	Token string
	// GracePeriod is how long a session in jeopardy keeps looking for a
	// master before it reports expired. If zero, DefaultGracePeriod (45 s).
	GracePeriod time.Duration
	// Drift is the clock-rate bound in [0, 0.5) by which the local lease is
	// shortened. If zero, DefaultDrift (1%).
	Drift float64
	// ReconnectMin and ReconnectMax bound the backoff between attempts to
	// reach a master. If zero, DefaultReconnectMin and DefaultReconnectMax.
	ReconnectMin, ReconnectMax time.Duration
	// HandshakeTimeout bounds each connection handshake. If zero, the
	// transport's default (3 s).
	HandshakeTimeout time.Duration
	// IdleTimeout is the connection's idle timeout. If zero, the transport's
	// default (8 s).
	IdleTimeout time.Duration
	// DialPatience is how long Dial looks for a master before it asks
	// every replica at once why there is none; if their answers explain it
	// (ErrCertificate, ErrUnauthenticated, ErrNoMaster, ErrUnreachable),
	// Dial returns that error instead of waiting for its context to end.
	// While some replica names a master, Dial goes on. If zero,
	// DefaultDialPatience (3 s); negative means never give up early.
	DialPatience time.Duration
	// EventBuffer is the capacity of each Session's Events channel; events
	// that find it full are dropped (callbacks still see them). If zero,
	// DefaultEventBuffer.
	EventBuffer int
	// OnEvent, if set, is called for every session event, in order, on one
	// goroutine per session. It may block without harming the session (its
	// KeepAlives go on), but events queue up behind it.
	OnEvent func(*Session, Event)
	// Cache turns on the client cache of file contents (and their stat) for
	// handles of files: reads are answered locally until the master
	// invalidates them, which it does before any write to the node
	// completes (api.OpenRequest.Cache). Off by default.
	Cache bool
	// Logger receives the client's logs. If nil, slog.Default().
	Logger *slog.Logger
	// LocalAddr, if set, is the local IP (or "ip:port") every connection's
	// UDP socket binds, so that one machine can stand in for many client
	// hosts (127.0.0.2, 127.0.0.3, … in tests and benchmarks). Ignored when
	// PacketConn is set. If empty, the system chooses.
	LocalAddr string
	// PacketConn, if set, is called for every connection the client makes
	// and returns the socket to carry it, instead of a new UDP socket: tests
	// with an in-process network (transport/memnet, cell/celltest) set it.
	// The connection takes ownership of what it returns, so it must return a
	// fresh one on every call.
	PacketConn func() (net.PacketConn, error)

	// sessions keeps the TLS session tickets the replicas gave, so that
	// the next connection to a replica (a fail-over's search, the dial to
	// the new master) resumes instead of making a full handshake; counts
	// counts the connections made. Both are made by populate and shared
	// by every copy of the populated Config (one Client's).
	sessions tls.ClientSessionCache
	counts   *connCounters

	// clock is the monotonic clock of the sessions' lease accounting,
	// KeepAlive timers and grace period. It is not a user setting (a wrong
	// clock breaks mutual exclusion); only this package's tests set it. If
	// nil, the process's monotonic clock.
	clock monotime.Clock
}

func (c Config) populate() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case len(c.Addrs) == 0:
		return bad("no replica addresses")
	case c.CA == nil:
		return bad("CA is required")
	case c.GracePeriod < 0:
		return bad("GracePeriod %v is negative", c.GracePeriod)
	case c.Drift < 0 || c.Drift >= 0.5:
		return bad("Drift %v is outside [0, 0.5)", c.Drift)
	case c.ReconnectMin < 0 || c.ReconnectMax < 0 || c.HandshakeTimeout < 0 || c.IdleTimeout < 0:
		return bad("negative duration")
	case c.EventBuffer < 0:
		return bad("EventBuffer is negative")
	case c.Certificate != nil && c.Token != "":
		return bad("set either Certificate or Token, not both")
	}
	for _, a := range c.Addrs {
		if a == "" {
			return bad("empty replica address")
		}
	}
	if c.LocalAddr != "" {
		if _, err := netip.ParseAddr(c.LocalAddr); err != nil {
			if _, err := netip.ParseAddrPort(c.LocalAddr); err != nil {
				return bad("LocalAddr %q is neither an IP nor ip:port", c.LocalAddr)
			}
		}
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.Drift == 0 {
		c.Drift = DefaultDrift
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.ReconnectMax < c.ReconnectMin {
		return bad("ReconnectMax %v is below ReconnectMin %v", c.ReconnectMax, c.ReconnectMin)
	}
	if c.DialPatience == 0 {
		c.DialPatience = DefaultDialPatience
	}
	if c.EventBuffer == 0 {
		c.EventBuffer = DefaultEventBuffer
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.clock == nil {
		c.clock = monotime.Real()
	}
	if c.sessions == nil {
		// One ticket per replica address (and some to spare for
		// addresses learned from the replicas' answers).
		c.sessions = tls.NewLRUClientSessionCache(2*len(c.Addrs) + 8)
	}
	if c.counts == nil {
		c.counts = &connCounters{}
	}
	return c, nil
}

// ConfigFile is a client settings file: the JSON file that tells a client
// how to reach a cell and with which credentials (client.json, which the
// dev cell writes to data/dev/client.json; lockcelld init's admin.json and
// tenant files). Its schema is the one the cell's tools write
// (internal/clientfile, documented there): the cell's addresses, CA and
// signing key, and the user's and the administrator's credentials under
// "user" and "admin". Files of the older flat layout (no "version") load
// too. Paths are relative to the file's directory unless absolute.
type ConfigFile struct {
	clientfile.File

	dir string
}

// ReadConfigFile reads a ConfigFile, of the current layout or the older
// flat one. Relative paths in it are resolved against the file's
// directory. A file that is not a settings file gives an error wrapping
// ErrInvalidConfig that names it.
func ReadConfigFile(path string) (*ConfigFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("client: reading config file: %w", err)
	}
	f, err := clientfile.Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, path, err)
	}
	return &ConfigFile{File: f, dir: filepath.Dir(path)}, nil
}

func (f *ConfigFile) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(f.dir, p)
}

// Config returns a Config with the file's addresses, CA and certificate:
// the administrator's if admin is set, else the user's (or, if the file
// names none, the administrator's).
func (f *ConfigFile) Config(admin bool) (Config, error) {
	caPEM, err := os.ReadFile(f.path(f.CA))
	if err != nil {
		return Config{}, fmt.Errorf("client: reading CA: %w", err)
	}
	pool, err := certs.PoolFromPEM(caPEM)
	if err != nil {
		return Config{}, fmt.Errorf("%w: CA %s: %w", ErrInvalidConfig, f.path(f.CA), err)
	}
	certFile, keyFile := f.User.Cert, f.User.Key
	cfg := Config{Addrs: append([]string(nil), f.Addrs...), CA: pool}
	if !admin && certFile == "" && f.User.TokenFile != "" {
		b, err := os.ReadFile(f.path(f.User.TokenFile))
		if err != nil {
			return Config{}, fmt.Errorf("client: reading token file: %w", err)
		}
		cfg.Token = strings.TrimSpace(string(b))
		return cfg, nil
	}
	if admin || certFile == "" {
		certFile, keyFile = f.Admin.Cert, f.Admin.Key
	}
	if certFile != "" {
		c, err := tls.LoadX509KeyPair(f.path(certFile), f.path(keyFile))
		if err != nil {
			return Config{}, fmt.Errorf("client: loading certificate %s: %w", f.path(certFile), err)
		}
		cfg.Certificate = &c
	}
	return cfg, nil
}

// PublicKeyPath is the file holding the cell's sequencer-signing public
// key, as the settings file names it but relative to the working directory
// (a relative name in the file is relative to the file's own directory);
// empty if the file names none.
func (f *ConfigFile) PublicKeyPath() string { return f.path(f.PublicKey) }

// SigningKey returns the cell's sequencer-signing public key named by the
// file.
func (f *ConfigFile) SigningKey() (ed25519.PublicKey, error) {
	if f.PublicKey == "" {
		return nil, fmt.Errorf("%w: the config file names no public_key", ErrInvalidConfig)
	}
	b, err := os.ReadFile(f.path(f.PublicKey))
	if err != nil {
		return nil, fmt.Errorf("client: reading public key: %w", err)
	}
	return ParsePublicKeyPEM(b)
}

// ParsePublicKeyPEM parses the cell's Ed25519 public key from PEM (PKIX).
func ParsePublicKeyPEM(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%w: public key is not PEM", ErrInvalidConfig)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: public key: %w", ErrInvalidConfig, err)
	}
	ek, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: public key is not Ed25519", ErrInvalidConfig)
	}
	return ek, nil
}

// LoadConfigFile reads a ConfigFile and returns the user's Config.
func LoadConfigFile(path string) (Config, error) {
	f, err := ReadConfigFile(path)
	if err != nil {
		return Config{}, err
	}
	return f.Config(false)
}
