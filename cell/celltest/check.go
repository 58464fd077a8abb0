package celltest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/transport"
)

// ErrNotConverged is returned by WaitConverged when the running replicas
// still differ when the context ends.
var ErrNotConverged = errors.New("celltest: replicas did not converge")

// Converged reports whether every running replica has applied the same
// slot (above 0) and holds the same state checksum, and returns their
// statuses in id order.
func (c *Cell) Converged() (bool, []cell.Status) {
	rs := c.Running()
	sts := make([]cell.Status, len(rs))
	for i, r := range rs {
		sts[i] = r.Status()
	}
	if len(sts) == 0 || sts[0].Applied == 0 {
		return false, sts
	}
	for _, st := range sts[1:] {
		if st.Applied != sts[0].Applied || st.Checksum != sts[0].Checksum {
			return false, sts
		}
	}
	return true, sts
}

// WaitConverged waits until Converged reports true. The error wraps
// ErrNotConverged and lists the statuses.
func (c *Cell) WaitConverged(ctx context.Context) error {
	for {
		ok, sts := c.Converged()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			msg := ""
			for _, st := range sts {
				msg += fmt.Sprintf("\n  replica %d: applied %d (core chosen %d) checksum %x role %s epoch %v leader %d loop stuck %v",
					st.ID, st.Applied, st.Chosen, st.Checksum, st.Role, api.Epoch(st.Epoch), st.Leader, st.LoopStuck)
			}
			return fmt.Errorf("%w:%s", ErrNotConverged, msg)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DialReplica opens a raw client connection (no session, no retries) to
// replica id with cert, for tests that speak the wire protocol to one
// replica. The caller closes it.
func (c *Cell) DialReplica(ctx context.Context, id uint64, cert tls.Certificate) (*transport.ClientConn, error) {
	pc, err := c.PacketConn()
	if err != nil {
		return nil, err
	}
	return transport.Dial(ctx, transport.DialConfig{
		Addrs: []string{c.addrs[id]}, CA: c.ca.Pool(), Certificate: &cert, PacketConn: pc, Logger: c.opts.Logger,
	})
}

// Call makes one raw call on conn and decodes the reply into resp; a
// refusal comes back as an *api.Error.
func Call(ctx context.Context, conn *transport.ClientConn, m api.Method, req, resp any) error {
	f, err := conn.Call(ctx, uint16(m), req)
	if err != nil {
		return err
	}
	return DecodeReply(f, resp)
}

// DecodeReply decodes a reply frame into resp, or returns the refusal it
// carries as an *api.Error.
func DecodeReply(f transport.Frame, resp any) error {
	switch f.Tag {
	case api.ReplyOK:
		return f.Decode(resp)
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return err
		}
		return ae
	}
	return fmt.Errorf("celltest: unexpected reply tag %#x", f.Tag)
}
