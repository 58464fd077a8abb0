package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
)

// TestTokenClient: a client without a certificate authenticates with a
// tenant token issued by the administrator; it opens a session, takes a
// lock and writes; once the token is revoked, every call fails with
// Unauthenticated, the session ends (the master expires it: its lock is
// released) and a new client with the token cannot even dial.
func TestTokenClient(t *testing.T) {
	tc := startCell(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	adminCert, err := tc.AdminCertificate()
	if err != nil {
		t.Fatal(err)
	}
	admin := tc.dial(t, ctx, tc.configWith(adminCert))
	tok, info, err := operator.New(admin).IssueToken(ctx, "t", "robot")
	if err != nil {
		t.Fatal(err)
	}
	if info.Tenant != "t" || info.Principal != "robot" || info.ID == "" {
		t.Fatalf("token info %+v", info)
	}
	cfg := tc.configWith(adminCert)
	cfg.Certificate, cfg.Token = nil, tok
	c := tc.dial(t, ctx, cfg)
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
	other := tc.session(t, ctx, "other")
	oh, err := other.Open(ctx, "/t/tok", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oh.Acquire(ctx, api.LockExclusive); err != nil {
		t.Fatalf("the revoked session's lock was not released: %v", err)
	}
	if _, err := client.Dial(ctx, cfg); !errors.Is(err, api.ErrUnauthenticated) {
		t.Fatalf("dial with a revoked token: %v; want Unauthenticated", err)
	}
	// Both credentials at once are refused by the client itself.
	both := tc.configWith(adminCert)
	both.Token = tok
	if _, err := client.Dial(ctx, both); !errors.Is(err, client.ErrInvalidConfig) {
		t.Fatalf("dial with a certificate and a token: %v; want ErrInvalidConfig", err)
	}
	if _, _, err := operator.New(admin).IssueToken(ctx, "nosuch", "p"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("token for a missing tenant: %v; want NotFound", err)
	}
}
