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
	dc := transport.DialConfig{
		Addrs: []string{addr}, CA: cfg.CA, Certificate: cfg.Certificate,
		HandshakeTimeout: cfg.HandshakeTimeout, IdleTimeout: cfg.IdleTimeout, Logger: cfg.Logger,
	}
	if cfg.PacketConn != nil {
		pc, err := cfg.PacketConn()
		if err != nil {
			return nil, fmt.Errorf("status of %s: opening a socket: %w", addr, err)
		}
		dc.PacketConn = pc
	}
	cc, err := transport.Dial(ctx, dc)
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	defer cc.Close()
	f, err := cc.Call(ctx, uint16(api.MethodCellStatus), &api.CellStatusRequest{Token: cfg.Token})
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	var resp api.CellStatusResponse
	switch f.Tag {
	case api.ReplyOK:
		err = f.Decode(&resp)
	case api.ReplyError:
		ae := &api.Error{}
		if err = f.Decode(ae); err == nil {
			err = ae
		}
	default:
		err = fmt.Errorf("unexpected reply tag %#x", f.Tag)
	}
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", addr, err)
	}
	return &resp, nil
}
