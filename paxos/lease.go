package paxos

// Master lease arithmetic.
//
// An acceptor that accepts a message from the leader with ballot B (an
// Accept, with or without entries) grants B a lease of LeaseTicks ticks on
// its own clock, counted from when it receives the message: until the grant
// runs out it refuses to promise any other proposer. The grant outlives real
// time (LeaseTicks-1)*P_a after receipt, where P_a is the acceptor's tick
// period (the first tick may come at once).
//
// The leader counts the same grant from when it sent the message, tick
// t_send on its own clock, and holds it live while its tick count is below
// t_send + E. That interval ends in real time at most E*P_l after the send.
// Safety needs E*P_l <= (LeaseTicks-1)*P_a for any two replicas, and with
// the drift bound P_l <= (1+d)*P_a, so E = floor((LeaseTicks-1)/(1+d)).
//
// A restarted acceptor cannot remember its grants, so NewNode starts with a
// grant of LeaseTicks to an unknown holder: it promises nobody (itself
// included) until that runs out.

// leaseEffective returns E, the number of leader ticks a grant is counted
// live for, for a lease of leaseTicks acceptor ticks and a drift bound of
// ppm parts per million.
func leaseEffective(leaseTicks int, ppm uint32) uint64 {
	if leaseTicks < 1 {
		return 0
	}
	return uint64(leaseTicks-1) * 1_000_000 / (1_000_000 + uint64(ppm))
}
