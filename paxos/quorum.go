package paxos

import "math/bits"

// majority is the size of a quorum among n replicas.
func majority(n int) int { return n/2 + 1 }

// voteSet is a set of replicas, by index into the sorted replica list
// (Config.Replicas holds at most MaxReplicas = 64 IDs).
type voteSet uint64

func (v voteSet) add(idx int) voteSet { return v | 1<<uint(idx) }
func (v voteSet) has(idx int) bool    { return v&(1<<uint(idx)) != 0 }
func (v voteSet) count() int          { return bits.OnesCount64(uint64(v)) }
func (v voteSet) quorum(n int) bool   { return v.count() >= majority(n) }

// quorumMin returns the largest value x such that at least a majority of
// the values are >= x: the quorum-th largest value. Given the tick at which
// each replica's lease grant ends (as the leader counts it), it is the tick at
// which the leader loses its majority. REQUIRES: len(vals) >= 1; vals is
// scratch space and is reordered.
func quorumMin(vals []uint64) uint64 {
	q := majority(len(vals))
	// Insertion sort, descending: n is at most 64 and usually 5.
	for i := 1; i < len(vals); i++ {
		for j := i; j > 0 && vals[j] > vals[j-1]; j-- {
			vals[j], vals[j-1] = vals[j-1], vals[j]
		}
	}
	return vals[q-1]
}
