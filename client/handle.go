package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/sequencer"
)

// OpenOptions says how to open a node. The zero value opens an existing
// node with no events.
type OpenOptions struct {
	// Create makes the node if it is missing; MustCreate fails with
	// api.ErrAlreadyExists if it exists.
	Create, MustCreate bool
	// Dir, Ephemeral, Contents, ACL and LockDelay apply only when the node is
	// created. LockDelay 0 means the cell's default; negative means none.
	Dir       bool
	Ephemeral bool
	Contents  []byte
	ACL       *api.ACLNames
	LockDelay time.Duration
	// Events selects the node events the session receives for this node.
	Events api.EventMask
}

// OpenInfo is what OpenStat learns besides the handle.
type OpenInfo struct {
	// Stat is the node's metadata as of the open.
	Stat api.NodeStat
	// Created reports whether this open created the node.
	Created bool
}

// Handle is an open node (Chubby §2.6). Handles are self-describing: after a
// fail-over the new master re-establishes them on first use, so a Handle
// stays usable for the session's life unless its node is deleted (calls
// then fail with api.ErrNotFound).
//
// Methods are safe for concurrent use; lock operations on one handle are
// serialized.
type Handle struct {
	s      *Session
	h      api.Handle
	cache  bool
	events api.EventMask // what the handle subscribed to
	closed atomic.Bool
	// lk serializes Acquire and Release on this handle. It is held across
	// their calls, so it is a chanLock, not a sync.Mutex (see chanLock).
	lk chanLock
}

// subscriptions counts, per path, a session's open handles that subscribed
// to events. The master keeps one subscription per session and path (the
// union of the masks its opens asked for) and Close ends it, whatever
// other handles of the session still want it; so a handle's Close tells
// the master only when no other subscribed handle on the path is open.
// Opens and closes on one path are serialized, so that a Close cannot
// overtake the Open of a new handle and end its subscription. The zero
// value is ready to use.
type subscriptions struct {
	mu    sync.Mutex
	paths map[string]*pathSubs
}

type pathSubs struct {
	// lk is held across an Open or Close call on the path. It is a
	// channel, not a sync.Mutex, so that a caller waiting for it gives up
	// when its context ends and, under testing/synctest, waits durably
	// while the holder's call waits for the clock.
	lk   chanLock
	open int // open handles with a nonzero event mask; guarded by lk
	refs int // users of this entry (for removal); guarded by subscriptions.mu
}

// lock returns path's entry, locked, or ctx's error if ctx ends first;
// unlock releases it.
func (ss *subscriptions) lock(ctx context.Context, path string) (*pathSubs, error) {
	ss.mu.Lock()
	if ss.paths == nil {
		ss.paths = map[string]*pathSubs{}
	}
	p := ss.paths[path]
	if p == nil {
		p = &pathSubs{lk: newChanLock()}
		ss.paths[path] = p
	}
	p.refs++
	ss.mu.Unlock()
	if err := p.lk.lock(ctx); err != nil {
		ss.unref(path, p)
		return nil, err
	}
	return p, nil
}

func (ss *subscriptions) unlock(path string, p *pathSubs) {
	p.lk.unlock()
	ss.unref(path, p)
}

// unref drops one user of path's entry, and the entry once it has none
// and no subscribed handle is open.
func (ss *subscriptions) unref(path string, p *pathSubs) {
	ss.mu.Lock()
	p.refs--
	if p.refs == 0 && p.open == 0 {
		delete(ss.paths, path)
	}
	ss.mu.Unlock()
}

// Open opens (and with opts.Create makes) the node at path.
func (s *Session) Open(ctx context.Context, path string, opts OpenOptions) (*Handle, error) {
	h, _, err := s.OpenStat(ctx, path, opts)
	return h, err
}

// OpenStat is Open that also returns the node's metadata and whether this
// call created it.
func (s *Session) OpenStat(ctx context.Context, path string, opts OpenOptions) (handle *Handle, _ OpenInfo, err error) {
	events := opts.Events
	caching := s.cfg.Cache && !opts.Dir
	if caching {
		events |= api.WantContentsModified
	}
	ld := int64(opts.LockDelay)
	if opts.LockDelay < 0 {
		ld = -1
	}
	var resp api.OpenResponse
	if events != 0 {
		p, err := s.subs.lock(ctx, path)
		if err != nil {
			return nil, OpenInfo{}, fmt.Errorf("open %s: %w", path, err)
		}
		defer s.subs.unlock(path, p)
		defer func(h **Handle) {
			if *h != nil {
				p.open++
			}
		}(&handle)
	}
	// A lost reply is retried unless MustCreate, whose retry would fail
	// with AlreadyExists (api.OpenRequest.Idempotent).
	err = s.call(ctx, api.MethodOpen, func(h api.Header) any {
		return &api.OpenRequest{Header: h, Path: path, Create: opts.Create, MustCreate: opts.MustCreate,
			Dir: opts.Dir, Ephemeral: opts.Ephemeral, Contents: opts.Contents, ACL: opts.ACL, LockDelay: ld, Events: events,
			Cache: caching}
	}, &resp)
	if err != nil {
		return nil, OpenInfo{}, fmt.Errorf("open %s: %w", path, err)
	}
	handle = &Handle{s: s, h: resp.Handle, cache: caching, events: events, lk: newChanLock()}
	return handle, OpenInfo{Stat: resp.Stat, Created: resp.Created}, nil
}

// Path returns the node's path.
func (h *Handle) Path() string { return h.h.Path }

// Instance returns the instance of the node the handle was opened on.
func (h *Handle) Instance() uint64 { return h.h.Instance }

// Session returns the handle's session.
func (h *Handle) Session() *Session { return h.s }

func (h *Handle) req(hd api.Header) *api.HandleRequest {
	return &api.HandleRequest{Header: hd, Handle: h.h}
}

// Close closes the handle. Its event subscription ends unless another
// open handle of the session on the same path subscribed too (the session
// then goes on receiving the path's events for that handle). Closing a
// closed handle does nothing.
func (h *Handle) Close(ctx context.Context) error {
	path := h.h.Path
	if h.closed.Load() {
		return nil
	}
	p, err := h.s.subs.lock(ctx, path)
	if err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	defer h.s.subs.unlock(path, p)
	if h.closed.Load() {
		return nil
	}
	if h.events != 0 {
		p.open--
	}
	if p.open > 0 {
		// Another handle still wants the path's events; the master's
		// Close would end them.
		h.closed.Store(true)
		return nil
	}
	err = h.s.call(ctx, api.MethodClose, func(hd api.Header) any { return h.req(hd) }, &api.Empty{})
	if err != nil {
		if h.events != 0 {
			p.open++
		}
		return fmt.Errorf("close %s: %w", path, err)
	}
	h.closed.Store(true)
	return nil
}

// GetContents returns the file's contents and metadata (from the cache
// when it is on and holds them, and the session is safe as of now).
func (h *Handle) GetContents(ctx context.Context) ([]byte, api.NodeStat, error) {
	// The cache is valid only while the lease runs: safe() turns it off at
	// once if the lease has run out, without waiting for the KeepAlive loop.
	if h.cache && h.s.safe() {
		if f, ok := h.s.cache.get(h.h.Path); ok && f.stat.Instance == h.h.Instance {
			return append([]byte(nil), f.contents...), f.stat, nil
		}
	}
	gen := h.s.cache.begin()
	var resp api.ContentsResponse
	err := h.s.call(ctx, api.MethodGetContentsAndStat, func(hd api.Header) any { return h.req(hd) }, &resp)
	if err != nil {
		return nil, api.NodeStat{}, fmt.Errorf("get %s: %w", h.h.Path, err)
	}
	if h.cache && resp.Cacheable {
		h.s.cache.put(h.h.Path, gen, cachedFile{contents: append([]byte(nil), resp.Contents...), stat: resp.Stat})
	}
	return resp.Contents, resp.Stat, nil
}

// Stat returns the node's metadata (lock state included; never cached).
func (h *Handle) Stat(ctx context.Context) (api.NodeStat, error) {
	var resp api.StatResponse
	err := h.s.call(ctx, api.MethodGetStat, func(hd api.Header) any { return h.req(hd) }, &resp)
	if err != nil {
		return api.NodeStat{}, fmt.Errorf("stat %s: %w", h.h.Path, err)
	}
	return resp.Stat, nil
}

// SetContents writes the file. A write whose reply is lost returns an
// error wrapping ErrOutcomeUnknown.
func (h *Handle) SetContents(ctx context.Context, data []byte) (api.NodeStat, error) {
	return h.SetContentsIf(ctx, data, 0)
}

// SetContentsIf writes the file only if its content generation is gen (0:
// unconditionally); a mismatch fails with api.ErrFailedPrecondition.
func (h *Handle) SetContentsIf(ctx context.Context, data []byte, gen uint64) (api.NodeStat, error) {
	var resp api.StatResponse
	err := h.s.call(ctx, api.MethodSetContents, func(hd api.Header) any {
		return &api.SetContentsRequest{Header: hd, Handle: h.h, Contents: data, IfGeneration: gen}
	}, &resp)
	h.s.cache.invalidate(h.h.Path)
	if err != nil {
		return api.NodeStat{}, fmt.Errorf("set %s: %w", h.h.Path, err)
	}
	return resp.Stat, nil
}

// ReadDir lists the directory's children in name order.
func (h *Handle) ReadDir(ctx context.Context) ([]api.DirEntry, error) {
	var out []api.DirEntry
	after := ""
	for {
		var resp api.ReadDirResponse
		err := h.s.call(ctx, api.MethodReadDir, func(hd api.Header) any {
			return &api.ReadDirRequest{Header: hd, Handle: h.h, After: after}
		}, &resp)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", h.h.Path, err)
		}
		out = append(out, resp.Entries...)
		if resp.Next == "" || len(resp.Entries) == 0 {
			return out, nil
		}
		after = resp.Next
	}
}

// Delete deletes the node (which must be the instance the handle names).
func (h *Handle) Delete(ctx context.Context) error {
	err := h.s.call(ctx, api.MethodDelete, func(hd api.Header) any { return h.req(hd) }, &api.Empty{})
	h.s.cache.invalidate(h.h.Path)
	if errors.Is(err, ErrOutcomeUnknown) {
		// Find out: a node that is gone (or re-created) was deleted by us or
		// by someone; either way the instance is gone.
		if _, serr := h.Stat(ctx); errors.Is(serr, api.ErrNotFound) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", h.h.Path, err)
	}
	return nil
}

// SetACL replaces the node's ACL names (only if the ACL generation is gen,
// unless gen is 0).
func (h *Handle) SetACL(ctx context.Context, acl api.ACLNames, gen uint64) (api.NodeStat, error) {
	var resp api.StatResponse
	err := h.s.call(ctx, api.MethodSetACL, func(hd api.Header) any {
		return &api.SetACLRequest{Header: hd, Handle: h.h, ACL: acl, IfGeneration: gen}
	}, &resp)
	if err != nil {
		return api.NodeStat{}, fmt.Errorf("set ACL of %s: %w", h.h.Path, err)
	}
	return resp.Stat, nil
}

// Sequencer returns the sequencer of the lock this session holds on the
// node, as the cell reports it now; api.ErrFailedPrecondition if it holds
// none.
func (h *Handle) Sequencer(ctx context.Context) (sequencer.Sequencer, error) {
	resp, err := h.getSequencer(ctx)
	if err != nil {
		return sequencer.Sequencer{}, err
	}
	return sequencer.Parse(resp.Sequencer)
}

func (h *Handle) getSequencer(ctx context.Context) (api.SequencerResponse, error) {
	var resp api.SequencerResponse
	err := h.s.call(ctx, api.MethodGetSequencer, func(hd api.Header) any { return h.req(hd) }, &resp)
	if err != nil {
		return resp, fmt.Errorf("sequencer of %s: %w", h.h.Path, err)
	}
	return resp, nil
}
