package paxos

import (
	"fmt"
	"slices"
	"strings"
)

// Membership changes: the replica set is part of the replicated state. The
// package documentation ("Membership") argues why the rules below are safe;
// this file holds the types and the pure pieces.

// Membership is a configuration of the cell: who votes and who only learns.
// Voters promise, accept and grant leases, and quorums are majorities of
// them; learners receive every chosen value but vote in nothing.
type Membership struct {
	// Voters lists the voting replicas, sorted, at least one.
	Voters []ID `msgpack:"v"`
	// Learners lists the non-voting replicas, sorted, disjoint from Voters.
	Learners []ID `msgpack:"l,omitempty"`
	// Index is the slot whose chosen configuration entry made this
	// membership, or 0 for the cell's initial one (Config.Replicas). It
	// orders memberships: a later one has a higher Index.
	Index Slot `msgpack:"i,omitempty"`
}

// ConfChangeType says what a ConfChange does.
type ConfChangeType uint8

// The configuration changes. Each changes the voters by at most one
// replica, so that any majority of the old voters and any majority of the
// new ones share a replica.
const (
	// ConfAddLearner adds a replica as a non-voting learner.
	ConfAddLearner ConfChangeType = iota + 1
	// ConfPromote makes a learner a voter.
	ConfPromote
	// ConfRemove removes a voter or a learner.
	ConfRemove
)

// String returns the change's name.
func (t ConfChangeType) String() string {
	switch t {
	case ConfAddLearner:
		return "add-learner"
	case ConfPromote:
		return "promote"
	case ConfRemove:
		return "remove"
	}
	return fmt.Sprintf("ConfChangeType(%d)", uint8(t))
}

// ConfChange is one change of the membership, proposed with
// Node.ProposeConfChange.
type ConfChange struct {
	Type ConfChangeType
	ID   ID
}

// clone returns a deep copy of m.
func (m Membership) clone() Membership {
	return Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners), Index: m.Index}
}

// isVoter reports whether id votes in m.
func (m Membership) isVoter(id ID) bool {
	_, ok := slices.BinarySearch(m.Voters, id)
	return ok
}

// isLearner reports whether id is a learner in m.
func (m Membership) isLearner(id ID) bool {
	_, ok := slices.BinarySearch(m.Learners, id)
	return ok
}

// isMember reports whether id is a voter or a learner in m.
func (m Membership) isMember(id ID) bool { return m.isVoter(id) || m.isLearner(id) }

// members returns the voters and learners, voters first.
func (m Membership) members() []ID {
	return append(slices.Clone(m.Voters), m.Learners...)
}

// Equal reports whether m and o are the same membership, Index included.
func (m Membership) Equal(o Membership) bool {
	return m.equal(o) && m.Index == o.Index
}

// equal reports whether m and o list the same replicas (Index aside).
func (m Membership) equal(o Membership) bool {
	return slices.Equal(m.Voters, o.Voters) && slices.Equal(m.Learners, o.Learners)
}

// String formats m as "voters=1,2,3 learners=4".
func (m Membership) String() string {
	join := func(ids []ID) string {
		parts := make([]string, len(ids))
		for i, id := range ids {
			parts[i] = fmt.Sprint(id)
		}
		return strings.Join(parts, ",")
	}
	s := "voters=" + join(m.Voters)
	if len(m.Learners) > 0 {
		s += " learners=" + join(m.Learners)
	}
	return s
}

// validate checks that m is well formed: 1..MaxReplicas members in all,
// at least one voter, IDs in range, sorted, no replica listed twice.
func (m Membership) validate() error {
	if len(m.Voters) == 0 {
		return fmt.Errorf("%w: membership without voters", ErrInvalidConfChange)
	}
	if len(m.Voters)+len(m.Learners) > MaxReplicas {
		return fmt.Errorf("%w: %d members, at most %d", ErrInvalidConfChange, len(m.Voters)+len(m.Learners), MaxReplicas)
	}
	for _, list := range [][]ID{m.Voters, m.Learners} {
		for i, id := range list {
			if id == 0 || id > MaxID {
				return fmt.Errorf("%w: replica ID %d out of range 1..%d", ErrInvalidConfChange, id, MaxID)
			}
			if i > 0 && list[i-1] >= id {
				return fmt.Errorf("%w: replica IDs not sorted or listed twice", ErrInvalidConfChange)
			}
		}
	}
	for _, id := range m.Learners {
		if m.isVoter(id) {
			return fmt.Errorf("%w: replica %d is both voter and learner", ErrInvalidConfChange, id)
		}
	}
	return nil
}

// apply returns the membership after cc, or ErrInvalidConfChange (wrapped)
// naming why cc does not apply to m. The result's Index is 0.
func (m Membership) apply(cc ConfChange) (Membership, error) {
	if cc.ID == 0 || cc.ID > MaxID {
		return Membership{}, fmt.Errorf("%w: replica ID %d out of range 1..%d", ErrInvalidConfChange, cc.ID, MaxID)
	}
	out := Membership{Voters: slices.Clone(m.Voters), Learners: slices.Clone(m.Learners)}
	insert := func(list []ID, id ID) []ID {
		i, _ := slices.BinarySearch(list, id)
		return slices.Insert(list, i, id)
	}
	remove := func(list []ID, id ID) []ID {
		i, _ := slices.BinarySearch(list, id)
		return slices.Delete(list, i, i+1)
	}
	switch cc.Type {
	case ConfAddLearner:
		if m.isMember(cc.ID) {
			return Membership{}, fmt.Errorf("%w: replica %d is already a member", ErrInvalidConfChange, cc.ID)
		}
		out.Learners = insert(out.Learners, cc.ID)
	case ConfPromote:
		if !m.isLearner(cc.ID) {
			return Membership{}, fmt.Errorf("%w: replica %d is not a learner", ErrInvalidConfChange, cc.ID)
		}
		out.Learners = remove(out.Learners, cc.ID)
		out.Voters = insert(out.Voters, cc.ID)
	case ConfRemove:
		switch {
		case m.isVoter(cc.ID):
			if len(m.Voters) == 1 {
				return Membership{}, fmt.Errorf("%w: replica %d is the last voter", ErrInvalidConfChange, cc.ID)
			}
			out.Voters = remove(out.Voters, cc.ID)
		case m.isLearner(cc.ID):
			out.Learners = remove(out.Learners, cc.ID)
		default:
			return Membership{}, fmt.Errorf("%w: replica %d is not a member", ErrInvalidConfChange, cc.ID)
		}
	default:
		return Membership{}, fmt.Errorf("%w: unknown change type %d", ErrInvalidConfChange, uint8(cc.Type))
	}
	if len(out.Learners) == 0 {
		out.Learners = nil
	}
	if err := out.validate(); err != nil {
		return Membership{}, err
	}
	return out, nil
}

// quorumOf reports whether the replicas in set (by peer index, see
// Node.peers) include a majority of m's voters.
func (n *Node) quorumOf(m Membership, set voteSet) bool {
	c := 0
	for _, id := range m.Voters {
		if i := n.index(id); i >= 0 && set.has(i) {
			c++
		}
	}
	return c >= majority(len(m.Voters))
}

// addPeer makes sure id has a peer index, growing every per-peer array,
// and returns the index. Indexes never change while the node runs.
func (n *Node) addPeer(id ID) int {
	if i := n.index(id); i >= 0 {
		return i
	}
	n.peers = append(n.peers, id)
	n.peerCommit = append(n.peerCommit, 0)
	if l := n.lead; l != nil {
		l.grantUntil = append(l.grantUntil, 0)
		l.peerChosen = append(l.peerChosen, 0)
		for _, in := range l.inflight {
			in.ackTick = append(in.ackTick, 0)
		}
	}
	return len(n.peers) - 1
}

// setMembership makes m this replica's membership (it knows the entry that
// made it chosen, or installed a snapshot carrying it), registering new
// peers. A leader removed from the voters hands over and steps down.
func (n *Node) setMembership(m Membership) {
	for _, id := range m.members() {
		n.addPeer(id)
	}
	n.conf = m
	if n.role != Follower && !m.isVoter(n.id) {
		if n.role == Leader {
			n.stepDown(n.pickSuccessor())
		} else {
			n.becomeFollower(0)
		}
	}
}

// confOf returns the configuration change e carries, if any.
func confOf(e Entry) *Membership { return e.Value.Conf }
