package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// Status returns the cell's status as the master reports it (any replica
// if there is no master).
func (c *Client) Status(ctx context.Context) (*api.CellStatusResponse, error) {
	var resp api.CellStatusResponse
	if err := c.call(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: c.cfg.Token}, &resp); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &resp, nil
}

// StatusOf asks the replica at addr (over a connection of its own) for the
// cell's status as that replica sees it.
func (c *Client) StatusOf(ctx context.Context, addr string) (*api.CellStatusResponse, error) {
	return StatusOfReplica(ctx, c.cfg, addr)
}

// CreateTenant creates a tenant (cell administrator only). acl names the
// new tenant root's ACL files; the zero value lets every principal of the
// tenant in.
func (c *Client) CreateTenant(ctx context.Context, name string, quota api.TenantQuota, acl api.ACLNames) (api.TenantInfo, error) {
	var resp api.TenantResponse
	if err := c.call(ctx, api.MethodCreateTenant, &api.TenantRequest{Header: c.hdr(), Name: name, Quota: quota, ACL: acl}, &resp); err != nil {
		return api.TenantInfo{}, fmt.Errorf("create tenant %s: %w", name, err)
	}
	return resp.Tenant, nil
}

// UpdateTenant replaces a tenant's quota (cell administrator only).
func (c *Client) UpdateTenant(ctx context.Context, name string, quota api.TenantQuota) (api.TenantInfo, error) {
	var resp api.TenantResponse
	if err := c.call(ctx, api.MethodUpdateTenant, &api.TenantRequest{Header: c.hdr(), Name: name, Quota: quota}, &resp); err != nil {
		return api.TenantInfo{}, fmt.Errorf("update tenant %s: %w", name, err)
	}
	return resp.Tenant, nil
}

// ListTenants lists the tenants (cell administrator only).
func (c *Client) ListTenants(ctx context.Context) ([]api.TenantInfo, error) {
	var resp api.ListTenantsResponse
	if err := c.call(ctx, api.MethodListTenants, &api.ListRequest{Header: c.hdr()}, &resp); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return resp.Tenants, nil
}

// ListSessions lists the open sessions of tenant ("" for the caller's own).
func (c *Client) ListSessions(ctx context.Context, tenant string) ([]api.SessionInfo, error) {
	var resp api.ListSessionsResponse
	if err := c.call(ctx, api.MethodListSessions, &api.ListRequest{Header: c.hdr(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return resp.Sessions, nil
}

// ListLocks lists the held locks of tenant ("" for the caller's own).
func (c *Client) ListLocks(ctx context.Context, tenant string) ([]api.LockInfo, error) {
	var resp api.ListLocksResponse
	if err := c.call(ctx, api.MethodListLocks, &api.ListRequest{Header: c.hdr(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return resp.Locks, nil
}

// hdr is the header of a sessionless call: only the token, if any.
func (c *Client) hdr() api.Header { return api.Header{Token: c.cfg.Token} }

// IssueToken issues a tenant token for principal of tenant (cell
// administrator only). The token is the secret credential (Config.Token);
// the cell keeps only its hash and cannot show it again. info names it for
// RevokeToken.
func (c *Client) IssueToken(ctx context.Context, tenant, principal string) (token string, info api.TokenInfo, err error) {
	var resp api.IssueTokenResponse
	// Not idempotent (the api method table): a lost reply leaves a token
	// nobody knows, which the administrator may revoke (ListTokens shows
	// it).
	if err := c.call(ctx, api.MethodIssueToken, &api.IssueTokenRequest{Header: c.hdr(), Tenant: tenant, Principal: principal}, &resp); err != nil {
		return "", api.TokenInfo{}, fmt.Errorf("issue token for %s/%s: %w", tenant, principal, err)
	}
	return resp.Token, resp.Info, nil
}

// RevokeToken revokes the token id of tenant (cell administrator only):
// every call with it fails from then on, and its sessions are expired.
func (c *Client) RevokeToken(ctx context.Context, tenant, id string) (api.TokenInfo, error) {
	var resp api.IssueTokenResponse
	if err := c.call(ctx, api.MethodRevokeToken, &api.RevokeTokenRequest{Header: c.hdr(), Tenant: tenant, ID: id}, &resp); err != nil {
		return api.TokenInfo{}, fmt.Errorf("revoke token %s of %s: %w", id, tenant, err)
	}
	return resp.Info, nil
}

// ListTokens lists tenant's tokens, without their secrets (cell
// administrator only).
func (c *Client) ListTokens(ctx context.Context, tenant string) ([]api.TokenInfo, error) {
	var resp api.ListTokensResponse
	if err := c.call(ctx, api.MethodListTokens, &api.ListRequest{Header: c.hdr(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", tenant, err)
	}
	return resp.Tokens, nil
}

// CheckSequencer asks the cell whether seq is still current: its lock is
// held in its mode at its generation on the same node instance. It makes
// Session a sequencer.Checker for a sequencer.Validator.
func (s *Session) CheckSequencer(ctx context.Context, seq sequencer.Sequencer) (bool, string, error) {
	b, err := seq.Marshal()
	if err != nil {
		return false, "", err
	}
	var resp api.CheckSequencerResponse
	err = s.call(ctx, api.MethodCheckSequencer, func(h api.Header) any {
		return &api.CheckSequencerRequest{Header: h, Sequencer: b}
	}, &resp)
	if err != nil {
		return false, "", fmt.Errorf("check sequencer: %w", err)
	}
	return resp.Valid, resp.Reason, nil
}
