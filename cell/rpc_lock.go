package cell

import (
	"context"
	"crypto/ed25519"
	"errors"

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
		if m.queued(path) {
			// Waiters are served in order; a try never overtakes them.
			return nil, apiErr(api.Locked, "the lock is held and others are waiting for it")
		}
		g, err := c.acquireOnce(ctx, &namespace.Acquire{Session: req.Session, Path: path, Mode: req.Mode})
		if err != nil {
			if errors.Is(err, api.ErrLocked) {
				m.subs.conflict(path)
			}
			return nil, err
		}
		return c.r.sequencerResponse(g)
	}
	// A blocked Acquire counts against its caller's tenant's MaxWaiters
	// until this call returns.
	if err := m.lim.addWaiter(c.caller.Tenant); err != nil {
		return nil, err
	}
	defer m.lim.removeWaiter(c.caller.Tenant)
	w := &lockWaiter{caller: c.caller, session: req.Session, mode: req.Mode, result: make(chan waitResult, 1), gone: make(chan struct{})}
	m.enqueue(path, w)
	select {
	case out := <-w.result:
		if out.err != nil {
			return nil, out.err
		}
		return c.r.sequencerResponse(out.granted)
	case <-ctx.Done():
		close(w.gone)
		m.cancelWaiter(path, w)
		// A grant that raced with the cancellation is released by the
		// master (see headOutcome); one already delivered is ours to give
		// back here.
		select {
		case out := <-w.result:
			if out.granted != nil {
				c.r.pipe.submit(context.Background(), c.m, originCell, c.caller, &namespace.Release{Session: req.Session, Path: path, Generation: out.granted.Generation}, func(namespace.Result, error) {})
			}
		default:
		}
		return nil, ctxError(ctx)
	case <-m.ctx.Done():
		return nil, c.r.notMaster()
	}
}

// acquireOnce proposes op and returns its grant. If ctx ends while the
// Acquire is in Paxos, a grant that arrives afterwards is released, so a
// canceled Acquire never leaves its session holding a lock it does not know
// of.
func (c *rpcCall) acquireOnce(ctx context.Context, op *namespace.Acquire) (*namespace.Granted, error) {
	type outcome struct {
		g   *namespace.Granted
		err error
	}
	ch := make(chan outcome, 1)
	gone := make(chan struct{})
	release := func(g *namespace.Granted) {
		c.r.pipe.submit(context.Background(), c.m, originCell, c.caller, &namespace.Release{Session: op.Session, Path: op.Path, Generation: g.Generation}, func(namespace.Result, error) {})
	}
	c.r.pipe.submit(ctx, c.m, originRequest, c.caller, op, func(res namespace.Result, err error) {
		reply, err := result(res, err)
		g, _ := reply.(*namespace.Granted)
		select {
		case <-gone:
			if g != nil {
				release(g)
			}
		default:
			ch <- outcome{g, err}
		}
	})
	select {
	case o := <-ch:
		return o.g, o.err
	case <-ctx.Done():
		close(gone)
		select {
		case o := <-ch: // delivered just before we gave up
			if o.g != nil {
				release(o.g)
			}
		default:
		}
		return nil, ctxError(ctx)
	}
}

// sequencerResponse builds the signed sequencer of a grant.
func (r *Replica) sequencerResponse(g *namespace.Granted) (*api.SequencerResponse, error) {
	seq := sequencer.Sequencer{Cell: r.cfg.Cell, Tenant: g.Tenant, Path: g.Path, Mode: sequencer.Mode(g.Mode), Generation: g.Generation, Instance: g.Instance}
	seq, err := seq.Sign(r.cfg.SigningKey)
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
	if _, err := c.needHandle(req.Header, req.Handle); err != nil {
		return nil, err
	}
	if _, err := result(c.propose(ctx, &namespace.Release{Session: req.Session, Path: req.Handle.Path, Generation: req.Generation})); err != nil {
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
	locks, err := c.r.ns.ListLocks(c.r.admin(), tenantOf(req.Handle.Path))
	if err != nil {
		return nil, err
	}
	for _, l := range locks {
		if l.Path != req.Handle.Path || l.Instance != st.Instance {
			continue
		}
		for _, h := range l.Holders {
			if h == req.Session {
				return c.r.sequencerResponse(&namespace.Granted{Tenant: tenantOf(l.Path), Path: l.Path, Mode: l.Mode, Generation: l.Generation, Instance: l.Instance})
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
	if seq.Cell != c.r.cfg.Cell {
		return &api.CheckSequencerResponse{Reason: "the sequencer was granted by another cell"}, nil
	}
	if !seq.Verify(c.r.cfg.SigningKey.Public().(ed25519.PublicKey)) {
		return &api.CheckSequencerResponse{Reason: "the sequencer's signature does not verify"}, nil
	}
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	ok, err := c.r.ns.CheckSequencer(c.caller, seq)
	end()
	if err != nil {
		return nil, err
	}
	if !ok {
		return &api.CheckSequencerResponse{Reason: "the lock is no longer held at this generation"}, nil
	}
	return &api.CheckSequencerResponse{Valid: true}, nil
}
