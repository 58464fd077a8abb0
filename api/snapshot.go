package api

// SaveSnapshot (cell administrator only) streams a backup of the cell's
// whole replicated state. It is the one RPC whose reply is several frames:
// the master answers ReplyOK with a SaveSnapshotResponse that describes the
// backup, then sends the backup's bytes in frames tagged ReplySnapshotChunk
// (body: SnapshotChunk), in order, Size bytes in all, and finishes its side
// of the stream. A failure after the first frame resets the stream; the
// client then has an incomplete backup and must discard it.

// ReplySnapshotChunk tags a frame of a SaveSnapshot reply's backup bytes.
const ReplySnapshotChunk uint16 = 0xFF02

// SnapshotChunkSize is the most backup bytes one SnapshotChunk carries; it
// keeps every frame well under the transport's default frame limit.
const SnapshotChunkSize = 256 << 10

// SaveSnapshotRequest asks the master for a backup.
type SaveSnapshotRequest struct {
	Header
}

// SaveSnapshotResponse describes the backup that follows it.
type SaveSnapshotResponse struct {
	// Cell is the identity (name) of the cell the backup is of.
	Cell string `msgpack:"c"`
	// Slot is the applied Paxos slot the state is consistent at.
	Slot uint64 `msgpack:"sl"`
	// Checksum is the state checksum at Slot (the one replicas compare).
	Checksum uint64 `msgpack:"cs"`
	// Format is the backup file's format version.
	Format uint32 `msgpack:"f"`
	// Master is the replica that took the backup.
	Master uint64 `msgpack:"m"`
	// Size is the number of backup bytes that follow.
	Size uint64 `msgpack:"sz"`
	// CRC is the CRC-32C (Castagnoli) of those bytes, so the client can
	// tell a complete backup from a damaged one without parsing it.
	CRC uint32 `msgpack:"crc"`
}

// SnapshotChunk carries part of a backup's bytes.
type SnapshotChunk struct {
	Data []byte `msgpack:"d"`
}
