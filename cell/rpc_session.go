package cell

import (
	"context"
	"sync/atomic"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/session"
)

func handleCreateSession(ctx context.Context, c *rpcCall, req *api.CreateSessionRequest) (any, error) {
	m := c.m
	reply, err := result(c.propose(ctx, &namespace.CreateSession{}))
	if err != nil {
		return nil, err
	}
	sc := reply.(*namespace.SessionCreated)
	if c.tokenID != "" {
		m.owners.bindToken(sc.Session, c.tokenID)
	}
	lease, err := m.sessions.Lease(session.ID(sc.Session))
	if err != nil {
		return nil, c.d.sessionError(err)
	}
	return &api.CreateSessionResponse{Session: sc.Session, Epoch: m.epoch, LeaseTimeout: int64(lease), Principal: c.caller.Principal, Tenant: c.caller.Tenant,
		Cadence: int64(max(c.d.ka.cadence, 0))}, nil
}

// handleCreateSessions creates the sessions of a CreateSessions call: one
// CreateSession command for each the rate let in (admit), submitted as one
// group (pipeline.submitGroup), so that they share a slot and cost the
// tenant's fair share ceil(n/groupUnit) units for n (fair.go), each held
// to the tenant's session quota in turn as it is applied. It answers once
// every command has its outcome, each in its entry; if none created a
// session the call fails with the first entry's error, so that a client
// treats it as it would a failed CreateSession (a NotMaster redirects it,
// a shed one retries).
func handleCreateSessions(ctx context.Context, c *rpcCall, req *api.CreateSessionsRequest) (any, error) {
	m := c.m
	resp := &api.CreateSessionsResponse{Epoch: m.epoch, Principal: c.caller.Principal, Tenant: c.caller.Tenant,
		Cadence: int64(max(c.d.ka.cadence, 0)), Sessions: make([]api.CreatedSession, req.Count)}
	k := c.granted
	if k < req.Count {
		shed := toAPIError(c.shed)
		for i := k; i < req.Count; i++ {
			resp.Sessions[i].Err = shed
		}
	}
	// The commands' outcomes come on the run loop, in any order (or on
	// this goroutine, if the group is refused at once); the last one
	// closes all.
	var left atomic.Int64
	left.Store(int64(k))
	all := make(chan struct{})
	op := &namespace.CreateSession{}
	ops := make([]namespace.Op, k)
	for i := range ops {
		ops[i] = op
	}
	c.d.submitGroup(ctx, m, c.caller, ops, func(i int, res namespace.Result, err error) {
		e := &resp.Sessions[i]
		switch {
		case err != nil:
			e.Err = toAPIError(err)
			if e.Err == errCoreBusy {
				// A CreateSession of its own would be counted as a
				// shed call; an entry is counted here.
				c.d.metrics.shed(c.caller.Tenant, "paxos_busy")
			}
		case res.Err != nil:
			e.Err = res.Err
		default:
			e.Session = res.Reply.(*namespace.SessionCreated).Session
		}
		if left.Add(-1) == 0 {
			close(all)
		}
	})
	select {
	case <-all:
	case <-ctx.Done():
		// The sessions the commands may still create expire: nobody
		// keeps them alive.
		return nil, ctxError(ctx)
	}
	created := 0
	for i := range resp.Sessions[:k] {
		e := &resp.Sessions[i]
		if e.Err != nil {
			continue
		}
		if c.tokenID != "" {
			m.owners.bindToken(e.Session, c.tokenID)
		}
		lease, err := m.sessions.Lease(session.ID(e.Session))
		if err != nil {
			e.Session, e.Err = 0, c.d.sessionError(err)
			continue
		}
		e.LeaseTimeout = int64(lease)
		created++
	}
	if created == 0 {
		return nil, resp.Sessions[0].Err
	}
	return resp, nil
}

func handleKeepAlive(ctx context.Context, c *rpcCall, req *api.KeepAliveRequest) (any, error) {
	m := c.m
	// KeepAlive is how a client learns a new epoch, so any epoch is welcome.
	if err := c.ownSession(m, req.Session); err != nil {
		return nil, err
	}
	ack := req.Ack
	if req.Epoch != m.epoch {
		ack = 0 // sequence numbers restart with each master
	}
	c.d.metrics.keepalives.Inc()
	reply, err := m.sessions.KeepAlive(ctx, session.ID(req.Session), ack)
	if err != nil {
		return nil, c.d.sessionError(err)
	}
	return keepAliveResponse(reply), nil
}

func handleCloseSession(ctx context.Context, c *rpcCall, req *api.CloseSessionRequest) (any, error) {
	m, err := c.needSession(req.Header)
	if err != nil {
		return nil, err
	}
	// The session's locks go to their head waiters in the same command
	// (lockhandover.go).
	op := &namespace.CloseSession{Session: req.Session}
	var hs handOvers
	op.Then, hs = m.heldHandOvers(req.Session)
	if _, err := result(c.proposeHandingOver(ctx, op, hs)); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}
