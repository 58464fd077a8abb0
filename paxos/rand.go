package paxos

// splitmix64 is a tiny deterministic PRNG (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014). The core draws its
// election jitter from it, seeded from Config.Seed, so that a simulator run
// replays exactly from one seed. It is not for cryptographic use.
type splitmix64 struct{ state uint64 }

// next returns the next 64 pseudo-random bits.
func (r *splitmix64) next() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a pseudo-random int in [0, n). REQUIRES: n > 0.
func (r *splitmix64) intn(n int) int {
	if n <= 0 {
		panic("paxos: invariant broken: splitmix64.intn with n <= 0")
	}
	return int(r.next() % uint64(n))
}
