package paxos

import (
	"errors"
	"fmt"
)

// ID identifies a replica of the cell. Valid IDs are 1..MaxID; 0 means none.
type ID uint64

// MaxID is the largest replica ID; it fits the low 16 bits of a Ballot.
const MaxID ID = 1<<16 - 1

// Slot numbers the positions of the replicated log. The first slot is 1;
// slot 0 means "nothing".
type Slot uint64

// Ballot orders proposers. It packs a round number and the proposing
// replica's ID so that the integer order is the ballot order: a higher round
// wins, and within a round the higher replica ID wins. Ballot 0 is below
// every real ballot and means "none".
type Ballot uint64

// MakeBallot returns the ballot of the given round for replica id.
// REQUIRES: id <= MaxID and round < 1<<48.
func MakeBallot(round uint64, id ID) Ballot {
	return Ballot(round<<16 | uint64(id&MaxID))
}

// Round returns the ballot's round number.
func (b Ballot) Round() uint64 { return uint64(b) >> 16 }

// ID returns the replica that owns the ballot.
func (b Ballot) ID() ID { return ID(b) & MaxID }

// String formats the ballot as round.id, for example "7.3".
func (b Ballot) String() string { return fmt.Sprintf("%d.%d", b.Round(), b.ID()) }

// ProposalID names one proposal uniquely across the cell's whole life: the
// ballot of the leader that accepted it from its caller, and a sequence number
// within that ballot. Ballots are never reused (a replica makes its own
// ballot durable as a promise before using it), so IDs never repeat, even
// across restarts.
type ProposalID struct {
	Ballot Ballot `msgpack:"b"`
	Seq    uint64 `msgpack:"s"`
}

// Command is one proposal inside a slot's value.
type Command struct {
	ID   ProposalID `msgpack:"i"`
	Data []byte     `msgpack:"d"`
}

// Value is what one slot holds: a batch of commands in proposal order. A
// value with no commands is a no-op (used to fill holes).
//
// A value with Conf set is a membership change (ProposeConfChange): Conf is
// the whole membership it makes, and its single command has no data and
// only names the proposal. The application must not apply that command as
// its own; it may record Conf (it belongs in its snapshots, see Snapshot).
type Value struct {
	Cmds []Command `msgpack:"c"`
	// Conf is the new membership, for a membership change; nil otherwise.
	Conf *Membership `msgpack:"g,omitempty"`
}

// IsNoop reports whether v carries no commands (and no membership change).
func (v Value) IsNoop() bool { return len(v.Cmds) == 0 && v.Conf == nil }

// equal reports whether v and o hold the same commands and the same
// membership change.
func (v Value) equal(o Value) bool {
	return sameValue(v, o) && (v.Conf == nil || v.Conf.Index == o.Conf.Index)
}

// Entry is a value accepted by an acceptor in a slot, at a ballot.
type Entry struct {
	Slot   Slot   `msgpack:"s"`
	Ballot Ballot `msgpack:"b"`
	Value  Value  `msgpack:"v"`
}

// HardState is the part of an acceptor's state that must survive a crash
// besides its accepted entries.
type HardState struct {
	// Promised is the highest ballot this replica promised (including its own
	// ballot when it campaigns). It must be durable before any Promise or
	// Prepare message that depends on it is sent.
	Promised Ballot `msgpack:"p"`
	// Chosen is the highest slot such that every slot up to it is known chosen
	// and the replica's stored entry for each such slot holds the chosen value.
	Chosen Slot `msgpack:"c"`
	// Rebuilding reports that this replica lost or damaged durable state and
	// is rebuilding as a learner: it casts no vote (no promise, no accept, no
	// lease grant) until the rebuild completes (see the package
	// documentation). It is durable so that a restart in the middle of a
	// rebuild starts the rebuild over instead of voting.
	Rebuilding bool `msgpack:"r,omitempty"`
}

// IsEmpty reports whether hs is the zero HardState.
func (hs HardState) IsEmpty() bool { return hs == HardState{} }

// Snapshot is the application's state after applying every slot up to and
// including Slot. Data is opaque to paxos.
//
// Members is the membership in force after Slot: the Conf of the last
// membership change applied at or below Slot (with its Index), or nil if
// there was none, in which case Config.Replicas is the membership. The
// application keeps it as part of its state and puts it into every
// snapshot it saves, since the entries that made it are compacted away.
type Snapshot struct {
	Slot    Slot        `msgpack:"s"`
	Data    []byte      `msgpack:"d"`
	Members *Membership `msgpack:"m,omitempty"`
}

// IsEmpty reports whether s is the zero Snapshot (no snapshot yet).
func (s Snapshot) IsEmpty() bool { return s.Slot == 0 }

// ErrCompacted is returned by Storage.Entries when part of the requested range
// lies at or below the snapshot slot and is no longer held.
var ErrCompacted = errors.New("paxos: requested slots are compacted")

// Storage is the read side of a replica's durable log. The core reads it when
// it starts (and may read it later, for example to send a snapshot to a
// lagging peer); it never writes it. The caller writes it through Saver, from
// Ready batches, before sending the messages of the same Ready.
//
// Error contract: any error other than ErrCompacted means the storage can no
// longer be trusted; the core stops (its methods return the error wrapped) and
// the replica must be restarted. It never guesses.
//
// Ownership: slices returned by Storage belong to the storage; the core copies
// what it keeps and never modifies them.
type Storage interface {
	// InitialState returns the durable hard state (zero on a new replica).
	InitialState() (HardState, error)
	// Snapshot returns the most recent snapshot (zero if there is none).
	Snapshot() (Snapshot, error)
	// Entries returns the accepted entries with lo <= Slot < hi in slot
	// order. Slots with no accepted entry are absent. It returns
	// ErrCompacted if lo is at or below the snapshot slot.
	Entries(lo, hi Slot) ([]Entry, error)
	// LastSlot returns the highest slot that holds an accepted entry, or the
	// snapshot slot if no entry lies above it.
	LastSlot() (Slot, error)
}

// Saver is the write side of a replica's durable log, used by the caller of
// the core (never by the core itself).
type Saver interface {
	// Save makes hs (unless empty) and ents durable as one atomic batch,
	// replacing any entry already stored in the same slot. With sync it
	// returns only after the batch is on stable storage (fsync).
	Save(hs HardState, ents []Entry, sync bool) error
	// SaveSnapshot stores snap and drops every entry with Slot <= snap.Slot,
	// atomically and synced. A snapshot older than the stored one is ignored.
	SaveSnapshot(snap Snapshot) error
}

// LogStore is a Storage the caller can also write.
type LogStore interface {
	Storage
	Saver
}
