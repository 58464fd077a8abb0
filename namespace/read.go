package namespace

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/wire"
	"github.com/lockcell/lockcell/sequencer"
)

// Reads. The master serves them from applied state; each sees the state
// after some whole slot. Each checks the caller like the commands do (see
// acl.go): errors are *api.Error values (InvalidArgument, Unauthenticated,
// NotFound, PermissionDenied, FailedPrecondition) or storage failures
// wrapping ErrStorage or ErrCorrupt.

// reading runs fn over the committed state with the read lock held, so a
// slot commit cannot land between fn's lookups.
func (s *Store) reading(fn func(v *view) error) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v := s.view(s.db)
	v.cc = s.cache
	return fn(&v)
}

// lookup is target for reads: caller, path, existence, permission.
func (v *view) lookup(c Caller, path string, perm api.Perm) (Path, *nodeRec, error) {
	if aerr, err := v.checkTenantCaller(c); aerr != nil || err != nil {
		return "", nil, errOr(aerr, err)
	}
	p, aerr := v.parsePath(path)
	if aerr != nil {
		return "", nil, aerr
	}
	n, err := v.node(p)
	if err != nil {
		return "", nil, err
	}
	if n == nil {
		aerr, err := v.missing(c, p)
		return "", nil, errOr(aerr, err)
	}
	aerr, err = v.check(c, p, n, perm)
	if aerr != nil || err != nil {
		return "", nil, errOr(aerr, err)
	}
	return p, n, nil
}

// errOr returns err if set, else aerr as an error (nil if aerr is nil).
func errOr(aerr *api.Error, err error) error {
	if err != nil {
		return err
	}
	if aerr != nil {
		return aerr
	}
	return nil
}

// Stat returns a node's metadata. Needs read permission.
func (s *Store) Stat(c Caller, path string) (api.NodeStat, error) {
	var st api.NodeStat
	err := s.reading(func(v *view) error {
		_, n, err := v.lookup(c, path, api.PermRead)
		if err == nil {
			st = n.stat()
		}
		return err
	})
	return st, err
}

// GetContentsAndStat returns a node's contents (empty for a directory) and
// metadata, consistent with each other. Needs read permission.
func (s *Store) GetContentsAndStat(c Caller, path string) ([]byte, api.NodeStat, error) {
	var (
		data []byte
		st   api.NodeStat
	)
	err := s.reading(func(v *view) error {
		p, n, err := v.lookup(c, path, api.PermRead)
		if err != nil {
			return err
		}
		st = n.stat()
		if !n.Dir && n.Size > 0 {
			data, err = v.contents(p)
			data = bytes.Clone(data) // it may be the cache's
		}
		return err
	})
	if err != nil {
		return nil, api.NodeStat{}, err
	}
	return data, st, nil
}

// DirPage is one page of a directory listing.
type DirPage struct {
	// Entries are children in increasing byte order of their names.
	Entries []api.DirEntry
	// Next is the cursor for the following page, "" when this page is the
	// last.
	Next string
}

// ReadDir lists a directory's children whose names sort after the cursor
// after ("" for the first page), at most limit of them (0 or more than
// Config.ReadDirLimit: Config.ReadDirLimit). Needs read permission on the
// directory, which reveals the children's names and metadata. Errors also
// include FailedPrecondition for a file.
func (s *Store) ReadDir(c Caller, path, after string, limit int) (DirPage, error) {
	if limit <= 0 || limit > s.cfg.ReadDirLimit {
		limit = s.cfg.ReadDirLimit
	}
	var page DirPage
	err := s.reading(func(v *view) error {
		p, n, err := v.lookup(c, path, api.PermRead)
		if err != nil {
			return err
		}
		if !n.Dir {
			return api.Errorf(api.FailedPrecondition, "%s is not a directory", p)
		}
		prefix := childPrefix(p)
		var from []byte
		if after != "" {
			from = append(append(append([]byte(nil), prefix...), after...), 0)
		}
		return v.scan(prefix, from, func(k, val []byte) (bool, error) {
			if len(page.Entries) == limit {
				page.Next = page.Entries[limit-1].Name
				return false, nil
			}
			var child nodeRec
			if err := decodeRec(k, val, &child); err != nil {
				return false, err
			}
			page.Entries = append(page.Entries, api.DirEntry{Name: string(k[len(prefix):]), Stat: child.stat()})
			return true, nil
		})
	})
	if err != nil {
		return DirPage{}, err
	}
	return page, nil
}

// CheckSequencer reports whether seq's lock is held now in seq's mode at
// seq's generation on the node instance seq names. Its Cell and Signature
// are not checked here (the cell checks them). A node that no longer exists
// gives false. Needs read permission on the node (or, if it is gone, on its
// nearest existing ancestor, else PermissionDenied).
func (s *Store) CheckSequencer(c Caller, seq sequencer.Sequencer) (bool, error) {
	var held bool
	err := s.reading(func(v *view) error {
		if aerr, err := v.checkTenantCaller(c); aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		p, aerr := v.parsePath(seq.Path)
		if aerr != nil {
			return aerr
		}
		if p.Tenant() != seq.Tenant {
			return api.Errorf(api.InvalidArgument, "sequencer path %s is not in tenant %q", p, seq.Tenant)
		}
		n, err := v.node(p)
		if err != nil {
			return err
		}
		if n == nil {
			aerr, err := v.missing(c, p)
			if err == nil && aerr != nil && aerr.Code == api.NotFound {
				return nil
			}
			return errOr(aerr, err)
		}
		if aerr, err := v.check(c, p, n, api.PermRead); aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		held = len(n.Holders) > 0 && n.Instance == seq.Instance && n.LockGen == seq.Generation &&
			uint8(n.Mode) == uint8(seq.Mode)
		return nil
	})
	return held, err
}

// Allowed reports whether c has perm on the node at path. A missing node
// gives NotFound or PermissionDenied as for the other reads.
func (s *Store) Allowed(c Caller, path string, perm api.Perm) (bool, error) {
	if perm != api.PermRead && perm != api.PermWrite && perm != api.PermChangeACL {
		return false, api.Errorf(api.InvalidArgument, "unknown permission %d", perm)
	}
	var ok bool
	err := s.reading(func(v *view) error {
		if aerr, err := v.checkTenantCaller(c); aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		p, aerr := v.parsePath(path)
		if aerr != nil {
			return aerr
		}
		n, err := v.node(p)
		if err != nil {
			return err
		}
		if n == nil {
			aerr, err := v.missing(c, p)
			return errOr(aerr, err)
		}
		ok, err = v.allowed(c, p, n, perm)
		return err
	})
	return ok, err
}

// tenantReader checks that c may read tenant's records: the administrator
// may read any tenant's, a tenant principal only its own. For the
// administrator, tenant "" means every tenant.
func (v *view) tenantReader(c Caller, tenant string) error {
	admin, aerr, err := v.checkCaller(c)
	if aerr != nil || err != nil {
		return errOr(aerr, err)
	}
	if admin && tenant == "" {
		return nil
	}
	if !admin && c.Tenant != tenant {
		return api.Errorf(api.PermissionDenied, "tenant %q: only its principals and the administrator may list it", trunc(tenant))
	}
	if ValidTenantName(tenant) != nil {
		return api.Errorf(api.InvalidArgument, "tenant name %q is not valid", trunc(tenant))
	}
	t, err := v.tenant(tenant)
	if err != nil {
		return err
	}
	if t == nil {
		return api.Errorf(api.NotFound, "tenant %q does not exist", tenant)
	}
	return nil
}

// ListSessions returns the open sessions of tenant in ID order. The caller
// must be a principal of tenant or the administrator; the administrator may
// pass "" for every session of the cell (what a new master needs to extend
// every lease after fail-over).
func (s *Store) ListSessions(c Caller, tenant string) ([]api.SessionInfo, error) {
	var out []api.SessionInfo
	err := s.reading(func(v *view) error {
		if err := v.tenantReader(c, tenant); err != nil {
			return err
		}
		if tenant == "" {
			return v.scan(tagKey(tagSession, 0), nil, func(k, val []byte) (bool, error) {
				var r sessionRec
				if len(k) != 10 {
					return false, fmt.Errorf("%w: session key %q", ErrCorrupt, k)
				}
				if err := decodeRec(k, val, &r); err != nil {
					return false, err
				}
				out = append(out, api.SessionInfo{ID: binary.BigEndian.Uint64(k[2:]), Tenant: r.Tenant, Principal: r.Principal, Created: r.Created})
				return true, nil
			})
		}
		prefix := tenantSessionPrefix(tenant)
		return v.scan(prefix, nil, func(k, _ []byte) (bool, error) {
			if len(k) != len(prefix)+8 {
				return false, fmt.Errorf("%w: session index key %q", ErrCorrupt, k)
			}
			sid := binary.BigEndian.Uint64(k[len(prefix):])
			r, err := v.session(sid)
			if err == nil && r == nil {
				err = fmt.Errorf("%w: indexed session %d missing", ErrCorrupt, sid)
			}
			if err != nil {
				return false, err
			}
			out = append(out, api.SessionInfo{ID: sid, Tenant: r.Tenant, Principal: r.Principal, Created: r.Created})
			return true, nil
		})
	})
	return out, err
}

// SessionOwner is one open session and the principal that owns it: what a
// new master needs of a session record to take the session over.
type SessionOwner struct {
	ID    uint64
	Owner Caller
}

// SessionOwners returns every open session of the cell with its owner, in
// ID order: ListSessions(c, "") without the creation times, in a form
// cheap enough for a new master's take-over, which runs while its lease
// runs. Owners that repeat share their strings, so the list allocates per
// distinct tenant and principal, not per session. Only the administrator
// may ask; a damaged record is reported as for ListSessions (ErrCorrupt).
func (s *Store) SessionOwners(c Caller) ([]SessionOwner, error) {
	var (
		out    []SessionOwner
		intern = map[string]string{}
		last   Caller
	)
	// name returns b as a string shared with every earlier equal name.
	name := func(b []byte, prev string) string {
		if string(b) == prev {
			return prev
		}
		if n, ok := intern[string(b)]; ok {
			return n
		}
		n := string(b)
		intern[n] = n
		return n
	}
	err := s.reading(func(v *view) error {
		if err := v.tenantReader(c, ""); err != nil {
			return err
		}
		return v.scan(tagKey(tagSession, 0), nil, func(k, val []byte) (bool, error) {
			if len(k) != 10 {
				return false, fmt.Errorf("%w: session key %q", ErrCorrupt, k)
			}
			tenant, principal, err := decodeSessionOwner(k, val)
			if err != nil {
				return false, err
			}
			last = Caller{Tenant: name(tenant, last.Tenant), Principal: name(principal, last.Principal)}
			out = append(out, SessionOwner{ID: binary.BigEndian.Uint64(k[2:]), Owner: last})
			return true, nil
		})
	})
	return out, err
}

// decodeSessionOwner decodes a session record as decodeRec does, accepting
// and refusing exactly the records it does, but returns the tenant and
// principal aliasing b instead of copying them.
func decodeSessionOwner(key, b []byte) (tenant, principal []byte, err error) {
	r := wire.NewReader(b)
	if ver := r.Byte("version"); r.Err() == nil && ver != recordVersion {
		r.Fail(0, "version", errRecord, "record version %d, want %d", ver, recordVersion)
	}
	if k := r.Byte("kind"); r.Err() == nil && k != tagSession {
		r.Fail(1, "kind", errRecord, "record kind %q, want %q", k, tagSession)
	}
	tenant = r.LenBytes(math.MaxUint64, "tenant")
	principal = r.LenBytes(math.MaxUint64, "principal")
	_ = r.Varint("created")
	if err := r.Done(); err != nil {
		if !errors.Is(err, errRecord) {
			err = fmt.Errorf("%w: %w", errRecord, err)
		}
		return nil, nil, fmt.Errorf("%w: key %q: %w", ErrCorrupt, key, err)
	}
	return tenant, principal, nil
}

// HeldLocks returns the paths of the locks session sid holds, in path
// order (none for a session that does not exist). Only the administrator
// may ask: the master uses it to hand an expiring session's locks over
// in the same command (ExpireSession.Then).
func (s *Store) HeldLocks(c Caller, sid uint64) ([]string, error) {
	var out []string
	err := s.reading(func(v *view) error {
		admin, aerr, err := v.checkCaller(c)
		if aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		if !admin {
			return api.Errorf(api.PermissionDenied, "only the administrator may list a session's locks")
		}
		prefix := sessionPrefix(tagHeld, sid)
		return v.scan(prefix, nil, func(k, _ []byte) (bool, error) {
			out = append(out, string(k[len(prefix):]))
			return true, nil
		})
	})
	return out, err
}

// ListLocks returns the held locks on tenant's nodes in path order. Access
// as for ListSessions, without the "" form.
func (s *Store) ListLocks(c Caller, tenant string) ([]api.LockInfo, error) {
	var out []api.LockInfo
	err := s.reading(func(v *view) error {
		if tenant == "" {
			return api.Errorf(api.InvalidArgument, "a tenant is required")
		}
		if err := v.tenantReader(c, tenant); err != nil {
			return err
		}
		add := func(p Path) error {
			n, err := v.node(p)
			if err == nil && n == nil {
				err = fmt.Errorf("%w: locked node %s missing", ErrCorrupt, p)
			}
			if err != nil {
				return err
			}
			out = append(out, api.LockInfo{Path: string(p), Instance: n.Instance, Mode: n.Mode, Generation: n.LockGen, Holders: append([]uint64(nil), n.Holders...)})
			return nil
		}
		root := Path("/" + tenant)
		if _, ok, err := v.get(lockedKey(root)); err != nil {
			return err
		} else if ok {
			if err := add(root); err != nil {
				return err
			}
		}
		prefix := lockedKey(root + "/")
		return v.scan(prefix, nil, func(k, _ []byte) (bool, error) {
			return true, add(Path(k[2:]))
		})
	})
	return out, err
}

// Tenant returns a tenant's quota and usage. Access as for ListSessions.
func (s *Store) Tenant(c Caller, name string) (api.TenantInfo, error) {
	var info api.TenantInfo
	err := s.reading(func(v *view) error {
		if name == "" {
			return api.Errorf(api.InvalidArgument, "a tenant is required")
		}
		if err := v.tenantReader(c, name); err != nil {
			return err
		}
		t, err := v.tenant(name)
		if err != nil {
			return err
		}
		info = t.info(name)
		return nil
	})
	return info, err
}

// ListTenants returns every tenant in name order. Only the administrator may
// call it.
func (s *Store) ListTenants(c Caller) ([]api.TenantInfo, error) {
	var out []api.TenantInfo
	err := s.reading(func(v *view) error {
		admin, aerr, err := v.checkCaller(c)
		if aerr != nil || err != nil {
			return errOr(aerr, err)
		}
		if !admin {
			return api.Errorf(api.PermissionDenied, "only the administrator lists tenants")
		}
		prefix := tagKey(tagTenant, 0)
		return v.scan(prefix, nil, func(k, val []byte) (bool, error) {
			var t tenantRec
			if err := decodeRec(k, val, &t); err != nil {
				return false, err
			}
			out = append(out, t.info(string(k[len(prefix):])))
			return true, nil
		})
	})
	return out, err
}
