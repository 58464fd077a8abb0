package nemesis

import (
	"context"
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
	kind      string
	weight    int
	partition bool
}

var faultMenu = []faultSpec{
	{FaultKillMaster, 3, false},
	{FaultKillMinority, 2, false},
	{FaultKillAll, 1, false},
	{FaultPauseMaster, 3, false},
	{FaultIsolateMaster, 3, true},
	{FaultPartitionSplit, 2, true},
	{FaultOneWay, 2, true},
	{FaultClockSkew, 1, false},
	{FaultSlowFsync, 1, false},
}

func (r *run) pick() string {
	total := 0
	for _, f := range faultMenu {
		if !f.partition || r.faultsOK {
			total += f.weight
		}
	}
	n := r.rng.IntN(total)
	for _, f := range faultMenu {
		if f.partition && !r.faultsOK {
			continue
		}
		if n < f.weight {
			return f.kind
		}
		n -= f.weight
	}
	return FaultKillMaster
}

func uniform(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}

// schedule injects faults, one at a time with quiet gaps, until ctx ends.
func (r *run) schedule(ctx context.Context) {
	for ctx.Err() == nil {
		sleepCtx(ctx, uniform(r.rng, time.Second, 3*time.Second))
		if ctx.Err() != nil {
			return
		}
		kind := r.pick()
		hold := uniform(r.rng, time.Second, 4*time.Second)
		if err := r.inject(ctx, kind, hold); err != nil {
			r.note("%s: %v", kind, err)
		}
	}
}

func (r *run) fault(kind, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	r.log.Info("fault", "kind", kind, "what", text)
	r.record(Entry{Source: "nemesis", Type: TypeFault, Op: kind, Text: text})
	r.mu.Lock()
	r.faults[kind]++
	r.mu.Unlock()
}

func (r *run) healed(kind string) {
	r.record(Entry{Source: "nemesis", Type: TypeHeal, Op: kind})
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
		r.setEverywhere(bg, transport.FaultState{Rules: []transport.Rule{{From: m, Partition: true}, {To: m, Partition: true}}})
		hold(ctx, d)
		r.c.HealAll(bg)
		r.healed(kind)
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
		r.setEverywhere(bg, partitionRules(minority, majority))
		hold(ctx, d)
		r.c.HealAll(bg)
		r.healed(kind)
	case FaultOneWay:
		from, err := r.master(ctx)
		if err != nil || r.rng.IntN(2) == 0 {
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
		r.setEverywhere(bg, transport.FaultState{Rules: rules})
		hold(ctx, d)
		r.c.HealAll(bg)
		r.healed(kind)
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
	default:
		return fmt.Errorf("nemesis: unknown fault %q", kind)
	}
	return nil
}

// skewSchedule is the weakened run: replica 1 ticks at half speed (its
// clock-rate error is 100%, far beyond the 1% drift bound), and whenever it
// is master it is isolated, so that the others elect a new master while it
// still believes in its lease.
func (r *run) skewSchedule(ctx context.Context) {
	const slow = 1
	r.fault(FaultClockSkew, "restart replica %d with clock scale 2 (beyond the drift bound)", slow)
	if err := r.c.Restart(slow, 2, 0); err != nil {
		r.note("skew: %v", err)
		return
	}
	for ctx.Err() == nil {
		m, err := r.master(ctx)
		if err != nil {
			continue
		}
		if m != slow {
			r.moveMastership(ctx, m, slow)
			continue
		}
		r.fault(FaultIsolateMaster, "isolate the skewed master %d", m)
		r.setEverywhere(context.Background(), transport.FaultState{Rules: []transport.Rule{{From: m, Partition: true}, {To: m, Partition: true}}})
		hold(ctx, 3*time.Second)
		r.c.HealAll(context.Background())
		r.healed(FaultIsolateMaster)
		hold(ctx, 2*time.Second)
	}
}

// moveMastership makes replica to (whose slow clock makes it lose every
// election) master: messages among the other replicas and to and from the
// current master m are cut, so that only to can gather a majority; once it
// serves, the rules are healed.
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
	r.setEverywhere(context.Background(), transport.FaultState{Rules: rules})
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	for wctx.Err() == nil {
		if id, err := r.c.FindMaster(wctx); err == nil && id == to {
			break
		}
		sleepCtx(wctx, 100*time.Millisecond)
	}
	cancel()
	r.c.HealAll(context.Background())
	r.healed(FaultIsolateMaster)
	hold(ctx, time.Second)
}
