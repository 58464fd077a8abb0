package namespace

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc64"
	"io"

	"github.com/cockroachdb/pebble/v2"
)

// Snapshot stream format, version 3 (store format 3, keys.go):
//
//	magic      8 bytes "LCNSNAP3"
//	slot       uvarint, the applied slot the state is at
//	checksum   8 bytes big-endian, Checksum() at that slot
//	records    per logical key in increasing key order:
//	           uvarint key length (≥ 1), key, uvarint value length, value
//	end        uvarint 0
//	trailer    8 bytes big-endian CRC-64/ECMA of every byte before it
//
// The meta record is not streamed: the header carries what it holds. The
// records are streamed as stored, so the magic names the store format;
// version 1 ("LCNSNAP1") carried format-1 records. InstallSnapshot also
// takes version 2 ("LCNSNAP2"): format 2 records read as format 3 ones.
const snapshotMagic = "LCNSNAP3"

// snapshotMagicMigrated is the older stream InstallSnapshot accepts.
const snapshotMagicMigrated = "LCNSNAP2"

// Limits InstallSnapshot enforces on each record.
const (
	maxSnapshotKey   = 2 + 2*MaxPathLenLimit + 16
	maxSnapshotValue = MaxContentsLimit + commandOverhead
)

// Snapshot writes the whole namespace state, consistent at one applied slot
// (read through a Pebble snapshot, so applies may continue meanwhile), to w
// and returns that slot. Errors are w's (wrapped) or storage failures.
func (s *Store) Snapshot(w io.Writer) (slot uint64, err error) {
	s.mu.RLock()
	snap := s.db.NewSnapshot()
	slot, sum := s.mu.applied, s.mu.sum
	s.mu.RUnlock()
	defer snap.Close()

	crc := crc64.New(crcTable)
	bw := bufio.NewWriterSize(io.MultiWriter(w, crc), 256<<10)
	var scratch [binary.MaxVarintLen64]byte
	uv := func(x uint64) {
		n := binary.PutUvarint(scratch[:], x)
		_, _ = bw.Write(scratch[:n])
	}
	_, _ = bw.WriteString(snapshotMagic)
	uv(slot)
	_, _ = bw.Write(binary.BigEndian.AppendUint64(nil, sum))
	v := s.view(snap)
	err = v.scan(keyStart, nil, func(k, val []byte) (bool, error) {
		if bytes.Equal(k, keyMeta) {
			return true, nil
		}
		uv(uint64(len(k)))
		_, _ = bw.Write(k)
		uv(uint64(len(val)))
		_, err := bw.Write(val)
		return err == nil, err // a write error sticks in bw; stop early
	})
	if err != nil {
		return 0, fmt.Errorf("namespace: writing snapshot: %w", err)
	}
	uv(0)
	if err := bw.Flush(); err != nil {
		return 0, fmt.Errorf("namespace: writing snapshot: %w", err)
	}
	if _, err := w.Write(binary.BigEndian.AppendUint64(nil, crc.Sum64())); err != nil {
		return 0, fmt.Errorf("namespace: writing snapshot: %w", err)
	}
	return slot, nil
}

// InstallSnapshot replaces the whole namespace state with the one r streams
// (as Snapshot wrote it), including the applied slot and checksum, in one
// atomic, synced Pebble batch. The stream is read and verified in full
// (framing, key order, trailer CRC, and that the records hash to the
// header's checksum) before anything changes: a bad or truncated stream
// returns an error wrapping ErrBadSnapshot and keeps the old state. A
// storage failure fails the Store. r may be read (buffered) beyond the
// trailer.
func (s *Store) InstallSnapshot(r io.Reader) error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.RLock()
	failed := s.mu.failed
	s.mu.RUnlock()
	if failed != nil {
		return fmt.Errorf("%w: %w", ErrFailed, failed)
	}

	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(keyStart, keyEnd, nil); err != nil {
		return s.fail(fmt.Errorf("%w: %w", ErrStorage, err))
	}
	slot, sum, err := readSnapshot(r, b)
	if err != nil {
		return err
	}
	if err := b.Set(keyMeta, metaValue(slot, sum), nil); err != nil {
		return s.fail(fmt.Errorf("%w: %w", ErrStorage, err))
	}
	s.mu.Lock()
	err = b.Commit(pebble.Sync)
	if err == nil {
		s.mu.applied, s.mu.sum = slot, sum
		// Every cached value may have changed.
		s.cache = newStateCache()
	}
	s.mu.Unlock()
	if err != nil {
		return s.fail(fmt.Errorf("%w: installing snapshot: %w", ErrStorage, err))
	}
	return nil
}

// snapReader reads a snapshot stream, hashing every byte it consumes.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash64
	buf []byte
}

func (sr *snapReader) ReadByte() (byte, error) {
	c, err := sr.r.ReadByte()
	if err == nil {
		sr.crc.Write([]byte{c})
	}
	return c, err
}

func (sr *snapReader) full(n int) ([]byte, error) {
	if cap(sr.buf) < n {
		sr.buf = make([]byte, n)
	}
	b := sr.buf[:n]
	if _, err := io.ReadFull(sr.r, b); err != nil {
		return nil, err
	}
	sr.crc.Write(b)
	return b, nil
}

func badSnap(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadSnapshot}, args...)...)
}

// readSnapshot verifies the stream and writes its records into b (if b
// is not nil).
func readSnapshot(r io.Reader, b *pebble.Batch) (slot, sum uint64, err error) {
	sr := &snapReader{r: bufio.NewReaderSize(r, 256<<10), crc: crc64.New(crcTable)}
	eof := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return badSnap("truncated")
		}
		return badSnap("reading: %v", err)
	}
	magic, err := sr.full(len(snapshotMagic))
	if err != nil {
		return 0, 0, eof(err)
	}
	if string(magic) != snapshotMagic && string(magic) != snapshotMagicMigrated {
		return 0, 0, badSnap("bad magic %q", magic)
	}
	if slot, err = binary.ReadUvarint(sr); err != nil {
		return 0, 0, eof(err)
	}
	sb, err := sr.full(8)
	if err != nil {
		return 0, 0, eof(err)
	}
	want := binary.BigEndian.Uint64(sb)
	var prev []byte
	for {
		klen, err := binary.ReadUvarint(sr)
		if err != nil {
			return 0, 0, eof(err)
		}
		if klen == 0 {
			break
		}
		if klen > maxSnapshotKey {
			return 0, 0, badSnap("key of %d bytes", klen)
		}
		k, err := sr.full(int(klen))
		if err != nil {
			return 0, 0, eof(err)
		}
		k = bytes.Clone(k)
		if k[0] != keyPrefixByte || bytes.Equal(k, keyMeta) {
			return 0, 0, badSnap("key %q outside the namespace", k)
		}
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return 0, 0, badSnap("keys out of order at %q", k)
		}
		prev = k
		vlen, err := binary.ReadUvarint(sr)
		if err != nil {
			return 0, 0, eof(err)
		}
		if vlen > maxSnapshotValue {
			return 0, 0, badSnap("value of %d bytes", vlen)
		}
		val, err := sr.full(int(vlen))
		if err != nil {
			return 0, 0, eof(err)
		}
		sum += kvHash(k, val)
		if b == nil {
			continue // VerifySnapshot: verify only
		}
		if err := b.Set(k, val, nil); err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrStorage, err)
		}
	}
	got := sr.crc.Sum64()
	tb := make([]byte, 8)
	if _, err := io.ReadFull(sr.r, tb); err != nil {
		return 0, 0, eof(err)
	}
	if binary.BigEndian.Uint64(tb) != got {
		return 0, 0, badSnap("trailer CRC mismatch")
	}
	if sum != want {
		return 0, 0, badSnap("records hash to %016x, header says %016x", sum, want)
	}
	return slot, sum, nil
}
