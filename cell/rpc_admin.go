package cell

import (
	"context"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

func handleCreateTenant(ctx context.Context, c *rpcCall, req *api.TenantRequest) (any, error) {
	if req.Name == AdminTenant {
		return nil, errInvalid("the tenant name " + AdminTenant + " is reserved for cell administrators")
	}
	reply, err := result(c.propose(ctx, &namespace.CreateTenant{Name: req.Name, Quota: req.Quota, ACL: req.ACL}))
	if err != nil {
		return nil, err
	}
	return &api.TenantResponse{Tenant: reply.(*namespace.TenantReply).Tenant}, nil
}

func handleUpdateTenant(ctx context.Context, c *rpcCall, req *api.TenantRequest) (any, error) {
	reply, err := result(c.propose(ctx, &namespace.UpdateTenant{Name: req.Name, Quota: req.Quota}))
	if err != nil {
		return nil, err
	}
	return &api.TenantResponse{Tenant: reply.(*namespace.TenantReply).Tenant}, nil
}

func handleListTenants(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	m := c.m
	var ts []api.TenantInfo
	var err error
	if c.caller.Tenant != "" {
		// A tenant principal sees its own tenant only.
		t, err := c.d.state.Tenant(c.caller, c.caller.Tenant)
		if err != nil {
			return nil, err
		}
		ts = []api.TenantInfo{t}
	} else if ts, err = c.d.state.ListTenants(c.caller); err != nil {
		return nil, err
	}
	for i := range ts {
		ts[i].Usage.Waiters = m.lim.waiters(ts[i].Name)
	}
	return &api.ListTenantsResponse{Tenants: ts}, nil
}

func handleListSessions(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	return c.masterRead(ctx, func() (any, error) {
		ss, err := c.d.state.ListSessions(c.caller, c.listTenant(req))
		return &api.ListSessionsResponse{Sessions: ss}, err
	})
}

func handleListLocks(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	return c.masterRead(ctx, func() (any, error) {
		ls, err := c.d.state.ListLocks(c.caller, c.listTenant(req))
		return &api.ListLocksResponse{Locks: ls}, err
	})
}

// masterRead runs a sessionless read at the master within the caller's
// tenant's share of concurrent reads.
func (c *rpcCall) masterRead(ctx context.Context, read func() (any, error)) (any, error) {
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	resp, err := read()
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// listTenant defaults a listing to the caller's own tenant.
func (c *rpcCall) listTenant(req *api.ListRequest) string {
	if req.Tenant == "" {
		return c.caller.Tenant
	}
	return req.Tenant
}

func handleCellStatus(ctx context.Context, c *rpcCall, req *api.CellStatusRequest) (any, error) {
	var st *api.CellStatusResponse
	if req.Except != 0 {
		wait := time.Duration(req.Wait)
		if wait <= 0 || wait > api.MaxStatusWait {
			wait = api.MaxStatusWait
		}
		st = c.d.admin.awaitOtherMaster(ctx, req.Except, wait)
	} else {
		st = c.d.admin.cellStatus()
	}
	if !c.isAdmin() {
		// The progress fields reveal the whole cell's write activity, every
		// tenant's included: they are the administrator's.
		st.Chosen, st.Applied, st.Checksum, st.Rebuild = 0, 0, 0, ""
		for i := range st.Replicas {
			st.Replicas[i].Chosen, st.Replicas[i].Applied, st.Replicas[i].Lag = 0, 0, 0
		}
	}
	return st, nil
}

func handleStepDown(ctx context.Context, c *rpcCall, req *api.StepDownRequest) (any, error) {
	if err := c.d.admin.stepDown(ctx, req.Next); err != nil {
		return nil, apiErr(api.FailedPrecondition, "step-down: "+err.Error())
	}
	// StepDown returned once this replica follows another leader: the one
	// that took over.
	succ := c.d.admin.successor()
	if l := c.d.admin.leader(); l != 0 && l != c.d.admin.self {
		succ = l
	}
	return &api.StepDownResponse{Successor: succ}, nil
}
