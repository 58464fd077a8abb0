package cell

import (
	"context"
	"crypto/ed25519"
	"errors"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/session"
	"github.com/lockcell/lockcell/transport"
)

// rpcCall is one client request being served.
type rpcCall struct {
	r      *Replica
	method api.Method
	// id is what the connection's certificate proved (anonymous without).
	id transport.Identity
	// caller is the authenticated principal (see authenticate).
	caller namespace.Caller
	// tokenID names the token the caller authenticated with, if any.
	tokenID string
	m       *master // set by needMaster
	// ctx is the request's context (the stream's).
	ctx context.Context
}

// handler serves one method: it decodes the request body itself (through
// the generic adapter below) and returns the response or an error.
type handler func(ctx context.Context, c *rpcCall, f transport.Frame) (any, error)

// with adapts a typed handler function to handler: it decodes the request,
// authenticates the caller and applies its tenant's rate limit.
func with[Req any](fn func(ctx context.Context, c *rpcCall, req *Req) (any, error)) handler {
	return func(ctx context.Context, c *rpcCall, f transport.Frame) (any, error) {
		req := new(Req)
		if err := f.Decode(req); err != nil {
			if c.id.Anonymous() {
				return nil, errNoCredentials
			}
			return nil, errInvalid("malformed " + c.method.String() + " request: " + err.Error())
		}
		if err := c.authenticate(any(req)); err != nil {
			return nil, err
		}
		if err := c.admit(); err != nil {
			return nil, err
		}
		return fn(ctx, c, req)
	}
}

var handlers map[api.Method]handler

func init() {
	handlers = map[api.Method]handler{
		api.MethodCreateSession:      with(handleCreateSession),
		api.MethodKeepAlive:          with(handleKeepAlive),
		api.MethodCloseSession:       with(handleCloseSession),
		api.MethodOpen:               with(handleOpen),
		api.MethodClose:              with(handleClose),
		api.MethodGetContentsAndStat: with(handleGetContents),
		api.MethodGetStat:            with(handleGetStat),
		api.MethodReadDir:            with(handleReadDir),
		api.MethodSetContents:        with(handleSetContents),
		api.MethodDelete:             with(handleDelete),
		api.MethodSetACL:             with(handleSetACL),
		api.MethodAcquire:            with(handleAcquire),
		api.MethodRelease:            with(handleRelease),
		api.MethodGetSequencer:       with(handleGetSequencer),
		api.MethodCheckSequencer:     with(handleCheckSequencer),
		api.MethodCreateTenant:       with(handleCreateTenant),
		api.MethodUpdateTenant:       with(handleUpdateTenant),
		api.MethodListTenants:        with(handleListTenants),
		api.MethodListSessions:       with(handleListSessions),
		api.MethodListLocks:          with(handleListLocks),
		api.MethodCellStatus:         with(handleCellStatus),
		api.MethodStepDown:           with(handleStepDown),
		api.MethodIssueToken:         with(handleIssueToken),
		api.MethodRevokeToken:        with(handleRevokeToken),
		api.MethodListTokens:         with(handleListTokens),
		api.MethodSaveSnapshot:       with(handleSaveSnapshot),
	}
}

// serveStream serves one client stream: one request frame, one reply frame.
func (r *Replica) serveStream(ctx context.Context, s *transport.ServerStream) {
	f, err := s.ReadFrame(ctx)
	if err != nil {
		return // the transport already reset a bad stream
	}
	method := api.Method(f.Tag)
	if method == api.MethodKeepAliveStream {
		r.serveKeepAliveStream(ctx, s, f)
		return
	}
	c := &rpcCall{r: r, method: method, id: s.Identity(), ctx: ctx}
	start := time.Now()
	var resp any
	h, ok := handlers[method]
	switch {
	case !ok && c.id.Anonymous():
		err = errNoCredentials
	case !ok:
		err = errInvalid("unknown method " + method.String())
	default:
		resp, err = h(ctx, c, f)
	}
	r.metrics.observeRPC(c.caller.Tenant, method, err, time.Since(start))
	if err != nil {
		tarpit(ctx, err)
		_ = s.WriteFrame(ctx, api.ReplyError, toAPIError(err))
		return
	}
	if sr, ok := resp.(streamedReply); ok {
		if err := sr.writeTo(ctx, s); err != nil {
			r.log.Debug("streamed reply failed", "method", method, "err", err)
		}
		return
	}
	_ = s.WriteFrame(ctx, api.ReplyOK, resp)
}

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

// admin is the caller the cell itself uses for its own commands.
func (r *Replica) admin() namespace.Caller {
	return namespace.Caller{Principal: r.cfg.AdminPrincipal}
}

func (c *rpcCall) isAdmin() bool {
	return c.caller.Tenant == "" && c.caller.Principal == c.r.cfg.AdminPrincipal
}

// needMaster returns the master role if this replica serves now. A
// replica that is taking over (see takingOver) first waits a little for
// its master role, so that a client redirected here by a hand-over is
// served instead of sent searching.
func (c *rpcCall) needMaster() (*master, error) {
	m := c.r.serving()
	if m == nil && c.ctx != nil {
		m = c.r.awaitTakeOver(c.ctx)
	}
	if m == nil {
		return nil, c.r.notMaster()
	}
	c.m = m
	return m, nil
}

// needSession checks that this replica is master, that the request names
// the current epoch, and that the session is live and the caller's.
func (c *rpcCall) needSession(h api.Header) (*master, error) {
	m, err := c.needMaster()
	if err != nil {
		return nil, err
	}
	if h.Epoch != m.epoch {
		return nil, &api.Error{Code: api.Failover, Msg: "the master changed; re-establish the session (KeepAlive) and retry"}
	}
	if err := c.ownSession(m, h.Session); err != nil {
		return nil, err
	}
	if _, err := m.sessions.Lease(session.ID(h.Session)); err != nil {
		return nil, c.r.sessionError(err)
	}
	return m, nil
}

// ownSession checks that sess is live and the caller's, and remembers the
// token the caller used with it (so that revoking the token ends it).
func (c *rpcCall) ownSession(m *master, sess uint64) error {
	owner, ok := m.owner(sess)
	if !ok {
		return apiErr(api.SessionExpired, "no such session")
	}
	if owner != c.caller {
		return apiErr(api.PermissionDenied, "the session belongs to another principal")
	}
	if c.tokenID != "" {
		m.bindToken(sess, c.tokenID)
	}
	return nil
}

// propose runs op through the pipeline as the caller's request and waits
// for its outcome (routeFor decides how it travels).
func (c *rpcCall) propose(ctx context.Context, op namespace.Op) (namespace.Result, error) {
	return c.r.pipe.do(ctx, c.m, originRequest, c.caller, op)
}

// read admits one read of the caller's tenant under its fair share of
// concurrent reads; the returned end must be called after the read.
func (c *rpcCall) read(ctx context.Context) (end func(), err error) {
	if c.caller.Tenant == "" || c.m == nil {
		return func() {}, nil
	}
	return c.m.lim.beginRead(ctx.Done(), c.caller.Tenant)
}

// needHandle checks the session and that the handle is the session's.
func (c *rpcCall) needHandle(h api.Header, hd api.Handle) (*master, error) {
	m, err := c.needSession(h)
	if err != nil {
		return nil, err
	}
	if hd.Session != h.Session || hd.Path == "" || hd.Instance == 0 {
		return nil, errInvalid("the handle does not belong to this session")
	}
	// Re-establish the handle's subscription on first use after a
	// fail-over (Chubby §2.9) — but only for a caller that may read the
	// node: handles are self-describing, so the path is the caller's word.
	m.subscribe(c.caller, h.Session, hd.Path, hd.Events)
	return m, nil
}

// checkInstance fails if the node was deleted or re-created since the
// handle was opened.
func checkInstance(hd api.Handle, st api.NodeStat) error {
	if st.Instance != hd.Instance {
		return apiErr(api.NotFound, "the handle is invalid: its node was deleted or re-created")
	}
	return nil
}

// result unwraps a command's result.
func result(res namespace.Result, err error) (namespace.Reply, error) {
	if err != nil {
		return nil, err
	}
	if res.Err != nil {
		return nil, res.Err
	}
	return res.Reply, nil
}

func handleCreateSession(ctx context.Context, c *rpcCall, req *api.CreateSessionRequest) (any, error) {
	m, err := c.needMaster()
	if err != nil {
		return nil, err
	}
	reply, err := result(c.propose(ctx, &namespace.CreateSession{}))
	if err != nil {
		return nil, err
	}
	sc := reply.(*namespace.SessionCreated)
	if c.tokenID != "" {
		m.bindToken(sc.Session, c.tokenID)
	}
	lease, err := m.sessions.Lease(session.ID(sc.Session))
	if err != nil {
		return nil, c.r.sessionError(err)
	}
	return &api.CreateSessionResponse{Session: sc.Session, Epoch: m.epoch, LeaseTimeout: int64(lease), Principal: c.caller.Principal, Tenant: c.caller.Tenant,
		Cadence: int64(max(c.r.cfg.KeepAliveCadence, 0))}, nil
}

func handleKeepAlive(ctx context.Context, c *rpcCall, req *api.KeepAliveRequest) (any, error) {
	m, err := c.needMaster()
	if err != nil {
		return nil, err
	}
	// KeepAlive is how a client learns a new epoch, so any epoch is welcome.
	if err := c.ownSession(m, req.Session); err != nil {
		return nil, err
	}
	if c.caller.Tenant != "" {
		if err := m.lim.allowKeepAlive(c.caller.Tenant); err != nil {
			return nil, err
		}
	}
	ack := req.Ack
	if req.Epoch != m.epoch {
		ack = 0 // sequence numbers restart with each master
	}
	c.r.metrics.keepalives.Inc()
	reply, err := m.sessions.KeepAlive(ctx, session.ID(req.Session), ack)
	if err != nil {
		return nil, c.r.sessionError(err)
	}
	// Held and LeaseTimeout are both measured on the session manager's
	// clock, from the request's arrival at the manager.
	return &api.KeepAliveResponse{LeaseTimeout: int64(reply.LeaseTimeout), Held: int64(reply.Held), Epoch: reply.Epoch, Events: reply.Events,
		Cadence: int64(reply.Cadence)}, nil
}

func handleCloseSession(ctx context.Context, c *rpcCall, req *api.CloseSessionRequest) (any, error) {
	if _, err := c.needSession(req.Header); err != nil {
		return nil, err
	}
	if _, err := result(c.propose(ctx, &namespace.CloseSession{Session: req.Session})); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func handleOpen(ctx context.Context, c *rpcCall, req *api.OpenRequest) (any, error) {
	m, err := c.needSession(req.Header)
	if err != nil {
		return nil, err
	}
	resp := &api.OpenResponse{}
	// Opening an existing node is a read; only a creation goes through
	// Paxos.
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	st, err := c.r.ns.Stat(c.caller, req.Path)
	end()
	switch {
	case err == nil && !req.MustCreate:
		resp.Stat = st
	case err == nil || errors.Is(err, api.ErrNotFound) && (req.Create || req.MustCreate):
		op := &namespace.OpenNode{Session: req.Session, Path: req.Path, Create: true, Exclusive: req.MustCreate,
			Dir: req.Dir, Ephemeral: req.Ephemeral, Contents: req.Contents, ACL: req.ACL, LockDelay: req.LockDelay}
		reply, err := result(c.propose(ctx, op))
		if err != nil {
			return nil, err
		}
		o := reply.(*namespace.Opened)
		resp.Stat, resp.Created = o.Stat, o.Created
	default:
		return nil, err
	}
	resp.Handle = api.Handle{Session: req.Session, Path: req.Path, Instance: resp.Stat.Instance, Events: req.Events, Cache: req.Cache}
	m.subscribe(c.caller, req.Session, req.Path, req.Events)
	return resp, nil
}

func handleClose(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	m, err := c.needSession(req.Header)
	if err != nil {
		return nil, err
	}
	m.unsubscribe(req.Session, req.Handle.Path)
	return &api.Empty{}, nil
}

// cacheable registers a Cache handle's session as caching the node, before
// the read, and reports whether the answer may be cached. Only a caller
// that may read the node is registered: a registered session is sent
// invalidations (which reveal writes) and is waited for by every write.
func (c *rpcCall) cacheable(m *master, h api.Header, hd api.Handle) bool {
	if !hd.Cache {
		return false
	}
	if ok, err := c.r.ns.Allowed(c.caller, hd.Path, api.PermRead); err != nil || !ok {
		return false
	}
	return m.registerCacher(h.Session, hd.Path)
}

func handleGetContents(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	m, err := c.needHandle(req.Header, req.Handle)
	if err != nil {
		return nil, err
	}
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	cacheable := c.cacheable(m, req.Header, req.Handle)
	data, st, err := c.r.ns.GetContentsAndStat(c.caller, req.Handle.Path)
	if err != nil {
		return nil, err
	}
	if err := checkInstance(req.Handle, st); err != nil {
		return nil, err
	}
	return &api.ContentsResponse{Contents: data, Stat: st, Cacheable: cacheable}, nil
}

func handleGetStat(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	m, err := c.needHandle(req.Header, req.Handle)
	if err != nil {
		return nil, err
	}
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	cacheable := c.cacheable(m, req.Header, req.Handle)
	st, err := c.r.ns.Stat(c.caller, req.Handle.Path)
	if err != nil {
		return nil, err
	}
	if err := checkInstance(req.Handle, st); err != nil {
		return nil, err
	}
	return &api.StatResponse{Stat: st, Cacheable: cacheable}, nil
}

func handleReadDir(ctx context.Context, c *rpcCall, req *api.ReadDirRequest) (any, error) {
	if _, err := c.needHandle(req.Header, req.Handle); err != nil {
		return nil, err
	}
	end, err := c.read(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	page, err := c.r.ns.ReadDir(c.caller, req.Handle.Path, req.After, req.Limit)
	if err != nil {
		return nil, err
	}
	return &api.ReadDirResponse{Entries: page.Entries, Next: page.Next}, nil
}

// currentStat checks that the handle's node still exists in its instance.
func (c *rpcCall) currentStat(hd api.Handle) (api.NodeStat, error) {
	st, err := c.r.ns.Stat(c.caller, hd.Path)
	if err != nil {
		return st, err
	}
	return st, checkInstance(hd, st)
}

// write runs a write to the handle's node that may invalidate caches: it
// checks the session and the handle (and, unless the op itself checks the
// instance, that the node is the one the handle opened), invalidates the
// sessions caching the node with an event of kind, proposes op and returns
// its reply.
func (c *rpcCall) write(ctx context.Context, h api.Header, hd api.Handle, kind api.EventKind, opChecksInstance bool, op namespace.Op) (namespace.Reply, error) {
	m, err := c.needHandle(h, hd)
	if err != nil {
		return nil, err
	}
	if !opChecksInstance {
		if _, err := c.currentStat(hd); err != nil {
			return nil, err
		}
	}
	end, err := m.invalidate(ctx, hd.Path, kind)
	if err != nil {
		return nil, err
	}
	defer end()
	return result(c.propose(ctx, op))
}

func handleSetContents(ctx context.Context, c *rpcCall, req *api.SetContentsRequest) (any, error) {
	op := &namespace.SetContents{Session: req.Session, Path: req.Handle.Path, Contents: req.Contents, IfGeneration: req.IfGeneration}
	reply, err := c.write(ctx, req.Header, req.Handle, api.EventContentsModified, false, op)
	if err != nil {
		return nil, err
	}
	return &api.StatResponse{Stat: reply.(*namespace.Written).Stat}, nil
}

func handleDelete(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	op := &namespace.Delete{Session: req.Session, Path: req.Handle.Path, IfInstance: req.Handle.Instance}
	if _, err := c.write(ctx, req.Header, req.Handle, api.EventHandleInvalid, true, op); err != nil {
		return nil, err
	}
	return &api.Empty{}, nil
}

func handleSetACL(ctx context.Context, c *rpcCall, req *api.SetACLRequest) (any, error) {
	op := &namespace.SetACL{Session: req.Session, Path: req.Handle.Path, ACL: req.ACL, IfGeneration: req.IfGeneration}
	reply, err := c.write(ctx, req.Header, req.Handle, api.EventContentsModified, false, op)
	if err != nil {
		return nil, err
	}
	return &api.StatResponse{Stat: reply.(*namespace.ACLSet).Stat}, nil
}

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
				m.mu.Lock()
				m.notifyConflict(path)
				m.mu.Unlock()
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

func handleCreateTenant(ctx context.Context, c *rpcCall, req *api.TenantRequest) (any, error) {
	if _, err := c.needMaster(); err != nil {
		return nil, err
	}
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
	if _, err := c.needMaster(); err != nil {
		return nil, err
	}
	reply, err := result(c.propose(ctx, &namespace.UpdateTenant{Name: req.Name, Quota: req.Quota}))
	if err != nil {
		return nil, err
	}
	return &api.TenantResponse{Tenant: reply.(*namespace.TenantReply).Tenant}, nil
}

func handleListTenants(ctx context.Context, c *rpcCall, req *api.ListRequest) (any, error) {
	m, err := c.needMaster()
	if err != nil {
		return nil, err
	}
	var ts []api.TenantInfo
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
	if _, err := c.needMaster(); err != nil {
		return nil, err
	}
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
	st := c.r.cellStatus()
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
	}
	if !st.IsLeader && st.Leader == r.cfg.ID {
		resp.Master = 0
	}
	now := monotime.Now()
	top := st.Chosen
	for _, id := range r.cfg.replicaIDs() {
		rs := api.ReplicaStatus{ID: id, Addr: r.cfg.Replicas[id], Master: id == resp.Master && resp.Master != 0}
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
	if !c.isAdmin() {
		return nil, apiErr(api.PermissionDenied, "only the cell administrator may ask the master to step down")
	}
	if _, err := c.needMaster(); err != nil {
		return nil, err
	}
	if err := c.r.StepDown(ctx, req.Next); err != nil {
		return nil, apiErr(api.FailedPrecondition, "step-down: "+err.Error())
	}
	return &api.StepDownResponse{Successor: c.r.successor.Load()}, nil
}

// tenantOf returns the tenant of an absolute path "/<tenant>/...".
func tenantOf(path string) string {
	if len(path) < 2 || path[0] != '/' {
		return ""
	}
	for i := 1; i < len(path); i++ {
		if path[i] == '/' {
			return path[1:i]
		}
	}
	return path[1:]
}

// maxTarpit bounds how long a shed call's refusal is held back.
const maxTarpit = 50 * time.Millisecond

// tarpit holds back the refusal of a call shed for a tenant's rate or its
// full fair-share queue for (at most maxTarpit of) the RetryAfter it
// carries. A flooding client that ignores RetryAfter and retries at once
// then retries no faster than its refusals come back, instead of spinning
// the master's CPU (and its neighbours' share of it) on refusals; a client
// that honours RetryAfter loses nothing.
func tarpit(ctx context.Context, err error) {
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.ResourceExhausted || ae.RetryAfter <= 0 {
		return
	}
	d := min(time.Duration(ae.RetryAfter), maxTarpit)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
