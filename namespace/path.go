package namespace

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lockcell/lockcell/api"
)

// Hard limits of the path syntax, whatever the Config says. Config may only
// lower them.
const (
	// MaxPathLenLimit is the longest path ParsePath accepts, in bytes; it is
	// the sequencer's path limit, so every lock path fits a sequencer.
	MaxPathLenLimit = 4096
	// MaxComponentLen is the longest path component, in bytes.
	MaxComponentLen = 255
	// MaxDepthLimit is the most components a path may have (the tenant
	// counts as one).
	MaxDepthLimit = 128
	// MaxTenantNameLen is the longest tenant name, in bytes.
	MaxTenantNameLen = 63
	// MaxPrincipalLen is the longest principal name, in bytes.
	MaxPrincipalLen = 255
)

// Path is a validated, canonical node path: "/<tenant>" or
// "/<tenant>/<name>/...". Obtain one from ParsePath.
//
// The rules: the path starts with '/', has no trailing '/', no empty
// components, no "." or ".." components; every component is valid UTF-8 of
// 1..MaxComponentLen bytes without NUL, other control characters (below
// 0x20, and 0x7f) or '/'; the first component is a valid tenant name (see
// ValidTenantName); the whole path has at most MaxPathLenLimit bytes and
// MaxDepthLimit components.
type Path string

// ParsePath validates s against the path rules. Errors are *api.Error with
// code InvalidArgument and a message naming the defect; ParsePath never
// panics.
func ParsePath(s string) (Path, error) {
	if len(s) > MaxPathLenLimit {
		return "", api.Errorf(api.InvalidArgument, "path: %d bytes, more than %d", len(s), MaxPathLenLimit)
	}
	if len(s) < 2 || s[0] != '/' {
		return "", api.Errorf(api.InvalidArgument, "path %q: must be absolute, /<tenant>/...", trunc(s))
	}
	if !utf8.ValidString(s) {
		return "", api.Errorf(api.InvalidArgument, "path %q: not valid UTF-8", trunc(s))
	}
	depth := 0
	rest := s[1:]
	for {
		i := strings.IndexByte(rest, '/')
		comp := rest
		if i >= 0 {
			comp = rest[:i]
		}
		depth++
		if depth > MaxDepthLimit {
			return "", api.Errorf(api.InvalidArgument, "path %q: more than %d components", trunc(s), MaxDepthLimit)
		}
		if depth == 1 {
			if err := ValidTenantName(comp); err != nil {
				return "", api.Errorf(api.InvalidArgument, "path %q: %s", trunc(s), err.(*api.Error).Msg)
			}
		} else if err := validComponent(comp); err != "" {
			return "", api.Errorf(api.InvalidArgument, "path %q: %s", trunc(s), err)
		}
		if i < 0 {
			return Path(s), nil
		}
		rest = rest[i+1:]
	}
}

func validComponent(c string) string {
	switch {
	case c == "":
		return "empty component"
	case c == "." || c == "..":
		return "component " + c + " not allowed"
	case len(c) > MaxComponentLen:
		return fmt.Sprintf("component longer than %d bytes", MaxComponentLen)
	}
	for i := 0; i < len(c); i++ {
		if b := c[i]; b < 0x20 || b == 0x7f {
			return fmt.Sprintf("control character 0x%02x", b)
		}
	}
	return ""
}

// ValidTenantName reports, as an InvalidArgument *api.Error, whether name
// breaks the tenant name rules: 1..MaxTenantNameLen bytes of ASCII letters,
// digits, '-', '_' and '.', not starting with '.'.
func ValidTenantName(name string) error {
	if name == "" || len(name) > MaxTenantNameLen {
		return api.Errorf(api.InvalidArgument, "tenant name must be 1..%d bytes", MaxTenantNameLen)
	}
	if name[0] == '.' {
		return api.Errorf(api.InvalidArgument, "tenant name %q must not start with '.'", name)
	}
	for i := 0; i < len(name); i++ {
		b := name[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.') {
			return api.Errorf(api.InvalidArgument, "tenant name %q: character %q not allowed (letters, digits, - _ .)", trunc(name), b)
		}
	}
	return nil
}

// ValidPrincipal reports, as an *api.Error with code Unauthenticated,
// whether name breaks the principal name rules: 1..MaxPrincipalLen bytes of
// UTF-8 without '/', whitespace, control characters or '#' (so that an ACL
// file line can name it unambiguously), and not "*".
func ValidPrincipal(name string) error {
	if name == "" || len(name) > MaxPrincipalLen || !utf8.ValidString(name) || name == "*" {
		return api.Errorf(api.Unauthenticated, "principal must be 1..%d bytes of UTF-8 and not \"*\"", MaxPrincipalLen)
	}
	for _, r := range name {
		if r <= ' ' || r == 0x7f || r == '/' || r == '#' || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029 {
			return api.Errorf(api.Unauthenticated, "principal %q: character %q not allowed", trunc(name), r)
		}
	}
	return nil
}

// String returns the path text.
func (p Path) String() string { return string(p) }

// Tenant returns the first component.
func (p Path) Tenant() string {
	s := string(p[1:])
	if i := strings.IndexByte(s, '/'); i >= 0 {
		return s[:i]
	}
	return s
}

// IsRoot reports whether p is a tenant root, "/<tenant>".
func (p Path) IsRoot() bool { return strings.IndexByte(string(p[1:]), '/') < 0 }

// Parent returns the parent path; a tenant root has none (ok false).
func (p Path) Parent() (Path, bool) {
	i := strings.LastIndexByte(string(p), '/')
	if i <= 0 {
		return "", false
	}
	return p[:i], true
}

// Base returns the last component.
func (p Path) Base() string {
	return string(p[strings.LastIndexByte(string(p), '/')+1:])
}

// Depth returns the number of components (1 for a tenant root).
func (p Path) Depth() int { return strings.Count(string(p), "/") }

// Child returns p/name. REQUIRES: name is a valid component.
func (p Path) Child(name string) Path { return p + "/" + Path(name) }

func trunc(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "..."
}
