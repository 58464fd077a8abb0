package cell

import (
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"time"

	"github.com/lockcell/lockcell/transport"
)

// Chubby's published timings, and ours where it published none.
const (
	// DefaultTick is how often the run loop ticks the Paxos core.
	DefaultTick = 10 * time.Millisecond
	// DefaultSessionLease is the session lease (Chubby: 12 s).
	DefaultSessionLease = 12 * time.Second
	// DefaultKeepAliveCadenceDivisor makes the default KeepAlive cadence a
	// twelfth of the session lease (Config.KeepAliveCadence).
	DefaultKeepAliveCadenceDivisor = 12
	// DefaultSnapshotEvery is how many applied slots pass between snapshots
	// that let the Paxos log be compacted.
	DefaultSnapshotEvery = 10_000
	// DefaultMaxInflight is the Paxos window (see Config.MaxInflight).
	DefaultMaxInflight = 1
	// DefaultAdminPrincipal is the principal (with no tenant) that
	// administers the cell.
	DefaultAdminPrincipal = "admin"
	// DefaultProposalWindow is how many tenant commands may be between the
	// fair scheduler and their applied result (see scheduler).
	DefaultProposalWindow = 64
	// DefaultTenantQueue is how many commands a tenant of weight 1 may have
	// queued at the master before new ones are shed.
	DefaultTenantQueue = 256
	// DefaultTenantReadConcurrency is how many reads of a tenant of weight
	// 1 the master serves at once (as many again may wait).
	DefaultTenantReadConcurrency = 16
)

// ErrInvalidConfig is returned (wrapped) by New for a Config that
// contradicts itself or lacks a required field.
var ErrInvalidConfig = errors.New("cell: invalid config")

// Config configures one replica. Fields marked required must be set; every
// other zero value selects the documented default.
type Config struct {
	// ID is this replica's id, ≥ 1, a key of Replicas. Required.
	ID uint64
	// Cell names the cell; it is written into every sequencer. Required.
	Cell string
	// Replicas maps every replica's id (this one included) to its UDP
	// address "host:port". Every replica must use the same map. Required.
	Replicas map[uint64]string
	// Join marks a replica that was not among the cell's first replicas:
	// it joins a running cell (AddReplica adds it), starting outside the
	// membership, as a learner that votes in nothing. Replicas then lists
	// this replica and the ones to reach at its first start; the cell
	// tells it the rest. Set it on every start of such a replica: it
	// matters until the replica has learned of its addition (from then on
	// its store holds the membership), but a start without it before then
	// would take the replica for one of the cell's first voters.
	Join bool
	// DataDir holds this replica's Pebble store. Required.
	DataDir string
	// CA is the cell CA pool: peers' and clients' certificates must chain to
	// it. Required.
	CA *x509.CertPool
	// Certificate is this replica's certificate (naming ID) and key.
	// Required.
	Certificate tls.Certificate
	// SigningKey signs sequencers (Ed25519). Every replica of a cell must
	// hold the same key, so that a sequencer granted by one master verifies
	// after a fail-over. Required.
	SigningKey ed25519.PrivateKey
	// HTTPAddr, if not empty, is where /metrics, /healthz, /readyz, /status
	// and the status page are served (and /debug/faults when Faults is set,
	// /debug/pprof/ to PprofAllow when Pprof is set). Loopback in tests.
	HTTPAddr string
	// Pprof serves the Go runtime's profiles (net/http/pprof) at
	// /debug/pprof/ on the HTTP listener, to requests from PprofAllow only;
	// every other request there gets 403 Forbidden.
	Pprof bool
	// PprofAllow lists the addresses (the TCP peer's, as prefixes) that may
	// fetch /debug/pprof/ when Pprof is set. If empty, loopback only (an
	// operator on the replica's own machine).
	PprofAllow []netip.Prefix
	// Tick is the Paxos tick. If zero, DefaultTick (10 ms).
	Tick time.Duration
	// ClockScale, if not zero, scales this replica's tick (a test-only clock
	// rate skew for the fault-injection suite: 1.01 ticks 1% slower).
	ClockScale float64
	// LeaseTicks, HeartbeatTicks, ElectionTicks and DriftPPM configure the
	// Paxos core (see paxos.Config); zero selects its defaults (a master
	// lease of 100 ticks, about 1 s).
	LeaseTicks, HeartbeatTicks, ElectionTicks int
	// DriftPPM bounds clock-rate differences between replicas; see
	// paxos.Config.DriftPPM.
	DriftPPM uint32
	// MaxBatch bounds the commands per Paxos slot; see paxos.Config.
	MaxBatch int
	// MaxInflight bounds the Paxos slots in flight; see paxos.Config. If
	// zero, DefaultMaxInflight (1): while a slot is in flight every new
	// command waits for the next one, so slots carry large batches. On a
	// 2-core machine running five replicas that gave 3.3× the throughput of
	// 32 slots in flight (8,400 against 2,500 acquire+release pairs/s from 64
	// proposers) at the same single-command latency. With the log written
	// off the run loop it still wins on CPU: in simulated time
	// (celltest.TestInflightWindows, 100 µs links, 500 µs fsync) a window of
	// 32 gains 10–25% simulated throughput at 64 clients and nothing at
	// one, but makes over 15× the slots per pair and costs about 1.6× the
	// instructions per pair, which is throughput where replicas share cores.
	MaxInflight int
	// SessionLease is the session lease. If zero, DefaultSessionLease.
	SessionLease time.Duration
	// MaxSessionLease is the longest session lease a master may grant when
	// it lengthens leases under load (Chubby §3). A new master extends every
	// session to it at fail-over, so every replica must use the same value.
	// If zero, SessionLease (no load extension).
	MaxSessionLease time.Duration
	// KeepAliveCadence is the longest the master parks a session's
	// KeepAlive before answering it (session.Config.KeepAliveCadence). If
	// zero, SessionLease/DefaultKeepAliveCadenceDivisor (1 s for the 12 s
	// lease); if negative, none: KeepAlives are parked until shortly before
	// the lease ends, as in Chubby.
	//
	// The arithmetic, for lease L, cadence C, client drift bound δ and
	// round trip r: every reply proves a lease of (C+L)(1−δ) counted from
	// its request's send, and the next request leaves as the reply
	// arrives, so a client holds between (C+L)(1−δ)−2(C+r) and
	// (C+L)(1−δ)−(C+r) of lease: 10.9–11.9 s at L=12 s, C=1 s, δ=1%
	// (Chubby's rule: 1.3–11.9 s, at a random moment). A client that hears
	// nothing for C and its margin (client.SilenceMargin: a quarter of C,
	// at least 250 ms) asks every replica who the master is. So after a
	// master dies its clients notice within 1.25 s, and a fail-over (master
	// lease 1 s, election 1.1–1.3 s) finishes with about 8 s of every
	// client's lease still in hand: no client goes into jeopardy. The
	// price is one KeepAlive per session per C at the master, instead of
	// one per L−L/8; a master that lengthens leases under load
	// (MaxSessionLease) lengthens C in proportion.
	KeepAliveCadence time.Duration
	// SnapshotEvery is the number of applied slots between snapshots. If
	// zero, DefaultSnapshotEvery.
	SnapshotEvery uint64
	// AdminPrincipal is the principal, with no tenant, that may administer
	// the cell. If empty, DefaultAdminPrincipal.
	AdminPrincipal string
	// Faults, if set, injects transport faults (tests and the
	// fault-injection suite) and is served at /debug/faults.
	Faults *transport.Faults
	// FaultInjection, if Faults is nil, gives the replica a fault injector
	// of its own, served at /debug/faults (test cells of real processes
	// only: whoever reaches the HTTP listener can partition the replica).
	FaultInjection bool
	// PacketConn, if set, is used instead of listening on this replica's
	// address (tests with an in-process network).
	PacketConn net.PacketConn
	// SyncDelay, if not zero, delays every fsync of the Paxos log by this
	// much (the fault-injection suite's slow disk).
	SyncDelay time.Duration
	// UnsafeNoFsync makes the store keep its log writes in memory for up to
	// half a second and never fsync them, and skips the check of the store
	// against its guard record: a replica killed with SIGKILL loses
	// acknowledged writes, as a machine whose disk lies about fsync loses
	// them in a power failure. Test cells only (the fault-injection suite's
	// proof that it sees lost acknowledged writes); it requires
	// FaultInjection or Faults.
	UnsafeNoFsync bool
	// ProposalWindow bounds the tenant commands between the fair scheduler
	// and their applied result (the sessions of one CreateSessions call
	// count as one: see scheduler). If zero, DefaultProposalWindow.
	ProposalWindow int
	// TenantQueue bounds the commands a tenant of weight 1 may have waiting
	// in its fair-share queue (weight w: w times as many; the sessions of
	// one CreateSessions call count as one); more are shed with
	// ResourceExhausted. If zero, DefaultTenantQueue.
	TenantQueue int
	// TenantReadConcurrency bounds the reads a tenant of weight 1 has
	// served at once (weight w: w times as many); further reads wait, up to
	// TenantQueue per unit of weight, and beyond that are shed with
	// ResourceExhausted. If zero, DefaultTenantReadConcurrency.
	TenantReadConcurrency int
	// MaxConnsPerIP bounds the client connections one source address may
	// hold at this replica (replicas are exempt). A host that runs many
	// client processes behind one address (NAT, a Kubernetes node) needs
	// one per process, plus a few while a client looks for the master. A
	// connection over the limit is closed after its handshake and its
	// client gets an error naming the limit (transport.ErrTooManyConns,
	// client.ErrTooManyConns). If zero, transport.DefaultMaxConnsPerIP
	// (1024); negative means unlimited (not for a cell that untrusted
	// hosts reach).
	MaxConnsPerIP int
	// MaxStreamsPerConn bounds the concurrent calls (QUIC streams) of one
	// client connection; further calls wait for a free stream, and fail
	// with an error naming the limit (transport.ErrStreamLimit) if their
	// context ends first. The KeepAlives of all the sessions on a
	// connection share one stream (api.KeepAliveStreamRequest). If zero,
	// transport.DefaultMaxStreamsPerClient (256).
	MaxStreamsPerConn int
	// Logger receives the replica's logs. If nil, slog.Default().
	Logger *slog.Logger

	// wallClock, if set, is this replica's wall clock instead of time.Now:
	// the in-process tests of clock skew set it (export_test.go). It is
	// unexported so that no deployment can skew a replica's clock.
	wallClock func() time.Time
	// headOutcomeHook, if set, receives the outcome of every Acquire the
	// master proposes for the head waiter of a lock (err is nil for a
	// grant; of a run of shared waiters handed the lock together, the
	// first's): deliver hands it on (at once or later, from any goroutine);
	// gone is closed once that waiter's caller has canceled. It runs on the
	// run loop goroutine and must not block. Tests use it to force the interleaving
	// of a cancellation with an Acquire in Paxos (export_test.go).
	headOutcomeHook func(path string, err error, gone <-chan struct{}, deliver func())
	// twoRoundHandOver, if set, makes the master hand a freed lock to its
	// head waiter in two Paxos rounds (the release, then the waiter's
	// Acquire), as before lockhandover.go: tests measure what one round
	// saves (export_test.go).
	twoRoundHandOver bool
	// featuresHook, if set, is what the replica advertises it can apply
	// instead of AllFeatures: the tests of the feature gate make one
	// replica look like an older binary (export_test.go).
	featuresHook func() Features
}

func (c Config) populate() Config {
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.SessionLease == 0 {
		c.SessionLease = DefaultSessionLease
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxSessionLease == 0 {
		c.MaxSessionLease = c.SessionLease
	}
	if c.KeepAliveCadence == 0 {
		c.KeepAliveCadence = c.SessionLease / DefaultKeepAliveCadenceDivisor
	}
	if c.SnapshotEvery == 0 {
		c.SnapshotEvery = DefaultSnapshotEvery
	}
	if c.AdminPrincipal == "" {
		c.AdminPrincipal = DefaultAdminPrincipal
	}
	if c.ProposalWindow == 0 {
		c.ProposalWindow = DefaultProposalWindow
	}
	if c.TenantQueue == 0 {
		c.TenantQueue = DefaultTenantQueue
	}
	if c.TenantReadConcurrency == 0 {
		c.TenantReadConcurrency = DefaultTenantReadConcurrency
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.FaultInjection && c.Faults == nil {
		c.Faults = transport.NewFaults(uint64(time.Now().UnixNano()) ^ c.ID)
	}
	c.Logger = c.Logger.With("replica", c.ID)
	return c
}

func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c.ID == 0:
		return bad("ID must be at least 1")
	case c.Cell == "":
		return bad("Cell is required")
	case len(c.Replicas) == 0:
		return bad("Replicas is required")
	case c.Replicas[c.ID] == "":
		return bad("Replicas has no address for this replica (%d)", c.ID)
	case c.Join && len(c.Replicas) < 2:
		return bad("Join needs the address of at least one other replica in Replicas")
	case c.DataDir == "":
		return bad("DataDir is required")
	case c.CA == nil:
		return bad("CA is required")
	case len(c.Certificate.Certificate) == 0:
		return bad("Certificate is required")
	case len(c.SigningKey) != ed25519.PrivateKeySize:
		return bad("SigningKey must be an Ed25519 private key")
	case c.Tick < time.Millisecond:
		return bad("Tick %v is below 1ms", c.Tick)
	case c.ClockScale < 0 || (c.ClockScale != 0 && (c.ClockScale < 0.5 || c.ClockScale > 2)):
		return bad("ClockScale %v is outside [0.5, 2]", c.ClockScale)
	case c.UnsafeNoFsync && !c.FaultInjection && c.Faults == nil:
		return bad("UnsafeNoFsync is a test-only setting: it requires FaultInjection")
	case c.SessionLease < time.Second:
		return bad("SessionLease %v is below 1s", c.SessionLease)
	case c.MaxStreamsPerConn < 0:
		return bad("MaxStreamsPerConn %d is negative", c.MaxStreamsPerConn)
	case c.ProposalWindow < 0 || c.TenantQueue < 0 || c.TenantReadConcurrency < 0:
		return bad("ProposalWindow, TenantQueue and TenantReadConcurrency must not be negative")
	case c.MaxSessionLease < c.SessionLease:
		return bad("MaxSessionLease %v is shorter than SessionLease %v", c.MaxSessionLease, c.SessionLease)
	}
	for id, addr := range c.Replicas {
		if id == 0 || addr == "" {
			return bad("replica %d has address %q", id, addr)
		}
	}
	return c.checkCertificate()
}

// replicaIDs returns the replica ids in increasing order.
func (c Config) replicaIDs() []uint64 {
	ids := make([]uint64, 0, len(c.Replicas))
	for id := range c.Replicas {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
