package cell_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// TestCreateSessionsBatch: n NewSession calls made at once on one Client
// reach the master as a few CreateSessions calls (one in flight, the rest
// queued behind it and sent together), never as a CreateSession each, and
// give n distinct sessions that stay safe past a lease. Floors: n sessions
// checked, and at least one CreateSessions call counted.
func TestCreateSessionsBatch(t *testing.T) {
	const n = 300
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3})
		ctx := testCtx(t, 10*time.Minute)
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		sessions := make([]*client.Session, n)
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				s, err := cl.NewSession(ctx)
				if err != nil {
					errs <- err
					return
				}
				sessions[i] = s
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("NewSession: %v", err)
		}
		metrics := m.MetricsText()
		batches := metricSum(metrics, "lockcell_rpcs_total", `method="CreateSessions"`)
		singles := metricSum(metrics, "lockcell_rpcs_total", `method="CreateSession"`)
		t.Logf("%d sessions opened in %v CreateSessions calls and %v CreateSession calls", n, batches, singles)
		for _, l := range strings.Split(metrics, "\n") {
			if strings.Contains(l, "CreateSession") && strings.HasPrefix(l, "lockcell_rpcs_total") || strings.HasPrefix(l, "lockcell_tenant_shed") {
				t.Log(l)
			}
		}
		if batches < 1 || batches > 10 {
			t.Errorf("%d concurrent NewSession calls made %v CreateSessions calls; want 1 to 10", n, batches)
		}
		if singles != 0 {
			t.Errorf("%v CreateSession calls; want none (every session asked for in a batch)", singles)
		}
		ids := map[uint64]bool{}
		for _, s := range sessions {
			if ids[s.ID()] {
				t.Fatalf("session %d handed out twice", s.ID())
			}
			ids[s.ID()] = true
		}
		if st := m.Status(); st.Sessions < n {
			t.Fatalf("the master holds %d sessions, want %d", st.Sessions, n)
		}
		time.Sleep(20 * time.Second) // past a 12 s lease: the KeepAlives keep them
		checked := 0
		for _, s := range sessions {
			if st := s.State(); st != client.StateSafe {
				t.Fatalf("session %d is %v after a lease; want safe", s.ID(), st)
			}
			checked++
		}
		if checked != n {
			t.Fatalf("checked %d sessions, want %d", checked, n)
		}
	})
}

// TestCreateSessionsQuota: a tenant's session quota holds for a batch
// exactly as for as many single creations: a raw CreateSessions call
// that would pass it creates the sessions that fit, in order, and refuses
// the rest naming the quota; a batch when the quota is used up fails as a
// whole; concurrent NewSession calls on one Client (joined into batches)
// get exactly the quota's sessions and the quota's error for the rest.
func TestCreateSessionsQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 5*time.Minute)
		admin := certActor(t, lc, "admin", cell.AdminTenant, "admin")
		for _, name := range []string{"qa", "qb"} {
			adminCall(t, ctx, admin, api.MethodCreateTenant, &api.TenantRequest{Name: name, Quota: api.TenantQuota{MaxSessions: 5}}, &api.TenantResponse{})
		}

		a := certActor(t, lc, "qa/p", "qa", "p")
		var resp api.CreateSessionsResponse
		if err := a.call(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: 3}, &resp); err != nil {
			t.Fatalf("CreateSessions(3): %v", err)
		}
		resp = api.CreateSessionsResponse{}
		if err := a.call(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: 4}, &resp); err != nil {
			t.Fatalf("CreateSessions(4) with two left: %v", err)
		}
		if len(resp.Sessions) != 4 {
			t.Fatalf("CreateSessions(4) answered %d entries", len(resp.Sessions))
		}
		for i, e := range resp.Sessions {
			if i < 2 {
				if e.Err != nil || e.Session == 0 || e.LeaseTimeout <= 0 {
					t.Fatalf("entry %d: %+v; want a session (two fit the quota)", i, e)
				}
				continue
			}
			wantQuota(t, "entry past the quota", e.Err, "max_sessions (5)")
			if e.Session != 0 {
				t.Fatalf("entry %d refused but names session %d", i, e.Session)
			}
		}
		err := a.call(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: 2}, &resp)
		wantQuota(t, "a batch with the quota used up", err, "max_sessions (5)")
		var sl api.ListSessionsResponse
		adminCall(t, ctx, admin, api.MethodListSessions, &api.ListRequest{Tenant: "qa"}, &sl)
		if len(sl.Sessions) != 5 {
			t.Fatalf("tenant qa has %d sessions, want 5 (its quota)", len(sl.Sessions))
		}

		const callers = 8
		cl := lc.Dial(ctx, lc.ClientConfig("qb", "p"))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var opened int
		var refused []error
		for range callers {
			wg.Go(func() {
				_, err := cl.NewSession(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, err)
					return
				}
				opened++
			})
		}
		wg.Wait()
		if opened != 5 || len(refused) != callers-5 {
			t.Fatalf("%d NewSession calls: %d opened, %d refused (%v); want 5 and %d", callers, opened, len(refused), refused, callers-5)
		}
		for _, err := range refused {
			wantQuota(t, "NewSession past the quota", err, "max_sessions (5)")
		}
	})
}

// TestCreateSessionsRate: a CreateSessions call is admitted as Count
// calls against the tenant's ops_per_second: with three a second to
// spend, a call for five creates three and sheds two with a RetryAfter;
// the next call at once is shed whole.
func TestCreateSessionsRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 5*time.Minute)
		admin := certActor(t, lc, "admin", cell.AdminTenant, "admin")
		adminCall(t, ctx, admin, api.MethodCreateTenant, &api.TenantRequest{Name: "qo", Quota: api.TenantQuota{OpsPerSecond: 3}}, &api.TenantResponse{})
		a := certActor(t, lc, "qo/p", "qo", "p")
		if err := a.tc.dial(ctx); err != nil {
			t.Fatal(err)
		}
		var resp api.CreateSessionsResponse
		if err := a.tc.callOnce(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: 5}, &resp); err != nil {
			t.Fatalf("CreateSessions(5): %v", err)
		}
		created, shed := 0, 0
		for i, e := range resp.Sessions {
			switch {
			case e.Err == nil && e.Session != 0:
				created++
			case e.Err != nil && e.Err.Code == api.ResourceExhausted && e.Err.RetryAfter > 0 && strings.Contains(e.Err.Msg, "ops_per_second"):
				shed++
			default:
				t.Fatalf("entry %d: %+v; want a session or a shed naming ops_per_second", i, e)
			}
		}
		if created != 3 || shed != 2 {
			t.Fatalf("CreateSessions(5) at 3 ops/s: %d created, %d shed; want 3 and 2", created, shed)
		}
		err := a.tc.callOnce(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: 2}, &resp)
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || ae.RetryAfter <= 0 {
			t.Fatalf("CreateSessions(2) with the rate spent: %v; want ResourceExhausted with a RetryAfter", err)
		}
	})
}

// TestCreateSessionsBadCount: a CreateSessions call asking for no
// sessions, a negative number, or more than api.MaxCreateSessions is
// refused with InvalidArgument naming the bound, and creates nothing.
func TestCreateSessionsBadCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 5*time.Minute)
		a := certActor(t, lc, "t/p", "t", "p")
		m := lc.Master()
		if m == nil {
			t.Fatal("no master")
		}
		before := m.Status().Sessions
		checked := 0
		for _, n := range []int{0, -1, api.MaxCreateSessions + 1, 1 << 20} {
			var resp api.CreateSessionsResponse
			err := a.call(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: n}, &resp)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.InvalidArgument || !strings.Contains(ae.Msg, "1 to 256") {
				t.Fatalf("CreateSessions(%d): %v; want InvalidArgument naming the bound", n, err)
			}
			checked++
		}
		synctest.Wait()
		if after := m.Status().Sessions; after != before || checked != 4 {
			t.Fatalf("after %d bad calls the master holds %d sessions, %d before", checked, after, before)
		}
		// The bound itself is fine.
		var resp api.CreateSessionsResponse
		if err := a.call(ctx, api.MethodCreateSessions, &api.CreateSessionsRequest{Count: api.MaxCreateSessions}, &resp); err != nil {
			t.Fatalf("CreateSessions(%d): %v", api.MaxCreateSessions, err)
		}
		if len(resp.Sessions) != api.MaxCreateSessions {
			t.Fatalf("CreateSessions(%d) answered %d entries", api.MaxCreateSessions, len(resp.Sessions))
		}
	})
}

// TestCreateSessionsOneFairShareUnit: a CreateSessions call is one unit
// of its tenant's fair share at the master, however many sessions it asks
// for: with a tenant queue of 2 and a window of 2, 600 NewSession calls
// made at once on three Clients (joined into calls of up to 256) are all
// served, none shed, and their creations share slots far beyond the
// window's 2. Counted as one unit per session, the same calls would be
// shed for a full queue and trickle through two sessions a slot. Floors:
// 600 sessions opened and held, slots counted.
func TestCreateSessionsOneFairShareUnit(t *testing.T) {
	const perClient, clients = 200, 3
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{Replicas: 3, Tune: func(cfg *cell.Config) {
			cfg.ProposalWindow, cfg.TenantQueue = 2, 2
		}})
		ctx := testCtx(t, 10*time.Minute)
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		before := m.Status()
		var wg sync.WaitGroup
		errs := make(chan error, perClient*clients)
		for i := range clients {
			cl := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("p%d", i)))
			for range perClient {
				wg.Go(func() {
					if _, err := cl.NewSession(ctx); err != nil {
						errs <- err
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("NewSession: %v", err)
		}
		after := m.Status()
		slots := after.Chosen - before.Chosen
		metrics := m.MetricsText()
		shed := metricSum(metrics, "lockcell_tenant_shed_total")
		t.Logf("%d sessions in %d slots; %v shed", perClient*clients, slots, shed)
		if after.Sessions < perClient*clients || slots == 0 {
			t.Fatalf("the master holds %d sessions after %d slots; want %d", after.Sessions, slots, perClient*clients)
		}
		if shed != 0 {
			t.Errorf("%v commands shed; want none (three calls in flight at most, against a queue of 2 and a window of 2 calls)", shed)
		}
		if slots*8 > perClient*clients {
			t.Errorf("%d sessions took %d slots; want at least 8 a slot with a window of 2 calls", perClient*clients, slots)
		}
	})
}
