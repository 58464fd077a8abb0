package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// cellStatusAt asks the replica at addr for its CellStatus over a
// connection of its own, dialled with cfg's CA, credentials, timeouts and
// socket (cfg.PacketConn, so in-process networks carry it too). It returns
// the answer and the replica the connection authenticated; an error is the
// transport's, a *api.Error for a refusal, or a decoding failure.
func cellStatusAt(ctx context.Context, cfg Config, addr string) (*api.CellStatusResponse, uint64, error) {
	cc, err := dialReplica(ctx, cfg, addr)
	if err != nil {
		return nil, 0, err
	}
	defer cc.Close()
	st, err := cellStatusOn(ctx, cc, cfg.Token)
	return st, cc.ReplicaID(), err
}

// dialReplica dials the replica at addr alone, with cfg's CA, credentials,
// timeouts and socket (cfg.PacketConn).
func dialReplica(ctx context.Context, cfg Config, addr string) (*transport.ClientConn, error) {
	return cfg.dial(ctx, transport.DialConfig{Addrs: []string{addr}}, cfg.Logger)
}

// cellStatusOn asks for the CellStatus on cc (token: the tenant token to
// send, if any).
func cellStatusOn(ctx context.Context, cc *transport.ClientConn, token string) (*api.CellStatusResponse, error) {
	var resp api.CellStatusResponse
	if err := callOn(ctx, cc, api.MethodCellStatus, &api.CellStatusRequest{Token: token}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// callOn makes one call of method m on cc, decoding the reply into resp; an
// error reply is returned as *api.Error.
func callOn(ctx context.Context, cc *transport.ClientConn, m api.Method, req, resp any) error {
	f, err := cc.Call(ctx, uint16(m), req)
	if err != nil {
		return err
	}
	switch f.Tag {
	case api.ReplyOK:
		if err := f.Decode(resp); err != nil {
			return fmt.Errorf("client: decoding %s reply: %w", m, err)
		}
		return nil
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return fmt.Errorf("client: decoding %s error reply: %w", m, err)
		}
		return ae
	default:
		return fmt.Errorf("client: unexpected %s reply tag %#x", m, f.Tag)
	}
}
