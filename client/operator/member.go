package operator

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
)

// AddReplica adds replica id, listening at addr ("host:port"), to the cell
// (cell administrator only): as a learner first, then, once it has caught
// up, as a voter. The replica must already be running, prepared as a new
// member (lockcelld init --join); the call waits while it catches up, so
// give ctx room for a snapshot transfer. A call cut short may be repeated:
// it resumes where the cell left off. The response is the membership now
// in force and the steps this call took. Besides Operator's errors, it
// returns an *api.Error with code InvalidArgument for an ID in use or
// used before, or a bad address, FailedPrecondition while another
// membership change is under way, and DeadlineExceeded (with the
// learner's progress) if the replica did not catch up in time.
func (o *Operator) AddReplica(ctx context.Context, id uint64, addr string) (*api.MembershipResponse, error) {
	var resp api.MembershipResponse
	req := &api.AddReplicaRequest{Header: o.c.Header(), ID: id, Addr: addr}
	if err := o.c.Call(ctx, api.MethodAddReplica, req, &resp); err != nil {
		return nil, fmt.Errorf("add replica %d at %s: %w", id, addr, err)
	}
	return &resp, nil
}

// RemoveReplica removes replica id from the cell (cell administrator
// only). If id is the master, the master hands over first and the call
// follows the successor, which removes it; sessions survive as in any
// hand-over. Once the removal is chosen, every replica refuses id's
// connections: stop its process. Repeating the call after it succeeded
// reports the membership. It returns an *api.Error with code
// InvalidArgument if id is not a member, or removing it would leave no
// voter.
func (o *Operator) RemoveReplica(ctx context.Context, id uint64) (*api.MembershipResponse, error) {
	var resp api.MembershipResponse
	req := &api.RemoveReplicaRequest{Header: o.c.Header(), ID: id}
	if err := o.c.Call(ctx, api.MethodRemoveReplica, req, &resp); err != nil {
		return nil, fmt.Errorf("remove replica %d: %w", id, err)
	}
	return &resp, nil
}

// ReplaceReplica replaces replica oldID by the new replica newID at addr
// (cell administrator only): AddReplica(newID, addr), then
// RemoveReplica(oldID), one membership change at a time. An interrupted
// call repeated with the same arguments continues from the step it
// reached. Its errors are those of AddReplica and RemoveReplica.
func (o *Operator) ReplaceReplica(ctx context.Context, oldID, newID uint64, addr string) (*api.MembershipResponse, error) {
	var resp api.MembershipResponse
	req := &api.ReplaceReplicaRequest{Header: o.c.Header(), Old: oldID, New: newID, Addr: addr}
	if err := o.c.Call(ctx, api.MethodReplaceReplica, req, &resp); err != nil {
		return nil, fmt.Errorf("replace replica %d by %d at %s: %w", oldID, newID, addr, err)
	}
	return &resp, nil
}
