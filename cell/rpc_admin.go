package cell

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
)

// CreateTenant creates a tenant as the cell administrator, through Paxos
// (for operators' tooling and the dev cell). It fails with NotMaster on a
// replica that is not master.
func (r *Replica) CreateTenant(ctx context.Context, name string, quota api.TenantQuota) (api.TenantInfo, error) {
	m := r.serving()
	if m == nil {
		return api.TenantInfo{}, r.notMaster()
	}
	reply, err := result(r.pipe.do(ctx, m, originRequest, r.admin(), &namespace.CreateTenant{Name: name, Quota: quota}))
	if err != nil {
		return api.TenantInfo{}, err
	}
	return reply.(*namespace.TenantReply).Tenant, nil
}

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
		t, err := c.r.ns.Tenant(c.caller, c.caller.Tenant)
		if err != nil {
			return nil, err
		}
		ts = []api.TenantInfo{t}
	} else if ts, err = c.r.ns.ListTenants(c.caller); err != nil {
		return nil, err
	}
	for i := range ts {
		ts[i].Usage.Waiters = m.lim.waiters(ts[i].Name)
	}
	return &api.ListTenantsResponse{Tenants: ts}, nil
}

func handleListSessions(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	return c.masterRead(ctx, func() (any, error) {
		ss, err := c.r.ns.ListSessions(c.caller, c.listTenant(req))
		return &api.ListSessionsResponse{Sessions: ss}, err
	})
}

func handleListLocks(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	return c.masterRead(ctx, func() (any, error) {
		ls, err := c.r.ns.ListLocks(c.caller, c.listTenant(req))
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
		st = c.r.awaitOtherMaster(ctx, req.Except, wait)
	} else {
		st = c.r.cellStatus()
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

func (r *Replica) cellStatus() *api.CellStatusResponse {
	st := r.Status()
	resp := &api.CellStatusResponse{
		Cell: r.cfg.Cell, Replica: r.cfg.ID, Master: st.Leader, Epoch: api.Epoch(st.Epoch),
		Chosen: st.Chosen, Applied: st.Applied, Checksum: api.Checksum(st.Checksum),
		PublicKey: r.cfg.SigningKey.Public().(ed25519.PublicKey),
		Role:      st.Role, Rebuild: st.Rebuild.String(),
		MasterLease: int64(r.masterLease()),
	}
	if !st.IsLeader && st.Leader == r.cfg.ID {
		resp.Master = 0
	}
	now := monotime.Now()
	top := st.Chosen
	d := r.members.view()
	resp.MembershipSlot = uint64(d.Members.Index)
	for _, id := range members(d.Members) {
		rs := api.ReplicaStatus{ID: id, Addr: d.addr(id, r.cfg.Replicas), Master: id == resp.Master && resp.Master != 0,
			Learner: isLearner(d.Members, id)}
		if id == r.cfg.ID {
			rs.Chosen, rs.Applied, rs.Role, rs.Epoch = st.Chosen, st.Applied, st.Role, api.Epoch(st.Epoch)
		} else if p, ok := r.progress.get(id); ok {
			rs.Chosen, rs.Applied, rs.Role, rs.Epoch = p.Chosen, p.Applied, p.Role, api.Epoch(p.Epoch)
			rs.HeardMillis = max(now.Sub(p.at).Milliseconds(), 1)
		} else {
			rs.Role, rs.HeardMillis = api.RoleUnknown, -1
		}
		top = max(top, rs.Chosen)
		resp.Replicas = append(resp.Replicas, rs)
	}
	for i := range resp.Replicas {
		if rs := &resp.Replicas[i]; rs.HeardMillis >= 0 && top > rs.Applied {
			rs.Lag = top - rs.Applied
		}
	}
	return resp
}

func handleStepDown(ctx context.Context, c *rpcCall, req *api.StepDownRequest) (any, error) {
	if err := c.r.StepDown(ctx, req.Next); err != nil {
		return nil, apiErr(api.FailedPrecondition, "step-down: "+err.Error())
	}
	// StepDown returned once this replica follows another leader: the one
	// that took over.
	succ := c.r.successor.Load()
	if st := c.r.status.Load(); st != nil && st.Leader != 0 && uint64(st.Leader) != c.r.cfg.ID {
		succ = uint64(st.Leader)
	}
	return &api.StepDownResponse{Successor: succ}, nil
}
