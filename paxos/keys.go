package paxos

import "encoding/binary"

// The key layout of everything paxos stores in Pebble, declared in one place.
//
// A replica keeps ONE Pebble database, shared by paxos and the namespace state
// machine. The first byte of a key says who owns it:
//
//	'p'  paxos (this file): the acceptor's hard state, accepted entries and
//	     the latest snapshot
//	'n'  namespace (namespace/keys.go): the replicated state machine
//
// Paxos reads and writes only keys that begin with keyPrefix, and never
// deletes a range that reaches outside [keySpanStart, keySpanEnd). Any new
// owner of keys must take a new first byte and be listed here and in its own
// keys.go.
//
// Under keyPrefix, the second byte is a tag:
//
//	p c <slot:8> <chunk:4>   one chunk of the data of the snapshot at slot
//	p e <slot:8>             the entry accepted in slot
//	p h                      the hard state (promised ballot, chosen slot)
//	p s                      the snapshot descriptor (slot, size, chunks, CRC)
//
// Integers in keys are big-endian and fixed-width, so Pebble's bytewise order
// is slot order: a range scan over entries or chunks visits them in order,
// and a single DeleteRange drops every entry (or chunk) below a slot. The
// value formats are described in storage_pebble.go.
const (
	// keyPrefix is the first byte of every key paxos owns.
	keyPrefix byte = 'p'

	keyTagSnapshotChunk byte = 'c'
	keyTagEntry         byte = 'e'
	keyTagHardState     byte = 'h'
	keyTagSnapshot      byte = 's'

	// keySlotLen and keyChunkLen are the widths of the fixed-size integers
	// inside keys.
	keySlotLen  = 8
	keyChunkLen = 4
	// keyEntryLen is the length of an entry key.
	keyEntryLen = 2 + keySlotLen
	// keySnapshotChunkLen is the length of a snapshot chunk key.
	keySnapshotChunkLen = 2 + keySlotLen + keyChunkLen
)

var (
	// keySpanStart and keySpanEnd bound every key paxos owns:
	// keySpanStart <= k < keySpanEnd.
	keySpanStart = []byte{keyPrefix}
	keySpanEnd   = []byte{keyPrefix + 1}

	// keyHardState holds the encoded HardState.
	keyHardState = []byte{keyPrefix, keyTagHardState}
	// keySnapshot holds the descriptor of the latest snapshot.
	keySnapshot = []byte{keyPrefix, keyTagSnapshot}

	// keyEntriesStart and keyEntriesEnd bound every entry key.
	keyEntriesStart = []byte{keyPrefix, keyTagEntry}
	keyEntriesEnd   = []byte{keyPrefix, keyTagEntry + 1}

	// keySnapshotChunksStart and keySnapshotChunksEnd bound every snapshot
	// chunk key.
	keySnapshotChunksStart = []byte{keyPrefix, keyTagSnapshotChunk}
	keySnapshotChunksEnd   = []byte{keyPrefix, keyTagSnapshotChunk + 1}
)

// keyEntry returns the key of the entry accepted in slot.
func keyEntry(slot Slot) []byte {
	return keyAppendEntry(make([]byte, 0, keyEntryLen), slot)
}

// keyAppendEntry appends the key of the entry in slot to dst.
func keyAppendEntry(dst []byte, slot Slot) []byte {
	dst = append(dst, keyPrefix, keyTagEntry)
	return binary.BigEndian.AppendUint64(dst, uint64(slot))
}

// keyEntryUpper returns the exclusive upper bound of the entry keys with
// Slot < hi.
func keyEntryUpper(hi Slot) []byte { return keyEntry(hi) }

// keyEntryThrough returns the exclusive upper bound of the entry keys with
// Slot <= slot (it does not overflow at the largest slot).
func keyEntryThrough(slot Slot) []byte {
	if slot == ^Slot(0) {
		return keyEntriesEnd
	}
	return keyEntry(slot + 1)
}

// keyDecodeEntry returns the slot of an entry key, or false if k is not an
// entry key.
func keyDecodeEntry(k []byte) (Slot, bool) {
	if len(k) != keyEntryLen || k[0] != keyPrefix || k[1] != keyTagEntry {
		return 0, false
	}
	return Slot(binary.BigEndian.Uint64(k[2:])), true
}

// keySnapshotChunk returns the key of chunk i of the snapshot at slot.
func keySnapshotChunk(slot Slot, i uint32) []byte {
	k := make([]byte, 0, keySnapshotChunkLen)
	k = append(k, keyPrefix, keyTagSnapshotChunk)
	k = binary.BigEndian.AppendUint64(k, uint64(slot))
	return binary.BigEndian.AppendUint32(k, i)
}

// keySnapshotChunksOf returns the bounds [lo, hi) of the chunk keys of the
// snapshot at slot.
func keySnapshotChunksOf(slot Slot) (lo, hi []byte) {
	lo = keySnapshotChunk(slot, 0)
	if slot == ^Slot(0) {
		return lo, keySnapshotChunksEnd
	}
	return lo, keySnapshotChunk(slot+1, 0)
}

// keyDecodeSnapshotChunk returns the slot and chunk index of a snapshot chunk
// key, or false if k is not one.
func keyDecodeSnapshotChunk(k []byte) (Slot, uint32, bool) {
	if len(k) != keySnapshotChunkLen || k[0] != keyPrefix || k[1] != keyTagSnapshotChunk {
		return 0, 0, false
	}
	return Slot(binary.BigEndian.Uint64(k[2:])), binary.BigEndian.Uint32(k[2+keySlotLen:]), true
}
