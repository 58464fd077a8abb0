package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lockcell/lockcell/transport"
)

// Fault kinds.
const (
	FaultKillMaster     = "kill-master"
	FaultKillMinority   = "kill-minority"
	FaultKillAll        = "kill-all"
	FaultPauseMaster    = "pause-master"
	FaultIsolateMaster  = "isolate-master"
	FaultPartitionSplit = "partition-majority-minority"
	FaultOneWay         = "partition-one-way"
	FaultClockSkew      = "clock-skew"
	FaultSlowFsync      = "slow-fsync"
)

type faultSpec struct {
	kind   string
	weight int
}

var faultMenu = []faultSpec{
	{FaultKillMaster, 3},
	{FaultKillMinority, 2},
	{FaultKillAll, 1},
	{FaultPauseMaster, 3},
	{FaultIsolateMaster, 3},
	{FaultPartitionSplit, 2},
	{FaultOneWay, 2},
	{FaultClockSkew, 1},
	{FaultSlowFsync, 1},
}

// pick draws a fault kind by weight.
func (r *run) pick() string {
	total := 0
	for _, f := range faultMenu {
		total += f.weight
	}
	n := r.rng.IntN(total)
	for _, f := range faultMenu {
		if n < f.weight {
			return f.kind
		}
		n -= f.weight
	}
	return FaultKillMaster
}

// FaultKinds lists every fault kind of the schedule.
func FaultKinds() []string {
	var out []string
	for _, f := range faultMenu {
		out = append(out, f.kind)
	}
	return out
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// schedule injects faults, one at a time with quiet gaps, for the run's
// Duration. The first faults are every kind once, in an order drawn from
// the seed, and the schedule runs past Duration (by at most
// scheduleOvertime) until each kind was applied, so that every run applies
// every kind. A fault that cannot be applied is a failure of the run
// (faultFailed), except for want of a master to aim at: that kind is drawn
// again later.
func (r *run) schedule(ctx context.Context) {
	end := time.Now().Add(r.opts.Duration)
	var owed []string
	for _, i := range r.rng.Perm(len(faultMenu)) {
		owed = append(owed, faultMenu[i].kind)
	}
	for ctx.Err() == nil {
		now := time.Now()
		if now.After(end) && (len(owed) == 0 || now.After(end.Add(scheduleOvertime))) {
			return
		}
		sleepCtx(ctx, uniform(r.rng, time.Second, 3*time.Second))
		if ctx.Err() != nil {
			return
		}
		kind := r.pick()
		if len(owed) > 0 {
			kind = owed[0]
		}
		applied, retry := r.try(ctx, kind, uniform(r.rng, time.Second, 4*time.Second))
		if len(owed) > 0 {
			owed = owed[1:]
			if !applied && retry {
				owed = append(owed, kind)
			}
		}
	}
}

// try injects one fault and counts it if it was applied. A fault that could
// not be applied fails the run (faultFailed), except for want of a master
// to aim at (retry: draw it again later).
func (r *run) try(ctx context.Context, kind string, hold time.Duration) (applied, retry bool) {
	err := r.inject(ctx, kind, hold)
	switch {
	case err == nil:
		r.applied(kind)
		return true, false
	case errors.Is(err, ErrNoMaster) && ctx.Err() == nil:
		r.note("%s: not applied for want of a master; drawn again later: %v", kind, err)
		return false, true
	case ctx.Err() != nil:
		return false, false // the run was cancelled
	}
	r.faultFailed(kind, err)
	return false, false
}

// scheduleOvertime bounds how long the schedule runs past Duration to apply
// every fault kind once.
const scheduleOvertime = 3 * time.Minute

// faultFailed records a fault that could not be applied (or healed): the
// run fails, since a schedule that silently drops faults tests less than
// it claims.
func (r *run) faultFailed(kind string, err error) {
	r.log.Warn("fault not applied", "kind", kind, "err", err)
	r.record(Entry{Source: "nemesis", Type: TypeNote, Op: kind, Text: "not applied: " + err.Error()})
	r.mu.Lock()
	r.faultErrors = append(r.faultErrors, fmt.Sprintf("%s: %v", kind, err))
	r.mu.Unlock()
}

// fault records the start of a fault in the history.
func (r *run) fault(kind, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	r.log.Info("fault", "kind", kind, "what", text)
	r.record(Entry{Source: "nemesis", Type: TypeFault, Op: kind, Text: text})
}

// applied counts a fault that was applied and ended as drawn.
func (r *run) applied(kind string) {
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *run) healed(kind string) {
	r.record(Entry{Source: "nemesis", Type: TypeHeal, Op: kind})
}

// healPartition heals every rule after a partition fault and returns the
// first error of installing (set) or healing the rules.
func (r *run) healPartition(kind string, set error) error {
	heal := r.c.HealAll(context.Background())
	r.healed(kind)
	if set != nil {
		return set
	}
	if heal != nil {
		return fmt.Errorf("healing: %w", heal)
	}
	return nil
}

// hold waits d, but at most until ctx ends plus nothing: faults always end.
func hold(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

func (r *run) master(ctx context.Context) (uint64, error) {
	mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.c.WaitMaster(mctx)
}

// inject runs one fault of kind for about d and ends it. It ends the fault
// even when ctx ends first.
func (r *run) inject(ctx context.Context, kind string, d time.Duration) error {
	bg := context.Background()
	ids := r.c.IDs()
	switch kind {
	case FaultKillMaster:
		m, err := r.master(ctx)
		if err != nil {
			return err
		}
		r.fault(kind, "kill -9 replica %d for %v", m, d)
		r.c.Kill(m)
		hold(ctx, d)
		err = r.c.Start(m)
		r.healed(kind)
		return err
	case FaultKillMinority:
		k := 1 + r.rng.IntN(len(ids)/2)
		perm := r.rng.Perm(len(ids))[:k]
		var victims []uint64
		for _, i := range perm {
			victims = append(victims, ids[i])
		}
		r.fault(kind, "kill -9 replicas %v for %v", victims, d)
		for _, id := range victims {
			r.c.Kill(id)
		}
		hold(ctx, d)
		var err error
		for _, id := range victims {
			if e := r.c.Start(id); e != nil {
				err = e
			}
		}
		r.healed(kind)
		return err
	case FaultKillAll:
		d = uniform(r.rng, 500*time.Millisecond, 3*time.Second)
		r.fault(kind, "kill -9 every replica for %v", d)
		for _, id := range ids {
			r.c.Kill(id)
		}
		hold(ctx, d)
		var err error
		for _, id := range ids {
			if e := r.c.Start(id); e != nil {
				err = e
			}
		}
		r.healed(kind)
		return err
	case FaultPauseMaster:
		m, err := r.master(ctx)
		if err != nil {
			return err
		}
		d = uniform(r.rng, MasterLease/2, 5*MasterLease)
		r.fault(kind, "SIGSTOP replica %d for %v", m, d)
		if err := r.c.Pause(m); err != nil {
			return err
		}
		hold(ctx, d)
		err = r.c.Resume(m)
		r.healed(kind)
		return err
	case FaultIsolateMaster:
		m, err := r.master(ctx)
		if err != nil {
			return err
		}
		r.fault(kind, "isolate replica %d for %v", m, d)
		err = r.setEverywhere(bg, transport.FaultState{Rules: []transport.Rule{{From: m, Partition: true}, {To: m, Partition: true}}})
		hold(ctx, d)
		return r.healPartition(kind, err)
	case FaultPartitionSplit:
		perm := r.rng.Perm(len(ids))
		k := len(ids) / 2
		var minority, majority []uint64
		for i, p := range perm {
			if i < k {
				minority = append(minority, ids[p])
			} else {
				majority = append(majority, ids[p])
			}
		}
		r.fault(kind, "partition %v | %v for %v", minority, majority, d)
		err := r.setEverywhere(bg, partitionRules(minority, majority))
		hold(ctx, d)
		return r.healPartition(kind, err)
	case FaultOneWay:
		from, merr := r.master(ctx)
		if merr != nil || r.rng.IntN(2) == 0 {
			from = ids[r.rng.IntN(len(ids))]
		}
		var rules []transport.Rule
		var cut []uint64
		for _, id := range ids {
			if id != from && r.rng.IntN(2) == 0 {
				rules = append(rules, transport.Rule{From: from, To: id, Partition: true})
				cut = append(cut, id)
			}
		}
		if len(rules) == 0 {
			to := ids[(int(from))%len(ids)]
			rules = append(rules, transport.Rule{From: from, To: to, Partition: true})
			cut = append(cut, to)
		}
		r.fault(kind, "drop messages from replica %d to %v for %v", from, cut, d)
		err := r.setEverywhere(bg, transport.FaultState{Rules: rules})
		hold(ctx, d)
		return r.healPartition(kind, err)
	case FaultClockSkew:
		id := ids[r.rng.IntN(len(ids))]
		// Within the drift bound: |scale-1| at most 90% of it.
		scale := 1 + (r.rng.Float64()*2-1)*0.9*DriftBound
		d = uniform(r.rng, 5*time.Second, 15*time.Second)
		_, delay := r.c.Skewed(id)
		r.fault(kind, "restart replica %d with clock scale %.4f for %v", id, scale, d)
		if err := r.c.Restart(id, scale, delay); err != nil {
			return err
		}
		hold(ctx, d)
		err := r.c.Restart(id, 0, delay)
		r.healed(kind)
		return err
	case FaultSlowFsync:
		id := ids[r.rng.IntN(len(ids))]
		if m, err := r.master(ctx); err == nil && r.rng.IntN(2) == 0 {
			id = m
		}
		delay := uniform(r.rng, 5*time.Millisecond, 50*time.Millisecond)
		d = uniform(r.rng, 5*time.Second, 15*time.Second)
		scale, _ := r.c.Skewed(id)
		r.fault(kind, "restart replica %d with fsync delay %v for %v", id, delay, d)
		if err := r.c.Restart(id, scale, delay); err != nil {
			return err
		}
		hold(ctx, d)
		err := r.c.Restart(id, scale, 0)
		r.healed(kind)
		return err
	}
	return fmt.Errorf("nemesis: unknown fault %q", kind)
}

// skewSchedule is the weakened run with a clock beyond the drift bound:
// replica 1 is restarted with its clock at half the real rate (scale 2, a
// clock-rate error of 100%, far beyond the 1% bound), so that it believes a
// master lease lasts twice as long as the others grant it, and with an
// election timeout of a quarter of the usual ticks, so that despite its slow
// clock it campaigns before the others. Whenever another replica is master,
// mastership is moved to replica 1 (moveMastership); whenever replica 1 is
// master, it is isolated: the others elect a new master once their grants
// run out, while replica 1 still serves — two masters at once, which the
// master-overlap checker must see.
//
// NB: tried first, and given up: fast clocks (scale 0.5) on every replica
// but the master. On a loaded machine a heartbeat late by 0.3 s makes the
// fast replicas elect one of their own before the master is isolated.
func (r *run) skewSchedule(ctx context.Context) {
	const slow = 1
	r.fault(FaultClockSkew, "restart replica %d with clock scale 2 (beyond the drift bound) and an early election timeout", slow)
	if err := r.c.RestartEager(slow, 2, eagerElectionTicks); err != nil {
		r.faultFailed(FaultClockSkew, err)
		return
	}
	r.applied(FaultClockSkew)
	r.awaitStatus(ctx, slow)
	for ctx.Err() == nil {
		m, err := r.master(ctx)
		if err != nil {
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		if m != slow {
			r.moveMastership(ctx, m, slow)
			continue
		}
		r.fault(FaultIsolateMaster, "isolate master %d (the skewed one)", m)
		err = r.setEverywhere(context.Background(), transport.FaultState{Rules: []transport.Rule{{From: m, Partition: true}, {To: m, Partition: true}}})
		hold(ctx, 3*time.Second)
		if err := r.healPartition(FaultIsolateMaster, err); err != nil {
			r.faultFailed(FaultIsolateMaster, err)
		} else {
			r.applied(FaultIsolateMaster)
		}
		hold(ctx, time.Second)
	}
}

// moveMastership makes replica to master: every link is cut but those of
// to with the replicas other than the current master m, so that only to
// can gather a majority (the others' campaigns reach nobody but to, which
// with its early election timeout campaigns again before they retry). Once
// to serves, or after 10 s, the rules are healed.
func (r *run) moveMastership(ctx context.Context, m, to uint64) {
	var rules []transport.Rule
	for _, x := range r.c.IDs() {
		for _, y := range r.c.IDs() {
			if x != y && (x != to && y != to || x == m || y == m) {
				rules = append(rules, transport.Rule{From: x, To: y, Partition: true})
			}
		}
	}
	r.fault(FaultIsolateMaster, "cut every link but those of replica %d (and cut master %d off) to move mastership to %d", to, m, to)
	err := r.setEverywhere(context.Background(), transport.FaultState{Rules: rules})
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	for wctx.Err() == nil && err == nil {
		if id, ferr := r.c.FindMaster(wctx); ferr == nil && id == to {
			break
		}
		sleepCtx(wctx, 100*time.Millisecond)
	}
	cancel()
	if err := r.healPartition(FaultIsolateMaster, err); err != nil {
		r.faultFailed(FaultIsolateMaster, err)
	}
	hold(ctx, 500*time.Millisecond)
}

// eagerElectionTicks is the skewed replica's election timeout: a quarter of
// the default (110 ticks), just above the heartbeat (25 ticks).
const eagerElectionTicks = 30

// awaitStatus waits up to 5 s for replica id's status page to answer.
func (r *run) awaitStatus(ctx context.Context, id uint64) {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for wctx.Err() == nil {
		if _, err := r.c.MasterOf(wctx, id); err == nil {
			return
		}
		sleepCtx(wctx, 50*time.Millisecond)
	}
}

// killAllSchedule is the weakened run without fsync: every 2 to 4 s, every
// replica is killed with SIGKILL (taking back its last half second of log
// writes) and restarted after 0.5 to 1 s.
func (r *run) killAllSchedule(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, uniform(r.rng, 2*time.Second, 4*time.Second))
		if ctx.Err() != nil {
			return
		}
		d := uniform(r.rng, 500*time.Millisecond, time.Second)
		r.fault(FaultKillAll, "kill -9 every replica (no fsync) for %v", d)
		for _, id := range r.c.IDs() {
			r.c.Kill(id)
		}
		sleepCtx(context.Background(), d)
		var err error
		for _, id := range r.c.IDs() {
			if e := r.c.Start(id); e != nil {
				err = e
			}
		}
		r.healed(FaultKillAll)
		if err != nil {
			r.faultFailed(FaultKillAll, err)
		} else {
			r.applied(FaultKillAll)
		}
	}
}
