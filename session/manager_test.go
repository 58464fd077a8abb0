package session

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.populate()
	if err := c.validate(); err != nil {
		t.Fatalf("zero Config invalid: %v", err)
	}
	if c.Lease != 12*time.Second || c.MaxLease != 12*time.Second || c.KeepAliveEarly != 1500*time.Millisecond ||
		c.MaxEvents != 1024 || c.Clock == nil || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	// KeepAliveEarly follows a configured Lease.
	if c := (Config{Lease: 8 * time.Second}).populate(); c.KeepAliveEarly != time.Second || c.MaxLease != 8*time.Second {
		t.Fatalf("defaults for an 8s lease: %+v", c)
	}
}

func TestConfigRejectsContradictions(t *testing.T) {
	for name, c := range map[string]Config{
		"negative lease":             {Lease: -time.Second},
		"max lease below lease":      {Lease: 20 * time.Second, MaxLease: 15 * time.Second},
		"negative max lease":         {MaxLease: -1},
		"early not below lease":      {Lease: 5 * time.Second, KeepAliveEarly: 5 * time.Second},
		"negative early":             {KeepAliveEarly: -time.Millisecond},
		"queue too small":            {MaxEvents: 1},
		"negative queue":             {MaxEvents: -4},
		"early beyond default lease": {KeepAliveEarly: time.Minute},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("%s: New = %v, want ErrBadConfig", name, err)
		}
	}
}

func TestLifeCycleErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		// Before Start nothing is served.
		if _, err := m.Add(1); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Add before Start: %v", err)
		}
		if _, err := m.KeepAlive(t.Context(), 1, 0); !errors.Is(err, ErrNotServing) {
			t.Fatalf("KeepAlive before Start: %v", err)
		}
		// A bad Start changes nothing: the next good one works.
		if err := m.Start(true, []ID{1, 2, 1}); !errors.Is(err, ErrDuplicateSession) {
			t.Fatalf("Start with a duplicate: %v", err)
		}
		if err := m.Start(false, []ID{1}); err != nil {
			t.Fatalf("Start: %v", err)
		}
		if st := m.Stats(); st.Sessions != 1 || st.FailoverPending != 0 {
			t.Fatalf("stats after Start: %+v", st)
		}
		if err := m.Start(false, nil); !errors.Is(err, ErrAlreadyStarted) {
			t.Fatalf("second Start: %v", err)
		}
		if _, err := m.Add(1); !errors.Is(err, ErrDuplicateSession) {
			t.Fatalf("Add of an existing session: %v", err)
		}
		if err := m.Remove(9); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("Remove of an unknown session: %v", err)
		}
		if _, err := m.KeepAlive(t.Context(), 9, 0); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("KeepAlive of an unknown session: %v", err)
		}
		m.Stop()
		m.Stop() // idempotent
		if err := m.Start(false, nil); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Start after Stop: %v", err)
		}
		if _, ok := <-m.Decisions(); ok {
			t.Fatal("Decisions not closed by Stop")
		}
	})
}

func TestStopBeforeStart(t *testing.T) {
	m, err := New(Config{Clock: monotime.NewManual(0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	m.Stop()
	if _, ok := <-m.Decisions(); ok {
		t.Fatal("Decisions not closed")
	}
}

func TestFailoverDoneAtOnceWithoutFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, failover := range []bool{false, true} {
			m := newManager(t, Config{}, failover) // no existing sessions
			select {
			case <-m.FailoverDone():
			default:
				t.Fatalf("failover=%v with no sessions: FailoverDone not closed", failover)
			}
		}
	})
}

// A session whose expiry is decided stays expired: a KeepAlive that arrives
// after the decision, while the ExpireSession command is still on its way
// through Paxos, must not renew it, and neither may anything else.
func TestLateKeepAliveCannotReviveExpiringSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		sleep(lease)
		if got := ids(drain(m)); !slices.Equal(got, []ID{1}) {
			t.Fatalf("decided %v, want [1]", got)
		}
		// The cell has not applied the expiry yet; the client comes back.
		if _, err := m.KeepAlive(t.Context(), 1, 0); !errors.Is(err, ErrExpired) {
			t.Fatalf("late KeepAlive: %v, want ErrExpired", err)
		}
		if _, err := m.Lease(1); !errors.Is(err, ErrExpired) {
			t.Fatalf("Lease of an expiring session: %v", err)
		}
		if err := m.Publish(1, api.Event{Kind: api.EventHandleInvalid}); !errors.Is(err, ErrExpired) {
			t.Fatalf("Publish to an expiring session: %v", err)
		}
		if got := m.Expired(monotime.Now().Add(time.Hour)); len(got) != 0 {
			t.Fatalf("an expiring session is due again: %v", got)
		}
		sleep(time.Hour)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("expiry decided twice: %v", got)
		}
		if st := m.Stats(); st.Expiring != 1 || st.Expiries != 1 {
			t.Fatalf("stats: %+v", st)
		}
		// Applied: the cell removes it.
		if err := m.Remove(1); err != nil {
			t.Fatal(err)
		}
		if _, err := m.KeepAlive(t.Context(), 1, 0); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("KeepAlive after Remove: %v", err)
		}
	})
}

// Remove (the close or expiry was applied) ends a parked KeepAlive with
// ErrExpired.
func TestRemoveEndsParkedKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		ka := goKeepAlive(t.Context(), m, 1, 0)
		sleep(500 * time.Millisecond)
		if err := m.Remove(1); err != nil {
			t.Fatal(err)
		}
		r, ok := returned(ka)
		if !ok || !errors.Is(r.err, ErrExpired) {
			t.Fatalf("parked KeepAlive after Remove: %+v (returned %v)", r, ok)
		}
		if st := m.Stats(); st.Sessions != 0 || st.Parked != 0 {
			t.Fatalf("stats after Remove: %+v", st)
		}
	})
}

// TestKeepAliveSuperseded: a parked KeepAlive replaced by a newer one is
// answered at once, without events, with the lease as the newer one's
// arrival renewed it, counted from that arrival; the newer one is answered
// on its own schedule. The superseded answer is a lease proof the client
// relies on, so its length must be what the master holds, also after a load
// extension ended between the two arrivals.
func TestKeepAliveSuperseded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		if err := m.Publish(1, api.Event{Kind: api.EventChildAdded, Path: "/ls/d", Child: "x"}); err != nil {
			t.Fatal(err)
		}
		// Acknowledge the event so both KeepAlives park.
		if r, err := m.KeepAlive(t.Context(), 1, 0); err != nil || len(r.Events) != 1 {
			t.Fatalf("KeepAlive with a pending event: %+v, %v", r, err)
		}
		first := goKeepAlive(t.Context(), m, 1, 1)
		sleep(time.Second)
		arrived := monotime.Now()
		second := goKeepAlive(t.Context(), m, 1, 1)
		r, ok := returned(first)
		if !ok || r.err != nil || !r.reply.Superseded {
			t.Fatalf("first KeepAlive: %+v (returned %v), want a Superseded reply", r, ok)
		}
		if r.reply.At != arrived || r.reply.Held != time.Second || r.reply.LeaseTimeout != lease || len(r.reply.Events) != 0 {
			t.Fatalf("superseded reply at %v held %v lease %v events %v, want at the second's arrival %v, held 1s, lease %v, no events",
				r.reply.At, r.reply.Held, r.reply.LeaseTimeout, r.reply.Events, arrived, lease)
		}
		if st := m.Stats(); st.Parked != 1 {
			t.Fatalf("Parked = %d, want 1", st.Parked)
		}
		// The second one is the one answered, timed from its own arrival.
		sleep(lease - early - 1)
		if _, ok := returned(second); ok {
			t.Fatal("second KeepAlive answered early")
		}
		sleep(1)
		if r, ok := returned(second); !ok || r.err != nil || r.reply.Superseded || r.reply.Held != lease-early {
			t.Fatalf("second KeepAlive: %+v (returned %v), want held %v", r, ok, lease-early)
		}
	})
	t.Run("extension ended", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const ext = 6 * time.Second
			m := newManager(t, Config{MaxLease: lease + ext}, false)
			if err := m.SetLeaseExtension(ext); err != nil {
				t.Fatal(err)
			}
			mustAdd(t, m, 1)
			t0 := monotime.Now()
			first := goKeepAlive(t.Context(), m, 1, 0) // renews to t0+lease+ext
			if err := m.SetLeaseExtension(0); err != nil {
				t.Fatal(err)
			}
			sleep(time.Second)
			second := goKeepAlive(t.Context(), m, 1, 0) // renews to t0+1s+lease: less
			r, ok := returned(first)
			if !ok || r.err != nil || !r.reply.Superseded {
				t.Fatalf("first KeepAlive: %+v (returned %v), want a Superseded reply", r, ok)
			}
			held, err := m.Lease(1)
			if err != nil {
				t.Fatal(err)
			}
			if end := r.reply.At.Add(r.reply.LeaseTimeout); end != t0.Add(lease+ext) || held != r.reply.LeaseTimeout {
				t.Fatalf("superseded reply proves a lease to %v, master holds %v from now; want t0+%v",
					end.Sub(t0), held, lease+ext)
			}
			_ = second
		})
	})
}

func TestKeepAliveBadAckChangesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		if err := m.Publish(1, api.Event{Kind: api.EventChildAdded, Path: "/ls/d", Child: "x"}); err != nil {
			t.Fatal(err)
		}
		sleep(5 * time.Second)
		if _, err := m.KeepAlive(t.Context(), 1, 2); !errors.Is(err, ErrBadAck) {
			t.Fatalf("ack beyond the last event: %v, want ErrBadAck", err)
		}
		if got, _ := m.Lease(1); got != lease-5*time.Second {
			t.Fatalf("a refused KeepAlive renewed the lease: %v left", got)
		}
		if st := m.Stats(); st.EventsQueued != 1 || st.KeepAlives != 0 {
			t.Fatalf("a refused KeepAlive changed state: %+v", st)
		}
	})
}

func TestPublishRejectsBadEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		for _, k := range []api.EventKind{0, api.EventMasterFailover, api.EventOverflow, 200} {
			if err := m.Publish(1, api.Event{Kind: k}); !errors.Is(err, ErrBadEvent) {
				t.Errorf("Publish kind %v: %v, want ErrBadEvent", k, err)
			}
		}
		if err := m.Publish(2, api.Event{Kind: api.EventLockAcquired}); !errors.Is(err, ErrUnknownSession) {
			t.Errorf("Publish to unknown session: %v", err)
		}
		if st := m.Stats(); st.EventsQueued != 0 {
			t.Fatalf("rejected events were queued: %+v", st)
		}
	})
}

// A lost reply loses no event: events leave the queue only when
// acknowledged, so the client's retry with its old acknowledgement gets them
// again, with the same sequence numbers.
func TestLostReplyRedeliversEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		ka := goKeepAlive(t.Context(), m, 1, 0)
		for _, p := range []string{"/ls/a", "/ls/b"} {
			if err := m.Publish(1, api.Event{Kind: api.EventContentsModified, Path: p}); err != nil {
				t.Fatal(err)
			}
		}
		first, ok := returned(ka)
		if !ok || first.err != nil || len(first.reply.Events) == 0 {
			t.Fatalf("first reply: %+v (returned %v)", first, ok)
		}
		// The reply is lost in the network; the client retries with ack 0.
		sleep(2 * time.Second)
		r, err := m.KeepAlive(t.Context(), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := []api.Event{
			{Kind: api.EventContentsModified, Path: "/ls/a", Seq: 1},
			{Kind: api.EventContentsModified, Path: "/ls/b", Seq: 2},
		}
		if !slices.Equal(r.Events, want) {
			t.Fatalf("retry got %v, want %v", r.Events, want)
		}
		// A partial acknowledgement keeps the rest.
		r, err = m.KeepAlive(t.Context(), 1, 1)
		if err != nil || !slices.Equal(r.Events, want[1:]) {
			t.Fatalf("after ack 1 got %v, %v; want %v", r.Events, err, want[1:])
		}
		// An old acknowledgement after a newer one changes nothing.
		r, err = m.KeepAlive(t.Context(), 1, 0)
		if err != nil || !slices.Equal(r.Events, want[1:]) {
			t.Fatalf("stale ack got %v, %v; want %v", r.Events, err, want[1:])
		}
	})
}

func TestQueueOverflowBecomesOneMarker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{MaxEvents: 4}, false)
		mustAdd(t, m, 1)
		for i := range 10 {
			if err := m.Publish(1, api.Event{Kind: api.EventContentsModified, Generation: uint64(i + 1)}); err != nil {
				t.Fatal(err)
			}
		}
		st := m.Stats()
		if st.EventsQueued > 4 || st.Overflows == 0 {
			t.Fatalf("stats after 10 events into a queue of 4: %+v", st)
		}
		r, err := m.KeepAlive(t.Context(), 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		// Generations 1-4 (Seq 1-4) overflow into marker 5, generation 5 is
		// Seq 6; then 5-7 (Seq 6-8) overflow into marker 9, and generations
		// 8-10 follow as Seq 10-12: never more than 4 queued.
		want := []api.Event{
			{Kind: api.EventOverflow, Seq: 9},
			{Kind: api.EventContentsModified, Seq: 10, Generation: 8},
			{Kind: api.EventContentsModified, Seq: 11, Generation: 9},
			{Kind: api.EventContentsModified, Seq: 12, Generation: 10},
		}
		if !slices.Equal(r.Events, want) {
			t.Fatalf("reply after overflow: %v, want %v", r.Events, want)
		}
	})
}

func TestContextEndsParkedKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		ctx, cancel := context.WithCancel(t.Context())
		ka := goKeepAlive(ctx, m, 1, 0)
		sleep(time.Second)
		cancel()
		r, ok := returned(ka)
		if !ok || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled KeepAlive: %+v (returned %v)", r, ok)
		}
		if st := m.Stats(); st.Parked != 0 {
			t.Fatalf("a cancelled KeepAlive is still parked: %+v", st)
		}
		// The renewal on arrival stands.
		if got, _ := m.Lease(1); got != lease-time.Second {
			t.Fatalf("lease after a cancelled KeepAlive: %v", got)
		}
		if _, err := m.KeepAlive(ctx, 1, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("KeepAlive with a dead context: %v", err)
		}
	})
}

// After a fail-over the existing leases end at MaxLease; a session created
// later with a 12 s lease must still be decided on time, so Add must wake the
// expiry loop sleeping towards the 60 s deadline.
func TestAddWakesExpiryLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{MaxLease: ChubbyLoadedLease}, true, 1)
		sleep(time.Second)
		mustAdd(t, m, 2)
		sleep(lease)
		if got := ids(drain(m)); !slices.Equal(got, []ID{2}) {
			t.Fatalf("decided %v at 13s, want [2]", got)
		}
	})
}

func TestSetLeaseExtensionBounds(t *testing.T) {
	m, err := New(Config{MaxLease: 30 * time.Second, Clock: monotime.NewManual(0), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	for _, d := range []time.Duration{-1, 18*time.Second + 1} {
		if err := m.SetLeaseExtension(d); !errors.Is(err, ErrBadConfig) {
			t.Errorf("SetLeaseExtension(%v) = %v, want ErrBadConfig", d, err)
		}
	}
	if err := m.SetLeaseExtension(18 * time.Second); err != nil {
		t.Fatal(err)
	}
	if got := m.Stats().LeaseExtension; got != 18*time.Second {
		t.Fatalf("LeaseExtension = %v", got)
	}
}

// The Manager runs on any injected clock: here a manual one. The bubble only
// lets the test wait, deterministically, until goroutines have parked.
func TestManualClockKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := monotime.NewManual(1000)
		m := newManager(t, Config{Clock: clk}, false)
		if _, err := m.Add(1); err != nil {
			t.Fatal(err)
		}
		ka := goKeepAlive(t.Context(), m, 1, 0)
		// The expiry loop's timer and the parked KeepAlive's.
		if clk.Armed() != 2 {
			t.Fatalf("Armed = %d, want 2", clk.Armed())
		}
		clk.Advance(lease - early - 1)
		if _, ok := returned(ka); ok {
			t.Fatal("KeepAlive answered early")
		}
		clk.Advance(1)
		r, ok := returned(ka)
		if !ok || r.err != nil || r.reply.LeaseTimeout != lease {
			t.Fatalf("reply %+v (returned %v), want a %v lease", r, ok, lease)
		}
		// No KeepAlive follows: the lease runs out 12 s after the reply.
		clk.Advance(lease - 1)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("decided %v early", got)
		}
		clk.Advance(1)
		got := drain(m)
		if len(got) != 1 || got[0].Session != 1 || got[0].LeaseEnd != monotime.Time(1000).Add(2*lease-early) {
			t.Fatalf("decisions %+v", got)
		}
	})
}
