package operator_test

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// env is a three-replica in-process cell with an administrator's Operator
// and one of a principal of tenant celltest.Tenant ("t").
type env struct {
	c      *celltest.Cell
	admin  *operator.Operator
	tenant *operator.Operator
}

// start starts the cell inside the synctest bubble.
func start(t *testing.T, ctx context.Context) env {
	t.Helper()
	c := celltest.Start(t, celltest.Options{Replicas: 3})
	return env{
		c:      c,
		admin:  operator.New(c.Dial(ctx, c.ClientConfig(cell.AdminTenant, cell.DefaultAdminPrincipal))),
		tenant: operator.New(c.Dial(ctx, c.ClientConfig("", "alice"))),
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestAdminOnlyCallsRefused: every call only the cell administrator may
// make fails, for a tenant's principal, with an error wrapping
// api.ErrPermissionDenied that names the call, and changes nothing: the
// tenants and their quotas, the tokens, the master and the snapshot writer
// are as before.
func TestAdminOnlyCallsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t)
		e := start(t, ctx)
		before, err := e.admin.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		master := e.c.Master().ID()
		var snap bytes.Buffer
		calls := []struct {
			name string
			call func() error
		}{
			{"create tenant", func() error {
				_, err := e.tenant.CreateTenant(ctx, "u", api.TenantQuota{}, api.ACLNames{})
				return err
			}},
			{"update tenant", func() error {
				_, err := e.tenant.UpdateTenant(ctx, celltest.Tenant, api.TenantQuota{MaxNodes: 1})
				return err
			}},
			{"issue token", func() error {
				_, _, err := e.tenant.IssueToken(ctx, celltest.Tenant, "mallory")
				return err
			}},
			{"revoke token", func() error {
				_, err := e.tenant.RevokeToken(ctx, celltest.Tenant, "someid")
				return err
			}},
			{"list tokens", func() error {
				_, err := e.tenant.ListTokens(ctx, celltest.Tenant)
				return err
			}},
			{"step down", func() error { return e.tenant.StepDown(ctx, 0) }},
			{"step down", func() error {
				_, err := e.tenant.HandOver(ctx, 0)
				return err
			}},
			{"save snapshot", func() error {
				_, err := e.tenant.SaveSnapshot(ctx, &snap)
				return err
			}},
		}
		judged := 0
		for _, c := range calls {
			err := c.call()
			if !errors.Is(err, api.ErrPermissionDenied) {
				t.Errorf("%s as a tenant's principal: %v; want PermissionDenied", c.name, err)
				continue
			}
			if !strings.HasPrefix(err.Error(), c.name) {
				t.Errorf("%s: the error %q does not name the call", c.name, err)
			}
			judged++
		}
		if judged != len(calls) {
			t.Fatalf("%d of %d admin-only calls refused", judged, len(calls))
		}
		after, err := e.admin.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sameTenants(before, after) {
			t.Errorf("the refused calls changed the tenants: %+v, then %+v", before, after)
		}
		if toks, err := e.admin.ListTokens(ctx, celltest.Tenant); err != nil || len(toks) != 0 {
			t.Errorf("tokens after the refused calls: %+v, %v; want none", toks, err)
		}
		if m := e.c.Master(); m == nil || m.ID() != master {
			t.Errorf("the master changed after a refused step-down: was %d, now %v", master, m)
		}
		if snap.Len() != 0 {
			t.Errorf("a refused snapshot wrote %d bytes", snap.Len())
		}
		// A tenant's principal sees its own tenant only, and may not list
		// another tenant's sessions or locks.
		own, err := e.tenant.ListTenants(ctx)
		if err != nil || len(own) != 1 || own[0].Name != celltest.Tenant {
			t.Errorf("ListTenants as a tenant's principal: %+v, %v; want its own tenant only", own, err)
		}
		if _, err := e.admin.CreateTenant(ctx, "u", api.TenantQuota{}, api.ACLNames{}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.tenant.ListSessions(ctx, "u"); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("ListSessions of another tenant: %v; want PermissionDenied", err)
		}
		if _, err := e.tenant.ListLocks(ctx, "u"); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("ListLocks of another tenant: %v; want PermissionDenied", err)
		}
	})
}

// sameTenants compares tenants by name and quota (usage may move).
func sameTenants(a, b []api.TenantInfo) bool {
	return slices.EqualFunc(a, b, func(x, y api.TenantInfo) bool { return x.Name == y.Name && x.Quota == y.Quota })
}

// TestOperatorCalls: each call does what its doc says for the
// administrator: status (through the master and of each replica),
// tenants, tokens, the lists of sessions and locks, a snapshot whose bytes
// match its size and CRC, and a hand-over to the named successor.
func TestOperatorCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t)
		e := start(t, ctx)
		master := e.c.Master().ID()

		st, err := e.admin.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.Cell != "test" || st.Master != master || len(st.Replicas) != 3 || st.Applied == 0 {
			t.Errorf("Status: %+v; want cell test, master %d, 3 replicas, a nonzero applied slot", st, master)
		}
		for _, id := range e.c.IDs() {
			rs, err := operator.StatusOfReplica(ctx, e.c.ClientConfig(cell.AdminTenant, cell.DefaultAdminPrincipal), celltest.Addr(id))
			if err != nil {
				t.Fatalf("StatusOfReplica(%d): %v", id, err)
			}
			if rs.Replica != id || rs.Master != master {
				t.Errorf("StatusOfReplica(%d): replica %d, master %d; want %d, %d", id, rs.Replica, rs.Master, id, master)
			}
		}

		// Tenants.
		ti, err := e.admin.CreateTenant(ctx, "u", api.TenantQuota{MaxNodes: 10}, api.ACLNames{})
		if err != nil || ti.Name != "u" || ti.Quota.MaxNodes != 10 {
			t.Fatalf("CreateTenant: %+v, %v", ti, err)
		}
		ti, err = e.admin.UpdateTenant(ctx, "u", api.TenantQuota{MaxNodes: 20})
		if err != nil || ti.Quota.MaxNodes != 20 {
			t.Fatalf("UpdateTenant: %+v, %v", ti, err)
		}
		ts, err := e.admin.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, x := range ts {
			names = append(names, x.Name)
			if x.Name == "u" && x.Quota.MaxNodes != 20 {
				t.Errorf("ListTenants: u's quota %+v; want MaxNodes 20", x.Quota)
			}
		}
		if !slices.Contains(names, "t") || !slices.Contains(names, "u") {
			t.Errorf("ListTenants: %v; want t and u among them", names)
		}

		// Tokens, and the sessions and locks of the token's principal.
		tok, info, err := e.admin.IssueToken(ctx, "u", "bot")
		if err != nil || tok == "" || info.Tenant != "u" || info.Principal != "bot" {
			t.Fatalf("IssueToken: %q, %+v, %v", tok, info, err)
		}
		cfg := e.c.ClientConfig("u", "ignored")
		cfg.Certificate, cfg.Token = nil, tok
		bot := e.c.Dial(ctx, cfg)
		s, err := bot.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h, err := s.Open(ctx, "/u/l", client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.Acquire(ctx, api.LockExclusive)
		if err != nil {
			t.Fatal(err)
		}
		toks, err := e.admin.ListTokens(ctx, "u")
		if err != nil || len(toks) != 1 || toks[0].ID != info.ID {
			t.Errorf("ListTokens: %+v, %v; want the one issued", toks, err)
		}
		ss, err := e.admin.ListSessions(ctx, "u")
		if err != nil || len(ss) != 1 || ss[0].ID != s.ID() || ss[0].Principal != "bot" {
			t.Errorf("ListSessions(u): %+v, %v; want session %d of bot", ss, err, s.ID())
		}
		ls, err := e.admin.ListLocks(ctx, "u")
		if err != nil || len(ls) != 1 || ls[0].Path != "/u/l" || ls[0].Generation != l.Generation() || !slices.Equal(ls[0].Holders, []uint64{s.ID()}) {
			t.Errorf("ListLocks(u): %+v, %v; want /u/l held by session %d at generation %d", ls, err, s.ID(), l.Generation())
		}
		if _, err := e.admin.RevokeToken(ctx, "u", info.ID); err != nil {
			t.Fatal(err)
		}
		if toks, err := e.admin.ListTokens(ctx, "u"); err != nil || len(toks) != 0 {
			t.Errorf("ListTokens after RevokeToken: %+v, %v; want none", toks, err)
		}
		if _, err := client.Dial(ctx, cfg); !errors.Is(err, api.ErrUnauthenticated) {
			t.Errorf("dial with the revoked token: %v; want Unauthenticated", err)
		}

		// A snapshot: every byte, matching the size and CRC it announced.
		var snap bytes.Buffer
		head, err := e.admin.SaveSnapshot(ctx, &snap)
		if err != nil {
			t.Fatal(err)
		}
		if head.Cell != "test" || head.Slot == 0 || head.Size == 0 || uint64(snap.Len()) != head.Size ||
			crc32.Checksum(snap.Bytes(), crc32.MakeTable(crc32.Castagnoli)) != head.CRC {
			t.Errorf("SaveSnapshot: %+v with %d bytes (CRC %08x)", head, snap.Len(), crc32.Checksum(snap.Bytes(), crc32.MakeTable(crc32.Castagnoli)))
		}

		// A hand-over to a named successor.
		next := e.c.IDs()[0]
		if next == master {
			next = e.c.IDs()[1]
		}
		succ, err := e.admin.HandOver(ctx, next)
		if err != nil {
			t.Fatal(err)
		}
		if succ != next {
			t.Errorf("HandOver(%d) handed over to %d", next, succ)
		}
		for {
			if m := e.c.Master(); m != nil && m.ID() == succ {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("replica %d never served after the hand-over", succ)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := e.admin.StepDown(ctx, 0); err != nil {
			t.Fatalf("StepDown: %v", err)
		}
		m, err := e.c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.ID() == succ {
			t.Errorf("StepDown: replica %d still serves", succ)
		}
	})
}

// TestOperatorErrors: bad requests get the typed error that names their
// cause and change nothing; a call after the Client's Close returns
// client.ErrClosed; StatusOfReplica of an address nobody answers returns
// an error naming it when its context ends.
func TestOperatorErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := testCtx(t)
		e := start(t, ctx)
		before, err := e.admin.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			want error
			call func() error
		}{
			{"an existing tenant", api.ErrAlreadyExists, func() error {
				_, err := e.admin.CreateTenant(ctx, celltest.Tenant, api.TenantQuota{}, api.ACLNames{})
				return err
			}},
			{"the administrators' tenant", api.ErrInvalidArgument, func() error {
				_, err := e.admin.CreateTenant(ctx, cell.AdminTenant, api.TenantQuota{}, api.ACLNames{})
				return err
			}},
			{"a tenant name with a slash", api.ErrInvalidArgument, func() error {
				_, err := e.admin.CreateTenant(ctx, "a/b", api.TenantQuota{}, api.ACLNames{})
				return err
			}},
			{"an unknown tenant's quota", api.ErrNotFound, func() error {
				_, err := e.admin.UpdateTenant(ctx, "nosuch", api.TenantQuota{MaxNodes: 5})
				return err
			}},
			{"an unknown token", api.ErrNotFound, func() error {
				_, err := e.admin.RevokeToken(ctx, celltest.Tenant, "0123456789abcdef")
				return err
			}},
			{"a malformed token id", api.ErrInvalidArgument, func() error {
				_, err := e.admin.RevokeToken(ctx, celltest.Tenant, "nosuch")
				return err
			}},
			{"a token of an unknown tenant", api.ErrNotFound, func() error {
				_, _, err := e.admin.IssueToken(ctx, "nosuch", "p")
				return err
			}},
		}
		judged := 0
		for _, c := range cases {
			if err := c.call(); !errors.Is(err, c.want) {
				t.Errorf("%s: %v; want %v", c.name, err, c.want)
				continue
			}
			judged++
		}
		if judged != len(cases) {
			t.Fatalf("%d of %d bad requests got their typed error", judged, len(cases))
		}
		after, err := e.admin.ListTenants(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !sameTenants(before, after) {
			t.Errorf("the refused calls changed the tenants: %+v, then %+v", before, after)
		}

		// Nobody at this address: the error names it once ctx ends.
		const nobody = "10.9.9.9:7000"
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = operator.StatusOfReplica(sctx, e.c.ClientConfig(cell.AdminTenant, cell.DefaultAdminPrincipal), nobody)
		cancel()
		if err == nil || !strings.Contains(err.Error(), nobody) {
			t.Errorf("StatusOfReplica(%s): %v; want an error naming the address", nobody, err)
		}

		// After Close.
		if err := e.tenant.Client().Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := e.tenant.Status(ctx); !errors.Is(err, client.ErrClosed) {
			t.Errorf("Status after Close: %v; want client.ErrClosed", err)
		}
	})
}
