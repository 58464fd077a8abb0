package cell

import "context"

// Stall stops the replica's run loop until until is closed or the replica
// closes, as a long GC pause, a stuck fsync or a stopped process would:
// nothing is ticked, stepped, persisted or applied meanwhile, while RPC
// handlers go on and must judge the master lease on the clock alone. It is
// for fault tests (cell/celltest pauses a replica with it); it returns
// once the loop has stalled, or ctx's error if ctx ends first.
func (r *Replica) Stall(ctx context.Context, until <-chan struct{}) error {
	stalled := make(chan struct{})
	f := func() {
		r.watch.stalled.Store(true)
		defer r.watch.stalled.Store(false)
		close(stalled)
		select {
		case <-until:
		case <-r.stopping:
		}
	}
	select {
	case r.ctlC <- f:
	case <-r.done:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	<-stalled
	return nil
}
