package cell_test

import (
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
)

// TestMetricsAndStatusRevealNoTenantData covers the matrix's secondary
// paths on the operators' HTTP listener. Metrics carry a tenant label, but
// its values come only from verified credentials (certificate or valid
// token): calls without credentials, with a revoked token or a forged one
// count under "-", so nobody can mint label values; and no metric, nor the
// status page, nor /status, carries a principal, a path or a token (tenant
// names appear only beside per-tenant numbers: metric labels and the status
// page's tenant table). The
// HTTP listener itself is the operators' (cell.Config.HTTPAddr): tenants
// reach the cell only through the client protocol, where CellStatus hides
// the progress fields from them (TestAuthorizationMatrix).
func TestMetricsAndStatusRevealNoTenantData(t *testing.T) {
	ctx := testCtx(t, 90*time.Second)
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "reveal", HTTP: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	admin := certActor(t, lc, "admin", cell.AdminTenant, "admin")
	for _, n := range []string{"alpha", "beta"} {
		adminCall(t, ctx, admin, api.MethodCreateTenant, &api.TenantRequest{Name: n}, &api.TenantResponse{})
	}
	b := certActor(t, lc, "beta", "beta", "principal-b1")
	if err := b.newSession(ctx); err != nil {
		t.Fatal(err)
	}
	b.mustOpen(t, ctx, api.OpenRequest{Path: "/beta/secret-path", Create: true, Contents: []byte("secret-contents")})
	tok := issueToken(t, ctx, admin, "alpha", "principal-tok")
	a := tokenActor(t, lc, "alpha-token", tok.Token)
	if err := a.newSession(ctx); err != nil {
		t.Fatal(err)
	}
	rev := issueToken(t, ctx, admin, "beta", "principal-rev")
	adminCall(t, ctx, admin, api.MethodRevokeToken, &api.RevokeTokenRequest{Tenant: "beta", ID: rev.Info.ID}, &api.IssueTokenResponse{})
	forged := tok.Token[:len(tok.Token)-4] + "AAAA"
	for _, bad := range []string{"", rev.Token, forged, "lct1_not-a-token"} {
		x := tokenActor(t, lc, "bad", bad)
		if err := x.newSession(ctx); err == nil || !strings.Contains(codeOf(err), "unauthenticated") {
			t.Fatalf("CreateSession with token %q: %v; want unauthenticated", bad, err)
		}
	}
	m := lc.Master()
	if m == nil {
		t.Fatal("no master")
	}
	metrics := httpGet(t, ctx, "http://"+m.HTTPAddr()+"/metrics")
	// Tenant label values: only tenants that proved who they are.
	labels := map[string]bool{}
	for _, mm := range regexp.MustCompile(`tenant="([^"]*)"`).FindAllStringSubmatch(metrics, -1) {
		labels[mm[1]] = true
	}
	for l := range labels {
		if !slices.Contains([]string{"-", "alpha", "beta"}, l) {
			t.Errorf("metrics carry tenant label %q", l)
		}
	}
	if n := metricSum(metrics, "lockcell_rpcs_total", `tenant="-"`, `method="CreateSession"`, `code="unauthenticated"`); n < 4 {
		t.Errorf("refused CreateSessions counted under \"-\": %v; want 4", n)
	}
	if n := metricSum(metrics, "lockcell_rpcs_total", `tenant="alpha"`, `method="CreateSession"`, `code="ok"`); n != 1 {
		t.Errorf("the token's CreateSession counted under alpha: %v; want 1", n)
	}
	if n := metricSum(metrics, "lockcell_rpcs_total", `tenant="beta"`, `code="unauthenticated"`); n != 0 {
		t.Errorf("the revoked token's calls were counted under its tenant: %v", n)
	}
	pages := map[string]string{"/metrics": metrics}
	for _, r := range lc.Running() {
		for _, p := range []string{"/", "/status"} {
			pages[r.HTTPAddr()+p] = httpGet(t, ctx, "http://"+r.HTTPAddr()+p)
		}
	}
	for name, body := range pages {
		for _, secret := range []string{"principal-b1", "principal-tok", "principal-rev", "secret-path", "secret-contents", tok.Token, tok.Info.ID[:8], "lct1_"} {
			if strings.Contains(body, secret) {
				t.Errorf("%s reveals %q", name, secret)
			}
		}
		// Tenant names appear where per-tenant numbers are shown (the
		// metrics' labels, the status page's tenant table), never in
		// /status, which mirrors what CellStatus tells any caller.
		if strings.HasSuffix(name, "/status") {
			for _, tenant := range []string{"alpha", "beta"} {
				if strings.Contains(body, tenant) {
					t.Errorf("%s reveals tenant %q", name, tenant)
				}
			}
		}
	}
}
