package cell_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

// wantQuota checks that err is ResourceExhausted naming quota.
func wantQuota(t *testing.T, what string, err error, quota string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || !strings.Contains(ae.Msg, quota) {
		t.Fatalf("%s: %v; want ResourceExhausted naming %s", what, err, quota)
	}
}

// resync makes a's requests follow a fail-over: it learns the new master's
// epoch from the master itself (its session's KeepAlive loop, started by
// keepAlive, acknowledges the fail-over).
func (a *actor) resync(t testing.TB, ctx context.Context, old uint64) {
	t.Helper()
	for {
		var st api.CellStatusResponse
		err := a.call(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: a.token}, &st)
		if err == nil && st.Master != 0 && st.Master == st.Replica && uint64(st.Epoch) != old {
			a.epoch = uint64(st.Epoch)
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: resync: %v", a.name, err)
		}
		time.Sleep(20 * time.Millisecond)
		_ = a.tc.dial(ctx)
	}
}

// quotaFixture is one tenant per quota, each used up to its limit.
type quotaFixture struct {
	sessions, nodes, bytes, contents, locks, waiters *actor
	holder                                           *actor
	lockH, lock2H, waitH                             api.Handle
	waiting                                          chan error
}

// TestQuotas fills every per-tenant quota — nodes, bytes, sessions, held
// locks, waiters, contents size, operations per second, KeepAlive budget —
// checks that the next use fails with ResourceExhausted naming the quota
// and its limit, and checks again after the master is killed: the quotas
// live in the replicated state, so the new master enforces the same ones.
func TestQuotas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 120*time.Second)
		admin := certActor(t, lc, "admin", cell.AdminTenant, "admin")
		quotas := map[string]api.TenantQuota{
			"qs": {MaxSessions: 2},
			"qn": {MaxNodes: 3},
			"qb": {MaxBytes: 10},
			"qc": {MaxContents: 8},
			"ql": {MaxLocks: 1},
			"qw": {MaxWaiters: 1},
			"qo": {OpsPerSecond: 2},
			"qk": {KeepAlivesPerSecond: 1},
		}
		for name, q := range quotas {
			var resp api.TenantResponse
			adminCall(t, ctx, admin, api.MethodCreateTenant, &api.TenantRequest{Name: name, Quota: q}, &resp)
			if resp.Tenant.Quota != q {
				t.Fatalf("tenant %s created with quota %+v; want %+v", name, resp.Tenant.Quota, q)
			}
		}
		session := func(tenant, principal string) *actor {
			a := certActor(t, lc, tenant+"/"+principal, tenant, principal)
			if err := a.newSession(ctx); err != nil {
				t.Fatalf("%s: CreateSession: %v", a.name, err)
			}
			keepAlive(t, ctx, lc, a, nil)
			return a
		}
		f := &quotaFixture{waiting: make(chan error, 1)}

		// Sessions: two, then no third.
		f.sessions = session("qs", "p")
		session("qs", "p")
		wantQuota(t, "third session", certActor(t, lc, "qs", "qs", "p").newSession(ctx), "max_sessions (2)")

		// Nodes: three below the root.
		f.nodes = session("qn", "p")
		for i := 0; i < 3; i++ {
			f.nodes.mustOpen(t, ctx, api.OpenRequest{Path: fmt.Sprintf("/qn/n%d", i), Create: true})
		}
		_, err := f.nodes.open(ctx, api.OpenRequest{Path: "/qn/n3", Create: true})
		wantQuota(t, "fourth node", err, "max_nodes (3)")

		// Bytes: ten in all.
		f.bytes = session("qb", "p")
		h := f.bytes.mustOpen(t, ctx, api.OpenRequest{Path: "/qb/f", Create: true, Contents: []byte("12345678")})
		_, err = f.bytes.open(ctx, api.OpenRequest{Path: "/qb/g", Create: true, Contents: []byte("123")})
		wantQuota(t, "11th byte by create", err, "max_bytes (10)")
		wantQuota(t, "11th byte by write", f.bytes.setContents(ctx, h, []byte("12345678901")), "max_bytes (10)")

		// Contents: no file over eight bytes, however much room is left.
		f.contents = session("qc", "p")
		hc := f.contents.mustOpen(t, ctx, api.OpenRequest{Path: "/qc/f", Create: true, Contents: []byte("12345678")})
		_, err = f.contents.open(ctx, api.OpenRequest{Path: "/qc/g", Create: true, Contents: []byte("123456789")})
		wantQuota(t, "9-byte file by create", err, "max_contents (8)")
		wantQuota(t, "9-byte file by write", f.contents.setContents(ctx, hc, []byte("123456789")), "max_contents (8)")

		// Locks: one grant.
		f.locks = session("ql", "p")
		f.lockH = f.locks.mustOpen(t, ctx, api.OpenRequest{Path: "/ql/a", Create: true})
		f.lock2H = f.locks.mustOpen(t, ctx, api.OpenRequest{Path: "/ql/b", Create: true})
		if err := f.locks.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: f.locks.hdr(), Handle: f.lockH, Mode: api.LockExclusive}, &api.SequencerResponse{}); err != nil {
			t.Fatal(err)
		}
		err = f.locks.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: f.locks.hdr(), Handle: f.lock2H, Mode: api.LockExclusive}, &api.SequencerResponse{})
		wantQuota(t, "second lock", err, "max_locks (1)")

		// Waiters: one blocked Acquire; a second is refused at once.
		f.holder = session("qw", "holder")
		f.waiters = session("qw", "waiter")
		hw := f.holder.mustOpen(t, ctx, api.OpenRequest{Path: "/qw/l", Create: true})
		if err := f.holder.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: f.holder.hdr(), Handle: hw, Mode: api.LockExclusive}, &api.SequencerResponse{}); err != nil {
			t.Fatal(err)
		}
		f.waitH = f.waiters.mustOpen(t, ctx, api.OpenRequest{Path: "/qw/l"})
		waiterCtx, stopWaiting := context.WithCancel(ctx)
		startWaiter := func() {
			w := certActor(t, lc, "qw/waiter", "qw", "waiter")
			w.sess, w.epoch = f.waiters.sess, f.waiters.epoch
			go func() {
				f.waiting <- w.tc.callOnce(waiterCtx, api.MethodAcquire, &api.AcquireRequest{Header: w.hdr(), Handle: f.waitH, Mode: api.LockExclusive, Wait: true}, &api.SequencerResponse{})
			}()
			waitFor(t, ctx, "the waiter to queue", func() bool {
				m := lc.Master()
				return m != nil && m.Status().LockWaiters == 1
			})
		}
		startWaiter()
		secondWaiter := func() error {
			// Refused at once; were it queued, it would wait for the holder.
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return f.waiters.call(wctx, api.MethodAcquire, &api.AcquireRequest{Header: f.waiters.hdr(), Handle: f.waitH, Mode: api.LockExclusive, Wait: true}, &api.SequencerResponse{})
		}
		wantQuota(t, "second waiter", secondWaiter(), "max_waiters (1)")

		checkRates := func() {
			// Operations per second: a burst of two, then refusals with a
			// retry hint.
			o := certActor(t, lc, "qo", "qo", "p")
			refused := 0
			for i := 0; i < 20; i++ {
				err := o.call(ctx, api.MethodListSessions, &api.ListRequest{}, &api.ListSessionsResponse{})
				var ae *api.Error
				if errors.As(err, &ae) && ae.Code == api.ResourceExhausted {
					if ae.RetryAfter <= 0 || !strings.Contains(ae.Msg, "ops_per_second (2)") {
						t.Fatalf("rate refusal without a retry hint or quota name: %+v", ae)
					}
					refused++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if refused == 0 {
				t.Fatal("20 calls at once never exceeded 2 per second")
			}
			// KeepAlive budget: one per second.
			k := certActor(t, lc, "qk", "qk", "p")
			if err := k.newSession(ctx); err != nil {
				t.Fatal(err)
			}

			// Five KeepAlives at once, on one connection: whatever the
			// machine's speed, at most two fit a budget of one per second
			// (the burst and at most one refill).
			if err := k.tc.dial(ctx); err != nil {
				t.Fatal(err)
			}
			results := make(chan error, 5)
			kctx, cancelKA := context.WithTimeout(ctx, 500*time.Millisecond)
			for i := 0; i < 5; i++ {
				go func() {
					results <- callConn(kctx, k.tc.conn, api.MethodKeepAlive, &api.KeepAliveRequest{Header: k.hdr()}, &api.KeepAliveResponse{})
				}()
			}
			refused = 0
			for i := 0; i < 5; i++ {
				err := <-results
				var ae *api.Error
				if errors.As(err, &ae) && ae.Code == api.ResourceExhausted {
					if ae.RetryAfter <= 0 || !strings.Contains(ae.Msg, "keepalives_per_second (1)") {
						t.Fatalf("KeepAlive refusal without a retry hint or quota name: %+v", ae)
					}
					refused++
				}
			}
			cancelKA()
			_ = k.tc.dial(ctx)
			if refused < 3 {
				t.Fatalf("of 5 KeepAlives at once only %d exceeded the budget of 1 per second", refused)
			}
			// Close it: a session nobody keeps alive would hold up writes
			// after the fail-over until its lease ran out.
			if err := k.call(ctx, api.MethodCloseSession, &api.CloseSessionRequest{Header: k.hdr()}, &api.Empty{}); err != nil {
				t.Fatal(err)
			}
		}
		checkRates()

		// Fail-over: kill the master; the new one enforces the same quotas.
		old := lc.Master()
		lc.Crash(old.ID())
		if _, err := lc.WaitMaster(ctx); err != nil {
			t.Fatal(err)
		}
		stopWaiting()
		<-f.waiting
		for _, a := range []*actor{f.sessions, f.nodes, f.bytes, f.contents, f.locks, f.holder, f.waiters} {
			a.resync(t, ctx, a.epoch)
		}
		waiterCtx, stopWaiting = context.WithCancel(ctx)
		defer stopWaiting()
		wantQuota(t, "third session after fail-over", certActor(t, lc, "qs", "qs", "p").newSession(ctx), "max_sessions (2)")
		_, err = f.nodes.open(ctx, api.OpenRequest{Path: "/qn/n3", Create: true})
		wantQuota(t, "fourth node after fail-over", err, "max_nodes (3)")
		wantQuota(t, "11th byte after fail-over", f.bytes.setContents(ctx, h, []byte("12345678901")), "max_bytes (10)")
		wantQuota(t, "9-byte file after fail-over", f.contents.setContents(ctx, hc, []byte("123456789")), "max_contents (8)")
		err = f.locks.call(ctx, api.MethodAcquire, &api.AcquireRequest{Header: f.locks.hdr(), Handle: f.lock2H, Mode: api.LockExclusive}, &api.SequencerResponse{})
		wantQuota(t, "second lock after fail-over", err, "max_locks (1)")
		f.waiters.epoch = f.holder.epoch
		startWaiter() // the client re-establishes its waiter with the new master
		wantQuota(t, "second waiter after fail-over", secondWaiter(), "max_waiters (1)")
		checkRates()

		// Usage as the administrator sees it: the waiter is counted.
		var lt api.ListTenantsResponse
		adminCall(t, ctx, admin, api.MethodListTenants, &api.ListRequest{}, &lt)
		for _, ti := range lt.Tenants {
			if ti.Name == "qw" && ti.Usage.Waiters != 1 {
				t.Fatalf("tenant qw usage %+v; want one waiter", ti.Usage)
			}
			if ti.Name == "qs" && ti.Usage.Sessions != 2 {
				t.Fatalf("tenant qs usage %+v; want two sessions", ti.Usage)
			}
		}
	})
}

// waitFor polls cond (state of another goroutine that has no channel to
// wait on) until it holds or ctx ends.
func waitFor(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
