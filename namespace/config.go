package namespace

import (
	"fmt"
	"log/slog"
	"time"
)

// Defaults, from Chubby where it published them (DESIGN.md "Defaults").
const (
	// DefaultMaxContents is the largest file contents, 256 KiB.
	DefaultMaxContents = 256 << 10
	// MaxContentsLimit is the most Config.MaxContents may be, 16 MiB.
	MaxContentsLimit = 16 << 20
	// DefaultLockDelay is the lock-delay of a node whose creator named none.
	DefaultLockDelay = 10 * time.Second
	// MaxLockDelayLimit is Chubby's bound on any lock-delay, 60 s.
	MaxLockDelayLimit = 60 * time.Second
	// DefaultMaxPathLen is the longest path the store accepts, in bytes.
	DefaultMaxPathLen = 1024
	// DefaultMaxDepth is the most components a path may have.
	DefaultMaxDepth = 32
	// DefaultReadDirLimit is the page size of ReadDir when the caller names
	// none, and the most it returns per page.
	DefaultReadDirLimit = 1000
	// DefaultAdminPrincipal is the cell administrator's principal name.
	DefaultAdminPrincipal = "admin"
	// commandOverhead is the room a command needs besides its contents.
	commandOverhead = 64 << 10
)

// NoLockDelay, as OpenNode.LockDelay, gives a node no lock-delay at all.
const NoLockDelay int64 = -1

// Config configures a Store. The zero value is usable: every zero field takes
// the default its doc names.
type Config struct {
	// MaxContents bounds a file's contents in bytes. If zero, 256 KiB. At
	// most MaxContentsLimit.
	MaxContents int
	// DefaultLockDelay is the lock-delay of nodes created without one. If
	// zero, 10 s. At most MaxLockDelay.
	DefaultLockDelay time.Duration
	// MaxLockDelay bounds the lock-delay a node may ask for. If zero, 60 s.
	// At most MaxLockDelayLimit (60 s, Chubby's bound).
	MaxLockDelay time.Duration
	// MaxPathLen bounds a path in bytes. If zero, 1024. At most
	// MaxPathLenLimit (4096).
	MaxPathLen int
	// MaxDepth bounds the number of path components, the tenant included.
	// If zero, 32. At most MaxDepthLimit (128).
	MaxDepth int
	// ReadDirLimit is the default and largest page of ReadDir. If zero,
	// 1000.
	ReadDirLimit int
	// MaxCommandSize bounds an encoded command. If zero, MaxContents plus
	// 64 KiB.
	MaxCommandSize int
	// AdminPrincipal is the cell administrator's principal name; the admin
	// caller is Caller{Tenant: "", Principal: AdminPrincipal}. If empty,
	// "admin".
	AdminPrincipal string
	// Sync commits each applied slot with pebble.Sync. If false (the default)
	// slots are committed with pebble.NoSync: the cell makes the shared WAL
	// durable when it syncs the Paxos log, and a lost tail of applied slots
	// is re-applied from the log after a crash.
	Sync bool
	// Logger receives storage failures. If nil, slog.Default().
	Logger *slog.Logger
}

// populate fills defaults into a copy of c.
func (c Config) populate() Config {
	if c.MaxContents == 0 {
		c.MaxContents = DefaultMaxContents
	}
	if c.DefaultLockDelay == 0 {
		c.DefaultLockDelay = DefaultLockDelay
	}
	if c.MaxLockDelay == 0 {
		c.MaxLockDelay = MaxLockDelayLimit
	}
	if c.MaxPathLen == 0 {
		c.MaxPathLen = DefaultMaxPathLen
	}
	if c.MaxDepth == 0 {
		c.MaxDepth = DefaultMaxDepth
	}
	if c.ReadDirLimit == 0 {
		c.ReadDirLimit = DefaultReadDirLimit
	}
	if c.MaxCommandSize == 0 {
		c.MaxCommandSize = c.MaxContents + commandOverhead
	}
	if c.AdminPrincipal == "" {
		c.AdminPrincipal = DefaultAdminPrincipal
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate rejects out-of-range and contradictory settings of a populated
// Config; the error wraps ErrConfig.
func (c Config) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case c.MaxContents < 0 || c.MaxContents > MaxContentsLimit:
		return bad("MaxContents %d not in 0..%d", c.MaxContents, MaxContentsLimit)
	case c.MaxLockDelay < 0 || c.MaxLockDelay > MaxLockDelayLimit:
		return bad("MaxLockDelay %v not in 0..%v", c.MaxLockDelay, MaxLockDelayLimit)
	case c.DefaultLockDelay < 0 || c.DefaultLockDelay > c.MaxLockDelay:
		return bad("DefaultLockDelay %v not in 0..MaxLockDelay (%v)", c.DefaultLockDelay, c.MaxLockDelay)
	case c.MaxPathLen < 2 || c.MaxPathLen > MaxPathLenLimit:
		return bad("MaxPathLen %d not in 2..%d", c.MaxPathLen, MaxPathLenLimit)
	case c.MaxDepth < 1 || c.MaxDepth > MaxDepthLimit:
		return bad("MaxDepth %d not in 1..%d", c.MaxDepth, MaxDepthLimit)
	case c.ReadDirLimit < 1:
		return bad("ReadDirLimit %d below 1", c.ReadDirLimit)
	case c.MaxCommandSize < c.MaxContents:
		return bad("MaxCommandSize %d below MaxContents %d", c.MaxCommandSize, c.MaxContents)
	}
	if err := ValidPrincipal(c.AdminPrincipal); err != nil {
		return bad("AdminPrincipal: %v", err)
	}
	return nil
}
