package paxos

import (
	"fmt"
	"strings"
	"testing"
)

// The idle catch-up checker: after the faults heal, no client proposes
// anything more, and still every replica must learn every chosen slot. A
// follower that missed chosen slots, or a deposed leader holding values it
// accepted but never learned chosen, may not wait for the next proposal to
// settle its log: heartbeats carry the chosen index and any answer from a
// peer that knows more is a chance to learn.

// idleCatchUpTicks bounds the ticks from heal until every replica has
// applied everything chosen: the restart lease, an election, and a few
// learn round trips, each a few times over.
func (p simParams) idleCatchUpTicks() int { return 6 * (p.lease + p.elect + p.heartbeat) }

// runIdle runs s with no proposal from heal on and reports whether the case
// was judged (some replica had applied less than the cell finally chose when
// the faults healed) and the first violation. With residual, one link of the
// replica furthest behind stays cut one way after heal (to or from a random
// peer), as a connection that never came back would: a majority of the cell
// still talks, and the replica must learn over its other links.
func (s *sim) runIdle(residual bool) (judged bool, err error) {
	s.idle = true
	healEnd := int64(s.p.faultTicks) * simTickMicros
	for s.failed == nil && !s.healed && s.now <= healEnd && s.step() {
	}
	if s.failed != nil {
		return false, s.failed
	}
	if !s.healed {
		return false, fmt.Errorf("the simulation ran dry before heal (t=%.3fs)", float64(s.now)/1e6)
	}
	// Only members are owed the log: a spare never added, or a replica
	// removed, is not judged.
	final := s.confs[len(s.confs)-1]
	atHeal := make([]Slot, len(s.reps))
	lag := -1
	for i, r := range s.reps {
		atHeal[i] = r.app.applied
		if final.isMember(r.id) && (lag < 0 || atHeal[i] < atHeal[lag]) {
			lag = i
		}
	}
	// A rebuilding replica needs answers from a majority of the cell
	// other than itself: with three voters, a link of its cut for good
	// leaves it one peer, and it must (by design) not vote again. Not a
	// case of catching up while idle, so no link is cut then.
	for _, r := range s.reps {
		if residual && (r.rebuilding || (r.up && r.node.rb != nil)) && len(final.Voters) < 4 {
			residual = false
		}
	}
	if residual {
		peer := (lag + 1 + s.rng.IntN(len(s.reps)-1)) % len(s.reps)
		if s.rng.IntN(2) == 0 {
			s.blocked[lag][peer] = true
		} else {
			s.blocked[peer][lag] = true
		}
	}
	end := s.now + int64(s.p.idleCatchUpTicks())*simTickMicros
	for s.failed == nil && s.now < end && s.step() {
	}
	if s.failed != nil {
		return false, s.failed
	}
	var chosen Slot
	for _, r := range s.reps {
		chosen = max(chosen, r.node.chosen)
	}
	final = s.confs[len(s.confs)-1]
	for i, r := range s.reps {
		judged = judged || (atHeal[i] < chosen && final.isMember(r.id))
	}
	var behind []string
	for _, r := range s.reps {
		if r.app.applied != chosen && final.isMember(r.id) {
			behind = append(behind, fmt.Sprintf("replica %d (%s, leader %d, rebuilding %t, peers' chosen %v) applied %d, chosen %d", r.id, r.node.role, r.node.leaderBallot.ID(), r.node.rb != nil, r.node.peerCommit, r.app.applied, r.node.chosen))
		}
	}
	if len(behind) > 0 {
		for _, r := range s.reps {
			if r.up {
				behind = append(behind, fmt.Sprintf("\n  %+v writes=%d", r.node.Status(), len(r.writes)))
			} else {
				behind = append(behind, fmt.Sprintf("\n  %d down", r.id))
			}
		}
		return judged, fmt.Errorf("liveness: %d ticks after heal with no new proposal the cell has chosen up to %d but %s", s.p.idleCatchUpTicks(), chosen, strings.Join(behind, "; "))
	}
	return judged, nil
}

// minIdleJudgedPct is the floor of judged cases, in percent of the seeds:
// a case counts when some replica lagged at heal.
const minIdleJudgedPct = 20

// TestSimulationIdleCatchUp runs the simulator's faulty phase and then
// lets the cell go idle: within idleCatchUpTicks every replica must have
// applied up to the highest chosen slot. Odd seeds leave one link of the
// replica furthest behind cut one way.
func TestSimulationIdleCatchUp(t *testing.T) {
	seeds := *simSeeds / 2
	if *simSeed >= 0 {
		seeds = 1
	}
	judged := 0
	var failures []string
	for i := range seeds {
		seed := int64(i) + 10_000
		if *simSeed >= 0 {
			seed = *simSeed
		}
		s := newSim(t, seed, paramsForSeed(seed))
		j, err := s.runIdle(seed%2 == 1)
		if j {
			judged++
		}
		if err != nil {
			failures = append(failures, fmt.Sprintf("seed %d: %v", seed, err))
		}
	}
	if len(failures) > 0 {
		t.Fatalf("%d of %d seeds did not catch up while idle (replay one with -run TestSimulationIdleCatchUp -sim.seed=N):\n%s", len(failures), seeds, strings.Join(failures, "\n"))
	}
	if *simSeed < 0 && judged*100 < minIdleJudgedPct*seeds {
		t.Fatalf("only %d of %d seeds had a replica behind at heal: too few to judge idle catch-up (floor %d%%)", judged, seeds, minIdleJudgedPct)
	}
	t.Logf("%d seeds, %d judged (a replica behind at heal), all caught up while idle", seeds, judged)
}

// TestIdleCatchUpQuietNonVoter replays idle seeds in which a replica that
// does not vote was cut off from the leader alone and heard nobody after
// the heal: a learner that had not yet learned the change that made it a
// member (seed 11961) and a rebuilding replica (seed 13391). Each must ask
// a peer for chosen values on its own clock (tickQuiet) and catch up.
func TestIdleCatchUpQuietNonVoter(t *testing.T) {
	for _, seed := range []int64{11961, 13391} {
		s := newSim(t, seed, paramsForSeed(seed))
		judged, err := s.runIdle(seed%2 == 1)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !judged {
			t.Fatalf("seed %d had no replica behind at heal: it no longer judges a quiet non-voter", seed)
		}
	}
}
