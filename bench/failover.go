package bench

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"time"
)

// DefaultPauseFor is how long failover-pause stops the master: twice
// lockcell's master lease (80 ticks of 10 ms), so that the lease surely
// runs out while the master is stopped.
const DefaultPauseFor = 1600 * time.Millisecond

// DefaultReplicas is the size of every system's cluster unless --replicas
// says otherwise: five, as Chubby runs.
const DefaultReplicas = 5

// ValidReplicas reports whether n members make a cluster the harness
// runs: an odd number from 3 to 7 (a fail-over needs a majority that
// survives the leader, and the scripts' port ranges hold seven).
func ValidReplicas(n int) bool { return n == 3 || n == 5 || n == 7 }

// Pauser is a Cluster whose members can be stopped (SIGSTOP) and continued
// (SIGCONT): failover-pause needs it.
type Pauser interface {
	// Pause stops member's process.
	Pause(ctx context.Context, member int) error
	// Resume continues it.
	Resume(ctx context.Context, member int) error
}

// Partitioner is a Cluster that can cut members off from one another:
// failover-partition needs it. Partition returns an error wrapping
// ErrUnsupported if the running cluster cannot (lockcell without fault
// injection).
type Partitioner interface {
	// Partition drops every message between the members in side and the
	// others, both ways; clients still reach every member.
	Partition(ctx context.Context, side []int) error
	// Heal removes the partition.
	Heal(ctx context.Context) error
}

// HandOverer is a Cluster that can hand leadership over on request:
// failover-rolling uses it before it restarts the master.
type HandOverer interface {
	// HandOver asks member, the leader, to hand leadership over, and
	// returns once another member leads.
	HandOver(ctx context.Context, member int) error
}

// acquireMark is one successful acquire in a fail-over run.
type acquireMark struct{ start, end time.Time }

// span is a disruption's interval; from == to for an instant one (a kill).
type span struct{ from, to time.Time }

// failoverEvent is what the disruption of a fail-over run did.
type failoverEvent struct {
	leader int
	// at is when the disruption began (the kill: when the process was
	// gone; the hand-over: when it was asked for).
	at time.Time
	// whole is the disruption from start to end; restarts, for
	// failover-rolling, one span per member restarted.
	whole    span
	restarts []restart
}

type restart struct {
	member int
	span
}

// failoverUnit is what one op of a fail-over run is.
const failoverUnit = "acquire+release/s"

func runFailover(ctx context.Context, d Driver, cfg Config, r *Result) error {
	cl := d.Cluster()
	if cl == nil {
		return fmt.Errorf("%w: no cluster to fail over", ErrUnsupported)
	}
	switch cfg.Workload {
	case FailoverPause:
		if _, ok := cl.(Pauser); !ok {
			return fmt.Errorf("%w: n/a: %s's members are not processes this harness can stop and continue", ErrUnsupported, d.Name())
		}
	case FailoverPartition:
		if _, ok := cl.(Partitioner); !ok {
			return fmt.Errorf("%w: n/a: no way to partition %s's members on loopback (lockcell partitions through its /debug/faults; "+
				"for other systems it takes packet filtering, which this harness does not do on a shared machine)", ErrUnsupported, d.Name())
		}
	}
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := cl.Healthy(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("bench: cluster not healthy before fail-over: %w", err)
	}
	cs, err := connect(ctx, d, cfg.Clients, ClientOptions{Tenant: "bench"})
	if err != nil {
		return err
	}
	defer closeAll(cs)
	mus := mutexes(cs, func(i int) string { return fmt.Sprintf("fo%d", i) })
	marks := make([][]acquireMark, len(cs))
	phase(cfg, d, cfg.Workload)
	win := newWindow(cfg)
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	if cfg.Workload == FailoverRolling {
		// The run lasts as long as the restarts take, plus a tail: it
		// ends when stopRun is called.
		win.end = win.start.Add(MaxDuration)
	}
	var (
		ev      failoverEvent
		evErr   error
		rollEnd time.Time
		evDone  = make(chan struct{})
		changes = make(chan int, 1)
	)
	go func() { changes <- watchLeader(runCtx, cl, win.start) }()
	go func() {
		defer close(evDone)
		// Disrupt a third of the way into the measured window.
		pause(ctx, time.Until(win.start.Add(cfg.Duration/3)))
		ev, evErr = disrupt(ctx, cl, cfg, win.start)
		if cfg.Workload == FailoverRolling {
			pause(ctx, cfg.Duration/3)
			rollEnd = time.Now()
			stopRun()
		}
	}()
	ws := loop(runCtx, cfg, len(cs), win, func(ctx context.Context, w *worker) error {
		t0 := time.Now()
		if _, err := mus[w.id].Lock(ctx); err != nil {
			return err
		}
		marks[w.id] = append(marks[w.id], acquireMark{t0, time.Now()})
		return mus[w.id].Unlock(ctx)
	})
	<-evDone
	stopRun()
	if !rollEnd.IsZero() {
		win.end = rollEnd
	}
	r.Metrics[MetricMasterChanges] = float64(<-changes)
	finish(r, ws, win, failoverUnit)
	lost := 0
	for _, c := range cs {
		if c.Lost() {
			lost++
		}
	}
	r.Metrics[MetricSessionsLost] = float64(lost)
	if evErr != nil {
		return fmt.Errorf("bench: %s: %w", cfg.Workload, evErr)
	}
	r.Metrics[MetricLeader] = float64(ev.leader)
	rec, gap, ok := recovery(marks, ev.at, win)
	if ok {
		r.Metrics[MetricRecovery] = ms(rec)
	} else {
		r.Note = "no acquire succeeded after the disruption began"
	}
	r.Metrics[MetricLongestGap] = ms(gap)
	o := outageSummary(clientOutages(marks, win, ev.whole))
	r.Metrics[MetricOutageP50], r.Metrics[MetricOutageP99], r.Metrics[MetricOutageMax] = ms(o.p50), ms(o.p99), ms(o.max)
	if cfg.Workload == FailoverRolling {
		r.Metrics[MetricRestarts] = float64(len(ev.restarts))
		for i, rs := range ev.restarts {
			o := outageSummary(clientOutages(marks, win, rs.span))
			k := fmt.Sprintf("restart%d_", i+1)
			r.Metrics[k+"member"] = float64(rs.member)
			r.Metrics[k+"outage_p50_ms"] = ms(o.p50)
			r.Metrics[k+"outage_max_ms"] = ms(o.max)
		}
	}
	// Bring the cluster back whole for the next workload.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if cfg.Workload == FailoverKill || cfg.Workload == FailoverStepDown {
		if err := cl.Restart(rctx, ev.leader); err != nil {
			return fmt.Errorf("bench: restarting member %d: %w", ev.leader, err)
		}
	}
	if err := cl.Healthy(rctx); err != nil {
		return fmt.Errorf("bench: cluster not healthy after fail-over: %w", err)
	}
	return nil
}

// disrupt does the workload's disruption to cl and returns what it did.
// It leaves a killed or stopped leader down (the caller restarts it); it
// undoes a pause and a partition itself.
func disrupt(ctx context.Context, cl Cluster, cfg Config, start time.Time) (failoverEvent, error) {
	var ev failoverEvent
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	leader, err := cl.Leader(lctx)
	if err != nil {
		return ev, err
	}
	ev.leader = leader
	switch cfg.Workload {
	case FailoverKill:
		// A crash counts from when the process is gone (Signal returns
		// then).
		err = cl.Signal(lctx, leader, syscall.SIGKILL)
		ev.at = time.Now()
		ev.whole = span{ev.at, ev.at}
	case FailoverStepDown:
		// A hand-over counts from when it was asked for.
		ev.at = time.Now()
		err = cl.Signal(lctx, leader, syscall.SIGTERM)
		ev.whole = span{ev.at, ev.at}
	case FailoverPause:
		p := cl.(Pauser)
		ev.at = time.Now()
		if err = p.Pause(lctx, leader); err != nil {
			return ev, err
		}
		pause(ctx, cfg.PauseFor)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = p.Resume(rctx, leader)
		rcancel()
		ev.whole = span{ev.at, time.Now()}
	case FailoverPartition:
		p := cl.(Partitioner)
		side := minority(leader, cfg.Replicas)
		ev.at = time.Now()
		if err = p.Partition(lctx, side); err != nil {
			return ev, err
		}
		// Heal two thirds of the way into the measured window.
		pause(ctx, time.Until(start.Add(2*cfg.Duration/3)))
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		err = p.Heal(hctx)
		hcancel()
		ev.whole = span{ev.at, time.Now()}
	case FailoverRolling:
		ev.at = time.Now()
		ev.restarts, err = rollingRestart(ctx, cl, leader, cfg.Replicas)
		ev.whole = span{ev.at, time.Now()}
	default:
		err = fmt.Errorf("%w: %s is not a fail-over workload", ErrInvalidConfig, cfg.Workload)
	}
	return ev, err
}

// minority is the largest minority of an n-member cluster that holds
// leader: leader and the members after it, wrapping round (of five: the
// leader and the next; of three: the leader alone).
func minority(leader, n int) []int {
	side := []int{leader}
	for m := leader; len(side) < (n-1)/2; {
		m = m%n + 1
		side = append(side, m)
	}
	return side
}

// rollingRestart restarts every member of an n-member cluster in turn,
// the leader last: each is stopped with SIGTERM and started again, and the
// next waits until the cluster is healthy. Before the leader stops it
// hands leadership over where the cluster can (HandOverer).
func rollingRestart(ctx context.Context, cl Cluster, leader, n int) ([]restart, error) {
	var order []int
	for m := 1; m <= n; m++ {
		if m != leader {
			order = append(order, m)
		}
	}
	order = append(order, leader)
	var out []restart
	for _, m := range order {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		from := time.Now()
		err := restartMember(sctx, cl, m, m == leader)
		cancel()
		out = append(out, restart{member: m, span: span{from, time.Now()}})
		if err != nil {
			return out, fmt.Errorf("restarting member %d: %w", m, err)
		}
	}
	return out, nil
}

func restartMember(ctx context.Context, cl Cluster, m int, isLeader bool) error {
	if h, ok := cl.(HandOverer); ok && isLeader {
		if err := h.HandOver(ctx, m); err != nil {
			return fmt.Errorf("handing leadership over: %w", err)
		}
	}
	if err := cl.Signal(ctx, m, syscall.SIGTERM); err != nil {
		return err
	}
	if err := cl.Restart(ctx, m); err != nil {
		return err
	}
	return cl.Healthy(ctx)
}

// watchLeader polls cl's leader every 100 ms from start until ctx ends and
// returns how often it changed (an answer of "none" is not a change).
func watchLeader(ctx context.Context, cl Cluster, start time.Time) int {
	pause(ctx, time.Until(start))
	last, changes := 0, 0
	for ctx.Err() == nil {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		m, err := cl.Leader(lctx)
		cancel()
		if err == nil && m != 0 {
			if last != 0 && m != last {
				changes++
			}
			last = m
		}
		pause(ctx, 100*time.Millisecond)
	}
	return changes
}

// recovery returns the time from killAt to the first acquire that began
// after it and succeeded, and the longest interval in win without a
// successful acquire (counting from win.start and up to win.end).
func recovery(marks [][]acquireMark, killAt time.Time, win window) (rec, gap time.Duration, ok bool) {
	var ends []time.Time
	for _, mk := range marks {
		for _, m := range mk {
			if !m.start.Before(killAt) && (!ok || m.end.Sub(killAt) < rec) {
				rec, ok = m.end.Sub(killAt), true
			}
			if win.contains(m.end) {
				ends = append(ends, m.end)
			}
		}
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	prev := win.start
	for _, t := range ends {
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	gap = max(gap, win.end.Sub(prev))
	return rec, gap, ok
}

// clientOutages returns each client's outage during ev: the longest gap
// between consecutive successful lock cycles of that client (win.start
// and win.end standing for cycles at the window's edges) that overlaps
// ev. A client with no success after ev counts until win.end.
func clientOutages(marks [][]acquireMark, win window, ev span) []time.Duration {
	out := make([]time.Duration, len(marks))
	for i, mk := range marks {
		var ends []time.Time
		for _, m := range mk {
			if win.contains(m.end) {
				ends = append(ends, m.end)
			}
		}
		slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
		ends = append(ends, win.end)
		prev := win.start
		for _, t := range ends {
			if !prev.After(ev.to) && !t.Before(ev.from) {
				out[i] = max(out[i], t.Sub(prev))
			}
			prev = t
		}
	}
	return out
}

type outages struct{ p50, p99, max time.Duration }

// outageSummary returns the nearest-rank p50 and p99 and the max of ds.
func outageSummary(ds []time.Duration) outages {
	if len(ds) == 0 {
		return outages{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return outages{p50: rank(0.5), p99: rank(0.99), max: s[len(s)-1]}
}
