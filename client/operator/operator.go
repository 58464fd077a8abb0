package operator

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// Operator makes operator and administrator calls through a Client. Every
// call retries across fail-overs until its context ends, as client.Client's
// calls do, and returns the errors they return: *api.Error values from the
// cell, client.ErrOutcomeUnknown (wrapped) when a call that is not safe to
// repeat lost its reply, client.ErrClosed after the Client's Close, and
// ctx's error.
type Operator struct {
	c *client.Client
}

// New returns an Operator that calls through c.
func New(c *client.Client) *Operator { return &Operator{c: c} }

// Client returns the client the Operator calls through.
func (o *Operator) Client() *client.Client { return o.c }

// Status returns the cell's status as the master reports it (any replica
// if there is no master).
func (o *Operator) Status(ctx context.Context) (*api.CellStatusResponse, error) {
	var resp api.CellStatusResponse
	if err := o.c.Call(ctx, api.MethodCellStatus, &api.CellStatusRequest{Token: o.c.Header().Token}, &resp); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &resp, nil
}

// StatusOfReplica asks the replica at addr, over a connection of its own,
// how it sees itself and the cell (a CellStatus call). Any replica answers,
// master or not, so this works when the cell has no master; it needs only
// cfg's CA and credentials (cfg.Addrs is not used). It returns the
// replica's answer, or an error naming addr: a *api.Error for a refusal, a
// transport error if the replica cannot be reached before ctx ends.
func StatusOfReplica(ctx context.Context, cfg client.Config, addr string) (*api.CellStatusResponse, error) {
	var resp api.CellStatusResponse
	if err := client.AskReplica(ctx, cfg, addr, api.MethodCellStatus, &api.CellStatusRequest{Token: cfg.Token}, &resp); err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	return &resp, nil
}

// CreateTenant creates a tenant (cell administrator only). acl names the
// new tenant root's ACL files; the zero value lets every principal of the
// tenant in.
func (o *Operator) CreateTenant(ctx context.Context, name string, quota api.TenantQuota, acl api.ACLNames) (api.TenantInfo, error) {
	var resp api.TenantResponse
	req := &api.TenantRequest{Header: o.c.Header(), Name: name, Quota: quota, ACL: acl}
	if err := o.c.Call(ctx, api.MethodCreateTenant, req, &resp); err != nil {
		return api.TenantInfo{}, fmt.Errorf("create tenant %s: %w", name, err)
	}
	return resp.Tenant, nil
}

// UpdateTenant replaces a tenant's quota (cell administrator only).
func (o *Operator) UpdateTenant(ctx context.Context, name string, quota api.TenantQuota) (api.TenantInfo, error) {
	var resp api.TenantResponse
	req := &api.TenantRequest{Header: o.c.Header(), Name: name, Quota: quota}
	if err := o.c.Call(ctx, api.MethodUpdateTenant, req, &resp); err != nil {
		return api.TenantInfo{}, fmt.Errorf("update tenant %s: %w", name, err)
	}
	return resp.Tenant, nil
}

// ListTenants lists the tenants (cell administrator only).
func (o *Operator) ListTenants(ctx context.Context) ([]api.TenantInfo, error) {
	var resp api.ListTenantsResponse
	if err := o.c.Call(ctx, api.MethodListTenants, &api.ListRequest{Header: o.c.Header()}, &resp); err != nil {
		return nil, fmt.Errorf("list tenants: %w", err)
	}
	return resp.Tenants, nil
}

// ListSessions lists the open sessions of tenant ("" for the caller's own).
func (o *Operator) ListSessions(ctx context.Context, tenant string) ([]api.SessionInfo, error) {
	var resp api.ListSessionsResponse
	if err := o.c.Call(ctx, api.MethodListSessions, &api.ListRequest{Header: o.c.Header(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return resp.Sessions, nil
}

// ListLocks lists the held locks of tenant ("" for the caller's own).
func (o *Operator) ListLocks(ctx context.Context, tenant string) ([]api.LockInfo, error) {
	var resp api.ListLocksResponse
	if err := o.c.Call(ctx, api.MethodListLocks, &api.ListRequest{Header: o.c.Header(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	return resp.Locks, nil
}

// IssueToken issues a tenant token for principal of tenant (cell
// administrator only). The token is the secret credential
// (client.Config.Token); the cell keeps only its hash and cannot show it
// again. info names it for RevokeToken.
func (o *Operator) IssueToken(ctx context.Context, tenant, principal string) (token string, info api.TokenInfo, err error) {
	var resp api.IssueTokenResponse
	// Not idempotent (the api method table): a lost reply leaves a token
	// nobody knows, which the administrator may revoke (ListTokens shows
	// it).
	req := &api.IssueTokenRequest{Header: o.c.Header(), Tenant: tenant, Principal: principal}
	if err := o.c.Call(ctx, api.MethodIssueToken, req, &resp); err != nil {
		return "", api.TokenInfo{}, fmt.Errorf("issue token for %s/%s: %w", tenant, principal, err)
	}
	return resp.Token, resp.Info, nil
}

// RevokeToken revokes the token id of tenant (cell administrator only):
// every call with it fails from then on, and its sessions are expired.
func (o *Operator) RevokeToken(ctx context.Context, tenant, id string) (api.TokenInfo, error) {
	var resp api.IssueTokenResponse
	req := &api.RevokeTokenRequest{Header: o.c.Header(), Tenant: tenant, ID: id}
	if err := o.c.Call(ctx, api.MethodRevokeToken, req, &resp); err != nil {
		return api.TokenInfo{}, fmt.Errorf("revoke token %s of %s: %w", id, tenant, err)
	}
	return resp.Info, nil
}

// ListTokens lists tenant's tokens, without their secrets (cell
// administrator only).
func (o *Operator) ListTokens(ctx context.Context, tenant string) ([]api.TokenInfo, error) {
	var resp api.ListTokensResponse
	if err := o.c.Call(ctx, api.MethodListTokens, &api.ListRequest{Header: o.c.Header(), Tenant: tenant}, &resp); err != nil {
		return nil, fmt.Errorf("list tokens of %s: %w", tenant, err)
	}
	return resp.Tokens, nil
}

// StepDown asks the master to hand mastership over now, without waiting
// out its master lease (cell administrator only): a planned fail-over, as
// before maintenance on the master's host, or to watch one. next names the
// preferred successor (0: the master picks the most caught-up replica that
// answers); it is a preference, not a promise. Sessions survive the
// hand-over; their holders see a fail-over event. HandOver is StepDown
// that also reports the successor.
func (o *Operator) StepDown(ctx context.Context, next uint64) error {
	_, err := o.HandOver(ctx, next)
	return err
}

// HandOver is StepDown, returning the replica the master handed
// mastership to (0 if it stepped down without naming one, or the cell
// does not say).
func (o *Operator) HandOver(ctx context.Context, next uint64) (uint64, error) {
	var resp api.StepDownResponse
	if err := o.c.Call(ctx, api.MethodStepDown, &api.StepDownRequest{Header: o.c.Header(), Next: next}, &resp); err != nil {
		return 0, fmt.Errorf("step down: %w", err)
	}
	return resp.Successor, nil
}
