package client

import (
	"context"
	"fmt"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// StatusOfReplica asks the replica at addr, over a connection of its own,
// how it sees itself and the cell (a CellStatus call). Any replica answers,
// master or not, so this works when the cell has no master; it needs only
// cfg's CA and credentials (Addrs is not used). It returns the replica's
// answer, or an error naming addr: a *api.Error for a refusal, a transport
// error if the replica cannot be reached before ctx ends.
func StatusOfReplica(ctx context.Context, cfg Config, addr string) (*api.CellStatusResponse, error) {
	if len(cfg.Addrs) == 0 {
		cfg.Addrs = []string{addr}
	}
	cfg, err := cfg.populate()
	if err != nil {
		return nil, err
	}
	st, _, err := cellStatusAt(ctx, cfg, addr)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	return st, nil
}

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
	dc := transport.DialConfig{
		Addrs: []string{addr}, CA: cfg.CA, Certificate: cfg.Certificate,
		HandshakeTimeout: cfg.HandshakeTimeout, IdleTimeout: cfg.IdleTimeout, Logger: cfg.Logger,
		LocalAddr: cfg.LocalAddr,
	}
	if cfg.PacketConn != nil {
		pc, err := cfg.PacketConn()
		if err != nil {
			return nil, fmt.Errorf("client: opening a socket: %w", err)
		}
		dc.PacketConn = pc
	}
	return transport.Dial(ctx, dc)
}

// cellStatusOn asks for the CellStatus on cc (token: the tenant token to
// send, if any).
func cellStatusOn(ctx context.Context, cc *transport.ClientConn, token string) (*api.CellStatusResponse, error) {
	f, err := cc.Call(ctx, uint16(api.MethodCellStatus), &api.CellStatusRequest{Token: token})
	if err != nil {
		return nil, err
	}
	switch f.Tag {
	case api.ReplyOK:
		var resp api.CellStatusResponse
		if err := f.Decode(&resp); err != nil {
			return nil, fmt.Errorf("client: decoding CellStatus reply: %w", err)
		}
		return &resp, nil
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return nil, fmt.Errorf("client: decoding CellStatus error reply: %w", err)
		}
		return nil, ae
	default:
		return nil, fmt.Errorf("client: unexpected CellStatus reply tag %#x", f.Tag)
	}
}
