package cell

import (
	"errors"
	"fmt"
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/paxos"
)

// TestPageStateFailovers: the status page records a master change each
// time the known (leader, epoch) changes, with the previous master, and
// keeps the last maxFailovers.
func TestPageStateFailovers(t *testing.T) {
	var p pageState
	p.noteStatus(&paxos.Status{})                                          // no leader known
	p.noteStatus(&paxos.Status{Leader: 1, Epoch: paxos.Ballot(1<<16 | 1)}) // first master
	p.noteStatus(&paxos.Status{Leader: 1, Epoch: paxos.Ballot(1<<16 | 1)}) // unchanged
	p.noteStatus(&paxos.Status{})                                          // leader lost for a moment
	p.noteStatus(&paxos.Status{Leader: 2, Epoch: paxos.Ballot(2<<16 | 2)}) // hand-over
	if got := p.mu.failovers; len(got) != 2 || got[0].master != 1 || got[0].previous != 0 || got[1].master != 2 || got[1].previous != 1 {
		t.Fatalf("failovers %+v; want 0→1, 1→2", got)
	}
	for i := range 3 * maxFailovers {
		id := paxos.ID(3 + i%3)
		p.noteStatus(&paxos.Status{Leader: id, Epoch: paxos.Ballot(uint64(3+i)<<16 | uint64(id))})
	}
	got := p.mu.failovers
	if len(got) != maxFailovers {
		t.Fatalf("%d failovers kept; want %d", len(got), maxFailovers)
	}
	if last := got[len(got)-1]; last.epoch.Round() != uint64(2+3*maxFailovers) {
		t.Fatalf("newest kept failover is round %d; want %d", last.epoch.Round(), 2+3*maxFailovers)
	}
}

// TestPageStateRates: per-tenant rates are measured since the replica
// started until a sample minRateWindow old exists, then since the newest
// such sample.
func TestPageStateRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var p pageState
		p.noteStatus(&paxos.Status{}) // the replica starts
		check := func(calls, wantRate float64, wantWindow time.Duration) {
			t.Helper()
			r, w := p.rates(map[string]tenantCounts{"a": {calls: calls, refused: calls / 2}})
			if math.Abs(r["a"].calls-wantRate) > 1e-9 || math.Abs(r["a"].refused-wantRate/2) > 1e-9 || w != wantWindow {
				t.Fatalf("after %v: rate %v over %v; want %v over %v", wantWindow, r["a"], w, wantRate, wantWindow)
			}
		}
		time.Sleep(5 * time.Second)
		check(50, 10, 5*time.Second) // since the start
		time.Sleep(time.Second)
		check(60, 10, 6*time.Second) // no sample 10 s old yet: since the start
		time.Sleep(14 * time.Second)
		check(200, 10, 14*time.Second) // since the sample at 6 s (60 calls)
		time.Sleep(2 * time.Minute)
		check(200, 0, 2*time.Minute) // old samples dropped: since the newest kept
	})
}

// fakePage is a snapshot the status page renders from, with no Replica.
func fakePage() (*statusPageHandler, *pageSources) {
	src := &pageSources{
		status: func() *api.CellStatusResponse {
			return &api.CellStatusResponse{Cell: "cellx", Replica: 2, Role: api.RoleFollower, Master: 1,
				Epoch: api.Epoch(3<<16 | 1), Chosen: 90, Applied: 88, Checksum: 0xabc,
				Replicas: []api.ReplicaStatus{
					{ID: 1, Addr: "10.0.0.1:7000", Master: true, Role: api.RoleMaster, Chosen: 90, Applied: 90, HeardMillis: 12},
					{ID: 2, Addr: "10.0.0.2:7000", Role: api.RoleFollower, Chosen: 90, Applied: 88, Lag: 2},
					{ID: 3, Addr: "10.0.0.3:7000", HeardMillis: -1},
				}}
		},
		readiness: func() (bool, string) { return false, "behind the master by 2 slots" },
		rebuild:   func() *RebuildStatus { return nil },
		tenants: func() ([]api.TenantInfo, error) {
			return []api.TenantInfo{
				{Name: "beta", Usage: api.TenantUsage{Sessions: 4, Locks: 2, Nodes: 9}},
				{Name: "alpha", Usage: api.TenantUsage{Sessions: 1, Locks: 0, Nodes: 3}},
			}, nil
		},
		counters: func() map[string]tenantCounts {
			return map[string]tenantCounts{"alpha": {calls: 50, refused: 10, shed: 5}, "-": {calls: 20, refused: 20}}
		},
		locksHeld: func() int { return 7 },
		logWriter: func() (int, int) { return 0, 0 },
	}
	return &statusPageHandler{src: *src, state: &pageState{}}, src
}

// TestStatusPageFromSources: the page renders what its sources say and
// nothing else: the status line scripts read, the master's address, the
// replicas' rows, readiness, sessions summed over tenants, the lock grants,
// a row per tenant of the state or of the counters (sorted, with rates over
// the window since the start), the master changes the page state saw, and
// the rebuild when there is one. Built on fakes alone, with no Replica.
func TestStatusPageFromSources(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h, _ := fakePage()
		h.state.noteStatus(&paxos.Status{Leader: 1, Epoch: paxos.Ballot(3<<16 | 1)})
		time.Sleep(10 * time.Second)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		body := rec.Body.String()
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
			t.Fatalf("Content-Type %q; want text/html", ct)
		}
		epoch := api.Epoch(3<<16 | 1).String()
		want := []string{
			"Replica 2 (follower). Master: replica 1, epoch " + epoch + ".",
			"Master: replica 1 (10.0.0.1:7000), epoch " + epoch + ".",
			"Ready: behind the master by 2 slots",
			"Chosen slot 90, applied slot 88",
			"<td>10.0.0.2:7000</td>",
			"<td>10.0.0.3:7000</td><td></td><td>-</td><td>-</td><td>-</td><td>-</td><td>never</td>",
			"12 ms ago",
			"Sessions open: 5. Lock grants held: 7.",
			"over the last 10s",
			// alpha: 50 calls, 10 refused, 5 shed in 10 s.
			`<tr><td>alpha</td><td class="n">1</td><td class="n">0</td><td class="n">3</td><td class="n">5.00</td><td class="n">1.00</td><td class="n">0.50</td></tr>`,
			`<tr><td>beta</td><td class="n">4</td><td class="n">2</td><td class="n">9</td>`,
			`<tr><td>-</td><td class="n">0</td>`,
			"<td>replica 1</td><td>" + epoch + "</td><td>none known (this replica had just started)</td>",
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("the page lacks %q", w)
			}
		}
		if a, b, c := strings.Index(body, "<td>-</td><td class"), strings.Index(body, "<td>alpha</td>"), strings.Index(body, "<td>beta</td>"); !(a < b && b < c) {
			t.Errorf("tenant rows out of order (-, alpha, beta): at %d, %d, %d", a, b, c)
		}
		if strings.Contains(body, "learner") {
			t.Error("the page tells of a rebuild the sources do not report")
		}
		if len(want) < 10 {
			t.Fatal("judged too little")
		}
	})
}

// TestStatusPageLogWriter: the page shows the log writer's backlog as its
// source reports it at each render: the writes in flight, then the
// messages held, each in its place.
func TestStatusPageLogWriter(t *testing.T) {
	h, _ := fakePage()
	judged := 0
	for _, c := range []struct{ writes, held int }{{0, 0}, {3, 11}, {1, 0}, {0, 4}} {
		h.src.logWriter = func() (int, int) { return c.writes, c.held }
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		want := fmt.Sprintf(`<p id="logwriter">Log writer: %d writes in flight (handed out, not yet durable), %d messages held until a write is durable.</p>`,
			c.writes, c.held)
		if body := rec.Body.String(); !strings.Contains(body, want) {
			t.Errorf("with %d writes in flight and %d messages held, the page lacks %q", c.writes, c.held, want)
		}
		judged++
	}
	if judged < 4 {
		t.Fatalf("judged %d renders; want 4", judged)
	}
}

// TestStatusPageRebuildAndErrors: a rebuild the sources report is shown;
// a state whose tenants cannot be listed still renders, with no sessions
// (and, on the first render, whose rate window is empty, no tenants).
func TestStatusPageRebuildAndErrors(t *testing.T) {
	h, _ := fakePage()
	h.src.rebuild = func() *RebuildStatus {
		return &RebuildStatus{Kind: "wiped", Reason: "the data directory was empty", Phase: "catching up", Since: time.Now()}
	}
	h.src.tenants = func() ([]api.TenantInfo, error) { return nil, errors.New("unreadable") }
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	body := rec.Body.String()
	for _, w := range []string{"This replica is a learner", "What was lost (wiped): the data directory was empty", "Rebuild: catching up",
		"Sessions open: 0. Lock grants held: 7.", `<td colspan="7">no tenants</td>`} {
		if !strings.Contains(body, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	if strings.Contains(body, "<td>beta</td>") {
		t.Error("the page shows a tenant its sources could not list")
	}
}

// TestTenantCounters: the page's per-tenant counters are read from the
// metrics: every call by tenant, the calls answered other than OK as
// refused, and the sheds.
func TestTenantCounters(t *testing.T) {
	m := newMetrics(metricsSources{})
	m.observeRPC("a", api.MethodCreateSession, nil, time.Millisecond)
	m.observeRPC("a", api.MethodCreateSession, apiErr(api.PermissionDenied, "no"), time.Millisecond)
	m.observeRPC("a", api.MethodKeepAlive, nil, time.Second)
	m.observeRPC("", api.MethodKeepAlive, apiErr(api.Unauthenticated, "no"), time.Second)
	m.shed("a", "ops_per_second")
	m.shed("a", "queue_full")
	got := tenantCounters(m.reg)
	want := map[string]tenantCounts{"a": {calls: 3, refused: 1, shed: 2}, "-": {calls: 1, refused: 1}}
	if len(got) != len(want) {
		t.Fatalf("counters %+v; want %+v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Fatalf("counters %+v; want %+v", got, want)
		}
	}
}
