package cell

import (
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
	"github.com/lockcell/lockcell/transport"
)

// gatherValues returns every sample of reg as "name{label=value,...}" →
// value (labels in the order the registry gives them).
func gatherValues(t *testing.T, m *metrics) map[string]float64 {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, s := range f.GetMetric() {
			key := f.GetName()
			if ls := s.GetLabel(); len(ls) > 0 {
				key += "{"
				for i, l := range ls {
					if i > 0 {
						key += ","
					}
					key += l.GetName() + "=" + l.GetValue()
				}
				key += "}"
			}
			switch {
			case s.GetCounter() != nil:
				out[key] = s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				out[key] = s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				out[key] = float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestMetricsFromSources: the metrics computed when scraped read their
// sources (sessions, lock grants, transport counters, state comparison),
// and nothing else: built on fakes alone, with no Replica. The counters
// count RPCs by tenant, method and code, sheds by reason, and tenant
// queues; a source left out is not exported.
func TestMetricsFromSources(t *testing.T) {
	sessions, locks := 42, 7
	up := false
	m := newMetrics(metricsSources{
		sums:      &sumCompare{},
		sessions:  func() int { return sessions },
		locksHeld: func() int { return locks },
		transport: func() (transport.Stats, bool) {
			return transport.Stats{PeerFramesSent: 5, BadFrames: 3, Reconnects: 2, ClientFullHandshakes: 7, ClientResumed: 11}, up
		},
	})
	m.observeRPC("a", api.MethodCreateSession, nil, time.Millisecond)
	m.observeRPC("a", api.MethodCreateSession, apiErr(api.NotFound, "x"), time.Millisecond)
	m.observeRPC("", api.MethodKeepAlive, errors.New("not an api error"), time.Second)
	m.shed("a", "ops_per_second")
	m.tenantQueue("a", +2)
	m.tenantQueue("a", -1)

	create := api.MethodCreateSession.String()
	ka := api.MethodKeepAlive.String()
	want := map[string]float64{
		"lockcell_sessions":   42,
		"lockcell_locks_held": 7,
		"lockcell_rpcs_total{code=" + api.OK.String() + ",method=" + create + ",tenant=a}":       1,
		"lockcell_rpcs_total{code=" + api.NotFound.String() + ",method=" + create + ",tenant=a}": 1,
		"lockcell_rpcs_total{code=" + api.Internal.String() + ",method=" + ka + ",tenant=-}":     1,
		"lockcell_rpc_seconds{method=" + create + "}":                                            2,
		"lockcell_tenant_rpc_seconds{tenant=a}":                                                  2,
		"lockcell_tenant_shed_total{reason=ops_per_second,tenant=a}":                             1,
		"lockcell_tenant_queued_commands{tenant=a}":                                              1,
		"lockcell_state_comparisons_total":                                                       0,
	}
	judged := 0
	check := func(want map[string]float64) {
		t.Helper()
		got := gatherValues(t, m)
		for k, v := range want {
			g, ok := got[k]
			if !ok || g != v {
				t.Errorf("%s = %v (exported %v); want %v", k, g, ok, v)
			}
			judged++
		}
		for k := range got {
			if k == "lockcell_rpc_seconds{method="+ka+"}" || k == "lockcell_tenant_rpc_seconds{tenant=-}" {
				t.Errorf("%s exported: a KeepAlive's long-poll must not count as latency", k)
			}
		}
	}
	check(want)
	if _, ok := gatherValues(t, m)["lockcell_transport_events_total{counter=bad_frames}"]; ok {
		t.Error("transport counters exported before the endpoint is up")
	}
	sessions, locks, up = 3, 1, true
	check(map[string]float64{
		"lockcell_sessions":   3,
		"lockcell_locks_held": 1,
		"lockcell_transport_events_total{counter=peer_frames_sent}":          5,
		"lockcell_transport_events_total{counter=bad_frames}":                3,
		"lockcell_transport_events_total{counter=reconnects}":                2,
		"lockcell_transport_events_total{counter=client_handshakes_full}":    7,
		"lockcell_transport_events_total{counter=client_handshakes_resumed}": 11,
	})

	// With no sources, only the counters are there.
	bare := gatherValues(t, newMetrics(metricsSources{}))
	for _, k := range []string{"lockcell_sessions", "lockcell_locks_held", "lockcell_state_comparisons_total", "lockcell_transport_events_total{counter=bad_frames}"} {
		if _, ok := bare[k]; ok {
			t.Errorf("%s exported without its source", k)
		}
	}
	if judged < 15 {
		t.Fatalf("judged %d values; want at least 15", judged)
	}
}

// TestMetricsLogWriterBacklog: the gauges of the log writer's backlog
// follow the Paxos core's status after every step: the writes in flight
// and the messages held, each from its own field, back to zero when the
// writes are durable.
func TestMetricsLogWriterBacklog(t *testing.T) {
	m := newMetrics(metricsSources{})
	prev := &paxos.Status{}
	judged := 0
	for _, c := range []struct{ writes, held int }{{0, 0}, {2, 7}, {5, 0}, {0, 3}, {0, 0}} {
		st := &paxos.Status{WritesInFlight: c.writes, HeldMessages: c.held}
		m.observeStatus(prev, st)
		prev = st
		got := gatherValues(t, m)
		for k, want := range map[string]int{"lockcell_paxos_writes_in_flight": c.writes, "lockcell_paxos_held_messages": c.held} {
			if g, ok := got[k]; !ok || g != float64(want) {
				t.Errorf("after a status of %d writes in flight and %d messages held: %s = %v (exported %v); want %d",
					c.writes, c.held, k, g, ok, want)
			}
			judged++
		}
	}
	if judged < 10 {
		t.Fatalf("judged %d values; want 10", judged)
	}
}

// fakeLocks is an applied state of tenants and their locks for
// countLocksHeld.
type fakeLocks struct {
	tenants []api.TenantInfo
	locks   map[string][]api.LockInfo
	errs    map[string]error
	admins  int // calls made as the administrator
}

func (f *fakeLocks) ListTenants(c namespace.Caller) ([]api.TenantInfo, error) {
	if c.Principal == "admin" {
		f.admins++
	}
	if err := f.errs[""]; err != nil {
		return nil, err
	}
	return f.tenants, nil
}

func (f *fakeLocks) ListLocks(c namespace.Caller, tenant string) ([]api.LockInfo, error) {
	if c.Principal == "admin" {
		f.admins++
	}
	return f.locks[tenant], f.errs[tenant]
}

// TestCountLocksHeld: every holder of every lock of every tenant counts
// once (a shared lock held by three sessions counts three); a tenant whose
// locks cannot be read is skipped, and a state whose tenants cannot be
// listed counts zero.
func TestCountLocksHeld(t *testing.T) {
	f := &fakeLocks{
		tenants: []api.TenantInfo{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		locks: map[string][]api.LockInfo{
			"a": {{Holders: []uint64{1, 2, 3}}, {Holders: []uint64{4}}, {}},
			"b": {{Holders: []uint64{9}}},
			"c": {{Holders: []uint64{5, 6}}},
		},
		errs: map[string]error{"b": errors.New("unreadable")},
	}
	admin := namespace.Caller{Principal: "admin"}
	if n := countLocksHeld(f, admin); n != 6 {
		t.Fatalf("counted %d grants; want 6 (3+1 of a, b skipped, 2 of c)", n)
	}
	if f.admins != 4 {
		t.Fatalf("%d reads as the administrator; want 4 (every read)", f.admins)
	}
	f.errs[""] = errors.New("no tenants")
	if n := countLocksHeld(f, admin); n != 0 {
		t.Fatalf("counted %d grants when the tenants cannot be listed; want 0", n)
	}
}
