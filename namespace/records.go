package namespace

import (
	"fmt"
	"slices"

	"github.com/lockcell/lockcell/api"
)

// nodeRec is the stored record of a node (key nN <parent> 0x00 <name>). The
// contents live under their own key so that stat never reads them.
type nodeRec struct {
	Instance   uint64       `msgpack:"i"`
	Dir        bool         `msgpack:"d,omitempty"`
	Owner      uint64       `msgpack:"o,omitempty"` // ephemeral owner session
	ContentGen uint64       `msgpack:"cg"`
	LockGen    uint64       `msgpack:"lg"`
	ACLGen     uint64       `msgpack:"ag"`
	Sum        uint64       `msgpack:"ck"`
	Size       uint64       `msgpack:"sz"`
	Created    int64        `msgpack:"ct"`
	Modified   int64        `msgpack:"mt"`
	ACL        api.ACLNames `msgpack:"a"`
	LockDelay  int64        `msgpack:"ld"`
	Mode       api.LockMode `msgpack:"m,omitempty"`
	// Holders lists the holding sessions in increasing order; nil when free.
	Holders    []uint64 `msgpack:"h,omitempty"`
	DelayUntil int64    `msgpack:"du,omitempty"`
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
	Tenant    string `msgpack:"t"`
	Principal string `msgpack:"p"`
	Created   int64  `msgpack:"ct"`
}

// tenantRec is the stored record of a tenant (key nT <name>).
type tenantRec struct {
	Quota   api.TenantQuota `msgpack:"q"`
	Usage   api.TenantUsage `msgpack:"u"`
	Created int64           `msgpack:"ct"`
}

func (t *tenantRec) info(name string) api.TenantInfo {
	return api.TenantInfo{Name: name, Quota: t.Quota, Usage: t.Usage, Created: t.Created}
}

// counters is the stored counters record (key nC): the last value handed out
// of each sequence. Sequences start at 1 and never go back, so session IDs,
// node instances and lock generations are never reused, not even across
// deletion and re-creation.
type counters struct {
	Session  uint64 `msgpack:"s"`
	Instance uint64 `msgpack:"i"`
	LockGen  uint64 `msgpack:"g"`
}

func encodeRec(v any) []byte {
	b, err := marshal(v)
	if err != nil {
		// Our record types always encode; failing here is a broken invariant.
		panic(fmt.Sprintf("namespace: encoding %T: %v", v, err))
	}
	return b
}

func decodeRec(key, b []byte, v any) error {
	if err := unmarshalStrict(b, v); err != nil {
		return fmt.Errorf("%w: key %q: %v", ErrCorrupt, key, err)
	}
	return nil
}
