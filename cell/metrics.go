package cell

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
	"github.com/lockcell/lockcell/transport"
)

// metrics are one replica's Prometheus metrics, in a registry of its own so
// several replicas can share a process (the dev cell).
type metrics struct {
	reg *prometheus.Registry

	chosen, applied    prometheus.Gauge
	writesInFlight     prometheus.Gauge
	heldMessages       prometheus.Gauge
	isMaster           prometheus.Gauge
	proposals          prometheus.Counter
	batchSize          prometheus.Histogram
	fsync              prometheus.Histogram
	commitLatency      prometheus.Histogram
	masterChanges      prometheus.Counter
	keepalives         prometheus.Counter
	expiries           prometheus.Counter
	events             prometheus.Counter
	invalidations      prometheus.Counter
	waiters            prometheus.Gauge
	snapshotsTaken     prometheus.Counter
	snapshotsInstalled prometheus.Counter
	loopStuck          prometheus.Counter
	badPeerMessages    prometheus.Counter
	rebuilding         prometheus.Gauge
	losses             *prometheus.CounterVec
	movedAside         prometheus.Counter
	rpcs               *prometheus.CounterVec
	rpcLatency         *prometheus.HistogramVec
	// Per-tenant metrics. Tenant label values come only from verified
	// credentials (a certificate issued by the cell CA or a valid token);
	// calls without them count under "-". The HTTP listener that serves
	// them is the operators' (see http.go): no tenant can reach it through
	// the client protocol.
	tenantLatency *prometheus.HistogramVec
	tenantShed    *prometheus.CounterVec
	tenantQueued  *prometheus.GaugeVec
}

// metricsSources are where the metrics computed when scraped come from;
// the replica builds them at start. A nil source's metrics are not
// exported (unit tests that need only the counters leave them out).
type metricsSources struct {
	// sums is the replica's state comparison, whose counters are exported
	// beside the rest.
	sums *sumCompare
	// sessions returns the live sessions known to this replica's master
	// role (0 when it is not the master).
	sessions func() int
	// locksHeld returns the lock grants held in the applied state
	// (countLocksHeld).
	locksHeld func() int
	// transport returns the endpoint's counters, and false before the
	// endpoint is up.
	transport func() (transport.Stats, bool)
}

// newMetrics creates a replica's metrics in a registry of their own.
func newMetrics(src metricsSources) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	if src.sums != nil {
		registerSumMetrics(m.reg, src.sums)
	}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	gauge := func(name, help string) prometheus.Gauge {
		g := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "lockcell", Name: name, Help: help})
		f(g)
		return g
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockcell", Name: name, Help: help})
		f(c)
		return c
	}
	latency := prometheus.ExponentialBuckets(0.0001, 2, 16) // 100µs .. ~3.3s
	m.chosen = gauge("paxos_chosen_slot", "Highest slot up to which every value is known chosen.")
	m.applied = gauge("paxos_applied_slot", "Highest slot applied to the namespace.")
	m.writesInFlight = gauge("paxos_writes_in_flight", "Paxos log writes handed to the log writer and not yet durable.")
	m.heldMessages = gauge("paxos_held_messages", "Paxos messages held back until a log write in flight is durable.")
	m.isMaster = gauge("master", "1 while this replica is the serving master.")
	m.proposals = counter("paxos_proposals_total", "Commands proposed by this replica.")
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lockcell", Name: "paxos_batch_commands", Help: "Commands per applied slot.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	f(m.batchSize)
	m.fsync = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lockcell", Name: "paxos_fsync_seconds", Help: "Latency of synced Paxos log writes.", Buckets: latency})
	f(m.fsync)
	m.commitLatency = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lockcell", Name: "paxos_commit_seconds", Help: "From proposal to applied result.", Buckets: latency})
	f(m.commitLatency)
	m.masterChanges = counter("master_changes_total", "Times this replica became master.")
	m.keepalives = counter("keepalives_total", "KeepAlive requests served.")
	m.expiries = counter("session_expiries_total", "Sessions whose lease ran out at this master.")
	m.events = counter("events_total", "Events published to sessions.")
	m.invalidations = counter("cache_invalidations_total", "Cache invalidations a write waited for.")
	m.waiters = gauge("lock_waiters", "Blocked Acquire calls waiting in lock queues.")
	m.snapshotsTaken = counter("snapshots_taken_total", "Snapshots taken to compact the Paxos log.")
	m.snapshotsInstalled = counter("snapshots_installed_total", "Snapshots received from the leader and installed.")
	m.loopStuck = counter("run_loop_stuck_checks_total", "Watchdog checks that found the run loop in a step that has not returned for many checks in a row (see cell/watchdog.go).")
	m.badPeerMessages = counter("peer_messages_refused_total", "Peer messages that did not decode or were refused by the Paxos core.")
	m.rebuilding = gauge("rebuilding", "1 while this replica rebuilds lost state as a learner that votes in nothing.")
	m.losses = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockcell", Name: "state_losses_total", Help: "Times this replica started without (some of) its durable state and rebuilt, by kind (wiped, corrupt, behind-guard, guard-missing, guard-damaged, rebuild-interrupted)."}, []string{"kind"})
	f(m.losses)
	m.movedAside = counter("stores_moved_aside_total", "Damaged stores this replica moved aside to rebuild from its peers.")
	m.rpcs = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockcell", Name: "rpcs_total", Help: "Client RPCs by tenant, method and result code."}, []string{"tenant", "method", "code"})
	f(m.rpcs)
	m.rpcLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lockcell", Name: "rpc_seconds", Help: "Client RPC latency by method (KeepAlive long-polls excluded).", Buckets: latency}, []string{"method"})
	f(m.rpcLatency)
	m.tenantLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "lockcell", Name: "tenant_rpc_seconds", Help: "Client RPC latency by tenant (KeepAlive long-polls excluded).", Buckets: latency}, []string{"tenant"})
	f(m.tenantLatency)
	m.tenantShed = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockcell", Name: "tenant_shed_total", Help: "Calls refused by a master-side tenant limit or shed under overload, by tenant and reason."}, []string{"tenant", "reason"})
	f(m.tenantShed)
	m.tenantQueued = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "lockcell", Name: "tenant_queued_commands", Help: "Commands waiting in a tenant's fair-share queue at the master."}, []string{"tenant"})
	f(m.tenantQueued)
	if src.sessions != nil {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lockcell", Name: "sessions", Help: "Live sessions known to this master."}, func() float64 {
			return float64(src.sessions())
		}))
	}
	if src.locksHeld != nil {
		f(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "lockcell", Name: "locks_held", Help: "Lock grants held (a shared lock held by three sessions counts three), from the applied state; computed when scraped."}, func() float64 {
			return float64(src.locksHeld())
		}))
	}
	if src.transport != nil {
		f(transportCollector{src.transport})
	}
	return m
}

func (m *metrics) observeStatus(prev, st *paxos.Status) {
	m.chosen.Set(float64(st.Chosen))
	m.applied.Set(float64(st.Applied))
	m.writesInFlight.Set(float64(st.WritesInFlight))
	m.heldMessages.Set(float64(st.HeldMessages))
	if st.Master {
		m.isMaster.Set(1)
	} else {
		m.isMaster.Set(0)
	}
	if st.Rebuild.Phase != paxos.RebuildNone {
		m.rebuilding.Set(1)
	} else {
		m.rebuilding.Set(0)
	}
}

func (m *metrics) observeRPC(tenant string, method api.Method, err error, d time.Duration) {
	code := api.OK
	var ae *api.Error
	if errors.As(err, &ae) {
		code = ae.Code
	} else if err != nil {
		code = api.Internal
	}
	if tenant == "" {
		tenant = "-"
	}
	m.rpcs.WithLabelValues(tenant, method.String(), code.String()).Inc()
	// A KeepAlive's (or a batch's) latency is its long-poll: it would
	// drown the latency of the calls that answer at once.
	if method != api.MethodKeepAlive && method != api.MethodKeepAliveBatch {
		m.rpcLatency.WithLabelValues(method.String()).Observe(d.Seconds())
		m.tenantLatency.WithLabelValues(tenant).Observe(d.Seconds())
	}
}

// shed counts a call of tenant refused by a master-side limit.
func (m *metrics) shed(tenant, reason string) {
	m.tenantShed.WithLabelValues(tenant, reason).Inc()
}

// tenantQueue counts delta commands into (or, negative, out of) tenant's
// fair-share queue.
func (m *metrics) tenantQueue(tenant string, delta int) {
	m.tenantQueued.WithLabelValues(tenant).Add(float64(delta))
}

// transportCollector exports the endpoint's counters.
type transportCollector struct {
	stats func() (transport.Stats, bool)
}

var transportDesc = prometheus.NewDesc("lockcell_transport_events_total", "Transport counters (bytes, frames, drops, reconnects, refusals, client handshakes full and resumed).", []string{"counter"}, nil)

func (transportCollector) Describe(ch chan<- *prometheus.Desc) { ch <- transportDesc }

func (c transportCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.stats()
	if !ok {
		return
	}
	for _, kv := range []struct {
		name string
		v    uint64
	}{
		{"peer_frames_sent", s.PeerFramesSent}, {"peer_bytes_sent", s.PeerBytesSent},
		{"peer_frames_received", s.PeerFramesReceived}, {"peer_bytes_received", s.PeerBytesReceived},
		{"client_frames_sent", s.ClientFramesSent}, {"client_bytes_sent", s.ClientBytesSent},
		{"client_frames_received", s.ClientFramesReceived}, {"client_bytes_received", s.ClientBytesReceived},
		{"drops_queue_full", s.DropsQueueFull}, {"drops_fault", s.DropsFault},
		{"drops_disconnected", s.DropsDisconnected}, {"drops_client_cut", s.DropsClientCut},
		{"dials", s.Dials}, {"dial_failures", s.DialFailures}, {"reconnects", s.Reconnects},
		{"refused_handshakes", s.RefusedHandshakes}, {"refused_conn_limit", s.RefusedConnLimit},
		{"bad_frames", s.BadFrames},
		{"client_handshakes_full", s.ClientFullHandshakes}, {"client_handshakes_resumed", s.ClientResumed},
	} {
		ch <- prometheus.MustNewConstMetric(transportDesc, prometheus.CounterValue, float64(kv.v), kv.name)
	}
}

// lockLister is the part of the applied state countLocksHeld reads
// (namespace.Store).
type lockLister interface {
	ListTenants(c namespace.Caller) ([]api.TenantInfo, error)
	ListLocks(c namespace.Caller, tenant string) ([]api.LockInfo, error)
}

// countLocksHeld counts the lock grants held in st, over every tenant, as
// the administrator admin sees them (a shared lock held by three sessions
// counts three). It walks the lock index, so it runs only when metrics are
// scraped or the status page is rendered.
func countLocksHeld(st lockLister, admin namespace.Caller) int {
	tenants, err := st.ListTenants(admin)
	if err != nil {
		return 0
	}
	n := 0
	for _, t := range tenants {
		locks, err := st.ListLocks(admin, t.Name)
		if err != nil {
			continue
		}
		for _, l := range locks {
			n += len(l.Holders)
		}
	}
	return n
}
