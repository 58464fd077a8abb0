package paxos

import "errors"

// Errors returned by the core. Callers test them with errors.Is; the core
// wraps them with detail (fmt.Errorf("%w: ...")).
var (
	// ErrNotLeader is returned by Propose and StepDown when this replica is
	// not the established leader, and is the outcome of a proposal that was
	// still waiting for a slot when this replica lost its leadership.
	ErrNotLeader = errors.New("paxos: not leader")
	// ErrPreempted is the outcome of a proposal that was placed in a slot
	// whose chosen value turned out to be another leader's: it was
	// definitely not chosen.
	ErrPreempted = errors.New("paxos: proposal preempted: another value was chosen in its slot")
	// ErrOutcomeUnknown is the outcome of a proposal placed in a slot that
	// this replica skipped by installing a snapshot before learning the
	// slot's value. The proposal may or may not have been chosen; it is the
	// only outcome that is not definite (see Outcome).
	ErrOutcomeUnknown = errors.New("paxos: proposal outcome unknown: its slot was covered by a snapshot")
	// ErrBusy is returned by Propose when too many proposals already wait
	// for a slot (see Config.MaxInflight and Config.MaxBatch).
	ErrBusy = errors.New("paxos: too many pending proposals")
	// ErrInvalidConfig is returned by NewNode for a contradictory Config.
	ErrInvalidConfig = errors.New("paxos: invalid config")
	// ErrInvalidMessage is returned by Step for a message that is malformed,
	// misaddressed, from an unknown replica or of an unknown type. The node
	// is left unchanged.
	ErrInvalidMessage = errors.New("paxos: invalid message")
	// ErrNoSuccessor is returned by HandOver when it is to pick the
	// successor and no peer's acknowledgement counts.
	ErrNoSuccessor = errors.New("paxos: no peer can take over")
	// ErrInvalidArgument is returned for a bad argument to StepDown or
	// Compact. The node is left unchanged.
	ErrInvalidArgument = errors.New("paxos: invalid argument")
	// ErrInvalidConfChange is returned by ProposeConfChange for a change
	// that does not apply to the current membership (adding a member,
	// promoting a replica that is not a learner, removing the last voter or
	// a non-member). The node is left unchanged.
	ErrInvalidConfChange = errors.New("paxos: invalid membership change")
	// ErrConfChangePending is returned by ProposeConfChange while an earlier
	// membership change is proposed and not yet known chosen: changes go
	// through the log one at a time.
	ErrConfChangePending = errors.New("paxos: a membership change is already pending")
	// ErrNotCaughtUp is returned by ProposeConfChange when a learner to be
	// promoted has not yet reported that it knows the log chosen up to
	// (nearly) where the leader does: it would vote without the values it
	// must report in a Promise.
	ErrNotCaughtUp = errors.New("paxos: learner has not caught up")
)
