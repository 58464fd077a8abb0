package paxos

import (
	"testing"
	"testing/quick"
)

// Ballot order against a dumb reference: compare (round, id) as a pair.
func TestQuickBallotOrder(t *testing.T) {
	f := func(r1, r2 uint32, id1, id2 uint16) bool {
		a, b := MakeBallot(uint64(r1), ID(id1)), MakeBallot(uint64(r2), ID(id2))
		refLess := r1 < r2 || (r1 == r2 && id1 < id2)
		return (a < b) == refLess && (a == b) == (r1 == r2 && id1 == id2) &&
			a.Round() == uint64(r1) && a.ID() == ID(id1)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// voteSet quorum counting against a dumb reference: count the distinct
// members by hand.
func TestQuickQuorumCounting(t *testing.T) {
	f := func(n8 uint8, votes []uint8) bool {
		n := 1 + int(n8)%MaxReplicas
		var v voteSet
		seen := map[int]bool{}
		for _, x := range votes {
			idx := int(x) % n
			v = v.add(idx)
			seen[idx] = true
		}
		for i := 0; i < n; i++ {
			if v.has(i) != seen[i] {
				return false
			}
		}
		return v.count() == len(seen) && v.quorum(n) == (2*len(seen) > n)
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// quorumMin against a dumb reference: the largest x that a majority of the
// values reach.
func TestQuickQuorumMin(t *testing.T) {
	f := func(vals []uint64) bool {
		if len(vals) == 0 || len(vals) > MaxReplicas {
			return true
		}
		for i := range vals {
			vals[i] %= 1000
		}
		var want uint64
		for _, cand := range vals {
			reach := 0
			for _, v := range vals {
				if v >= cand {
					reach++
				}
			}
			if 2*reach > len(vals) && cand > want {
				want = cand
			}
		}
		got := quorumMin(append([]uint64(nil), vals...))
		return got == want
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// The leader's view of a grant must end no later in real time than the
// grant itself, for any tick periods within the drift bound: E*P_l <=
// (L-1)*P_a whenever P_l <= (1+d)*P_a.
func TestQuickLeaseEffectiveIsConservative(t *testing.T) {
	f := func(l16 uint16, ppm32 uint32) bool {
		L := 4 + int(l16)%5000
		ppm := ppm32 % (MaxDriftPPM + 1)
		E := leaseEffective(L, ppm)
		// Worst case: the leader's tick is (1+d) times the acceptor's.
		// E*(1e6+ppm) <= (L-1)*1e6 in exact integers.
		return E*(1_000_000+uint64(ppm)) <= uint64(L-1)*1_000_000 && E+2 >= uint64(L-1)*1_000_000/(1_000_000+uint64(ppm))
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 5000}); err != nil {
		t.Fatal(err)
	}
}

// splitmix64 is deterministic per seed and intn stays in range.
func TestQuickSplitmixDeterministic(t *testing.T) {
	f := func(seed uint64, n16 uint16) bool {
		n := 1 + int(n16)
		a, b := splitmix64{seed}, splitmix64{seed}
		var xs []int
		for i := 0; i < 20; i++ {
			x, y := a.intn(n), b.intn(n)
			if x != y || x < 0 || x >= n {
				return false
			}
			xs = append(xs, x)
		}
		_ = xs
		return true
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	st := NewMemoryStorage()
	base := func() Config { return Config{ID: 1, Replicas: []ID{1, 2, 3}, Storage: st} }
	if _, err := NewNode(base()); err != nil {
		t.Fatalf("defaults rejected: %v", err)
	}
	n, _ := NewNode(base())
	if n.cfg.LeaseTicks != 80 || n.cfg.HeartbeatTicks != 20 || n.cfg.ElectionTicks != 84 || n.cfg.ElectionJitterTicks != 8 || n.effTTL != 78 {
		t.Fatalf("defaults: %+v effTTL=%d", n.cfg, n.effTTL)
	}
	// A replica outside the initial membership starts as a non-member
	// learner (a replica being added).
	if nd, err := NewNode(Config{ID: 4, Replicas: []ID{1, 2, 3}, Storage: st}); err != nil || nd.voting() {
		t.Fatalf("a new replica outside Replicas: err=%v, voting=%v", err, err == nil && nd.voting())
	}
	bad := []func(*Config){
		func(c *Config) { c.ID = 0 },
		func(c *Config) { c.ID = MaxID + 1 },
		func(c *Config) { c.Replicas = []ID{1, 1, 2} },
		func(c *Config) { c.Replicas = nil },
		func(c *Config) { c.Replicas = []ID{0, 1} },
		func(c *Config) { c.Storage = nil },
		func(c *Config) { c.LeaseTicks = 3 },
		func(c *Config) { c.HeartbeatTicks = 60 },
		func(c *Config) { c.ElectionTicks = 10; c.HeartbeatTicks = 10 },
		func(c *Config) { c.DriftPPM = MaxDriftPPM + 1 },
		func(c *Config) { c.MaxInflight = -1 },
		func(c *Config) { c.LeaseTicks = 4; c.HeartbeatTicks = 2; c.ElectionTicks = 5 },
	}
	for i, tweak := range bad {
		c := base()
		tweak(&c)
		if _, err := NewNode(c); err == nil {
			t.Errorf("bad config %d (%+v) accepted", i, c)
		}
	}
}
