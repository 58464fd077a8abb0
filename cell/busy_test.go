package cell_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
)

// TestPaxosBackPressureSheds: a master whose Paxos core takes few commands
// at a time (one slot in flight, one command a slot: the core refuses a
// proposal once four wait) while the fair scheduler lets hundreds through
// to it. The core's refusals reach clients as a shed (ResourceExhausted
// with a RetryAfter), which the client library retries, so every one of
// the sessions opened in a burst is created, and none is refused as
// Unavailable (which would make the client drop its connection and fail
// the CreateSession). Floor: the master shed at least one CreateSession
// that way, so the path was taken.
func TestPaxosBackPressureSheds(t *testing.T) {
	const (
		sessions = 400
		parallel = 200
	)
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3, Tune: func(cfg *cell.Config) {
			cfg.MaxBatch, cfg.MaxInflight = 1, 1
			cfg.ProposalWindow, cfg.TenantQueue = 4*parallel, 4*parallel
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			opened int
			failed []error
		)
		next := make(chan int, sessions)
		for i := range sessions {
			next <- i
		}
		close(next)
		for range parallel {
			wg.Go(func() {
				for range next {
					_, err := cl.NewSession(ctx)
					mu.Lock()
					if err != nil {
						failed = append(failed, err)
					} else {
						opened++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		metrics := m.MetricsText()
		// Sessions opened together share a CreateSessions call, whose
		// entries the core sheds one by one (counted as paxos_busy).
		shed := metricSum(metrics, "lockcell_rpcs_total", `method="CreateSession"`, `code="resource exhausted"`) +
			metricSum(metrics, "lockcell_rpcs_total", `method="CreateSessions"`, `code="resource exhausted"`) +
			metricSum(metrics, "lockcell_tenant_shed_total", `reason="paxos_busy"`)
		unavailable := metricSum(metrics, "lockcell_rpcs_total", `method="CreateSession"`, `code="unavailable"`) +
			metricSum(metrics, "lockcell_rpcs_total", `method="CreateSessions"`, `code="unavailable"`)
		t.Logf("%d sessions opened, %d failed; the master shed %v CreateSessions, refused %v as unavailable", opened, len(failed), shed, unavailable)
		for i, err := range failed {
			if i == 5 {
				break
			}
			t.Errorf("NewSession: %v", err)
		}
		if unavailable > 0 {
			t.Errorf("%v CreateSessions refused as unavailable; want the core's back-pressure shed as ResourceExhausted", unavailable)
		}
		if shed < 1 {
			t.Fatalf("the master shed no CreateSession: the Paxos core's back-pressure was not exercised")
		}
		if opened != sessions {
			t.Fatalf("%d of %d sessions opened", opened, sessions)
		}
		if st := m.Status(); st.Sessions < sessions {
			t.Fatalf("the master holds %d sessions, want %d", st.Sessions, sessions)
		}
	})
}
