package cell

import (
	"context"
	"errors"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
)

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
	st, err := c.d.state.Stat(c.caller, req.Path)
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
	m.subs.subscribe(c.caller, req.Session, req.Path, req.Events)
	return resp, nil
}

func handleClose(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	m, err := c.needSession(req.Header)
	if err != nil {
		return nil, err
	}
	m.subs.unsubscribe(req.Session, req.Handle.Path)
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
	if ok, err := c.d.state.Allowed(c.caller, hd.Path, api.PermRead); err != nil || !ok {
		return false
	}
	return m.caches.register(h.Session, hd.Path)
}

// beginHandleRead admits a read through an open handle: the handle must
// be the session's, and the read counts against the tenant's concurrent
// reads until end is called. cacheable says whether the reply may be
// cached (see cacheable).
func (c *rpcCall) beginHandleRead(ctx context.Context, req *api.HandleRequest) (cacheable bool, end func(), err error) {
	m, err := c.needHandle(req.Header, req.Handle)
	if err != nil {
		return false, nil, err
	}
	end, err = c.read(ctx)
	if err != nil {
		return false, nil, err
	}
	return c.cacheable(m, req.Header, req.Handle), end, nil
}

func handleGetContents(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	cacheable, end, err := c.beginHandleRead(ctx, req)
	if err != nil {
		return nil, err
	}
	defer end()
	data, st, err := c.d.state.GetContentsAndStat(c.caller, req.Handle.Path)
	if err != nil {
		return nil, err
	}
	if err := checkInstance(req.Handle, st); err != nil {
		return nil, err
	}
	return &api.ContentsResponse{Contents: data, Stat: st, Cacheable: cacheable}, nil
}

func handleGetStat(ctx context.Context, c *rpcCall, req *api.HandleRequest) (any, error) {
	cacheable, end, err := c.beginHandleRead(ctx, req)
	if err != nil {
		return nil, err
	}
	defer end()
	st, err := c.d.state.Stat(c.caller, req.Handle.Path)
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
	page, err := c.d.state.ReadDir(c.caller, req.Handle.Path, req.After, req.Limit)
	if err != nil {
		return nil, err
	}
	return &api.ReadDirResponse{Entries: page.Entries, Next: page.Next}, nil
}

// currentStat checks that the handle's node still exists in its instance.
func (c *rpcCall) currentStat(hd api.Handle) (api.NodeStat, error) {
	st, err := c.d.state.Stat(c.caller, hd.Path)
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
	end, err := m.caches.invalidate(ctx, hd.Path, kind)
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
