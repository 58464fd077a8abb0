package cell

import (
	"context"

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
