package cell

import (
	"crypto/ed25519"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// cellStatus is the cell as this replica sees it: its own status, the
// membership in force, and the progress its peers last reported. The
// CellStatus call and the status page answer with it.
func (r *Replica) cellStatus() *api.CellStatusResponse {
	st := r.Status()
	resp := &api.CellStatusResponse{
		Cell: r.cfg.Cell, Replica: r.cfg.ID, Master: st.Leader, Epoch: api.Epoch(st.Epoch),
		Chosen: st.Chosen, Applied: st.Applied, Checksum: api.Checksum(st.Checksum),
		PublicKey: r.cfg.SigningKey.Public().(ed25519.PublicKey),
		Role:      st.Role, Rebuild: st.Rebuild.String(),
		MasterLease: int64(r.masterLease()),
	}
	if !st.IsLeader && st.Leader == r.cfg.ID {
		resp.Master = 0
	}
	now := monotime.Now()
	top := st.Chosen
	d := r.members.view()
	resp.MembershipSlot = uint64(d.Members.Index)
	for _, id := range members(d.Members) {
		rs := api.ReplicaStatus{ID: id, Addr: d.addr(id, r.cfg.Replicas), Master: id == resp.Master && resp.Master != 0,
			Learner: isLearner(d.Members, id)}
		if id == r.cfg.ID {
			rs.Chosen, rs.Applied, rs.Role, rs.Epoch = st.Chosen, st.Applied, st.Role, api.Epoch(st.Epoch)
		} else if p, ok := r.progress.get(id); ok {
			rs.Chosen, rs.Applied, rs.Role, rs.Epoch = p.Chosen, p.Applied, p.Role, api.Epoch(p.Epoch)
			rs.HeardMillis = max(now.Sub(p.at).Milliseconds(), 1)
		} else {
			rs.Role, rs.HeardMillis = api.RoleUnknown, -1
		}
		top = max(top, rs.Chosen)
		resp.Replicas = append(resp.Replicas, rs)
	}
	for i := range resp.Replicas {
		if rs := &resp.Replicas[i]; rs.HeardMillis >= 0 && top > rs.Applied {
			rs.Lag = top - rs.Applied
		}
	}
	return resp
}
