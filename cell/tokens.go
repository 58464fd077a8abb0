package cell

import (
	"context"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

// Token administration (see auth.go for how tokens authenticate).

// tokenApplied reacts to applied token commands: a revocation ends the
// sessions bound to the token. It runs on the run loop goroutine.
func (m *master) tokenApplied(reply namespace.Reply) {
	if tr, ok := reply.(*namespace.TokenRevoked); ok {
		m.tokenRevoked(tr.Info.ID)
	}
}

func handleIssueToken(ctx context.Context, c *rpcCall, req *api.IssueTokenRequest) (any, error) {
	if req.Tenant == AdminTenant {
		return nil, errInvalid("tokens are for tenant principals; the cell administrator uses its certificate")
	}
	tok, id, hash, err := newToken()
	if err != nil {
		return nil, apiErr(api.Internal, "generating a token: "+err.Error())
	}
	reply, err := result(c.propose(ctx, &namespace.IssueToken{ID: id, Tenant: req.Tenant, Principal: req.Principal, Hash: hash}))
	if err != nil {
		return nil, err
	}
	c.d.log.Info("tenant token issued", "tenant", req.Tenant, "principal", req.Principal, "token", id)
	return &api.IssueTokenResponse{Token: tok, Info: reply.(*namespace.TokenIssued).Info}, nil
}

func handleRevokeToken(ctx context.Context, c *rpcCall, req *api.RevokeTokenRequest) (any, error) {
	reply, err := result(c.propose(ctx, &namespace.RevokeToken{Tenant: req.Tenant, ID: req.ID}))
	if err != nil {
		return nil, err
	}
	c.d.log.Info("tenant token revoked", "tenant", req.Tenant, "token", req.ID)
	return &api.IssueTokenResponse{Info: reply.(*namespace.TokenRevoked).Info}, nil
}

func handleListTokens(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	ts, err := c.d.state.ListTokens(c.caller, req.Tenant)
	if err != nil {
		return nil, err
	}
	return &api.ListTokensResponse{Tokens: ts}, nil
}
