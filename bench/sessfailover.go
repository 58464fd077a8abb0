package bench

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockcell/lockcell/client"
)

// sessionsSafePatience bounds how long sessions-failover waits, after the
// disruption, for every session to be safe with the new master: longer
// than lockcell's 45 s grace period, by when a session is either back or
// lost.
const sessionsSafePatience = 90 * time.Second

// sessionsSafePoll is how often sessions-failover looks at the sessions
// after the disruption: the resolution of MetricSessionsSafe.
const sessionsSafePoll = 50 * time.Millisecond

// runSessionsFailover opens and holds cfg.Sessions sessions, lets them
// settle, disrupts the master (cfg.SessionsDisrupt) and measures the time
// until every session that did not end is safe and has heard from a
// master of a later term (SessionTerms; a driver without it reports only
// the sessions lost), then holds them for cfg.Duration more and counts the
// sessions lost. The disrupted member is restarted and the cluster must be
// healthy again before it returns.
func runSessionsFailover(ctx context.Context, d Driver, cfg Config, r *Result) error {
	r.Clients = cfg.Sessions
	cl := d.Cluster()
	if cl == nil {
		return fmt.Errorf("%w: no cluster to fail over", ErrUnsupported)
	}
	hctx, cancel := context.WithTimeout(ctx, time.Minute)
	err := cl.Healthy(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("bench: cluster not healthy before fail-over: %w", err)
	}
	set, closeSet, err := openSessions(ctx, d, cfg, r, "sessions-failover")
	if err != nil {
		return err
	}
	defer closeSet()
	// Let the opening burst settle (every session's KeepAlives in step).
	cfg.Live.SetPhase(fmt.Sprintf("%s sessions-failover: holding %d", d.Name(), cfg.Sessions))
	pause(ctx, max(cfg.Warmup*2, 5*time.Second))
	tr := newConnTrace(d, set)
	terms, tracked := set.(SessionTerms)
	var before uint64
	if tracked {
		var unsafe int
		before, unsafe, _ = terms.Behind(0)
		if unsafe > 0 {
			r.Note = fmt.Sprintf("%d sessions were not safe before the disruption", unsafe)
		}
	}

	cfg.Live.SetPhase(fmt.Sprintf("%s sessions-failover: %s with %d sessions", d.Name(), cfg.SessionsDisrupt, cfg.Sessions))
	dcfg := cfg
	dcfg.Workload = cfg.SessionsDisrupt
	ev, derr := disrupt(ctx, cl, dcfg, time.Now())
	if derr == nil {
		r.Metrics[MetricLeader] = float64(ev.leader)
	}
	if derr == nil && tracked {
		worst, behind := 0, 0
		deadline := ev.at.Add(sessionsSafePatience)
		for ctx.Err() == nil {
			var unsafe int
			_, unsafe, behind = terms.Behind(before)
			tr.sample(ev.at, before)
			worst = max(worst, unsafe)
			if cfg.Live != nil {
				cfg.Live.Ops.Store(uint64(cfg.Sessions - behind))
			}
			if behind == 0 {
				r.Metrics[MetricSessionsSafe] = ms(time.Since(ev.at))
				break
			}
			if time.Now().After(deadline) {
				r.Metrics[MetricSessionsBehind] = float64(behind)
				break
			}
			pause(ctx, sessionsSafePoll)
		}
		r.Metrics[MetricSessionsUnsafeMax] = float64(worst)
	}
	defer tr.report(ev.at)
	if derr == nil {
		// Sessions the new master did not take over end within a lease
		// and a grace period; hold on to see them go.
		pause(ctx, cfg.Duration)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	r.Seconds = time.Since(ev.at).Seconds()
	lost := set.Lost()
	r.Metrics[MetricSessionsHeld] = float64(cfg.Sessions - lost)
	r.Metrics[MetricSessionsLost] = float64(lost)
	if derr != nil {
		return fmt.Errorf("bench: %s: %w", cfg.SessionsDisrupt, derr)
	}
	// Bring the cluster back whole for the next workload.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := cl.Restart(rctx, ev.leader); err != nil {
		return fmt.Errorf("bench: restarting member %d: %w", ev.leader, err)
	}
	if err := cl.Healthy(rctx); err != nil {
		return fmt.Errorf("bench: cluster not healthy after fail-over: %w", err)
	}
	return nil
}

// connTrace follows, for a lockcell run whose client logs are kept
// (--client-log), each connection's sessions through the fail-over: when
// the first and the last of them heard from the new master and were safe,
// and how many were lost. It logs the sessions of each connection first,
// so that a replica's log (which names sessions) can be read per
// connection. A nil *connTrace does nothing.
type connTrace struct {
	log  *slog.Logger
	set  *lockcellSessions
	per  int
	cons []connTimes
}

// connTimes is one connection's progress, as offsets from the disruption
// (negative: not yet).
type connTimes struct {
	first, all time.Duration
}

// newConnTrace returns the trace of set, or nil unless d is lockcell with
// its client logs kept.
func newConnTrace(d Driver, set SessionSet) *connTrace {
	ld, ok := d.(*LockcellDriver)
	ls, ok2 := set.(*lockcellSessions)
	if !ok || !ok2 || !ld.log.Enabled(context.Background(), slog.LevelInfo) || len(ls.clients) == 0 {
		return nil
	}
	tr := &connTrace{log: ld.log, set: ls, per: sessionsPerConn, cons: make([]connTimes, len(ls.clients))}
	for i := range tr.cons {
		tr.cons[i] = connTimes{first: -1, all: -1}
		ids := make([]uint64, 0, tr.per)
		for _, s := range tr.sessionsOf(i) {
			if s != nil {
				ids = append(ids, s.ID())
			}
		}
		tr.log.Info("bench: connection's sessions", "conn", i, "sessions", ids)
	}
	return tr
}

func (tr *connTrace) sessionsOf(i int) []*client.Session {
	return tr.set.sessions[i*tr.per : min(len(tr.set.sessions), (i+1)*tr.per)]
}

// sample notes, for each connection, whether its first and all of its
// live sessions are safe with a master of a term after before.
func (tr *connTrace) sample(at time.Time, before uint64) {
	if tr == nil {
		return
	}
	now := time.Since(at)
	for i := range tr.cons {
		ct := &tr.cons[i]
		if ct.all >= 0 {
			continue
		}
		n, done := 0, 0
		for _, s := range tr.sessionsOf(i) {
			if s == nil || s.Err() != nil {
				continue
			}
			n++
			if s.State() == client.StateSafe && s.Epoch() > before {
				done++
			}
		}
		if done > 0 && ct.first < 0 {
			ct.first = now
		}
		if done == n {
			ct.all = now
		}
	}
}

// report logs each connection's progress and losses.
func (tr *connTrace) report(at time.Time) {
	if tr == nil {
		return
	}
	for i, ct := range tr.cons {
		lost := 0
		for _, s := range tr.sessionsOf(i) {
			if s != nil && s.Err() != nil {
				lost++
			}
		}
		tr.log.Info("bench: connection through the fail-over", "conn", i, "first_safe", ct.first, "all_safe", ct.all, "lost", lost)
	}
}
