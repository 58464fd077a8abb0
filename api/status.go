package api

// This file holds the values a cell's status is told in, each with the one
// representation that the status page, the /status JSON, lockctl and the
// logs all use.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Epoch names a master's term: the Paxos ballot it leads under, which packs
// a round number (high 48 bits) and the leading replica's id (low 16 bits),
// so that a later epoch is a larger number. It is written "round.replica",
// for example "7.3" (round 7, led by replica 3), everywhere people read it:
// String, and the JSON form (a string). On the wire (msgpack) it is the
// number.
type Epoch uint64

// Round returns the epoch's round number.
func (e Epoch) Round() uint64 { return uint64(e) >> 16 }

// Replica returns the id of the replica that leads in the epoch.
func (e Epoch) Replica() uint64 { return uint64(e) & (1<<16 - 1) }

// String formats the epoch as "round.replica", for example "7.3".
func (e Epoch) String() string {
	return strconv.FormatUint(e.Round(), 10) + "." + strconv.FormatUint(e.Replica(), 10)
}

// ErrBadEpoch is returned (wrapped) by ParseEpoch for text that is not an
// epoch.
var ErrBadEpoch = errors.New("api: not an epoch (want round.replica, for example 7.3)")

// ParseEpoch parses the "round.replica" form String writes.
func ParseEpoch(s string) (Epoch, error) {
	r, id, ok := strings.Cut(s, ".")
	if !ok {
		return 0, fmt.Errorf("%w: %q", ErrBadEpoch, s)
	}
	round, err1 := strconv.ParseUint(r, 10, 48)
	rep, err2 := strconv.ParseUint(id, 10, 16)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: %q", ErrBadEpoch, s)
	}
	return Epoch(round<<16 | rep), nil
}

// MarshalJSON writes the epoch as its string form, "7.3".
func (e Epoch) MarshalJSON() ([]byte, error) { return json.Marshal(e.String()) }

// UnmarshalJSON reads the string form.
func (e *Epoch) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%w: %s", ErrBadEpoch, b)
	}
	v, err := ParseEpoch(s)
	if err != nil {
		return err
	}
	*e = v
	return nil
}

// Checksum is a replica's checksum of its whole applied state. Replicas at
// the same applied slot have the same checksum. It is written as 16
// hexadecimal digits, in JSON as a string (a JSON number cannot carry 64
// bits exactly).
type Checksum uint64

// String formats the checksum as 16 hexadecimal digits.
func (c Checksum) String() string { return fmt.Sprintf("%016x", uint64(c)) }

// MarshalJSON writes the checksum as a string of 16 hexadecimal digits.
func (c Checksum) MarshalJSON() ([]byte, error) { return json.Marshal(c.String()) }

// UnmarshalJSON reads the hexadecimal string form.
func (c *Checksum) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("api: checksum %s: want a hexadecimal string", b)
	}
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return fmt.Errorf("api: checksum %q: want a hexadecimal string", s)
	}
	*c = Checksum(v)
	return nil
}

// Role is what a replica does in its cell, as status displays name it.
type Role string

// The roles a replica reports of itself.
const (
	// RoleMaster: it leads and holds the master lease; it serves clients.
	RoleMaster Role = "master"
	// RoleLeader: it leads (won Phase 1) but holds no live master lease,
	// so it serves nothing; typically it cannot reach a majority.
	RoleLeader Role = "leader"
	// RoleCandidate: it is trying to become leader.
	RoleCandidate Role = "candidate"
	// RoleFollower: it accepts and learns what the leader proposes.
	RoleFollower Role = "follower"
	// RoleLearner: it lost durable state and learns from its peers; it
	// votes in nothing until it has rebuilt.
	RoleLearner Role = "learner (rebuilding)"
	// RoleUnknown: nothing was heard of the replica.
	RoleUnknown Role = "unknown"
)
