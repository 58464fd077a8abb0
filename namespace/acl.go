package namespace

import (
	"bytes"

	"github.com/lockcell/lockcell/api"
)

// ACL rules (Chubby §2.4, made tenant-safe).
//
// Every node names three ACL files: read, write and change-ACL
// (api.ACLNames). A node created without ACL names inherits its parent's; a
// tenant root gets the names given to CreateTenant. A permission is checked
// against the one ACL name for it:
//
//   - An empty name grants the permission to every principal of the node's
//     tenant, and to nobody else.
//   - A non-empty name is the absolute path of a file in the node's own tenant
//     (SetACL, Open and CreateTenant refuse any other). The file's contents
//     list grantees, one per line; blank lines and lines starting with '#'
//     are ignored, and surrounding spaces, tabs and '\r' are trimmed. A line
//     is "name" (principal name of the node's tenant), "*" (every principal
//     of the node's tenant), "tenant/name" (principal name of another
//     tenant) or "tenant/*" (every principal of that tenant). Nothing else
//     matches anybody.
//   - If the named file does not exist or is a directory, nobody has the
//     permission (fail closed). Reading an ACL file's contents for a check
//     needs no permission of its own.
//
// Permissions: read (get contents, stat, read dir, check sequencer, open an
// existing node), write (set contents, delete, acquire a lock, and — on a
// directory — create a child), change-ACL (set ACL). Release needs none: a
// holding session may always let go. Reading a directory reveals its
// children's names and metadata, not their contents.
//
// A missing node is reported as NotFound only to a caller that may read the
// nearest existing ancestor; everyone else gets PermissionDenied, so a
// principal of tenant A learns nothing about tenant B's subtree unless B's
// ACL files grant it.
//
// The administrator (Config.AdminPrincipal, tenant "") manages tenants and
// may list any tenant's sessions and locks, but has no access to nodes: no
// ACL line can name it.

// aclName returns the ACL file name n uses for perm.
func aclName(n *nodeRec, perm api.Perm) string {
	switch perm {
	case api.PermRead:
		return n.ACL.Read
	case api.PermWrite:
		return n.ACL.Write
	case api.PermChangeACL:
		return n.ACL.ChangeACL
	}
	return "\x00invalid" // never a valid path: fails closed
}

// allowed reports whether c has perm on node n at p.
func (v *view) allowed(c Caller, p Path, n *nodeRec, perm api.Perm) (bool, error) {
	tenant := p.Tenant()
	name := aclName(n, perm)
	if name == "" {
		return c.Tenant == tenant, nil
	}
	fp, err := ParsePath(name)
	if err != nil || fp.Tenant() != tenant {
		return false, nil
	}
	f, err := v.node(fp)
	if err != nil || f == nil || f.Dir {
		return false, err
	}
	data, err := v.contents(fp)
	if err != nil {
		return false, err
	}
	return aclGrants(data, tenant, c), nil
}

// aclGrants reports whether the ACL file contents data, of a file in tenant
// fileTenant, name c.
func aclGrants(data []byte, fileTenant string, c Caller) bool {
	if c.Tenant == "" {
		return false // the administrator has no node access
	}
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		line = bytes.Trim(line, " \t\r")
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		tenant, name := fileTenant, line
		if i := bytes.IndexByte(line, '/'); i >= 0 {
			tenant, name = string(line[:i]), line[i+1:]
			if tenant == "" {
				continue
			}
		}
		if tenant != c.Tenant {
			continue
		}
		if string(name) == "*" || string(name) == c.Principal {
			return true
		}
	}
	return false
}

// check returns PermissionDenied unless c has perm on n at p. A caller that
// could not tell whether p exists (it may not read p's parent) gets the very
// error a missing node gives it, so the refusal does not reveal that p
// exists; one that could is told which permission it lacks.
func (v *view) check(c Caller, p Path, n *nodeRec, perm api.Perm) (*api.Error, error) {
	ok, err := v.allowed(c, p, n, perm)
	if err != nil || ok {
		return nil, err
	}
	if hidden, err := v.missing(c, p); err != nil || hidden.Code == api.PermissionDenied {
		return hidden, err
	}
	return api.Errorf(api.PermissionDenied, "%s: no %s permission", p, perm), nil
}

// missing returns the error for a node p that does not exist: NotFound if c
// may read the nearest existing ancestor, PermissionDenied otherwise.
func (v *view) missing(c Caller, p Path) (*api.Error, error) {
	for q, ok := p.Parent(); ok; q, ok = q.Parent() {
		n, err := v.node(q)
		if err != nil {
			return nil, err
		}
		if n == nil {
			continue
		}
		ok, err := v.allowed(c, q, n, api.PermRead)
		if err != nil {
			return nil, err
		}
		if ok {
			return api.Errorf(api.NotFound, "%s: no such node", p), nil
		}
		break
	}
	return api.Errorf(api.PermissionDenied, "%s: not found or no permission", p), nil
}

// validACLNames checks that every non-empty name is a valid path in tenant
// (within the configured limits).
func (v *view) validACLNames(a api.ACLNames, tenant string) *api.Error {
	for _, name := range []string{a.Read, a.Write, a.ChangeACL} {
		if name == "" {
			continue
		}
		p, err := v.parsePath(name)
		if err != nil {
			return api.Errorf(api.InvalidArgument, "ACL name: %s", err.Msg)
		}
		if p.Tenant() != tenant {
			return api.Errorf(api.InvalidArgument, "ACL name %s: not in tenant %q", p, tenant)
		}
	}
	return nil
}

// parsePath applies ParsePath and the configured limits.
func (v *view) parsePath(s string) (Path, *api.Error) {
	if len(s) > v.cfg.MaxPathLen {
		return "", api.Errorf(api.InvalidArgument, "path: %d bytes, more than %d", len(s), v.cfg.MaxPathLen)
	}
	p, err := ParsePath(s)
	if err != nil {
		return "", err.(*api.Error)
	}
	if d := p.Depth(); d > v.cfg.MaxDepth {
		return "", api.Errorf(api.InvalidArgument, "path %s: %d components, more than %d", trunc(s), d, v.cfg.MaxDepth)
	}
	return p, nil
}

// checkCaller validates c's syntax and that its tenant exists. admin
// reports the administrator.
func (v *view) checkCaller(c Caller) (admin bool, aerr *api.Error, err error) {
	if e := ValidPrincipal(c.Principal); e != nil {
		return false, e.(*api.Error), nil
	}
	if c.Tenant == "" {
		if c.Principal == v.cfg.AdminPrincipal {
			return true, nil, nil
		}
		return false, api.Errorf(api.Unauthenticated, "principal %q has no tenant", c.Principal), nil
	}
	if ValidTenantName(c.Tenant) != nil {
		return false, api.Errorf(api.Unauthenticated, "caller tenant %q is not a valid tenant name", trunc(c.Tenant)), nil
	}
	t, err := v.tenant(c.Tenant)
	if err != nil {
		return false, nil, err
	}
	if t == nil {
		return false, api.Errorf(api.Unauthenticated, "caller tenant %q does not exist", c.Tenant), nil
	}
	return false, nil, nil
}

// checkTenantCaller is checkCaller for operations only tenant principals may
// perform.
func (v *view) checkTenantCaller(c Caller) (*api.Error, error) {
	admin, aerr, err := v.checkCaller(c)
	if err != nil || aerr != nil {
		return aerr, err
	}
	if admin {
		return api.Errorf(api.PermissionDenied, "the administrator has no sessions or nodes"), nil
	}
	return nil, nil
}
