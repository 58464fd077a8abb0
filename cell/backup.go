package cell

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/transport"
)

// Backups (`lockctl snapshot save`, `lockcelld restore`, `lockcelld check`).
//
// A backup is the namespace snapshot stream the replicas already exchange
// (namespace/snapshot.go: slot, state checksum, records, CRC-64 trailer)
// behind a small header that says whose state it is:
//
//	magic    8 bytes "LCBACKUP"
//	hlen     uint32 big-endian, the header's length
//	header   hlen bytes of JSON (BackupInfo)
//	hcrc     uint32 big-endian, CRC-32C of every byte before it
//	body     the namespace snapshot stream, to its end
//
// The header repeats the stream's slot and checksum (ReadBackup checks they
// agree) so that people and tools can read them without the stream. The
// format version is BackupInfo.Format; ReadBackup refuses any other.

// BackupFormat is the backup file format this build writes and reads.
const BackupFormat = 1

const backupMagic = "LCBACKUP"

// maxBackupHeader bounds the JSON header ReadBackup accepts.
const maxBackupHeader = 64 << 10

// ErrBadBackup is returned (wrapped) by ReadBackup, Restore and
// CheckBackup for a file that is not a complete, intact backup.
var ErrBadBackup = errors.New("cell: bad backup file")

// BackupInfo is a backup's header.
type BackupInfo struct {
	// Format is the file format version (BackupFormat).
	Format int `json:"format"`
	// Cell is the identity of the cell whose state this is.
	Cell string `json:"cell"`
	// Slot is the applied Paxos slot the state is consistent at.
	Slot uint64 `json:"slot"`
	// Checksum is the state checksum at Slot, as 16 hex digits.
	Checksum string `json:"checksum"`
	// Master is the replica that took the backup.
	Master uint64 `json:"master"`
	// Replicas is the cell's replica set when the backup was taken.
	Replicas map[uint64]string `json:"replicas,omitempty"`
	// Taken is when the backup was taken (the master's wall clock, UTC).
	Taken time.Time `json:"taken"`
}

// checksumHex formats a state checksum as BackupInfo and the logs do.
func checksumHex(sum uint64) string { return fmt.Sprintf("%016x", sum) }

// Backup writes a backup of the replica's state, consistent at its applied
// slot, into a buffer and returns it with its header. Any replica can take
// one; the SaveSnapshot RPC asks the master, whose applied state is the
// newest. Errors are storage failures.
func (r *Replica) Backup() ([]byte, BackupInfo, error) {
	var body bytes.Buffer
	slot, err := r.ns.Snapshot(&body)
	if err != nil {
		return nil, BackupInfo{}, fmt.Errorf("cell: backup: %w", err)
	}
	hslot, sum, err := namespace.SnapshotHeader(bytes.NewReader(body.Bytes()))
	if err != nil || hslot != slot {
		return nil, BackupInfo{}, fmt.Errorf("cell: backup: the snapshot stream's header does not read back (slot %d, %v)", hslot, err)
	}
	info := BackupInfo{Format: BackupFormat, Cell: r.cfg.Cell, Slot: slot, Checksum: checksumHex(sum),
		Master: r.cfg.ID, Replicas: r.members.response(nil).Addrs, Taken: time.Now().UTC()}
	hdr, err := encodeBackupHeader(info)
	if err != nil {
		return nil, BackupInfo{}, err
	}
	return append(hdr, body.Bytes()...), info, nil
}

func encodeBackupHeader(info BackupInfo) ([]byte, error) {
	j, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("cell: backup header: %w", err)
	}
	b := append([]byte(backupMagic), binary.BigEndian.AppendUint32(nil, uint32(len(j)))...)
	b = append(b, j...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, guardCRC)), nil
}

// ReadBackup reads a whole backup file, checks its header and verifies the
// snapshot stream in it (every record, the stream's CRC, and that the
// records hash to the stated checksum). It returns the header and the
// stream. Errors wrap ErrBadBackup, or are the file system's.
func ReadBackup(path string) (BackupInfo, []byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return BackupInfo{}, nil, err
	}
	return parseBackup(b)
}

func parseBackup(b []byte) (BackupInfo, []byte, error) {
	bad := func(format string, args ...any) (BackupInfo, []byte, error) {
		return BackupInfo{}, nil, fmt.Errorf("%w: "+format, append([]any{ErrBadBackup}, args...)...)
	}
	if len(b) < len(backupMagic)+8 || string(b[:len(backupMagic)]) != backupMagic {
		return bad("it does not start with %q (not a lockcell backup, or truncated)", backupMagic)
	}
	hlen := binary.BigEndian.Uint32(b[len(backupMagic):])
	if hlen > maxBackupHeader || uint64(len(b)) < uint64(len(backupMagic))+4+uint64(hlen)+4 {
		return bad("header length %d does not fit the file's %d bytes", hlen, len(b))
	}
	end := len(backupMagic) + 4 + int(hlen)
	if got, want := crc32.Checksum(b[:end], guardCRC), binary.BigEndian.Uint32(b[end:]); got != want {
		return bad("header CRC %08x, computed %08x: the header is damaged", want, got)
	}
	var info BackupInfo
	if err := json.Unmarshal(b[len(backupMagic)+4:end], &info); err != nil {
		return bad("header does not decode: %v", err)
	}
	if info.Format != BackupFormat {
		return bad("format %d; this build reads format %d", info.Format, BackupFormat)
	}
	body := b[end+4:]
	slot, sum, err := namespace.VerifySnapshot(bytes.NewReader(body))
	if err != nil {
		return bad("the state in it is damaged: %v", err)
	}
	if slot != info.Slot || checksumHex(sum) != info.Checksum {
		return bad("header says slot %d checksum %s, the state is at slot %d with checksum %s", info.Slot, info.Checksum, slot, checksumHex(sum))
	}
	return info, body, nil
}

// handleSaveSnapshot serves SaveSnapshot: the administrator's backup,
// taken by the master and streamed in chunks after the first reply.
func handleSaveSnapshot(ctx context.Context, c *rpcCall, req *api.SaveSnapshotRequest) (any, error) {
	data, info, err := c.d.admin.backup()
	if err != nil {
		c.d.log.Error("backup failed", "err", err)
		return nil, apiErr(api.Internal, err.Error())
	}
	c.d.log.Info("backup taken", "slot", info.Slot, "checksum", info.Checksum, "bytes", len(data))
	var sum uint64
	fmt.Sscanf(info.Checksum, "%x", &sum)
	return &streamedSnapshot{
		head: api.SaveSnapshotResponse{Cell: info.Cell, Slot: info.Slot, Checksum: sum, Format: BackupFormat,
			Master: info.Master, Size: uint64(len(data)), CRC: crc32.Checksum(data, guardCRC)},
		data: data,
	}, nil
}

// streamedReply is a reply of several frames: serveStream hands it the
// stream instead of writing one frame.
type streamedReply interface {
	writeTo(ctx context.Context, s *transport.ServerStream) error
}

// streamedSnapshot is SaveSnapshot's reply: its description, then the
// backup's bytes in chunks.
type streamedSnapshot struct {
	head api.SaveSnapshotResponse
	data []byte
}

func (ss *streamedSnapshot) writeTo(ctx context.Context, s *transport.ServerStream) error {
	if err := s.WriteFrame(ctx, api.ReplyOK, &ss.head); err != nil {
		return err
	}
	for off := 0; off < len(ss.data); off += api.SnapshotChunkSize {
		end := min(off+api.SnapshotChunkSize, len(ss.data))
		if err := s.WriteFrame(ctx, api.ReplySnapshotChunk, &api.SnapshotChunk{Data: ss.data[off:end]}); err != nil {
			return err
		}
	}
	return nil
}
