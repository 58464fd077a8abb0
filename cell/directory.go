package cell

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// The cell side of membership change (docs/membership.md; paxos/doc.go,
// "Membership"). The Paxos core keeps who votes and who learns; the cell
// keeps, beside it and as replicated as it, what the core does not know:
// where each replica listens, and every replica ID that was ever a member,
// so that no ID is ever used twice (ballots carry IDs: a new replica under
// a former member's ID could meet promises that replica made).
//
// Both live in a directory, which every replica derives from the log in
// the same way:
//
//   - a membership change (a chosen paxos.Value with Conf) replaces the
//     directory's membership and adds its members to the IDs ever used;
//     the namespace sees only an empty slot;
//   - a cell command (an ordinary command whose data begins with
//     cellCmdTag, a byte no namespace command begins with: msgpack never
//     uses 0xc1) records the address of a replica about to be added;
//   - a snapshot carries the directory (wrapSnapshot) and its membership
//     (paxos.Snapshot.Members), since compaction drops the entries that
//     made them;
//   - a restarted replica rebuilds it from its stored snapshot and the
//     chosen entries above it up to its applied slot (loadDirectory), as
//     the core rebuilds its membership: nothing else is stored.
//
// The directory thus always describes the applied slot. The transport's
// peer set follows the core's membership (it changes when a change is
// known chosen, a little before it is applied) with addresses from the
// directory (membership.syncPeers). membership.go holds the replica's
// side of all this: the directory it publishes, its peer set, and the
// changes it makes as master.

// cellCmdTag opens the data of a cell command. No msgpack value begins
// with 0xc1 (the format leaves it unused), so no namespace command does.
const cellCmdTag byte = 0xc1

// cellCommand is a command for the cell itself, carried in the log like a
// namespace command and applied to the directory instead.
type cellCommand struct {
	// SetAddr records the address of a replica that is about to be added
	// (it is ignored for a replica that was ever a member).
	SetAddr *setAddr `msgpack:"sa,omitempty"`
}

type setAddr struct {
	ID   uint64 `msgpack:"id"`
	Addr string `msgpack:"a"`
}

func encodeCellCommand(c cellCommand) ([]byte, error) {
	b, err := msgpack.Marshal(&c)
	if err != nil {
		return nil, err
	}
	return append([]byte{cellCmdTag}, b...), nil
}

// isCellCommand reports whether data is a cell command's.
func isCellCommand(data []byte) bool { return len(data) > 0 && data[0] == cellCmdTag }

func decodeCellCommand(data []byte) (cellCommand, error) {
	var c cellCommand
	if !isCellCommand(data) {
		return c, errors.New("not a cell command")
	}
	err := msgpack.Unmarshal(data[1:], &c)
	return c, err
}

// directory is the cell's replicated record of its replicas, as of an
// applied slot. A directory is never modified once published
// (membership.view); the run loop changes a copy.
type directory struct {
	// Slot is the applied slot it describes.
	Slot uint64 `msgpack:"s"`
	// Members is the membership in force after Slot.
	Members paxos.Membership `msgpack:"m"`
	// Addrs maps replicas to the addresses AddReplica gave them: members
	// added since the cell began, and replicas about to be added. The
	// cell's first replicas are at the addresses of Config.Replicas.
	Addrs map[uint64]string `msgpack:"a,omitempty"`
	// Ever lists, sorted, every replica ID that was ever a member.
	Ever []uint64 `msgpack:"e"`

	// sum is the directory's checksum (see checksum), set when it is
	// published.
	sum uint64
}

// checksum hashes what the directory says, in a canonical order, for the
// replicas to compare (compare.go): the membership (its index, voters and
// learners), the addresses and the IDs ever used; not Slot, since the
// comparison is made at equal slots. It is never zero (zero means "none"
// in a progress report).
func (d *directory) checksum() uint64 {
	h := fnv.New64a()
	var b []byte
	num := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	ids := func(tag uint64, v []uint64) {
		num(tag)
		num(uint64(len(v)))
		for _, id := range v {
			num(id)
		}
	}
	num(uint64(d.Members.Index))
	ids(1, members(paxos.Membership{Voters: d.Members.Voters}))
	ids(2, members(paxos.Membership{Learners: d.Members.Learners}))
	ids(3, d.Ever)
	num(4)
	for _, id := range slices.Sorted(maps.Keys(d.Addrs)) {
		num(id)
		num(uint64(len(d.Addrs[id])))
		b = append(b, d.Addrs[id]...)
	}
	h.Write(b)
	return max(h.Sum64(), 1)
}

// newDirectory is the directory of a cell that never changed its
// membership: voters is its initial membership.
func newDirectory(voters []paxos.ID) *directory {
	d := &directory{Members: paxos.Membership{Voters: slices.Clone(voters)}}
	for _, id := range voters {
		d.Ever = append(d.Ever, uint64(id))
	}
	slices.Sort(d.Ever)
	return d
}

func (d *directory) clone() *directory {
	return &directory{
		Slot: d.Slot,
		Members: paxos.Membership{Voters: slices.Clone(d.Members.Voters), Learners: slices.Clone(d.Members.Learners),
			Index: d.Members.Index},
		Addrs: maps.Clone(d.Addrs),
		Ever:  slices.Clone(d.Ever),
	}
}

// changed reports whether d differs from the directory of a cell that
// never changed its membership (so that its snapshots need carry it).
func (d *directory) changed() bool { return d.Members.Index != 0 || len(d.Addrs) > 0 }

func isVoter(m paxos.Membership, id uint64) bool { return slices.Contains(m.Voters, paxos.ID(id)) }

func isLearner(m paxos.Membership, id uint64) bool {
	return slices.Contains(m.Learners, paxos.ID(id))
}

func isMember(m paxos.Membership, id uint64) bool { return isVoter(m, id) || isLearner(m, id) }

// members returns the voters and learners of m, sorted.
func members(m paxos.Membership) []uint64 {
	var out []uint64
	for _, id := range m.Voters {
		out = append(out, uint64(id))
	}
	for _, id := range m.Learners {
		out = append(out, uint64(id))
	}
	slices.Sort(out)
	return out
}

// wasMember reports whether id was ever a member (it may still be one).
func (d *directory) wasMember(id uint64) bool {
	_, ok := slices.BinarySearch(d.Ever, id)
	return ok
}

// retired reports whether id was a member and is no longer.
func (d *directory) retired(id uint64) bool { return d.wasMember(id) && !isMember(d.Members, id) }

// addr returns the address of replica id: the directory's, or else
// fallback's (the replica's Config.Replicas), or "".
func (d *directory) addr(id uint64, fallback map[uint64]string) string {
	if a := d.Addrs[id]; a != "" {
		return a
	}
	return fallback[id]
}

// applyConf makes m, chosen at slot, the membership.
func (d *directory) applyConf(m paxos.Membership, slot uint64) {
	d.Members = paxos.Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners), Index: paxos.Slot(slot)}
	for _, id := range members(m) {
		if i, ok := slices.BinarySearch(d.Ever, id); !ok {
			d.Ever = slices.Insert(d.Ever, i, id)
		}
	}
	for id := range d.Addrs {
		if d.retired(id) {
			delete(d.Addrs, id) // an ID is never used again
		}
	}
}

// applyCommand applies a cell command. A command that does not decode, or
// names a replica ID already used, changes nothing (every replica decides
// alike).
func (d *directory) applyCommand(data []byte) {
	c, err := decodeCellCommand(data)
	if err != nil || c.SetAddr == nil || c.SetAddr.ID == 0 || d.wasMember(c.SetAddr.ID) {
		return
	}
	if d.Addrs == nil {
		d.Addrs = map[uint64]string{}
	}
	d.Addrs[c.SetAddr.ID] = c.SetAddr.Addr
}

// applyEntry applies chosen entry e to d, if it is a membership change or
// holds cell commands.
func (d *directory) applyEntry(e paxos.Entry) {
	if e.Value.Conf != nil {
		d.applyConf(*e.Value.Conf, uint64(e.Slot))
		return
	}
	for _, c := range e.Value.Cmds {
		if isCellCommand(c.Data) {
			d.applyCommand(c.Data)
		}
	}
}

// snapMagic opens the data of a snapshot that carries the directory, ahead
// of the namespace's own stream (which begins "LCNSNAP"). Snapshots of a
// cell that never changed its membership carry none and are the
// namespace's stream alone, as before.
var snapMagic = []byte("LCCELLD1")

// wrapSnapshot returns the snapshot data for the namespace stream ns with
// directory d.
func wrapSnapshot(d *directory, ns []byte) ([]byte, error) {
	if !d.changed() {
		return ns, nil
	}
	b, err := msgpack.Marshal(d)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(snapMagic)+binary.MaxVarintLen64+len(b)+len(ns))
	out = append(out, snapMagic...)
	out = binary.AppendUvarint(out, uint64(len(b)))
	out = append(out, b...)
	return append(out, ns...), nil
}

// unwrapSnapshot splits snapshot data into its directory (nil if it
// carries none) and the namespace stream.
func unwrapSnapshot(data []byte) (*directory, []byte, error) {
	if !bytes.HasPrefix(data, snapMagic) {
		return nil, data, nil
	}
	rest := data[len(snapMagic):]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)-k) {
		return nil, nil, fmt.Errorf("%w: snapshot directory header damaged", namespace.ErrCorrupt)
	}
	var d directory
	if err := msgpack.Unmarshal(rest[k:k+int(n)], &d); err != nil {
		return nil, nil, fmt.Errorf("%w: snapshot directory: %v", namespace.ErrCorrupt, err)
	}
	return &d, rest[k+int(n):], nil
}

// loadDirectory derives the directory at the applied slot from the stored
// snapshot and the chosen entries above it. initial is the membership the
// core starts from when no change was ever made.
func loadDirectory(logdb paxos.Storage, initial []paxos.ID, applied uint64) (*directory, error) {
	snap, err := logdb.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("cell: paxos log: %w", err)
	}
	d, _, err := unwrapSnapshot(snap.Data)
	if err != nil {
		return nil, err
	}
	if d == nil {
		d = newDirectory(initial)
		if m := snap.Members; m != nil {
			d.applyConf(*m, uint64(m.Index))
		}
	}
	d.Slot = uint64(snap.Slot)
	if applied <= uint64(snap.Slot) {
		return d, nil
	}
	ents, err := logdb.Entries(snap.Slot+1, paxos.Slot(applied)+1)
	if err != nil {
		return nil, fmt.Errorf("cell: reading the log for the membership: %w", err)
	}
	for _, e := range ents {
		d.applyEntry(e)
	}
	d.Slot = applied
	return d, nil
}
