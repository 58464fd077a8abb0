package cell

import (
	"context"

	"github.com/lockcell/lockcell/api"
)

// The membership handlers: AddReplica, RemoveReplica and ReplaceReplica,
// served by the replica's membership (membership.go).

func handleAddReplica(ctx context.Context, c *rpcCall, req *api.AddReplicaRequest) (any, error) {
	return c.d.members.addReplica(ctx, req.ID, req.Addr)
}

func handleRemoveReplica(ctx context.Context, c *rpcCall, req *api.RemoveReplicaRequest) (any, error) {
	return c.d.members.removeReplica(ctx, req.ID)
}

func handleReplaceReplica(ctx context.Context, c *rpcCall, req *api.ReplaceReplicaRequest) (any, error) {
	return c.d.members.replace(ctx, req.Old, req.New, req.Addr)
}
