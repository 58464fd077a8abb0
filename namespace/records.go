package namespace

import (
	"slices"

	"github.com/lockcell/lockcell/api"
)

// nodeRec is the stored record of a node (key nN <parent> 0x00 <name>). The
// contents live under their own key so that stat never reads them. Records
// are stored in the binary encoding of reccodec.go.
type nodeRec struct {
	Instance   uint64
	Dir        bool
	Owner      uint64 // ephemeral owner session
	ContentGen uint64
	LockGen    uint64
	ACLGen     uint64
	Sum        uint64
	Size       uint64
	Created    int64
	Modified   int64
	ACL        api.ACLNames
	LockDelay  int64
	Mode       api.LockMode
	// Holders lists the holding sessions in increasing order; nil when free.
	Holders    []uint64
	DelayUntil int64
}

func (n *nodeRec) stat() api.NodeStat {
	return api.NodeStat{
		Instance:          n.Instance,
		ContentGeneration: n.ContentGen,
		LockGeneration:    n.LockGen,
		ACLGeneration:     n.ACLGen,
		Checksum:          n.Sum,
		Created:           n.Created,
		Modified:          n.Modified,
		EphemeralOwner:    n.Owner,
		IsDir:             n.Dir,
		Size:              n.Size,
		ACL:               n.ACL,
		LockDelay:         n.LockDelay,
		LockMode:          n.Mode,
		LockHolders:       uint32(len(n.Holders)),
		LockDelayUntil:    n.DelayUntil,
	}
}

func (n *nodeRec) holds(sid uint64) bool {
	_, ok := slices.BinarySearch(n.Holders, sid)
	return ok
}

func (n *nodeRec) addHolder(sid uint64) {
	i, _ := slices.BinarySearch(n.Holders, sid)
	n.Holders = slices.Insert(n.Holders, i, sid)
}

func (n *nodeRec) removeHolder(sid uint64) {
	if i, ok := slices.BinarySearch(n.Holders, sid); ok {
		n.Holders = slices.Delete(n.Holders, i, i+1)
	}
	if len(n.Holders) == 0 {
		n.Holders = nil // one encoding for "free"
		n.Mode = api.LockNone
	}
}

// sessionRec is the stored record of a session (key nS <sid>).
type sessionRec struct {
	Tenant    string
	Principal string
	Created   int64
}

// tenantRec is the stored record of a tenant (key nT <name>).
type tenantRec struct {
	Quota   api.TenantQuota
	Usage   api.TenantUsage
	Created int64
}

func (t *tenantRec) info(name string) api.TenantInfo {
	return api.TenantInfo{Name: name, Quota: t.Quota, Usage: t.Usage, Created: t.Created}
}

// counters is the stored counters record (key nC): the last value handed out
// of each sequence, and the cell's clock. Sequences start at 1 and never go
// back, so session IDs, node instances and lock generations are never
// reused, not even across deletion and re-creation.
type counters struct {
	Session  uint64
	Instance uint64
	LockGen  uint64
	// Clock is the time of the last command that succeeded: every command
	// is applied at max(Clock, Command.Time), so the time apply sees never
	// goes backwards (DESIGN.md invariant 9). Unix nanoseconds; 0 before
	// the first command.
	Clock int64
	// DelayEnd is the latest lock-delay end any command has set (on the
	// clock above; 0 if none): once the clock reaches it no lock is in
	// lock-delay. The master uses it to know when its own wall clock may
	// not move the cell's time (cell/clock.go).
	DelayEnd int64
}
