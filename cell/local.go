package cell

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
)

// AdminTenant is the tenant name that client certificates of cell
// administrators carry: a certificate for AdminTenant/P acts as the
// tenant-less principal P, and P = Config.AdminPrincipal administers the
// cell. No tenant may take this name.
const AdminTenant = "_cell"

// LocalConfig describes a cell whose replicas all run in this process on
// loopback: the dev cell of `lockcelld dev` and the cell of tests.
type LocalConfig struct {
	// Dir holds everything: certs/, one data directory per replica
	// (r1, r2, ...), and client.json. Reusing a Dir restarts the same cell
	// with its data and certificates. Required.
	Dir string
	// Replicas is the number of replicas. If zero, 5.
	Replicas int
	// Cell names the cell. If empty, "dev".
	Cell string
	// Host is the loopback address replicas listen on. If empty, 127.0.0.1.
	Host string
	// BasePort, if not zero, puts replica i on BasePort+i-1 and its HTTP
	// listener on BasePort+100+i-1; if zero, ports are chosen by the system
	// (tests) and there are no HTTP listeners unless HTTP is set.
	BasePort int
	// HTTP gives every replica an HTTP listener on an ephemeral port when
	// BasePort is zero.
	HTTP bool
	// DevTenant, if not empty, is a tenant created on first start, with a
	// client certificate for principal DevPrincipal written to client.json.
	DevTenant string
	// DevPrincipal is the dev tenant's principal. If empty, "dev".
	DevPrincipal string
	// Tune, if set, adjusts each replica's Config before it starts (timings,
	// faults, logger).
	Tune func(*Config)
	// Logger receives the replicas' logs. If nil, slog.Default().
	Logger *slog.Logger
}

// LocalCell is a running local cell.
type LocalCell struct {
	cfg     LocalConfig
	CA      *certs.CA
	signing ed25519.PrivateKey
	addrs   map[uint64]string

	mu       sync.Mutex
	replicas map[uint64]*Replica
}

// StartLocal starts (or restarts) a local cell and waits until it has a
// master. On first start it generates the cell CA, replica certificates,
// the sequencer-signing key, an administrator certificate and, with
// DevTenant, the dev tenant and its certificate, and marks every replica's
// data directory as a new member's (InitDataDir). On a restart, a replica
// whose data directory was wiped rebuilds from the others.
func StartLocal(ctx context.Context, cfg LocalConfig) (*LocalCell, error) {
	if cfg.Dir == "" {
		return nil, fmt.Errorf("%w: LocalConfig.Dir is required", ErrInvalidConfig)
	}
	if cfg.Replicas == 0 {
		cfg.Replicas = 5
	}
	if cfg.Cell == "" {
		cfg.Cell = "dev"
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.DevPrincipal == "" {
		cfg.DevPrincipal = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	lc := &LocalCell{cfg: cfg, addrs: map[uint64]string{}, replicas: map[uint64]*Replica{}}
	_, caErr := os.Stat(lc.certPath("ca.pem"))
	if err := lc.loadOrCreateCredentials(); err != nil {
		return nil, err
	}
	if errors.Is(caErr, fs.ErrNotExist) { // a new cell
		for id := uint64(1); id <= uint64(cfg.Replicas); id++ {
			if err := InitDataDir(lc.dataDir(id)); err != nil {
				return nil, err
			}
		}
	}
	if err := lc.assignAddrs(); err != nil {
		return nil, err
	}
	for id := uint64(1); id <= uint64(cfg.Replicas); id++ {
		if err := lc.Start(ctx, id); err != nil {
			lc.Close()
			return nil, err
		}
	}
	if _, err := lc.WaitMaster(ctx); err != nil {
		lc.Close()
		return nil, err
	}
	if cfg.DevTenant != "" {
		if err := lc.ensureDevTenant(ctx); err != nil {
			lc.Close()
			return nil, err
		}
	}
	if err := lc.writeClientFile(); err != nil {
		lc.Close()
		return nil, err
	}
	return lc, nil
}

func (lc *LocalCell) certPath(name string) string { return filepath.Join(lc.cfg.Dir, "certs", name) }

func (lc *LocalCell) loadOrCreateCredentials() error {
	if err := os.MkdirAll(filepath.Join(lc.cfg.Dir, "certs"), 0o700); err != nil {
		return err
	}
	caCert, errC := os.ReadFile(lc.certPath("ca.pem"))
	caKey, errK := os.ReadFile(lc.certPath("ca-key.pem"))
	if errC == nil && errK == nil {
		ca, err := certs.LoadCA(caCert, caKey)
		if err != nil {
			return fmt.Errorf("cell: loading the local CA: %w", err)
		}
		lc.CA = ca
	} else {
		ca, err := certs.NewCA(lc.cfg.Cell, certs.Options{})
		if err != nil {
			return err
		}
		key, err := ca.KeyPEM()
		if err != nil {
			return err
		}
		if err := writeFile(lc.certPath("ca.pem"), ca.CertPEM()); err != nil {
			return err
		}
		if err := writeFile(lc.certPath("ca-key.pem"), key); err != nil {
			return err
		}
		lc.CA = ca
	}
	key, err := LoadOrCreateSigningKey(lc.certPath("signing-key.pem"))
	if err != nil {
		return err
	}
	lc.signing = key
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := writeFile(lc.certPath("signing-pub.pem"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	if _, err := lc.clientCert("admin", AdminTenant, DefaultAdminPrincipal); err != nil {
		return err
	}
	return nil
}

// clientCert loads or issues the certificate files name.pem/name-key.pem.
func (lc *LocalCell) clientCert(name, tenant, principal string) (tls.Certificate, error) {
	certFile, keyFile := lc.certPath(name+".pem"), lc.certPath(name+"-key.pem")
	if c, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil {
		return c, nil
	}
	c, err := lc.CA.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
	if err != nil {
		return tls.Certificate{}, err
	}
	certPEM, keyPEM, err := certs.EncodeKeyPair(c)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := writeFile(certFile, certPEM); err != nil {
		return tls.Certificate{}, err
	}
	return c, writeFile(keyFile, keyPEM)
}

// ClientCertificate issues a certificate for tenant/principal (tests).
func (lc *LocalCell) ClientCertificate(tenant, principal string) (tls.Certificate, error) {
	return lc.CA.IssueClient(certs.ClientID{Tenant: tenant, Principal: principal}, certs.Options{})
}

// AdminCertificate returns the administrator's client certificate.
func (lc *LocalCell) AdminCertificate() (tls.Certificate, error) {
	return lc.clientCert("admin", AdminTenant, DefaultAdminPrincipal)
}

// PublicKey returns the cell's sequencer-signing key.
func (lc *LocalCell) PublicKey() ed25519.PublicKey { return lc.signing.Public().(ed25519.PublicKey) }

// assignAddrs fixes the replicas' addresses: from BasePort, or from
// addrs.json (written on first start) so that a restarted cell keeps them,
// or by asking the system for free ports.
func (lc *LocalCell) assignAddrs() error {
	if lc.cfg.BasePort != 0 {
		for id := uint64(1); id <= uint64(lc.cfg.Replicas); id++ {
			lc.addrs[id] = net.JoinHostPort(lc.cfg.Host, strconv.Itoa(lc.cfg.BasePort+int(id)-1))
		}
		return nil
	}
	file := filepath.Join(lc.cfg.Dir, "addrs.json")
	if b, err := os.ReadFile(file); err == nil {
		var saved map[uint64]string
		if err := json.Unmarshal(b, &saved); err == nil && len(saved) == lc.cfg.Replicas {
			lc.addrs = saved
			return nil
		}
	}
	for id := uint64(1); id <= uint64(lc.cfg.Replicas); id++ {
		pc, err := net.ListenPacket("udp", net.JoinHostPort(lc.cfg.Host, "0"))
		if err != nil {
			return err
		}
		lc.addrs[id] = pc.LocalAddr().String()
		_ = pc.Close()
	}
	b, _ := json.Marshal(lc.addrs)
	return writeFile(file, b)
}

// Addrs returns the replicas' addresses in id order.
func (lc *LocalCell) Addrs() []string {
	out := make([]string, 0, len(lc.addrs))
	for id := uint64(1); id <= uint64(lc.cfg.Replicas); id++ {
		out = append(out, lc.addrs[id])
	}
	return out
}

// Config returns the Config replica id starts with.
func (lc *LocalCell) Config(id uint64) (Config, error) {
	cert, err := lc.CA.IssueReplica(id, certs.Options{IPAddresses: []net.IP{net.ParseIP(lc.cfg.Host)}})
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		ID:          id,
		Cell:        lc.cfg.Cell,
		Replicas:    lc.addrs,
		DataDir:     lc.dataDir(id),
		CA:          lc.CA.Pool(),
		Certificate: cert,
		SigningKey:  lc.signing,
		Logger:      lc.cfg.Logger,
	}
	switch {
	case lc.cfg.BasePort != 0:
		cfg.HTTPAddr = net.JoinHostPort(lc.cfg.Host, strconv.Itoa(lc.cfg.BasePort+100+int(id)-1))
	case lc.cfg.HTTP:
		cfg.HTTPAddr = net.JoinHostPort(lc.cfg.Host, "0")
	}
	if lc.cfg.Tune != nil {
		lc.cfg.Tune(&cfg)
	}
	return cfg, nil
}

// dataDir is replica id's data directory (before Tune).
func (lc *LocalCell) dataDir(id uint64) string {
	return filepath.Join(lc.cfg.Dir, "r"+strconv.FormatUint(id, 10))
}

// Start starts replica id (again, after Stop).
func (lc *LocalCell) Start(ctx context.Context, id uint64) error {
	cfg, err := lc.Config(id)
	if err != nil {
		return err
	}
	var r *Replica
	// A just-closed UDP port may take a moment to be free again.
	for attempt := 0; ; attempt++ {
		r, err = Start(ctx, cfg)
		if err == nil || attempt >= 50 || ctx.Err() != nil || errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrDataDirInUse) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	lc.mu.Lock()
	lc.replicas[id] = r
	lc.mu.Unlock()
	return nil
}

// Stop stops replica id (as a crash would, without a hand-over).
func (lc *LocalCell) Stop(id uint64) {
	lc.mu.Lock()
	r := lc.replicas[id]
	delete(lc.replicas, id)
	lc.mu.Unlock()
	if r != nil {
		_ = r.Close()
	}
}

// Replica returns running replica id, or nil.
func (lc *LocalCell) Replica(id uint64) *Replica {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.replicas[id]
}

// Running returns the running replicas in id order.
func (lc *LocalCell) Running() []*Replica {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	var out []*Replica
	for id := uint64(1); id <= uint64(lc.cfg.Replicas); id++ {
		if r := lc.replicas[id]; r != nil {
			out = append(out, r)
		}
	}
	return out
}

// Master returns the running replica that serves as master, or nil.
func (lc *LocalCell) Master() *Replica {
	for _, r := range lc.Running() {
		if r.Status().Master {
			return r
		}
	}
	return nil
}

// WaitMaster waits until some running replica serves as master.
func (lc *LocalCell) WaitMaster(ctx context.Context) (*Replica, error) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if m := lc.Master(); m != nil {
			return m, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cell: no master: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Close stops every replica.
func (lc *LocalCell) Close() {
	for _, r := range lc.Running() {
		lc.Stop(r.ID())
	}
}

// ClientFilePath is where the cell's client.json is.
func (lc *LocalCell) ClientFilePath() string { return filepath.Join(lc.cfg.Dir, "client.json") }

func (lc *LocalCell) writeClientFile() error {
	cf := clientfile.File{
		Cell: lc.cfg.Cell, Addrs: lc.Addrs(), CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
		Admin: clientfile.Credential{Cert: "certs/admin.pem", Key: "certs/admin-key.pem"},
	}
	if lc.cfg.DevTenant != "" {
		cf.User = clientfile.Credential{Cert: "certs/" + lc.cfg.DevTenant + ".pem", Key: "certs/" + lc.cfg.DevTenant + "-key.pem"}
	}
	return writeFile(lc.ClientFilePath(), cf.Marshal())
}

// ensureDevTenant creates the dev tenant (once) and its certificate.
func (lc *LocalCell) ensureDevTenant(ctx context.Context) error {
	if _, err := lc.clientCert(lc.cfg.DevTenant, lc.cfg.DevTenant, lc.cfg.DevPrincipal); err != nil {
		return err
	}
	for {
		m, err := lc.WaitMaster(ctx)
		if err != nil {
			return err
		}
		_, err = m.CreateTenant(ctx, lc.cfg.DevTenant, api.TenantQuota{})
		switch {
		case err == nil, errors.Is(err, api.ErrAlreadyExists):
			return nil
		case !errors.Is(err, api.ErrNotMaster) && !errors.Is(err, api.ErrUnavailable):
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LoadOrCreateSigningKey reads an Ed25519 private key (PKCS#8 PEM) from
// file, creating and saving a new one if the file does not exist.
func LoadOrCreateSigningKey(file string) (ed25519.PrivateKey, error) {
	if b, err := os.ReadFile(file); err == nil {
		blk, _ := pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("cell: %s: not PEM", file)
		}
		k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("cell: %s: %w", file, err)
		}
		ek, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("cell: %s: not an Ed25519 key", file)
		}
		return ek, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, err
	}
	return k, writeFile(file, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func writeFile(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return err
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, name)
}
