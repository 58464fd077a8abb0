package cell

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Scanning Pebble's write-ahead logs for damage before Pebble opens them.
//
// Pebble replays its newest WAL up to the first record it cannot read and
// opens anyway, because after a crash the tail of the log may be a record
// torn in the middle of its write: never synced, never acknowledged, safe to
// drop. Damage to records that were synced looks the same at that point.
// What tells them apart is what follows: a WAL written with sync offsets
// (FormatWALSyncChunks) records in every chunk how far the log had been
// synced when the chunk was written. A chunk that decodes, belongs to this
// log and vouches for a sync beyond the first bad chunk proves that the bad
// chunk was durable once, so it is damage. Pebble's own read-ahead checks
// this too, but only for chunks that start a later 32 KiB block; this scan
// looks at every byte after the bad chunk, so damage followed by any
// vouching chunk is found. A log with no such chunk after its first bad one
// ends in a torn tail, which is normal after a crash (and the guard record
// catches acknowledged writes missing at the tail, see store.go).
//
// The chunk format (pebble/record): 32 KiB blocks of chunks, each
//
//	checksum:4 length:2 type:1 [logNum:4 [syncedOffset:8]] payload
//
// little-endian, where types 1-4 have the 7-byte header, 5-8 add the log
// number, 9-12 add the synced offset too, and the checksum is Pebble's
// masked CRC-32C of everything from the type byte to the end of the payload.
// A chunk never crosses a block boundary.
const (
	walBlockSize = 32 << 10
	walHdrLegacy = 7
	walHdrRecyc  = 11
	walHdrSync   = 19
)

var walCRC = crc32.MakeTable(crc32.Castagnoli)

// walChecksum is Pebble's masked CRC-32C.
func walChecksum(b []byte) uint32 {
	c := crc32.Checksum(b, walCRC)
	return (c>>15 | c<<17) + 0xa282ead8
}

// walChunk decodes the chunk at off in b (which holds the whole file) and
// returns its length, its synced offset (0 unless a WAL-sync chunk), and
// whether it is a valid chunk of log logNum. An EOF trailer (the log number
// one past ours, written when a log is closed) is reported as end.
func walChunk(b []byte, off int, logNum uint32) (n int, synced uint64, ok, end bool) {
	blockEnd := min((off/walBlockSize+1)*walBlockSize, len(b))
	if off+walHdrLegacy > blockEnd {
		return 0, 0, false, false
	}
	length := int(binary.LittleEndian.Uint16(b[off+4:]))
	typ := b[off+6]
	hdr := walHdrLegacy
	switch {
	case typ >= 1 && typ <= 4:
	case typ >= 5 && typ <= 8:
		hdr = walHdrRecyc
	case typ >= 9 && typ <= 12:
		hdr = walHdrSync
	default:
		return 0, 0, false, false
	}
	if off+hdr+length > blockEnd {
		return 0, 0, false, false
	}
	if hdr > walHdrLegacy {
		switch num := binary.LittleEndian.Uint32(b[off+7:]); {
		case num == logNum+1:
			return 0, 0, false, true
		case num != logNum:
			return 0, 0, false, false
		}
	}
	if walChecksum(b[off+6:off+hdr+length]) != binary.LittleEndian.Uint32(b[off:]) {
		return 0, 0, false, false
	}
	if hdr == walHdrSync {
		synced = binary.LittleEndian.Uint64(b[off+11:])
	}
	return hdr + length, synced, true, false
}

// scanWAL reads the WAL file at path and returns a description of the
// damage it holds, or "" if it reads cleanly or ends in a torn tail.
func scanWAL(path string) (string, error) {
	name := filepath.Base(path)
	digits := strings.TrimSuffix(name, ".log")
	if i := strings.IndexByte(digits, '-'); i >= 0 {
		digits = digits[:i]
	}
	num, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return "", nil // not a WAL of Pebble's naming
	}
	logNum := uint32(num) // Pebble keeps the low 32 bits in the chunks
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	// Walk the chunks in order to the first one that does not decode.
	off := 0
	for off < len(b) {
		blockLeft := walBlockSize - off%walBlockSize
		if blockLeft < walHdrSync && allZero(b[off:min(off+blockLeft, len(b))]) {
			off += blockLeft // the writer pads a block's end too short for a chunk with zeros
			continue
		}
		n, _, ok, end := walChunk(b, off, logNum)
		if end {
			return "", nil // closed cleanly; what follows is an older log's
		}
		if !ok {
			break
		}
		off += n
	}
	if off >= len(b) {
		return "", nil
	}
	bad := off
	// Look for a later chunk of this log that vouches for a sync past it.
	for p := bad + 1; p+walHdrSync <= len(b); p++ {
		if t := b[p+6]; t < 9 || t > 12 || binary.LittleEndian.Uint32(b[p+7:]) != logNum {
			continue
		}
		if _, synced, ok, _ := walChunk(b, p, logNum); ok && synced > uint64(bad) {
			return fmt.Sprintf("WAL %s: the record at offset %d does not decode, yet the record at offset %d was written after the log was synced to offset %d", name, bad, p, synced), nil
		}
	}
	return "", nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// scanWALs scans every WAL in dir and returns the first damage found.
func scanWALs(dir string) (string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".log") {
			if d, err := scanWAL(filepath.Join(dir, e.Name())); err != nil || d != "" {
				return d, err
			}
		}
	}
	return "", nil
}
