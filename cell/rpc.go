package cell

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/session"
	"github.com/lockcell/lockcell/transport"
)

// handlerDeps is what the RPC handlers need of their replica, and the only
// way they reach it: the replica builds it once (wire.go), and every call
// carries it (rpcCall.d). Its parts follow the handler families:
//
//   - roleDeps, the master role and admission: every family (rpc.go,
//     auth.go);
//   - state, the applied state read at the master, and propose and
//     submit, the way a request's command reaches Paxos: the node, lock,
//     session, token and tenant handlers;
//   - seq, the cell's name and signing key: the lock handlers
//     (rpc_lock.go);
//   - ka, the KeepAlive accounting: the session handlers and the
//     KeepAlive stream (rpc_session.go, kastream.go);
//   - admin, the replica-wide calls of the administrator (rpc_admin.go,
//     backup.go), and members, its membership changes (rpc_member.go).
type handlerDeps struct {
	roleDeps
	state appliedState
	// propose runs op through the pipeline under the master role m as
	// caller's request and waits for its outcome (pipeline.do); submit is
	// its non-blocking form (pipeline.submit); submitGroup submits the
	// commands of one call as a group (pipeline.submitGroup).
	propose     func(ctx context.Context, m *master, caller namespace.Caller, op namespace.Op) (namespace.Result, error)
	submit      func(ctx context.Context, m *master, caller namespace.Caller, op namespace.Op, done func(namespace.Result, error))
	submitGroup func(ctx context.Context, m *master, caller namespace.Caller, ops []namespace.Op, done func(i int, res namespace.Result, err error))
	seq         sequencerKey
	ka          keepAliveDeps
	admin       adminDeps
	members     *membership
	metrics     *metrics
	log         *slog.Logger
}

// roleDeps is how a call learns whether this replica serves as master.
type roleDeps struct {
	// serving returns the master role if this replica serves now (it
	// leads and its master lease is live); awaitTakeOver waits a little
	// for it while the replica is taking over (Replica.awaitTakeOver).
	serving       func() *master
	awaitTakeOver func(ctx context.Context) *master
	// notMaster is the NotMaster error naming the master this replica
	// knows of; sessionError maps the session manager's errors.
	notMaster    func() *api.Error
	sessionError func(error) *api.Error
	// adminPrincipal is the cell administrator (Config.AdminPrincipal).
	adminPrincipal string
}

// appliedState is the applied state as the handlers read it (the
// namespace's reads; namespace.Store implements it).
type appliedState interface {
	Stat(c namespace.Caller, path string) (api.NodeStat, error)
	GetContentsAndStat(c namespace.Caller, path string) ([]byte, api.NodeStat, error)
	ReadDir(c namespace.Caller, path, after string, limit int) (namespace.DirPage, error)
	Allowed(c namespace.Caller, path string, perm api.Perm) (bool, error)
	CheckSequencer(c namespace.Caller, seq sequencer.Sequencer) (bool, error)
	ListSessions(c namespace.Caller, tenant string) ([]api.SessionInfo, error)
	ListLocks(c namespace.Caller, tenant string) ([]api.LockInfo, error)
	Tenant(c namespace.Caller, name string) (api.TenantInfo, error)
	ListTenants(c namespace.Caller) ([]api.TenantInfo, error)
	TokenByID(id string) (rec namespace.TokenRecord, found bool, err error)
	ListTokens(c namespace.Caller, tenant string) ([]api.TokenInfo, error)
}

// sequencerKey is what grants and checks sequencers: the cell's name
// (Config.Cell) and its signing key (Config.SigningKey).
type sequencerKey struct {
	cell string
	key  ed25519.PrivateKey
}

// keepAliveDeps is the KeepAlive accounting of the session handlers.
type keepAliveDeps struct {
	// cadence is how often a client sends its KeepAlive
	// (Config.KeepAliveCadence).
	cadence time.Duration
	// frames counts the KeepAlive request frames served on KeepAlive
	// streams (Status.KeepAliveFrames).
	frames *atomic.Uint64
}

// adminDeps are the replica-wide calls the administrator's handlers make.
type adminDeps struct {
	// self is this replica's ID.
	self uint64
	// cellStatus is the cell as this replica sees it (Replica.cellStatus);
	// awaitOtherMaster waits for a master other than except
	// (Replica.awaitOtherMaster).
	cellStatus       func() *api.CellStatusResponse
	awaitOtherMaster func(ctx context.Context, except uint64, wait time.Duration) *api.CellStatusResponse
	// stepDown hands mastership over (Replica.StepDown); leader is the
	// leader this replica follows (0 if none), successor the replica it
	// handed mastership to (Replica.successor).
	stepDown  func(ctx context.Context, next uint64) error
	leader    func() uint64
	successor func() uint64
	// backup takes a backup of the applied state (Replica.Backup).
	backup func() ([]byte, BackupInfo, error)
}

// rpcCall is one client request being served.
type rpcCall struct {
	d      *handlerDeps
	method api.Method
	// info is the method's entry in the api table.
	info api.MethodInfo
	// id is what the connection's certificate proved (anonymous without).
	id transport.Identity
	// caller is the authenticated principal (see authenticate).
	caller namespace.Caller
	// tokenID names the token the caller authenticated with, if any.
	tokenID string
	m       *master // set by needMaster
	// granted is how many calls admit let in of a request that counts as
	// several (api.CountedRequest; 1 for any other), and shed the refusal
	// of the rest (nil if none).
	granted int
	shed    error
	// ctx is the request's context (the stream's).
	ctx context.Context
}

// handler serves one method on a stream of its own: it decodes the request
// body itself (through with) and returns the response or an error.
type handler func(ctx context.Context, c *rpcCall, f transport.Frame) (any, error)

// streamHandler serves a method that takes over its stream for many
// frames (KeepAliveStream); f is the first frame, already read.
type streamHandler func(d *handlerDeps, ctx context.Context, s *transport.ServerStream, f transport.Frame)

// with adapts a typed handler function to handler: it decodes the request
// and admits the call (see admit) before fn runs.
func with[Req any](fn func(ctx context.Context, c *rpcCall, req *Req) (any, error)) handler {
	return func(ctx context.Context, c *rpcCall, f transport.Frame) (any, error) {
		req := new(Req)
		if err := f.Decode(req); err != nil {
			if c.id.Anonymous() {
				return nil, errNoCredentials
			}
			return nil, errInvalid("malformed " + c.method.String() + " request: " + err.Error())
		}
		if err := c.admit(any(req)); err != nil {
			return nil, err
		}
		return fn(ctx, c, req)
	}
}

// handlers and streamHandlers serve the methods: every method of the api
// table has exactly one of them (TestEveryMethodServed).
var (
	handlers = map[api.Method]handler{
		api.MethodCreateSession:      with(handleCreateSession),
		api.MethodCreateSessions:     with(handleCreateSessions),
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
		api.MethodAddReplica:         with(handleAddReplica),
		api.MethodRemoveReplica:      with(handleRemoveReplica),
		api.MethodReplaceReplica:     with(handleReplaceReplica),
	}
	streamHandlers = map[api.Method]streamHandler{
		api.MethodKeepAliveStream: (*handlerDeps).serveKeepAliveStream,
		api.MethodKeepAliveBatch:  (*handlerDeps).serveKeepAliveStream,
	}
)

// endpoint is one method as a replica serves it: its entry in the api
// table, which decides admission, and the function that serves it (serve,
// or stream for a method that takes over its stream).
type endpoint struct {
	api.MethodInfo
	serve  handler
	stream streamHandler
}

// endpoints joins the api table with the handlers: the methods a replica
// serves. A method missing from either is not served (it is answered as an
// unknown method), which TestEveryMethodServed forbids.
var endpoints map[api.Method]endpoint

func init() {
	// NB: assigned here, not in endpoints' declaration: the KeepAlive
	// stream's handler reads endpoints, an initialization cycle.
	endpoints = buildEndpoints(api.Methods(), handlers, streamHandlers)
}

func buildEndpoints(table []api.MethodInfo, hs map[api.Method]handler, ss map[api.Method]streamHandler) map[api.Method]endpoint {
	eps := make(map[api.Method]endpoint, len(table))
	for _, mi := range table {
		e := endpoint{MethodInfo: mi, serve: hs[mi.Method], stream: ss[mi.Method]}
		if e.serve != nil || e.stream != nil {
			eps[mi.Method] = e
		}
	}
	return eps
}

// serveStream serves one client stream: one request frame, one reply frame
// (or, for a stream method, as many as it exchanges).
func (d *handlerDeps) serveStream(ctx context.Context, s *transport.ServerStream) {
	f, err := s.ReadFrame(ctx)
	if err != nil {
		return // the transport already reset a bad stream
	}
	method := api.Method(f.Tag)
	e, ok := endpoints[method]
	if ok && e.stream != nil {
		e.stream(d, ctx, s, f)
		return
	}
	c := &rpcCall{d: d, method: method, info: e.MethodInfo, id: s.Identity(), ctx: ctx}
	start := time.Now()
	var resp any
	switch {
	case !ok && c.id.Anonymous():
		err = errNoCredentials
	case !ok:
		err = errInvalid("unknown method " + method.String())
	default:
		resp, err = e.serve(ctx, c, f)
	}
	d.metrics.observeRPC(c.caller.Tenant, method, err, time.Since(start))
	if err != nil {
		tarpit(ctx, err)
		_ = s.WriteFrame(ctx, api.ReplyError, toAPIError(err))
		return
	}
	if sr, ok := resp.(streamedReply); ok {
		if err := sr.writeTo(ctx, s); err != nil {
			d.log.Debug("streamed reply failed", "method", method, "err", err)
		}
		return
	}
	_ = s.WriteFrame(ctx, api.ReplyOK, resp)
}

// admit lets a call in or refuses it before its handler runs, by its
// method's entry in the api table; it is the one place that does. It
// authenticates the caller (see authenticate), then by the admission
// class: an AdmitAdmin method is the cell administrator's only; a tenant
// principal's call is charged at the master against its tenant's
// KeepAlive budget (AdmitKeepAlive), against nothing (AdmitRelease: calls
// that free resources are never refused for rate) or against its rate
// (OpsPerSecond, every other class). Last, a method that needs the master
// is refused with NotMaster on a replica that is not (see needMaster).
//
// A request that counts as several calls (api.CountedRequest) must count
// as 1 to api.MaxCreateSessions of them, or it is refused with
// InvalidArgument; it is charged as that many, and lets in as many as the
// rate allows (c.granted; the rest are refused with c.shed).
func (c *rpcCall) admit(req any) error {
	if err := c.authenticate(req); err != nil {
		return err
	}
	n := 1
	if cr, ok := req.(api.CountedRequest); ok {
		if n = cr.Ops(); n < 1 || n > api.MaxCreateSessions {
			return errInvalid(fmt.Sprintf("%s asks for %d at once; it may ask for 1 to %d", c.method, n, api.MaxCreateSessions))
		}
	}
	c.granted = n
	if err := c.charge(); err != nil {
		return err
	}
	if c.info.NeedsMaster {
		if _, err := c.needMaster(); err != nil {
			return err
		}
	}
	return nil
}

// charge applies the admission class to the authenticated caller. A
// replica that is not master charges nothing: the call is refused with
// NotMaster, or is one every replica serves.
func (c *rpcCall) charge() error {
	switch c.info.Admission {
	case api.AdmitAdmin:
		if !c.isAdmin() {
			return apiErr(api.PermissionDenied, "only the cell administrator may call "+c.method.String())
		}
		return nil
	case api.AdmitRelease:
		return nil
	}
	if c.caller.Tenant == "" {
		return nil
	}
	m := c.d.serving()
	if m == nil {
		return nil
	}
	if c.info.Admission == api.AdmitKeepAlive {
		return m.lim.allowKeepAlive(c.caller.Tenant)
	}
	if c.granted > 1 {
		granted, shed := m.lim.allowOps(c.caller.Tenant, c.granted)
		if granted == 0 {
			return shed
		}
		c.granted, c.shed = granted, shed
		return nil
	}
	return m.lim.allowOp(c.caller.Tenant)
}

// cellCaller is the caller the cell itself uses for its own commands.
func (d *roleDeps) cellCaller() namespace.Caller {
	return namespace.Caller{Principal: d.adminPrincipal}
}

func (c *rpcCall) isAdmin() bool {
	return c.caller.Tenant == "" && c.caller.Principal == c.d.adminPrincipal
}

// needMaster returns the master role if this replica serves now. A
// replica that is taking over (see takingOver) first waits a little for
// its master role, so that a client redirected here by a hand-over is
// served instead of sent searching.
func (c *rpcCall) needMaster() (*master, error) {
	m := c.d.serving()
	if m == nil && c.ctx != nil {
		m = c.d.awaitTakeOver(c.ctx)
	}
	if m == nil {
		return nil, c.d.notMaster()
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
		return nil, c.d.sessionError(err)
	}
	return m, nil
}

// ownSession checks that sess is live and the caller's, and remembers the
// token the caller used with it (so that revoking the token ends it).
func (c *rpcCall) ownSession(m *master, sess uint64) error {
	owner, ok := m.owners.owner(sess)
	if !ok {
		return apiErr(api.SessionExpired, "no such session")
	}
	if owner != c.caller {
		return apiErr(api.PermissionDenied, "the session belongs to another principal")
	}
	if c.tokenID != "" {
		m.owners.bindToken(sess, c.tokenID)
	}
	return nil
}

// propose runs op through the pipeline as the caller's request and waits
// for its outcome (routeFor decides how it travels).
func (c *rpcCall) propose(ctx context.Context, op namespace.Op) (namespace.Result, error) {
	return c.d.propose(ctx, c.m, c.caller, op)
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
	m.subs.subscribe(c.caller, h.Session, hd.Path, hd.Events)
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
