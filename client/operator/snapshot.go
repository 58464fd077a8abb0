package operator

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// ErrIncompleteSnapshot is returned (wrapped) by SaveSnapshot when the
// backup's bytes did not all arrive intact; what was written to w must be
// discarded.
var ErrIncompleteSnapshot = errors.New("operator: incomplete snapshot")

var snapshotCRC = crc32.MakeTable(crc32.Castagnoli)

// SaveSnapshot asks the master for a backup of the cell's whole state
// (cell administrator only), consistent at one applied slot, and writes its
// bytes to w: a file that `lockcelld restore` builds a new cell from. It
// returns the backup's description once every byte arrived and matched its
// CRC. It retries, until ctx ends, a request that fails before the first
// byte is written (no master, a fail-over); a failure after that returns an
// error wrapping ErrIncompleteSnapshot.
func (o *Operator) SaveSnapshot(ctx context.Context, w io.Writer) (api.SaveSnapshotResponse, error) {
	var head api.SaveSnapshotResponse
	err := o.c.CallStream(ctx, api.MethodSaveSnapshot, &api.SaveSnapshotRequest{Header: o.c.Header()}, &head,
		func(next func() (transport.Frame, error)) (bool, error) { return readSnapshot(&head, next, w) })
	if err != nil {
		return head, fmt.Errorf("save snapshot: %w", err)
	}
	return head, nil
}

// readSnapshot reads the chunks of the backup head describes and writes
// them to w; started reports whether any byte was written.
func readSnapshot(head *api.SaveSnapshotResponse, next func() (transport.Frame, error), w io.Writer) (started bool, err error) {
	crc := crc32.New(snapshotCRC)
	var got uint64
	for got < head.Size {
		f, err := next()
		if err != nil {
			return got > 0, fmt.Errorf("%w: %d of %d bytes arrived: %w", ErrIncompleteSnapshot, got, head.Size, err)
		}
		var ch api.SnapshotChunk
		if f.Tag != api.ReplySnapshotChunk || f.Decode(&ch) != nil || len(ch.Data) == 0 || got+uint64(len(ch.Data)) > head.Size {
			return got > 0, fmt.Errorf("%w: bad chunk (tag %#x) after %d of %d bytes", ErrIncompleteSnapshot, f.Tag, got, head.Size)
		}
		if _, err := w.Write(ch.Data); err != nil {
			return true, err
		}
		_, _ = crc.Write(ch.Data)
		got += uint64(len(ch.Data))
	}
	if crc.Sum32() != head.CRC {
		return true, fmt.Errorf("%w: CRC %08x, the master sent %08x", ErrIncompleteSnapshot, crc.Sum32(), head.CRC)
	}
	return true, nil
}
