//go:build !lockcell_weaken_lockctx

package client

// exactLease makes every answer to "is the session safe, is the lock still
// held" consult the local lease deadline on the session's monotonic clock
// (see Session.State and Lock.Context). It is false only in builds with the
// lockcell_weaken_lockctx tag (lease_weak.go).
const exactLease = true
