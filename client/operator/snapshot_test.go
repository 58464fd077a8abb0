package operator

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"testing"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/transport"
)

// frame encodes v as a frame tagged tag, as the cell sends it.
func frame(t *testing.T, tag uint16, v any) transport.Frame {
	t.Helper()
	b, err := transport.AppendFrame(nil, tag, v, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := transport.ReadFrame(bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestReadSnapshot: readSnapshot writes the chunks of a backup that
// arrives whole and matches its CRC, and for every damaged stream
// (a stream that ends early, a wrong tag, an empty chunk, a chunk past the
// announced size, a wrong CRC) returns an error wrapping
// ErrIncompleteSnapshot and reports whether it had written a byte.
func TestReadSnapshot(t *testing.T) {
	data := []byte("0123456789")
	crc := crc32.Checksum(data, snapshotCRC)
	chunk := func(p []byte) transport.Frame { return frame(t, api.ReplySnapshotChunk, &api.SnapshotChunk{Data: p}) }
	cases := []struct {
		name        string
		head        api.SaveSnapshotResponse
		frames      []transport.Frame
		wantErr     bool
		wantStarted bool
	}{
		{"whole", api.SaveSnapshotResponse{Size: 10, CRC: crc}, []transport.Frame{chunk(data[:4]), chunk(data[4:])}, false, true},
		{"ends early", api.SaveSnapshotResponse{Size: 10, CRC: crc}, []transport.Frame{chunk(data[:4])}, true, true},
		{"ends before a byte", api.SaveSnapshotResponse{Size: 10, CRC: crc}, nil, true, false},
		{"wrong tag", api.SaveSnapshotResponse{Size: 10, CRC: crc}, []transport.Frame{frame(t, api.ReplySnapshotChunk+1, &api.SnapshotChunk{Data: data})}, true, false},
		{"empty chunk", api.SaveSnapshotResponse{Size: 10, CRC: crc}, []transport.Frame{chunk(nil)}, true, false},
		{"past the size", api.SaveSnapshotResponse{Size: 4, CRC: crc}, []transport.Frame{chunk(data)}, true, false},
		{"wrong CRC", api.SaveSnapshotResponse{Size: 10, CRC: crc + 1}, []transport.Frame{chunk(data)}, true, true},
	}
	for _, c := range cases {
		var out bytes.Buffer
		frames := c.frames
		next := func() (transport.Frame, error) {
			if len(frames) == 0 {
				return transport.Frame{}, io.ErrUnexpectedEOF
			}
			f := frames[0]
			frames = frames[1:]
			return f, nil
		}
		head := c.head
		started, err := readSnapshot(&head, next, &out)
		switch {
		case c.wantErr && !errors.Is(err, ErrIncompleteSnapshot):
			t.Errorf("%s: %v; want ErrIncompleteSnapshot", c.name, err)
		case !c.wantErr && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case !c.wantErr && !bytes.Equal(out.Bytes(), data):
			t.Errorf("%s: wrote %q; want %q", c.name, out.Bytes(), data)
		}
		if started != c.wantStarted {
			t.Errorf("%s: started %v; want %v", c.name, started, c.wantStarted)
		}
	}
}
