package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
)

// fileConfig is the JSON config of one replica (`lockcelld serve
// --config`). Paths are relative to the config file's directory unless
// absolute. Durations are Go durations ("12s"); empty means the default.
type fileConfig struct {
	ID       uint64            `json:"id"`
	Cell     string            `json:"cell"`
	Replicas map[string]string `json:"replicas"` // id → host:port
	DataDir  string            `json:"data_dir"`
	CAFile   string            `json:"ca_file"`
	CertFile string            `json:"cert_file"`
	KeyFile  string            `json:"key_file"`
	// SigningKeyFile holds the cell's Ed25519 sequencer-signing key (PKCS#8
	// PEM), the same file on every replica.
	SigningKeyFile string `json:"signing_key_file"`
	HTTPAddr       string `json:"http_addr,omitempty"`
	// Join marks a replica that joined a running cell (lockcelld init
	// --join) rather than one of its first replicas: it starts outside the
	// membership and votes in nothing until the cell adds it
	// (cell.Config.Join). Replicas then names it and the peers it reaches
	// first.
	Join bool `json:"join,omitempty"`
	// Pprof serves the Go runtime's profiles at /debug/pprof/ on the HTTP
	// listener, to the addresses in PprofAllow only (cell.Config.Pprof).
	Pprof bool `json:"pprof,omitempty"`
	// PprofAllow lists the prefixes ("10.0.0.9/32") whose requests to
	// /debug/pprof/ are served; empty means loopback only.
	PprofAllow     []string `json:"pprof_allow,omitempty"`
	Tick           string   `json:"tick,omitempty"`
	LeaseTicks     int      `json:"lease_ticks,omitempty"`
	HeartbeatTicks int      `json:"heartbeat_ticks,omitempty"`
	ElectionTicks  int      `json:"election_ticks,omitempty"`
	DriftPPM       uint32   `json:"drift_ppm,omitempty"`
	SessionLease   string   `json:"session_lease,omitempty"`
	// MaxSessionLease is the longest lease a master under load may grant
	// (the same on every replica); empty means session_lease.
	MaxSessionLease string `json:"max_session_lease,omitempty"`
	SnapshotEvery   uint64 `json:"snapshot_every,omitempty"`
	// KeepAliveCadence is the longest the master parks a KeepAlive
	// (cell.Config.KeepAliveCadence); empty means a twelfth of
	// session_lease, a negative duration none (Chubby's rule).
	KeepAliveCadence string `json:"keepalive_cadence,omitempty"`
	// MaxConnsPerIP bounds the client connections from one source address
	// (cell.Config.MaxConnsPerIP); 0 means the default (1024), negative
	// unlimited.
	MaxConnsPerIP int `json:"max_conns_per_ip,omitempty"`
	// MaxStreamsPerConn bounds the concurrent calls of one client
	// connection (cell.Config.MaxStreamsPerConn); 0 means the default (256).
	MaxStreamsPerConn int `json:"max_streams_per_conn,omitempty"`
	// FaultInjection serves /debug/faults on the HTTP listener (test cells
	// only: it lets anyone who reaches that listener partition the cell).
	FaultInjection bool `json:"fault_injection,omitempty"`
	// The test-only knobs below are refused (TestKnobError) unless
	// FaultInjection is on: a clock scale of 2 is exactly what makes two
	// masters, and a replica that does not fsync loses acknowledged writes.

	// ClockScale skews this replica's tick rate (tests only).
	ClockScale float64 `json:"clock_scale,omitempty"`
	// SyncDelay delays every fsync of the Paxos log (tests only).
	SyncDelay string `json:"sync_delay,omitempty"`
	// UnsafeNoFsync makes the replica's store lose its unsynced writes
	// when the process dies, as a disk that lies about fsync loses them in
	// a power failure (tests only: the fault-injection suite's proof that
	// it sees lost acknowledged writes).
	UnsafeNoFsync bool `json:"unsafe_no_fsync,omitempty"`
}

// ErrTestKnob is what a TestKnobError is (errors.Is).
var ErrTestKnob = errors.New("lockcelld: test-only setting without fault_injection")

// TestKnobError reports a test-only setting in a config whose
// fault_injection is off.
type TestKnobError struct {
	// Knob is the setting's JSON name.
	Knob string
}

func (e *TestKnobError) Error() string {
	return fmt.Sprintf("lockcelld: %s is a test-only setting, refused unless fault_injection is true", e.Knob)
}

// Is reports ErrTestKnob.
func (e *TestKnobError) Is(target error) bool { return target == ErrTestKnob }

// checkTestKnobs refuses a test-only setting without fault_injection.
func (fc *fileConfig) checkTestKnobs() error {
	if fc.FaultInjection {
		return nil
	}
	switch {
	case fc.ClockScale != 0:
		return &TestKnobError{Knob: "clock_scale"}
	case fc.SyncDelay != "":
		return &TestKnobError{Knob: "sync_delay"}
	case fc.UnsafeNoFsync:
		return &TestKnobError{Knob: "unsafe_no_fsync"}
	}
	return nil
}

func readFileConfig(file string) (*fileConfig, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var fc fileConfig
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := fc.checkTestKnobs(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return &fc, nil
}

func duration(name, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// replicaConfig turns the file config into a cell.Config.
func (fc *fileConfig) replicaConfig(file string, log *slog.Logger) (cell.Config, error) {
	base := filepath.Dir(file)
	rel := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	cfg := cell.Config{
		ID: fc.ID, Cell: fc.Cell, DataDir: rel(fc.DataDir), HTTPAddr: fc.HTTPAddr,
		LeaseTicks: fc.LeaseTicks, HeartbeatTicks: fc.HeartbeatTicks, ElectionTicks: fc.ElectionTicks,
		DriftPPM: fc.DriftPPM, SnapshotEvery: fc.SnapshotEvery, ClockScale: fc.ClockScale, Logger: log,
		MaxConnsPerIP: fc.MaxConnsPerIP, MaxStreamsPerConn: fc.MaxStreamsPerConn,
		Replicas: map[uint64]string{},
	}
	for k, v := range fc.Replicas {
		id, err := strconv.ParseUint(k, 10, 64)
		if err != nil {
			return cfg, fmt.Errorf("replicas: bad id %q", k)
		}
		cfg.Replicas[id] = v
	}
	var err error
	if cfg.Tick, err = duration("tick", fc.Tick); err != nil {
		return cfg, err
	}
	if cfg.SessionLease, err = duration("session_lease", fc.SessionLease); err != nil {
		return cfg, err
	}
	if cfg.MaxSessionLease, err = duration("max_session_lease", fc.MaxSessionLease); err != nil {
		return cfg, err
	}
	if cfg.KeepAliveCadence, err = duration("keepalive_cadence", fc.KeepAliveCadence); err != nil {
		return cfg, err
	}
	if cfg.SyncDelay, err = duration("sync_delay", fc.SyncDelay); err != nil {
		return cfg, err
	}
	caPEM, err := os.ReadFile(rel(fc.CAFile))
	if err != nil {
		return cfg, fmt.Errorf("ca_file: %w", err)
	}
	if cfg.CA, err = certs.PoolFromPEM(caPEM); err != nil {
		return cfg, fmt.Errorf("ca_file: %w", err)
	}
	if cfg.Certificate, err = tls.LoadX509KeyPair(rel(fc.CertFile), rel(fc.KeyFile)); err != nil {
		return cfg, fmt.Errorf("cert_file/key_file: %w", err)
	}
	if fc.SigningKeyFile == "" {
		return cfg, fmt.Errorf("signing_key_file is required")
	}
	if _, err := os.Stat(rel(fc.SigningKeyFile)); err != nil {
		return cfg, fmt.Errorf("signing_key_file: %w", err)
	}
	if cfg.SigningKey, err = cell.LoadOrCreateSigningKey(rel(fc.SigningKeyFile)); err != nil {
		return cfg, err
	}
	cfg.Join = fc.Join
	cfg.FaultInjection = fc.FaultInjection
	cfg.UnsafeNoFsync = fc.UnsafeNoFsync
	cfg.Pprof = fc.Pprof
	for _, s := range fc.PprofAllow {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return cfg, fmt.Errorf("pprof_allow: %w", err)
		}
		cfg.PprofAllow = append(cfg.PprofAllow, p.Masked())
	}
	return cfg, nil
}

// Defaults of lockcelld init.
const (
	// defaultInitDir is where init writes a cell: outside the source tree's
	// packages (./deploy is git-ignored), never a Go package's folder.
	defaultInitDir = "deploy"
	// defaultHTTPPort is replica 1's status listener port; replica i uses
	// defaultHTTPPort+i-1.
	defaultHTTPPort = 7101
	// defaultTenant is the first tenant init writes settings for.
	defaultTenant = "app"
)

// initOptions are lockcelld init's flags.
type initOptions struct {
	dir, name, tenant, principal string
	addrs                        []string
	httpHost                     string
	httpBase                     int
	faults                       bool
}

// cmdInit writes what a cell of real processes needs: a CA, one
// certificate and config per replica, the sequencer-signing key, the
// administrator's lockctl settings (admin.json), the first tenant's
// client certificate and settings (<tenant>.json), and each replica's data
// directory holding only the new-member marker (cell.InitDataDir): a
// replica that starts on an empty store without it takes itself for one
// that lost its state, and rebuilds from its peers before it votes. It
// prints what to do next.
func cmdInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockcelld init", flag.ContinueOnError)
	var o initOptions
	fs.StringVar(&o.dir, "dir", defaultInitDir, "output directory (it will hold the CA's private key: keep it out of source control)")
	fs.StringVar(&o.name, "cell", "lockcell", "cell name")
	addrs := fs.String("replicas", "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003,127.0.0.1:7004,127.0.0.1:7005", "comma-separated replica addresses host:port (three or five); replica i is the i-th")
	fs.StringVar(&o.httpHost, "http-host", "127.0.0.1", "host the status pages, /metrics, /healthz and /readyz listen on")
	fs.IntVar(&o.httpBase, "http-port", defaultHTTPPort, "replica i serves its status page on http-host:(http-port+i-1); 0 for none")
	fs.StringVar(&o.tenant, "tenant", defaultTenant, "the first tenant: init writes its client certificate and settings (<tenant>.json)")
	fs.StringVar(&o.principal, "principal", "user", "the principal the first tenant's certificate names")
	fs.BoolVar(&o.faults, "fault-injection", false, "enable /debug/faults on the HTTP listeners (test cells only)")
	joining := fs.Bool("join", false, "prepare ONE new replica that joins the running cell in --dir (its certificate, config and empty data directory); needs --id and --addr")
	var jo joinOptions
	fs.Uint64Var(&jo.id, "id", 0, "with --join: the new replica's ID, never used in this cell before")
	fs.StringVar(&jo.addr, "addr", "", "with --join: the new replica's address host:port")
	fs.StringVar(&jo.peers, "peers", "", "with --join: the cell's current replicas, ID=host:port,... as 'lockctl status' lists them (default: every replica the configs in --dir name)")
	fs.StringVar(&jo.caKey, "ca-key", "", "with --join: the cell CA's private key (default --dir/certs/ca-key.pem)")
	if code, stop := parseFlags(fs, args, stdout, stderr); stop {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *joining {
		for _, name := range []string{"cell", "replicas", "tenant", "principal", "fault-injection"} {
			if set[name] {
				fmt.Fprintf(stderr, "lockcelld init: --%s does not go with --join: a joining replica takes it from the cell in --dir\n", name)
				return exitUsage
			}
		}
		jo.dir, jo.httpHost, jo.httpBase = o.dir, o.httpHost, o.httpBase
		return cmdJoin(jo, stdout, stderr)
	}
	for _, name := range []string{"id", "addr", "peers", "ca-key"} {
		if set[name] {
			fmt.Fprintf(stderr, "lockcelld init: --%s goes with --join only\n", name)
			return exitUsage
		}
	}
	o.addrs = strings.Split(*addrs, ",")
	if err := initCell(o); err != nil {
		fmt.Fprintln(stderr, "lockcelld init:", err)
		return exitError
	}
	printInitNext(stdout, o)
	return exitOK
}

// printInitNext tells the operator what init wrote and what to do next.
func printInitNext(w io.Writer, o initOptions) {
	d := o.dir
	fmt.Fprintf(w, "Wrote cell %q (%d replicas) to %s/:\n", o.name, len(o.addrs), d)
	fmt.Fprintf(w, "  replica-N.json          replica N's config; it names certs/ca.pem, certs/replica-N*.pem,\n")
	fmt.Fprintf(w, "                          certs/signing-key.pem and its data directory data/replica-N\n")
	fmt.Fprintf(w, "  admin.json              the cell administrator's lockctl settings (certs/admin*.pem)\n")
	fmt.Fprintf(w, "  %-23s tenant %s's settings (certs/%s-%s*.pem), for lockctl and the Go client\n", o.tenant+".json", o.tenant, o.tenant, o.principal)
	fmt.Fprintf(w, "  certs/ca-key.pem        the CA's private key: keep it safe, off the replica hosts\n")
	fmt.Fprintf(w, "\nNext:\n")
	fmt.Fprintf(w, "  1. Give each host its replica: copy %s/ there (without certs/ca-key.pem) and run\n", d)
	for i, a := range o.addrs {
		fmt.Fprintf(w, "       lockcelld serve --config %s/replica-%d.json        # on %s\n", d, i+1, a)
	}
	if o.httpBase != 0 {
		fmt.Fprintf(w, "     Replica N's status page: http://%s:%d/ plus N-1 (also /readyz, /healthz, /metrics).\n", o.httpHost, o.httpBase)
	}
	fmt.Fprintf(w, "  2. Check the cell:          lockctl --config %s/admin.json status\n", d)
	fmt.Fprintf(w, "  3. Create the first tenant: lockctl --config %s/admin.json tenant create %s\n", d, o.tenant)
	fmt.Fprintf(w, "  4. Use it:                  lockctl --config %s/%s.json put /%s/hello world\n", d, o.tenant, o.tenant)
	fmt.Fprintf(w, "     From Go: client.ReadConfigFile(%q), then its Config(false), then client.Dial.\n", filepath.Join(d, o.tenant+".json"))
}

// writeReplicaCert issues replica id's certificate from ca, valid for the
// host of addr (host:port), and writes it and its key with write to
// certs/replica-<id>.pem and certs/replica-<id>-key.pem.
func writeReplicaCert(ca *certs.CA, write func(path string, b []byte) error, id uint64, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("replica address %q: %w", addr, err)
	}
	opts := certs.Options{}
	if ip := net.ParseIP(host); ip != nil {
		opts.IPAddresses = []net.IP{ip}
	} else {
		opts.DNSNames = []string{host}
	}
	c, err := ca.IssueReplica(id, opts)
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := certs.EncodeKeyPair(c)
	if err != nil {
		return err
	}
	n := strconv.FormatUint(id, 10)
	if err := write("certs/replica-"+n+".pem", certPEM); err != nil {
		return err
	}
	return write("certs/replica-"+n+"-key.pem", keyPEM)
}

func initCell(o initOptions) error {
	dir, name, addrs := o.dir, o.name, o.addrs
	if o.tenant == "" || o.principal == "" {
		return fmt.Errorf("--tenant and --principal must not be empty")
	}
	if len(addrs) == 0 {
		return fmt.Errorf("no replica addresses")
	}
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("replica address %q: %w", a, err)
		}
		// Refuse before writing anything: a new CA would orphan that store.
		if err := cell.CheckNewDataDir(filepath.Join(dir, "data", "replica-"+strconv.Itoa(i+1))); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "certs"), 0o700); err != nil {
		return err
	}
	ca, err := certs.NewCA(name, certs.Options{})
	if err != nil {
		return err
	}
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	write := func(p string, b []byte) error { return os.WriteFile(filepath.Join(dir, p), b, 0o600) }
	if err := write("certs/ca.pem", ca.CertPEM()); err != nil {
		return err
	}
	if err := write("certs/ca-key.pem", caKey); err != nil {
		return err
	}
	signing, err := cell.LoadOrCreateSigningKey(filepath.Join(dir, "certs", "signing-key.pem"))
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(signing.Public())
	if err != nil {
		return err
	}
	if err := write("certs/signing-pub.pem", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})); err != nil {
		return err
	}
	replicas := map[string]string{}
	for i, a := range addrs {
		replicas[strconv.Itoa(i+1)] = a
	}
	for i, a := range addrs {
		id := uint64(i + 1)
		if err := writeReplicaCert(ca, write, id, a); err != nil {
			return err
		}
		n := strconv.FormatUint(id, 10)
		fc := fileConfig{
			ID: id, Cell: name, Replicas: replicas, DataDir: "data/replica-" + n,
			CAFile: "certs/ca.pem", CertFile: "certs/replica-" + n + ".pem", KeyFile: "certs/replica-" + n + "-key.pem",
			SigningKeyFile: "certs/signing-key.pem", FaultInjection: o.faults,
		}
		if o.httpBase != 0 {
			fc.HTTPAddr = net.JoinHostPort(o.httpHost, strconv.Itoa(o.httpBase+i))
		}
		b, _ := json.MarshalIndent(fc, "", "  ")
		if err := write("replica-"+n+".json", append(b, '\n')); err != nil {
			return err
		}
		if err := cell.InitDataDir(filepath.Join(dir, fc.DataDir)); err != nil {
			return err
		}
	}
	admin, err := ca.IssueClient(certs.ClientID{Tenant: cell.AdminTenant, Principal: cell.DefaultAdminPrincipal}, certs.Options{})
	if err != nil {
		return err
	}
	certPEM, keyPEM, err := certs.EncodeKeyPair(admin)
	if err != nil {
		return err
	}
	if err := write("certs/admin.pem", certPEM); err != nil {
		return err
	}
	if err := write("certs/admin-key.pem", keyPEM); err != nil {
		return err
	}
	cf := clientfile.File{Cell: name, Addrs: addrs, CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
		Admin: clientfile.Credential{Cert: "certs/admin.pem", Key: "certs/admin-key.pem"}}
	if err := write("admin.json", cf.Marshal()); err != nil {
		return err
	}
	// The first tenant's certificate and settings. The tenant itself is
	// created in the cell's replicated state once the cell runs (lockctl
	// tenant create); the certificate is valid from now on.
	user, err := ca.IssueClient(certs.ClientID{Tenant: o.tenant, Principal: o.principal}, certs.Options{})
	if err != nil {
		return fmt.Errorf("tenant %q: %w", o.tenant, err)
	}
	certPEM, keyPEM, err = certs.EncodeKeyPair(user)
	if err != nil {
		return err
	}
	base := "certs/" + o.tenant + "-" + o.principal
	if err := write(base+".pem", certPEM); err != nil {
		return err
	}
	if err := write(base+"-key.pem", keyPEM); err != nil {
		return err
	}
	tf := clientfile.File{Cell: name, Addrs: addrs, CA: "certs/ca.pem", PublicKey: "certs/signing-pub.pem",
		User: clientfile.Credential{Cert: base + ".pem", Key: base + "-key.pem"}}
	return write(o.tenant+".json", tf.Marshal())
}
