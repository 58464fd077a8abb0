package client

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/lockcell/lockcell/api"
)

// ErrIncompleteSnapshot is returned (wrapped) by SaveSnapshot when the
// backup's bytes did not all arrive intact; what was written to w must be
// discarded.
var ErrIncompleteSnapshot = errors.New("client: incomplete snapshot")

var snapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// SaveSnapshot asks the master for a backup of the cell's whole state
// (cell administrator only), consistent at one applied slot, and writes its
// bytes to w: a file that `lockcelld restore` builds a new cell from. It
// returns the backup's description once every byte arrived and matched its
// CRC. It retries, until ctx ends, a request that fails before the first
// byte is written (no master, a fail-over); a failure after that returns an
// error wrapping ErrIncompleteSnapshot. A caller that is not the
// administrator gets an error wrapping api.ErrPermissionDenied.
func (c *Client) SaveSnapshot(ctx context.Context, w io.Writer) (api.SaveSnapshotResponse, error) {
	for {
		head, started, err := c.saveSnapshotOnce(ctx, w)
		if err == nil {
			return head, nil
		}
		if started || ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return head, fmt.Errorf("save snapshot: %w", err)
		}
		if retry, _ := classify(err); !retry {
			return head, fmt.Errorf("save snapshot: %w", err)
		}
		if perr := c.pause(ctx); perr != nil {
			return head, fmt.Errorf("save snapshot: %w (last error: %v)", perr, err)
		}
	}
}

// saveSnapshotOnce makes one attempt; started reports whether bytes were
// written to w.
func (c *Client) saveSnapshotOnce(ctx context.Context, w io.Writer) (head api.SaveSnapshotResponse, started bool, err error) {
	cc, err := c.use(ctx)
	if err != nil {
		return head, false, err
	}
	defer c.release(cc)
	s, err := cc.OpenStream(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.drop(cc, "")
		}
		return head, false, err
	}
	defer s.Close()
	if err := s.WriteFrame(ctx, uint16(api.MethodSaveSnapshot), &api.SaveSnapshotRequest{Header: c.hdr()}); err != nil {
		if ctx.Err() == nil {
			c.drop(cc, "")
		}
		return head, false, err
	}
	_ = s.CloseWrite() // NB: see rpcOnce; a fast reply makes this fail harmlessly
	f, err := s.ReadFrame(ctx)
	if err != nil {
		if ctx.Err() == nil {
			c.drop(cc, "")
		}
		return head, false, err
	}
	switch f.Tag {
	case api.ReplyOK:
		if err := f.Decode(&head); err != nil {
			return head, false, fmt.Errorf("client: decoding SaveSnapshot reply: %w", err)
		}
	case api.ReplyError:
		ae := &api.Error{}
		if err := f.Decode(ae); err != nil {
			return head, false, fmt.Errorf("client: decoding SaveSnapshot error reply: %w", err)
		}
		switch ae.Code {
		case api.NotMaster:
			c.retire(cc, ae.Master)
		case api.Unavailable:
			c.drop(cc, "")
		}
		return head, false, ae
	default:
		c.drop(cc, "")
		return head, false, fmt.Errorf("client: SaveSnapshot: unexpected reply tag %#x", f.Tag)
	}
	crc := crc32.New(snapshotCRC)
	var got uint64
	for got < head.Size {
		f, err := s.ReadFrame(ctx)
		if err != nil {
			return head, got > 0, fmt.Errorf("%w: %d of %d bytes arrived: %w", ErrIncompleteSnapshot, got, head.Size, err)
		}
		var ch api.SnapshotChunk
		if f.Tag != api.ReplySnapshotChunk || f.Decode(&ch) != nil || len(ch.Data) == 0 || got+uint64(len(ch.Data)) > head.Size {
			return head, got > 0, fmt.Errorf("%w: bad chunk (tag %#x) after %d of %d bytes", ErrIncompleteSnapshot, f.Tag, got, head.Size)
		}
		if _, err := w.Write(ch.Data); err != nil {
			return head, true, err
		}
		_, _ = crc.Write(ch.Data)
		got += uint64(len(ch.Data))
	}
	if crc.Sum32() != head.CRC {
		return head, true, fmt.Errorf("%w: CRC %08x, the master sent %08x", ErrIncompleteSnapshot, crc.Sum32(), head.CRC)
	}
	c.succeeded()
	return head, true, nil
}
