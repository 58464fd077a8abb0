package namespace

import "encoding/binary"

// The namespace's Pebble key layout. The DB is shared with the Paxos log:
// the namespace owns exactly the keys whose first byte is 'n' (paxos owns
// 'p'), so the whole namespace is the key range [keyStart, keyEnd) and a
// snapshot install can clear it with one range deletion.
//
// Below, <path> is a canonical Path, <parent> the parent path ("" for a
// tenant root), <name> the last component, <sid> a session ID as 8 bytes
// big-endian (so sessions sort by ID) and 0x00 a separator byte that no path
// or tenant name contains.
//
//	n 0x00 "meta"           store format (1 byte, storeFormat) + applied
//	                        slot (8 BE) + state checksum (8 BE). Not part of
//	                        the logical state: excluded from the checksum and
//	                        from snapshot streams.
//	nC                      counters record (last session ID, instance,
//	                        lock generation)
//	nN <parent> 0x00 <name> node record. Children of directory P are exactly
//	                        the keys with prefix nN P 0x00, in name order, so
//	                        ReadDir is one range scan; a grandchild's key
//	                        continues P with '/', never 0x00.
//	nD <path>               contents of a file (absent when empty)
//	nL <path>               present (empty value) while the node's lock is held
//	nS <sid>                session record
//	nU <tenant> 0x00 <sid>  session index by tenant (empty value)
//	nH <sid> <path>         lock held by the session (value: mode byte)
//	nE <sid> <path>         ephemeral node owned by the session (empty value)
//	nT <tenant>             tenant record
//	nK <id>                 tenant token record (tokens.go); id is
//	                        TokenIDLen lowercase hex digits
//
// Records are encoded as reccodec.go describes.
const (
	keyPrefixByte = 'n'
	tagCounters   = 'C'
	tagNode       = 'N'
	tagData       = 'D'
	tagLocked     = 'L'
	tagSession    = 'S'
	tagTenantSess = 'U'
	tagHeld       = 'H'
	tagEphemeral  = 'E'
	tagTenant     = 'T'
	tagToken      = 'K'
)

// storeFormat is the on-disk format of the namespace keys, recorded in the
// meta record. Open refuses any other (ErrFormat). History:
//
//	1  records as msgpack maps; meta of 16 bytes without a format byte
//	2  records in the binary encoding of reccodec.go (recordVersion 2);
//	   snapshot streams "LCNSNAP2"
//	3  the counters record carries the cell's clock and the latest
//	   lock-delay end (records.go); snapshot streams "LCNSNAP3". A format 2
//	   store opens as is (its counters read as clock 0, lock-delay end 0)
//	   and is format 3 from its next applied slot; a format 2 snapshot
//	   stream installs likewise. Builds that read format 2 only refuse a
//	   format 3 store with ErrFormat.
const storeFormat byte = 3

// storeFormatMigrated is the older format Open still accepts (see above).
const storeFormatMigrated byte = 2

// metaLen is the length of the meta record's value.
const metaLen = 1 + 8 + 8

var (
	keyStart    = []byte{keyPrefixByte}
	keyEnd      = []byte{keyPrefixByte + 1}
	keyMeta     = []byte("n\x00meta")
	keyCounters = []byte{keyPrefixByte, tagCounters}
)

func tagKey(tag byte, extra int) []byte {
	b := make([]byte, 2, 2+extra)
	b[0], b[1] = keyPrefixByte, tag
	return b
}

// nodeKey returns nN <parent> 0x00 <name>.
func nodeKey(p Path) []byte {
	parent, _ := p.Parent()
	base := p.Base()
	k := tagKey(tagNode, len(parent)+1+len(base))
	k = append(k, parent...)
	k = append(k, 0)
	return append(k, base...)
}

// childPrefix returns nN <dir> 0x00, the prefix of dir's children's keys.
func childPrefix(dir Path) []byte {
	k := tagKey(tagNode, len(dir)+1)
	k = append(k, dir...)
	return append(k, 0)
}

// pathFromNodeKey inverts nodeKey. ok is false for a key that is not a node
// key.
func pathFromNodeKey(k []byte) (Path, bool) {
	if len(k) < 3 || k[0] != keyPrefixByte || k[1] != tagNode {
		return "", false
	}
	rest := k[2:]
	for i := len(rest) - 1; i >= 0; i-- {
		if rest[i] == 0 {
			return Path(string(rest[:i]) + "/" + string(rest[i+1:])), true
		}
	}
	return "", false
}

func pathKey(tag byte, p Path) []byte {
	k := tagKey(tag, len(p))
	return append(k, p...)
}

func dataKey(p Path) []byte   { return pathKey(tagData, p) }
func lockedKey(p Path) []byte { return pathKey(tagLocked, p) }
func tenantKey(name string) []byte {
	k := tagKey(tagTenant, len(name))
	return append(k, name...)
}

func sessionKey(sid uint64) []byte {
	return binary.BigEndian.AppendUint64(tagKey(tagSession, 8), sid)
}

func tenantSessionPrefix(tenant string) []byte {
	k := tagKey(tagTenantSess, len(tenant)+1+8)
	k = append(k, tenant...)
	return append(k, 0)
}

func tenantSessionKey(tenant string, sid uint64) []byte {
	return binary.BigEndian.AppendUint64(tenantSessionPrefix(tenant), sid)
}

func sessionPrefix(tag byte, sid uint64) []byte {
	return binary.BigEndian.AppendUint64(tagKey(tag, 8), sid)
}

func heldKey(sid uint64, p Path) []byte      { return append(sessionPrefix(tagHeld, sid), p...) }
func ephemeralKey(sid uint64, p Path) []byte { return append(sessionPrefix(tagEphemeral, sid), p...) }

// prefixEnd returns the smallest key above every key with the given prefix.
// REQUIRES: prefix is not all 0xff (ours never are: they start with 'n').
func prefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	panic("namespace: prefixEnd of an all-0xff prefix")
}
