package paxos

import (
	"fmt"
	"slices"
	"testing"
)

// TestSimulationRejoinKeepsMaster runs the simulator without random faults
// and, once a master is established, takes one follower away and brings it
// back, in three ways, each for several election timeouts: restarted and
// deaf (it sends but hears nothing), cut off both ways, and deaf to the
// master only (it still talks with the others both ways). Its election
// timer fires meanwhile. The master must never change: a
// majority still hears it, so the pre-vote refuses the returning replica,
// which never raises the ballot that would make it refuse the master's
// next heartbeat. Each seed also checks every invariant the simulator
// checks. It reports how many returns it judged and fails below a floor.
func TestSimulationRejoinKeepsMaster(t *testing.T) {
	judged, fired := 0, 0
	for seed := int64(0); seed < 12; seed++ {
		for _, how := range []rejoinMode{restartedDeaf, partitioned, deafToMaster} {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, how), func(t *testing.T) {
				f := runRejoin(t, seed, how)
				judged++
				if f {
					fired++
				}
			})
		}
	}
	// The returning replica's election timer must really have fired in
	// most runs, or the test judged nothing.
	if judged < 36 || fired < judged/2 {
		t.Fatalf("judged %d returns, the returning replica's election timer fired in %d: too few", judged, fired)
	}
	t.Logf("judged %d returns of a follower; its election timer fired in %d; no master change", judged, fired)
}

// rejoinMode is how TestSimulationRejoinKeepsMaster takes a follower away.
type rejoinMode uint8

const (
	restartedDeaf rejoinMode = iota // restarted, hears nobody
	partitioned                     // cut off both ways
	deafToMaster                    // hears everybody but the master
)

func (m rejoinMode) String() string {
	return [...]string{"restarted-deaf", "partitioned", "deaf-to-master"}[m]
}

// runRejoin runs one scenario of TestSimulationRejoinKeepsMaster and
// reports whether the returning replica's election timer fired while it
// was away (it pre-voted or campaigned).
func runRejoin(t *testing.T, seed int64, how rejoinMode) bool {
	p := paramsForSeed(seed)
	p.crashes, p.partitions, p.amnesia, p.leaderIsolationHeavy = false, false, false, false
	p.loss, p.dup, p.slowFrac = 0, 0, 0
	s := newSim(t, seed, p)
	s.healed = true // no random faults; the test injects its own
	tick := int64(simTickMicros)
	var master *replica
	var ballot Ballot
	watch := func() {
		for _, r := range s.reps {
			if master != nil && r.up && r.node.role == Leader && r.node.lead.ballot != ballot {
				s.failf("master changed: replica %d leads at %s, replica %d led at %s", r.id, r.node.lead.ballot, master.id, ballot)
			}
		}
	}
	fired := false
	runFor := func(ticks int, away *replica) {
		end := s.now + int64(ticks)*tick
		for s.failed == nil && s.now < end && s.step() {
			watch()
			if away != nil && away.up && (away.node.pre != nil || away.node.role == Candidate) {
				fired = true
			}
		}
	}
	for i := 0; i < 20 && master == nil && s.failed == nil; i++ {
		runFor(p.lease+p.elect, nil)
		for _, r := range s.reps {
			if r.up && r.node.isMaster() {
				master, ballot = r, r.node.lead.ballot
			}
		}
	}
	if master == nil {
		t.Fatalf("seed %d: no master without faults", seed)
	}
	// Let the cell settle under the master, then take a follower away.
	runFor(2*p.lease, nil)
	// The next voter after the master (spares outside the membership
	// follow nobody).
	voters := master.node.conf.Voters
	away := s.reps[voters[(slices.Index(voters, master.id)+1)%len(voters)]-1]
	idx := int(away.id - 1)
	gone := 4 * (p.lease + p.elect)
	switch how {
	case restartedDeaf:
		away.crash()
		runFor(5, nil)
		s.restart(idx)
		for j := range s.reps {
			s.blocked[j][idx] = true
		}
	case partitioned:
		for j := range s.reps {
			s.blocked[j][idx], s.blocked[idx][j] = true, true
		}
	case deafToMaster:
		s.blocked[master.id-1][idx] = true
	}
	runFor(gone, away)
	s.clearPartitions()
	runFor(6*(p.lease+p.elect), nil)
	if s.failed != nil {
		t.Fatalf("seed %d (%+v): %v", seed, p, s.failed)
	}
	if !master.up || !master.node.isMaster() {
		t.Fatalf("seed %d: replica %d is no longer master at the end", seed, master.id)
	}
	if st := away.node.Status(); st.Leader != master.id {
		t.Fatalf("seed %d: the returning replica %d follows %d, not the master %d: %+v", seed, away.id, st.Leader, master.id, st)
	}
	return fired
}

// TestSimulationRollingRestart restarts every replica of a quiet cell in
// turn, each once the previous one has caught up: the followers first,
// then the master, which hands over to a follower already restarted. A
// restarted replica hears nothing for longer than an election timeout (as
// while a real one reconnects its transport), so its election timer fires. The
// master must change exactly once, at the hand-over. It also checks every
// invariant the simulator checks.
func TestSimulationRollingRestart(t *testing.T) {
	restarts := 0
	for seed := int64(0); seed < 8; seed++ {
		p := paramsForSeed(seed)
		p.crashes, p.partitions, p.amnesia, p.leaderIsolationHeavy = false, false, false, false
		p.loss, p.dup, p.slowFrac = 0, 0, 0
		s := newSim(t, seed, p)
		s.healed = true // no random faults
		ballots := map[Ballot]bool{}
		runFor := func(ticks int) {
			end := s.now + int64(ticks)*simTickMicros
			for s.failed == nil && s.now < end && s.step() {
				for _, r := range s.reps {
					if r.up && r.node.isMaster() {
						ballots[r.node.lead.ballot] = true
					}
				}
			}
		}
		var master *replica
		for i := 0; i < 20 && master == nil && s.failed == nil; i++ {
			runFor(p.lease + p.elect)
			for _, r := range s.reps {
				if r.up && r.node.isMaster() {
					master = r
				}
			}
		}
		if master == nil {
			t.Fatalf("seed %d: no master without faults", seed)
		}
		clear(ballots)
		runFor(p.lease)
		settle := 3 * (p.lease + p.elect)
		restartDeaf := func(r *replica) {
			i := int(r.id - 1)
			s.restart(i)
			for j := range s.reps {
				s.blocked[j][i] = true
			}
			runFor(p.lease + 2*p.elect)
			s.clearPartitions()
			runFor(settle)
		}
		var first *replica
		for _, r := range s.reps {
			if r == master {
				continue
			}
			r.crash()
			runFor(5)
			restartDeaf(r)
			restarts++
			if first == nil {
				first = r
			}
		}
		if err := master.node.StepDown(first.id); err != nil {
			t.Fatalf("seed %d: replica %d lost its mastership while the followers restarted (master ballots %v): StepDown: %v", seed, master.id, ballots, err)
		}
		s.flush(int(master.id - 1))
		runFor(5)
		master.crash()
		runFor(5)
		restartDeaf(master)
		restarts++
		if s.failed != nil {
			t.Fatalf("seed %d (%+v): %v", seed, p, s.failed)
		}
		if len(ballots) != 2 {
			t.Fatalf("seed %d: %d master ballots over a rolling restart of %d replicas, want 2 (one hand-over): %v", seed, len(ballots), len(s.reps), ballots)
		}
	}
	if restarts < 8*3 {
		t.Fatalf("only %d restarts judged", restarts)
	}
	t.Logf("%d replica restarts in 8 rolling restarts; one master change each, at the hand-over", restarts)
}
