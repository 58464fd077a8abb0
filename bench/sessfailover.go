package bench

import (
	"context"
	"fmt"
	"time"
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
