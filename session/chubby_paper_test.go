package session

// One test per sentence of "The Chubby lock service for loosely-coupled
// distributed systems" (Burrows, OSDI 2006) that the master's session
// liveness must honour, §2.8 "Sessions and KeepAlives", §2.9 "Fail-overs"
// and §3 "Scaling". Each quotes its sentence and is written init / act /
// check. All run on testing/synctest's fake clock, so 12 s leases and
// 10-minute client loops take no real time.

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// §2.8: "Each session has an associated lease—an interval of time extending
// into the future during which the master guarantees not to terminate the
// session unilaterally. The end of this interval is called the session lease
// timeout."
func TestPaperLeaseGuaranteesNoUnilateralTermination(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{}, false)
		start := monotime.Now()
		mustAdd(t, m, 1)

		// act: stay silent until one nanosecond before the lease timeout.
		sleep(lease - 1)
		// check: nothing decided yet, and the session still answers.
		if got := drain(m); len(got) != 0 {
			t.Fatalf("expiry decided %v before the lease timeout", got)
		}
		if _, err := m.Lease(1); err != nil {
			t.Fatalf("Lease before timeout: %v", err)
		}

		// act: reach the lease timeout.
		sleep(1)
		// check: exactly then the expiry is decided.
		got := drain(m)
		if len(got) != 1 || got[0].Session != 1 || got[0].LeaseEnd != start.Add(lease) {
			t.Fatalf("at the lease timeout got decisions %+v, want session 1 ending at start+12s", got)
		}
	})
}

// §2.8: "The master is free to advance this timeout further into the future,
// but may not move it backwards in time."
func TestPaperLeaseNeverMovesBackwards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init: a loaded master grants 60 s, then load drops back to 12 s.
		m := newManager(t, Config{MaxLease: 60 * time.Second}, false)
		if err := m.SetLeaseExtension(48 * time.Second); err != nil {
			t.Fatal(err)
		}
		if got, _ := m.Add(1); got != 60*time.Second {
			t.Fatalf("Add granted %v, want 60s", got)
		}
		if err := m.SetLeaseExtension(0); err != nil {
			t.Fatal(err)
		}
		sleep(5 * time.Second)

		// act: a KeepAlive answered at once (an event is pending) grants
		// only 12 s from now, which ends before the 60 s lease.
		if err := m.Publish(1, api.Event{Kind: api.EventContentsModified, Path: "/ls/a"}); err != nil {
			t.Fatal(err)
		}
		r, err := m.KeepAlive(t.Context(), 1, 0)
		if err != nil {
			t.Fatal(err)
		}

		// check: the reply and the master keep the later timeout.
		if r.LeaseTimeout != 55*time.Second {
			t.Fatalf("reply carries %v, want the remaining 55s", r.LeaseTimeout)
		}
		sleep(55*time.Second - 1)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("lease moved backwards: expiry %v decided before the 60s timeout", got)
		}
		sleep(1)
		if got := ids(drain(m)); !slices.Equal(got, []ID{1}) {
			t.Fatalf("at the 60s timeout got %v, want [1]", got)
		}
	})
}

// §2.8: "The master advances the lease timeout in three circumstances: on
// creation of the session, when a master fail-over occurs (see below), and
// when it responds to a KeepAlive RPC from the client."
func TestPaperLeaseAdvancedInThreeCircumstances(t *testing.T) {
	t.Run("creation", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newManager(t, Config{}, false)
			sleep(time.Hour) // the Manager's age does not matter
			got, err := m.Add(7)
			if err != nil || got != lease {
				t.Fatalf("Add = %v, %v; want a full %v lease", got, err, lease)
			}
		})
	})
	t.Run("fail-over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The old master's leases are unknown to the new one; the new
			// master's Start is the moment its clients' leases restart.
			sleep(time.Hour)
			m := newManager(t, Config{}, true, 7)
			got, err := m.Lease(7)
			if err != nil || got != lease {
				t.Fatalf("Lease after fail-over = %v, %v; want a full %v", got, err, lease)
			}
		})
	})
	t.Run("keepalive reply", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newManager(t, Config{}, false)
			mustAdd(t, m, 7)
			ka := goKeepAlive(t.Context(), m, 7, 0)
			sleep(lease - early)
			r, ok := returned(ka)
			if !ok || r.err != nil || r.reply.LeaseTimeout != lease {
				t.Fatalf("KeepAlive reply = %+v (returned %v); want a full %v lease", r, ok, lease)
			}
			if got, _ := m.Lease(7); got != lease {
				t.Fatalf("master's lease after the reply = %v, want %v", got, lease)
			}
		})
	})
}

// §2.8: "On receiving a KeepAlive, the master typically blocks the RPC (does
// not allow it to return) until the client's previous lease interval is
// close to expiring."
func TestPaperKeepAliveBlocksUntilLeaseNearlyExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		start := monotime.Now()

		// act
		ka := goKeepAlive(t.Context(), m, 1, 0)

		// check: parked until KeepAliveEarly before the lease end ...
		if st := m.Stats(); st.Parked != 1 {
			t.Fatalf("Parked = %d, want 1", st.Parked)
		}
		sleep(lease - early - 1)
		if _, ok := returned(ka); ok {
			t.Fatal("KeepAlive returned before the lease was close to expiring")
		}
		// ... and answered exactly then.
		sleep(1)
		r, ok := returned(ka)
		if !ok || r.err != nil {
			t.Fatalf("KeepAlive not answered at lease end - %v: %+v", early, r)
		}
		if r.at.Sub(start) != lease-early {
			t.Fatalf("answered after %v, want %v", r.at.Sub(start), lease-early)
		}
	})
}

// §2.8: "The default extension is 12s, but an overloaded master may use
// higher values to reduce the number of KeepAlive calls it must process."
// §3: "Increase lease times from 12s up to around 60s, so that the master
// need process fewer KeepAlive RPCs."
func TestPaperOverloadedMasterUsesLongerLeases(t *testing.T) {
	// keepalivesIn10Min runs a well-behaved client for ten minutes against
	// a master granting lease+ext and counts the KeepAlives it processed.
	keepalivesIn10Min := func(t *testing.T, ext time.Duration) (n uint64, grant time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			m := newManager(t, Config{MaxLease: ChubbyLoadedLease}, false)
			if err := m.SetLeaseExtension(ext); err != nil {
				t.Fatal(err)
			}
			grant, _ = m.Add(1)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
			defer cancel()
			for {
				if _, err := m.KeepAlive(ctx, 1, 0); err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Fatalf("KeepAlive: %v", err)
					}
					break
				}
			}
			n = m.Stats().KeepAlives
		})
		return n, grant
	}
	// init / act
	normal, g0 := keepalivesIn10Min(t, 0)
	loaded, g1 := keepalivesIn10Min(t, ChubbyLoadedLease-DefaultLease)

	// check
	if g0 != 12*time.Second || g1 != 60*time.Second {
		t.Fatalf("grants = %v and %v, want 12s and 60s", g0, g1)
	}
	// A cycle lasts lease-early: 10.5 s at 12 s, 58.5 s at 60 s.
	if normal != 58 || loaded != 11 {
		t.Fatalf("KeepAlives in 10 minutes: %d at 12s, %d at 60s; want 58 and 11", normal, loaded)
	}
}

// §2.8: "The client initiates a new KeepAlive immediately after receiving
// the previous reply. Thus, the client ensures that there is almost always a
// KeepAlive call blocked at the master."
func TestPaperClientAlwaysHasKeepAliveBlocked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)

		// act: a client that always re-issues its KeepAlive at once.
		go func() {
			for {
				if _, err := m.KeepAlive(ctx, 1, 0); err != nil {
					done <- err
					return
				}
			}
		}()

		// check: sampled every 700 ms for ten minutes, a KeepAlive is always
		// parked and the session never expires.
		for range 857 {
			sleep(700 * time.Millisecond)
			synctest.Wait()
			if st := m.Stats(); st.Parked != 1 || st.Expiries != 0 {
				t.Fatalf("at %v: stats %+v, want one parked KeepAlive and no expiry", monotime.Now(), st)
			}
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("client loop ended with %v", err)
		}
		if got := drain(m); len(got) != 0 {
			t.Fatalf("a kept-alive session expired: %v", got)
		}
	})
}

// §2.8: "As well as extending the client's lease, the KeepAlive reply is
// used to transmit events and cache invalidations back to the client. The
// master allows a KeepAlive to return early when an event or invalidation is
// to be delivered."
func TestPaperKeepAliveReturnsEarlyForEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init: a parked KeepAlive.
		m := newManager(t, Config{Epoch: 9}, false)
		mustAdd(t, m, 1)
		ka := goKeepAlive(t.Context(), m, 1, 0)
		sleep(3 * time.Second)

		// act
		ev := api.Event{Kind: api.EventContentsModified, Path: "/ls/cell/f", Generation: 4}
		if err := m.Publish(1, ev); err != nil {
			t.Fatal(err)
		}

		// check: answered at once, with the event and a full new lease.
		r, ok := returned(ka)
		if !ok {
			t.Fatal("parked KeepAlive did not return when an event was published")
		}
		ev.Seq = 1
		if r.err != nil || !slices.Equal(r.reply.Events, []api.Event{ev}) || r.reply.LeaseTimeout != lease || r.reply.Epoch != 9 {
			t.Fatalf("reply = %+v, %v; want event %v, lease %v, epoch 9", r.reply, r.err, ev, lease)
		}
	})
}

// §2.8: "Piggybacking events on KeepAlive replies ensures that clients cannot
// maintain a session without acknowledging cache invalidations, and causes
// all Chubby RPCs to flow from client to master."
func TestPaperEventsPiggybackedUntilAcknowledged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		inv := api.Event{Kind: api.EventContentsModified, Path: "/ls/x"}
		if err := m.Publish(1, inv); err != nil {
			t.Fatal(err)
		}

		// act / check: every lease renewal the client gets while it has not
		// acknowledged the invalidation carries it (a lost reply loses
		// nothing) ...
		for i := range 3 {
			r, err := m.KeepAlive(t.Context(), 1, 0)
			if err != nil || len(r.Events) != 1 || r.Events[0].Seq != 1 || r.Events[0].Path != "/ls/x" {
				t.Fatalf("unacknowledged renewal %d: %+v, %v; want the invalidation again", i, r, err)
			}
			sleep(time.Second)
		}
		// ... and once acknowledged it is gone and the KeepAlive parks.
		ka := goKeepAlive(t.Context(), m, 1, 1)
		if _, ok := returned(ka); ok {
			t.Fatal("KeepAlive acknowledging every event returned at once")
		}
		sleep(lease - early)
		r, ok := returned(ka)
		if !ok || r.err != nil || len(r.reply.Events) != 0 {
			t.Fatalf("after the acknowledgement got %+v (returned %v), want an empty renewal", r, ok)
		}
	})
}

// §2.9: "When a master fails or otherwise loses mastership, it discards its
// in-memory state about sessions, handles, and locks."
func TestPaperMasterLossDiscardsState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1, 2)
		ka := goKeepAlive(t.Context(), m, 1, 0)
		stopAt := monotime.Now()

		// act
		m.Stop()

		// check: the parked KeepAlive returned at once with ErrNotServing,
		// and nothing of the term remains.
		r, ok := returned(ka)
		if !ok || !errors.Is(r.err, ErrNotServing) || r.at != stopAt {
			t.Fatalf("parked KeepAlive after Stop: %+v (returned %v), want ErrNotServing at once", r, ok)
		}
		if _, err := m.KeepAlive(t.Context(), 2, 0); !errors.Is(err, ErrNotServing) {
			t.Fatalf("KeepAlive after Stop: %v", err)
		}
		if _, err := m.Add(3); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Add after Stop: %v", err)
		}
		if st := m.Stats(); st.Sessions != 0 || st.Parked != 0 {
			t.Fatalf("stats after Stop: %+v", st)
		}
	})
}

// §2.9: "The authoritative timer for session leases runs at the master, so
// until a new master is elected the session lease timer is stopped; this is
// legal because it is equivalent to extending the client's lease."
func TestPaperLeaseTimerStoppedWithoutMaster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init: a term with a silent session ends 1 s before its lease does.
		old := newManager(t, Config{}, false)
		mustAdd(t, old, 1)
		sleep(lease - time.Second)
		old.Stop()

		// act: no master for a long time.
		sleep(time.Hour)

		// check: the stopped master decided nothing ...
		if got := drain(old); len(got) != 0 {
			t.Fatalf("a stopped master decided %v", got)
		}
		// ... and the next master's timer starts from its own start.
		m := newManager(t, Config{Epoch: 2}, true, 1)
		sleep(lease - 1)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("new master expired %v before a full lease", got)
		}
		sleep(1)
		if got := ids(drain(m)); !slices.Equal(got, []ID{1}) {
			t.Fatalf("new master decided %v, want [1] after a full lease", got)
		}
	})
}

// §2.9, step 3: "It builds in-memory data structures for sessions and locks
// that are recorded in the database. Session leases are extended to the
// maximum that the previous master may have been using."
func TestPaperFailoverExtendsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init: a cell whose masters may grant up to 60 s under load.
		cfg := Config{MaxLease: ChubbyLoadedLease, Epoch: 3}

		// act: a new master takes over sessions recorded in the database.
		m := newManager(t, cfg, true, 4, 5, 6)

		// check: each has the longest lease the old master may have granted,
		// and nobody expires before it.
		for _, id := range []ID{4, 5, 6} {
			if got, err := m.Lease(id); err != nil || got != ChubbyLoadedLease {
				t.Fatalf("Lease(%d) = %v, %v; want %v", id, got, err, ChubbyLoadedLease)
			}
		}
		sleep(ChubbyLoadedLease - 1)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("expired %v before the old master's longest lease", got)
		}
		sleep(1)
		if got := ids(drain(m)); !slices.Equal(got, []ID{4, 5, 6}) {
			t.Fatalf("decided %v, want [4 5 6]", got)
		}
	})
}

// §2.9, step 5: "It emits a fail-over event to each session; this causes
// clients to flush their caches (because they may have missed
// invalidations), and to warn applications that other events may have been
// lost."
func TestPaperFailoverEventToEverySession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init
		m := newManager(t, Config{Epoch: 42}, true, 1, 2)

		for _, id := range []ID{1, 2} {
			// act: the session's first KeepAlive to the new master.
			r, err := m.KeepAlive(t.Context(), id, 0)

			// check: answered at once with the fail-over event.
			want := []api.Event{{Kind: api.EventMasterFailover, Seq: 1, Epoch: 42}}
			if err != nil || !slices.Equal(r.Events, want) || r.Epoch != 42 {
				t.Fatalf("session %d first KeepAlive: %+v, %v; want %v", id, r, err, want)
			}
		}
		// A session created after the fail-over gets none.
		mustAdd(t, m, 3)
		ka := goKeepAlive(t.Context(), m, 3, 0)
		if r, ok := returned(ka); ok {
			t.Fatalf("a new session's KeepAlive returned at once: %+v", r)
		}
	})
}

// §2.9, step 6: "The master waits until each session acknowledges the
// fail-over event or lets its session expire."
func TestPaperFailoverWaitsForAcks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// init: three sessions: one acknowledges, one goes silent, one is
		// closed.
		m := newManager(t, Config{}, true, 1, 2, 3)
		pending := func() bool {
			select {
			case <-m.FailoverDone():
				return false
			default:
				return true
			}
		}

		// act / check
		if _, err := m.KeepAlive(t.Context(), 1, 0); err != nil { // receives the event
			t.Fatal(err)
		}
		if !pending() || m.Stats().FailoverPending != 3 {
			t.Fatalf("receiving is not acknowledging: pending %d", m.Stats().FailoverPending)
		}
		goKeepAlive(t.Context(), m, 1, 1) // acknowledges, parks
		if !pending() || m.Stats().FailoverPending != 2 {
			t.Fatalf("after one ack: pending %d, want 2", m.Stats().FailoverPending)
		}
		if err := m.Remove(3); err != nil {
			t.Fatal(err)
		}
		if !pending() || m.Stats().FailoverPending != 1 {
			t.Fatalf("after a close: pending %d, want 1", m.Stats().FailoverPending)
		}
		sleep(lease) // session 2 expires; session 1 is kept alive
		if got := ids(drain(m)); !slices.Equal(got, []ID{2}) {
			t.Fatalf("decided %v, want [2]", got)
		}
		if pending() {
			t.Fatalf("FailoverDone not closed after every session acked or expired: %+v", m.Stats())
		}
	})
}
