package api

// This file holds the shared value types of the wire contract: node metadata,
// lock modes, ACL names, tenants, sessions and locks as the cell reports them.
// They are msgpack-tagged plain values with no behaviour beyond naming.
//
// Times are int64 unix nanoseconds taken from the master's stamp on the
// command that caused them; they are labels, never read from a clock on a
// replica.

// LockMode is the mode of a lock: exclusive (one writer) or shared (many
// readers). The numbers match sequencer.Mode.
type LockMode uint8

const (
	// LockNone means not held (used in stats and as "no mode").
	LockNone LockMode = 0
	// LockExclusive is a writer lock: at most one holder.
	LockExclusive LockMode = 1
	// LockShared is a reader lock: any number of holders, no exclusive one.
	LockShared LockMode = 2
)

// String returns "none", "exclusive", "shared" or "mode(N)".
func (m LockMode) String() string {
	switch m {
	case LockNone:
		return "none"
	case LockExclusive:
		return "exclusive"
	case LockShared:
		return "shared"
	}
	return "mode(" + itoa(uint64(m)) + ")"
}

// Perm is a permission checked against a node's ACL files.
type Perm uint8

const (
	// PermRead allows reading contents, stat and directory listings, and
	// checking sequencers.
	PermRead Perm = 1
	// PermWrite allows writing contents, creating children (on a directory),
	// deleting the node, and acquiring or releasing its lock.
	PermWrite Perm = 2
	// PermChangeACL allows changing the node's ACL names.
	PermChangeACL Perm = 3
)

// String returns "read", "write", "change-acl" or "perm(N)".
func (p Perm) String() string {
	switch p {
	case PermRead:
		return "read"
	case PermWrite:
		return "write"
	case PermChangeACL:
		return "change-acl"
	}
	return "perm(" + itoa(uint64(p)) + ")"
}

// ACLNames names the three ACL files of a node (Chubby §2.4). Each is an
// absolute path of a file in the node's own tenant whose contents list the
// principals granted that permission, one per line; an empty name means
// "every principal of the node's tenant". The namespace package documents
// the exact rules.
type ACLNames struct {
	Read      string `msgpack:"r,omitempty"`
	Write     string `msgpack:"w,omitempty"`
	ChangeACL string `msgpack:"a,omitempty"`
}

// NodeStat is the metadata of a file or directory.
type NodeStat struct {
	// Instance identifies this incarnation of the node: a node deleted and
	// created again under the same name has a new, larger instance number.
	Instance uint64 `msgpack:"in"`
	// ContentGeneration grows on every write of the contents; 1 at creation.
	ContentGeneration uint64 `msgpack:"cg"`
	// LockGeneration grows every time the lock goes from free to held; 0 if
	// the lock was never held.
	LockGeneration uint64 `msgpack:"lg"`
	// ACLGeneration grows on every change of the ACL names; 1 at creation.
	ACLGeneration uint64 `msgpack:"ag"`
	// Checksum is a 64-bit checksum (CRC-64/ECMA) of the contents.
	Checksum uint64 `msgpack:"ck"`
	// Created is the stamped time of the command that created the node.
	Created int64 `msgpack:"ct"`
	// Modified is the stamped time of the last contents write (Created at
	// first).
	Modified int64 `msgpack:"mt"`
	// EphemeralOwner is the session that owns an ephemeral node, 0 for a
	// permanent one.
	EphemeralOwner uint64 `msgpack:"eo,omitempty"`
	// IsDir reports a directory.
	IsDir bool `msgpack:"d,omitempty"`
	// Size is the length of the contents in bytes.
	Size uint64 `msgpack:"sz"`
	// ACL names the node's ACL files.
	ACL ACLNames `msgpack:"acl"`
	// LockDelay is the node's lock-delay in nanoseconds.
	LockDelay int64 `msgpack:"ld"`
	// LockMode is the mode the lock is held in, LockNone if free.
	LockMode LockMode `msgpack:"lm,omitempty"`
	// LockHolders is the number of sessions holding the lock.
	LockHolders uint32 `msgpack:"lh,omitempty"`
	// LockDelayUntil, if in the future, is when the lock leaves lock-delay,
	// in the cell's time (see Error.Until).
	LockDelayUntil int64 `msgpack:"lu,omitempty"`
}

// DirEntry is one child in a directory listing.
type DirEntry struct {
	Name string   `msgpack:"n"`
	Stat NodeStat `msgpack:"s"`
}

// TenantQuota bounds a tenant's use of the cell. A zero field means
// unlimited.
type TenantQuota struct {
	// MaxNodes bounds the nodes below the tenant root (the root not counted).
	MaxNodes uint64 `msgpack:"n,omitempty"`
	// MaxBytes bounds the total contents bytes in the tenant's subtree.
	MaxBytes uint64 `msgpack:"b,omitempty"`
	// MaxSessions bounds the open sessions of the tenant's principals.
	MaxSessions uint64 `msgpack:"s,omitempty"`
	// MaxLocks bounds the lock grants held on the tenant's nodes (a shared
	// lock held by three sessions counts three).
	MaxLocks uint64 `msgpack:"l,omitempty"`
	// MaxWaiters bounds the blocked Acquire calls of the tenant's principals
	// waiting at the master (whoever's node they wait for). Waiters live in
	// the master's memory; the limit is replicated, so a new master applies
	// it to the waiters clients re-establish after a fail-over.
	MaxWaiters uint64 `msgpack:"w,omitempty"`
	// MaxContents bounds the size in bytes of any one file's contents in
	// the tenant's subtree (below the cell-wide limit).
	MaxContents uint64 `msgpack:"c,omitempty"`
	// OpsPerSecond bounds the rate of the tenant's calls at the master
	// (a token bucket with a burst of one second's worth; KeepAlive,
	// Release and CloseSession are not counted). Calls over the rate fail
	// with ResourceExhausted and Error.RetryAfter.
	OpsPerSecond uint64 `msgpack:"o,omitempty"`
	// KeepAlivesPerSecond is the tenant's KeepAlive budget at the master: a
	// token bucket like OpsPerSecond's, for KeepAlive calls only.
	KeepAlivesPerSecond uint64 `msgpack:"k,omitempty"`
	// Weight is the tenant's share when the master is saturated: its queued
	// proposals are scheduled weighted round-robin against other tenants',
	// and its concurrent reads are capped in proportion. Zero means 1.
	Weight uint64 `msgpack:"wt,omitempty"`
}

// TenantUsage is what a tenant currently uses, counted as TenantQuota
// bounds it.
type TenantUsage struct {
	Nodes    uint64 `msgpack:"n"`
	Bytes    uint64 `msgpack:"b"`
	Sessions uint64 `msgpack:"s"`
	Locks    uint64 `msgpack:"l"`
	// Waiters is the blocked Acquire calls at the master (master memory,
	// filled in by the master when it lists tenants).
	Waiters uint64 `msgpack:"w,omitempty"`
}

// TenantInfo describes a tenant.
type TenantInfo struct {
	Name    string      `msgpack:"name"`
	Quota   TenantQuota `msgpack:"q"`
	Usage   TenantUsage `msgpack:"u"`
	Created int64       `msgpack:"ct"`
}

// SessionInfo describes an open session as the replicated state records it.
// Liveness (leases, KeepAlive) is the master's business, not recorded here.
type SessionInfo struct {
	ID        uint64 `msgpack:"id"`
	Tenant    string `msgpack:"t"`
	Principal string `msgpack:"p"`
	Created   int64  `msgpack:"ct"`
}

// LockInfo describes a held lock.
type LockInfo struct {
	Path       string   `msgpack:"p"`
	Instance   uint64   `msgpack:"in"`
	Mode       LockMode `msgpack:"m"`
	Generation uint64   `msgpack:"g"`
	// Holders lists the holding sessions in increasing order.
	Holders []uint64 `msgpack:"h"`
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
