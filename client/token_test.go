package client_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// TestTokenClient: a client without a certificate authenticates with a
// tenant token issued by the administrator; it opens a session, takes a
// lock and writes; once the token is revoked, every call fails with
// Unauthenticated, the session ends (the master expires it: its lock is
// released, well within a session lease) and a new client with the token
// cannot even dial. It runs on celltest in simulated time.
func TestTokenClient(t *testing.T) {
	synctest.Test(t, testTokenClient)
}

func testTokenClient(t *testing.T) {
	tc := startSimCell(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	adminCert, err := tc.AdminCertificate()
	if err != nil {
		t.Fatal(err)
	}
	adminCfg := simConfigWith(tc, adminCert)
	admin := tc.Dial(ctx, adminCfg)
	tok, info, err := operator.New(admin).IssueToken(ctx, "t", "robot")
	if err != nil {
		t.Fatal(err)
	}
	if info.Tenant != "t" || info.Principal != "robot" || info.ID == "" {
		t.Fatalf("token info %+v", info)
	}
	cfg := adminCfg
	cfg.Certificate, cfg.Token = nil, tok
	c := tc.Dial(ctx, cfg)
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Tenant() != "t" || s.Principal() != "robot" {
		t.Fatalf("token session is %s/%s; want t/robot", s.Tenant(), s.Principal())
	}
	h, err := s.Open(ctx, "/t/tok", client.OpenOptions{Create: true, LockDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.SetContents(ctx, []byte("by token")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Acquire(ctx, api.LockExclusive); err != nil {
		t.Fatal(err)
	}
	toks, err := operator.New(admin).ListTokens(ctx, "t")
	if err != nil || len(toks) != 1 || toks[0].ID != info.ID {
		t.Fatalf("ListTokens: %v %+v", err, toks)
	}

	// Revocation: the session's calls fail at once and it ends.
	revoked := time.Now()
	if _, err := operator.New(admin).RevokeToken(ctx, "t", info.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.GetContents(ctx); !errors.Is(err, api.ErrUnauthenticated) && !errors.Is(err, client.ErrSessionExpired) {
		t.Fatalf("a read after revocation: %v; want Unauthenticated or session expired", err)
	}
	select {
	case <-s.Done():
	case <-ctx.Done():
		t.Fatal("the revoked token's session did not end")
	}
	// Its lock was released by the expiry.
	other := simSession(t, ctx, tc, "other")
	oh, err := other.Open(ctx, "/t/tok", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oh.Acquire(ctx, api.LockExclusive); err != nil {
		t.Fatalf("the revoked session's lock was not released: %v", err)
	}
	// The master expired it at the revocation, not its lease running out
	// (simulated time: the bound is exact).
	if d := time.Since(revoked); d >= testLease {
		t.Fatalf("the revoked session's lock was free only %v after the revocation, a whole session lease (%v)", d, testLease)
	}
	if _, err := client.Dial(ctx, cfg); !errors.Is(err, api.ErrUnauthenticated) {
		t.Fatalf("dial with a revoked token: %v; want Unauthenticated", err)
	}
	// Both credentials at once are refused by the client itself.
	both := adminCfg
	both.Token = tok
	if _, err := client.Dial(ctx, both); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("dial with a certificate and a token: %v; want ErrInvalidConfig", err)
	}
	if _, _, err := operator.New(admin).IssueToken(ctx, "nosuch", "p"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("token for a missing tenant: %v; want NotFound", err)
	}
}
