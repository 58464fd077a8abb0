package cell

import (
	"context"
	"crypto/ed25519"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/sequencer"
)

func handleAcquire(ctx context.Context, c *rpcCall, req *api.AcquireRequest) (any, error) {
	m, err := c.needHandle(req.Header, req.Handle)
	if err != nil {
		return nil, err
	}
	if req.Mode != api.LockExclusive && req.Mode != api.LockShared {
		return nil, errInvalid("lock mode must be exclusive or shared")
	}
	if _, err := c.currentStat(req.Handle); err != nil {
		return nil, err
	}
	path := req.Handle.Path
	if !req.Wait {
		g, err := m.locks.try(ctx, c.caller, req.Session, path, req.Mode)
		if err != nil {
			return nil, err
		}
		return c.d.seq.response(g)
	}
	// A blocked Acquire counts against its caller's tenant's MaxWaiters
	// until this call returns.
	if err := m.lim.addWaiter(c.caller.Tenant); err != nil {
		return nil, err
	}
	defer m.lim.removeWaiter(c.caller.Tenant)
	g, err := m.locks.wait(ctx, c.caller, req.Session, path, req.Mode)
	if err != nil {
		return nil, err
	}
	return c.d.seq.response(g)
}

// response builds the signed sequencer of a grant.
func (k sequencerKey) response(g *namespace.Granted) (*api.SequencerResponse, error) {
	seq := sequencer.Sequencer{Cell: k.cell, Tenant: g.Tenant, Path: g.Path, Mode: sequencer.Mode(g.Mode), Generation: g.Generation, Instance: g.Instance}
	seq, err := seq.Sign(k.key)
	if err != nil {
		return nil, apiErr(api.Internal, "signing sequencer: "+err.Error())
	}
	b, err := seq.Marshal()
	if err != nil {
		return nil, apiErr(api.Internal, "encoding sequencer: "+err.Error())
	}
	return &api.SequencerResponse{Sequencer: b, Generation: g.Generation, Mode: g.Mode}, nil
}

func handleRelease(ctx context.Context, c *rpcCall, req *api.ReleaseRequest) (any, error) {
	m, err := c.needHandle(req.Header, req.Handle)
	if err != nil {
		return nil, err
	}
	// The head waiter, if any, takes the lock in the same command
	// (handover.go).
	grants, hs := m.locks.attach(req.Handle.Path)
	op := &namespace.Release{Session: req.Session, Path: req.Handle.Path, Generation: req.Generation, Then: grants}
	if _, err := result(c.proposeHandingOver(ctx, op, hs)); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func handleGetSequencer(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	if _, err := c.needHandle(req.Header, req.Handle); err != nil {
		return nil, err
	}
	st, err := c.currentStat(req.Handle)
	if err != nil {
		return nil, err
	}
	locks, err := c.d.state.ListLocks(c.d.cellCaller(), tenantOf(req.Handle.Path))
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		if l.Path != req.Handle.Path || l.Instance != st.Instance {
			continue
		}
		for _, h := range l.Holders {
			if h == req.Session {
				return c.d.seq.response(&namespace.Granted{Tenant: tenantOf(l.Path), Path: l.Path, Mode: l.Mode, Generation: l.Generation, Instance: l.Instance})
			}
		}
	}
	return nil, apiErr(api.FailedPrecondition, "this session does not hold the lock")
}

func handleCheckSequencer(ctx context.Context, c *rpcCall, req *api.CheckSequencerRequest) (any, error) {
	if _, err := c.needSession(req.Header); err != nil {
		return nil, err
	}
	seq, err := sequencer.Parse(req.Sequencer)
	if err != nil {
		return nil, errInvalid(err.Error())
	}
	if seq.Cell != c.d.seq.cell {
		return &api.CheckSequencerResponse{Reason: "the sequencer was granted by another cell"}, nil
	}
	if !seq.Verify(c.d.seq.key.Public().(ed25519.PublicKey)) {
		return &api.CheckSequencerResponse{Reason: "the sequencer's signature does not verify"}, nil
	}
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := c.d.state.CheckSequencer(c.caller, seq)
	end()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &api.CheckSequencerResponse{Reason: "the lock is no longer held at this generation"}, nil
	}
	return &api.CheckSequencerResponse{Valid: true}, nil
}
