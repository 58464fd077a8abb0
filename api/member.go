package api

// Membership changes (cell administrator only): the replica set is part of
// the replicated state, changed one replica at a time through the Paxos
// log (docs/membership.md). A replica ID names one replica for the cell's
// whole life: an ID that was ever a member is never accepted again.

// AddReplicaRequest adds replica ID, listening at Addr ("host:port"), to
// the cell: first as a learner that votes in nothing while it catches up
// (by snapshot, then the log), then, once caught up, as a voter. The new
// replica must already be running (lockcelld init --join). A request for
// a replica that is already a learner at Addr resumes the addition; one
// for a voter at Addr reports the membership.
type AddReplicaRequest struct {
	Header
	ID   uint64 `msgpack:"id"`
	Addr string `msgpack:"a"`
}

// RemoveReplicaRequest removes replica ID (a voter or a learner) from the
// cell. If ID is the master, it hands mastership over first and the
// request is answered NotMaster naming the successor, which the client
// follows and which removes it. A request for a replica already removed
// reports the membership.
type RemoveReplicaRequest struct {
	Header
	ID uint64 `msgpack:"id"`
}

// ReplaceReplicaRequest replaces replica Old by the new replica New at
// Addr, in four changes: New added as a learner, New caught up, New
// promoted to voter, Old removed (after a hand-over if Old is master). A
// request interrupted at any step and sent again continues from there.
type ReplaceReplicaRequest struct {
	Header
	Old  uint64 `msgpack:"o"`
	New  uint64 `msgpack:"n"`
	Addr string `msgpack:"a"`
}

// MembershipResponse answers the membership changes with the membership
// they left in force.
type MembershipResponse struct {
	// Voters and Learners are the members, each sorted by ID.
	Voters   []uint64 `msgpack:"v"`
	Learners []uint64 `msgpack:"l,omitempty"`
	// Addrs maps every member to its address.
	Addrs map[uint64]string `msgpack:"ad"`
	// Slot is the Paxos slot at which this membership was chosen (0: the
	// cell's initial membership, unchanged).
	Slot uint64 `msgpack:"s"`
	// Steps lists, in order, the changes this request made ("add-learner
	// 6 at slot 41", "promote 6 at slot 44", "remove 5 at slot 47"); empty
	// if it found them all made already.
	Steps []string `msgpack:"st,omitempty"`
}
