package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/monotime"
)

// The lease tests run the client against a fakeMaster with a pauseClock:
// the test decides when each KeepAlive is answered and moves the client's
// clock, so the lease's end is known to the nanosecond and every check is
// exact arithmetic, not timing.

const (
	fakeLease = 10 * time.Second
	// fakeDrift is exact in binary, so the test's arithmetic and the
	// client's agree to the nanosecond.
	fakeDrift = 1.0 / 16
)

// shortened is d as the client must count it: d×(1−drift).
func shortened(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (1 - fakeDrift))
}

type fakeSession struct {
	m   *fakeMaster
	clk *pauseClock
	s   *client.Session
	// t0 is the instant the client sent CreateSession.
	t0 monotime.Time
}

// newFakeSession dials the fake master and opens a session (the fake
// answers CreateSession at once, unless answer is set: then answer is
// called with the parked request and the clock, and must answer it).
func newFakeSession(t *testing.T, ctx context.Context, answer func(*pending, *pauseClock)) *fakeSession {
	t.Helper()
	parkCreate := answer != nil
	m := startFakeMaster(t, fakeLease, parkCreate)
	clk := newPauseClock()
	c, err := client.Dial(ctx, m.config(t, fakeDrift, clk))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t0 := clk.Now()
	type result struct {
		s   *client.Session
		err error
	}
	ch := make(chan result, 1)
	go func() {
		s, err := c.NewSession(ctx)
		ch <- result{s, err}
	}()
	if parkCreate {
		select {
		case p := <-m.creates:
			answer(p, clk)
		case <-ctx.Done():
			t.Fatal("CreateSession never reached the master")
		}
	}
	r := recv(t, ctx, "NewSession to return", ch)
	if r.err != nil {
		t.Fatal(r.err)
	}
	return &fakeSession{m: m, clk: clk, s: r.s, t0: t0}
}

// expectLeaseEnd checks that the session is safe, with lock intact, up to
// the last nanosecond before end, and in jeopardy with the lock lost at
// end. It moves the clock to end without firing a timer, so no goroutine of
// the session runs in between: the answers come from the looks alone.
func expectLeaseEnd(t *testing.T, fs *fakeSession, l *client.Lock, end monotime.Time) {
	t.Helper()
	fs.clk.JumpTo(t, end-1)
	if st := fs.s.State(); st != client.StateSafe {
		t.Fatalf("1ns before the lease end %v: state %v, want safe (the lease ends too early)", end.Sub(fs.t0), st)
	}
	if l != nil && l.Err() != nil {
		t.Fatalf("1ns before the lease end: lock lost (%v)", l.Err())
	}
	fs.clk.Jump(1)
	if l != nil {
		if err := l.Err(); !errors.Is(err, client.ErrJeopardy) {
			t.Fatalf("at the lease end %v: lock error %v, want ErrJeopardy (the lease is counted too long)", end.Sub(fs.t0), err)
		}
	}
	if st := fs.s.State(); st != client.StateJeopardy {
		t.Fatalf("at the lease end %v: state %v, want jeopardy (the lease is counted too long)", end.Sub(fs.t0), st)
	}
}

// TestLeaseCountedFromSend: the local lease is counted from when the
// request was sent, not from when its reply arrived: a reply that took 3 s
// to come back proves 3 s less lease than it would if it had been
// immediate. Checked for CreateSession's lease and for a KeepAlive's (which
// also counts the time the master held the long-poll).
func TestLeaseCountedFromSend(t *testing.T) {
	const late = 3 * time.Second
	t.Run("CreateSession", func(t *testing.T) {
		ctx := testCtx(t, 30*time.Second)
		fs := newFakeSession(t, ctx, func(p *pending, clk *pauseClock) {
			// The reply reaches the client 3 s after the request left.
			clk.Jump(late)
			p.reply <- struct{}{}
		})
		expectLeaseEnd(t, fs, nil, fs.t0.Add(shortened(fakeLease)))
	})
	t.Run("KeepAlive", func(t *testing.T) {
		ctx := testCtx(t, 30*time.Second)
		fs := newFakeSession(t, ctx, nil)
		l, err := client.NewMutex(fs.s, "/t/lease").Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ka := fs.m.nextKA(t, ctx) // sent at t0: the clock has not moved
		fs.clk.Jump(late)
		const held = 2 * time.Second
		fs.m.answer(t, ctx, ka, held, fakeLease)
		expectLeaseEnd(t, fs, l, fs.t0.Add(shortened(held+fakeLease)))
	})
}

// TestLeaseShortenedByDrift: the local lease is the proved lease shortened
// by the drift bound (the client's clock may run slow against the
// master's), and by no more: a KeepAlive answered at once with a 16 s lease
// proves 15 s at a drift bound of 1/16.
func TestLeaseShortenedByDrift(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	fs := newFakeSession(t, ctx, nil)
	l, err := client.NewMutex(fs.s, "/t/drift").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ka := fs.m.nextKA(t, ctx)
	fs.m.answer(t, ctx, ka, 0, 16*time.Second)
	if shortened(16*time.Second) != 15*time.Second {
		t.Fatalf("test arithmetic: %v", shortened(16*time.Second))
	}
	expectLeaseEnd(t, fs, l, fs.t0.Add(15*time.Second))
}

// TestLockContextExactAfterPause: the process is "paused" past its lease —
// the clock jumps beyond the lease end and no goroutine runs, as in the
// first instant after SIGCONT — and each way of asking whether the lock is
// still held, asked first, says it is lost; then all the others agree.
func TestLockContextExactAfterPause(t *testing.T) {
	done := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	looks := []struct {
		name string
		// lost reports whether the look saw the lock lost; it is the
		// first look after the pause.
		lost func(t *testing.T, fs *fakeSession, m *client.Mutex, l *client.Lock) bool
	}{
		{"Context.Err", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool {
			return l.Context().Err() != nil
		}},
		{"Context.Done", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool {
			return done(l.Context().Done())
		}},
		{"Lock.Done", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool { return done(l.Done()) }},
		{"context.Cause", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool {
			return errors.Is(context.Cause(l.Context()), client.ErrJeopardy)
		}},
		{"Lock.Err", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool { return l.Err() != nil }},
		{"Mutex.Held", func(_ *testing.T, _ *fakeSession, m *client.Mutex, _ *client.Lock) bool { return m.Held() == nil }},
		{"Session.State", func(_ *testing.T, fs *fakeSession, _ *client.Mutex, _ *client.Lock) bool {
			return fs.s.State() != client.StateSafe
		}},
		{"derived context", func(_ *testing.T, _ *fakeSession, _ *client.Mutex, l *client.Lock) bool {
			// A context derived now starts out cancelled.
			d, cancel := context.WithCancel(l.Context())
			defer cancel()
			return d.Err() != nil && errors.Is(context.Cause(d), client.ErrJeopardy)
		}},
		{"call", func(t *testing.T, fs *fakeSession, _ *client.Mutex, l *client.Lock) bool {
			// A call waits out jeopardy instead of going out as if the
			// session were safe (the fake master would refuse it).
			cctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			_, err := l.Handle().Stat(cctx)
			return errors.Is(err, context.DeadlineExceeded) && fs.m.refused.Load() == 0
		}},
	}
	for _, look := range looks {
		t.Run(look.name, func(t *testing.T) {
			ctx := testCtx(t, 30*time.Second)
			fs := newFakeSession(t, ctx, nil)
			m := client.NewMutex(fs.s, "/t/pause")
			l, err := m.Lock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			fs.m.nextKA(t, ctx) // parked: no reply will come
			if l.Err() != nil || fs.s.State() != client.StateSafe {
				t.Fatalf("before the pause: lock %v, state %v", l.Err(), fs.s.State())
			}
			fs.clk.JumpTo(t, fs.t0.Add(shortened(fakeLease)))
			if !look.lost(t, fs, m, l) {
				t.Fatalf("first look after a pause past the lease (%s): the lock still looks held", look.name)
			}
			// Everyone else agrees.
			if !done(l.Done()) || l.Context().Err() == nil || !errors.Is(l.Err(), client.ErrJeopardy) ||
				!errors.Is(context.Cause(l.Context()), client.ErrJeopardy) || m.Held() != nil ||
				fs.s.State() != client.StateJeopardy {
				t.Fatalf("after the first look: done %v, err %v, cause %v, held %v, state %v",
					done(l.Done()), l.Context().Err(), context.Cause(l.Context()), m.Held(), fs.s.State())
			}
		})
	}
}

// TestLeaseLapseRaces: a lock lost at a lapse stays lost when the session
// turns safe again; a lock granted in the new lease period is not
// cancelled by the old period's deadline; and a late reply proving less
// lease than the session already has never moves the lease end back.
func TestLeaseLapseRaces(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	fs := newFakeSession(t, ctx, nil)
	m := client.NewMutex(fs.s, "/t/races")
	l1, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fs.m.nextKA(t, ctx) // parked for good
	oldEnd := fs.t0.Add(shortened(fakeLease))
	fs.clk.JumpTo(t, oldEnd)
	if !errors.Is(l1.Err(), client.ErrJeopardy) {
		t.Fatalf("after the lease end: %v", l1.Err())
	}
	// The look woke the loop, which proves a renewal with a pair of
	// KeepAlives sent now.
	tj := fs.clk.Now()
	a, b := fs.m.nextKA(t, ctx), fs.m.nextKA(t, ctx)
	fs.m.answer(t, ctx, a, 0, fakeLease)
	newEnd := tj.Add(shortened(fakeLease))
	if st := fs.s.State(); st != client.StateSafe {
		t.Fatalf("after a renewal in jeopardy: state %v, want safe", st)
	}
	if !errors.Is(l1.Err(), client.ErrJeopardy) || m.Held() != nil {
		t.Fatalf("the lock lost at the lapse came back: %v, held %v", l1.Err(), m.Held())
	}
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Err() != nil || m.Held() != l2 {
		t.Fatalf("a lock granted after the old deadline %v: %v", fs.clk.Now().Sub(oldEnd), l2.Err())
	}
	// b was sent with a, but says the lease is only 1 s: it proves less
	// than the session has, and changes nothing.
	fs.m.answer(t, ctx, b, 0, time.Second)
	expectLeaseEnd(t, fs, l2, newEnd)
	if !errors.Is(l1.Err(), client.ErrJeopardy) {
		t.Fatalf("first lock: %v", l1.Err())
	}
}

// TestLateReplyAfterLapse: a KeepAlive reply that arrives after the local
// lease ran out — the process was paused past the deadline, and the reply
// of a KeepAlive the master had parked is the first thing it handles on
// resuming, before anyone looked — does not revive the lapsed lease. The
// session lapses first (the lock is lost for good, its context cancelled
// with ErrJeopardy, a jeopardy event) and only then is safe again on the
// lease the reply proves, although that lease reaches beyond now.
func TestLateReplyAfterLapse(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	fs := newFakeSession(t, ctx, nil)
	m := client.NewMutex(fs.s, "/t/late")
	l, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ka := fs.m.nextKA(t, ctx) // sent at t0, while the lease ran
	oldEnd := fs.t0.Add(shortened(fakeLease))
	// The pause: past the deadline, no timer fires and nobody looks.
	fs.clk.JumpTo(t, oldEnd.Add(time.Second))
	// The master held the KeepAlive 5 s: the reply proves a lease to
	// t0+(5 s+10 s)(1−drift), well beyond now.
	const held = 5 * time.Second
	newEnd := fs.t0.Add(shortened(held + fakeLease))
	if !newEnd.After(fs.clk.Now()) {
		t.Fatalf("test arithmetic: the proved lease %v ends before now", newEnd.Sub(fs.t0))
	}
	fs.m.answer(t, ctx, ka, held, fakeLease)
	// The reply has been handled (answer waits for its acknowledgement);
	// the first look after it must find the lock lost.
	if err := l.Err(); !errors.Is(err, client.ErrJeopardy) {
		t.Fatalf("a lock whose lease ran out %v before a late reply: error %v, want ErrJeopardy (the reply revived a lapsed lease)",
			fs.clk.Now().Sub(oldEnd), err)
	}
	if l.Context().Err() == nil || !errors.Is(context.Cause(l.Context()), client.ErrJeopardy) || m.Held() != nil {
		t.Fatalf("after the late reply: context %v, cause %v, held %v", l.Context().Err(), context.Cause(l.Context()), m.Held())
	}
	// The session itself is safe again on the fresh lease, and said it
	// had lapsed.
	if st := fs.s.State(); st != client.StateSafe {
		t.Fatalf("after the late reply: state %v, want safe", st)
	}
	var kinds []client.EventKind
	for len(kinds) < 2 {
		select {
		case ev := <-fs.s.Events():
			if ev.Kind == client.EventJeopardy || ev.Kind == client.EventSafe {
				kinds = append(kinds, ev.Kind)
			}
		case <-ctx.Done():
			t.Fatalf("session events %v, want jeopardy then safe", kinds)
		}
	}
	if kinds[0] != client.EventJeopardy || kinds[1] != client.EventSafe {
		t.Fatalf("session events %v, want jeopardy then safe", kinds)
	}
	// A lock taken now holds until the fresh lease's end.
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expectLeaseEnd(t, fs, l2, newEnd)
	if !errors.Is(l.Err(), client.ErrJeopardy) {
		t.Fatalf("the first lock came back: %v", l.Err())
	}
}

// TestSupersededErrorProvesNothing: a master that answers a replaced
// KeepAlive with an Aborted error says nothing of how long it renewed the
// lease (a load extension the client last saw may have ended since), so the
// error extends nothing; only the newer KeepAlive's answer does. Here the
// session's grant was 10 s, the probe pair goes out near the lease end, the
// first of the pair is aborted and the second proves only 1 s: the lease
// ends 1 s (less drift) after the pair was sent, not 10 s.
func TestSupersededErrorProvesNothing(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	fs := newFakeSession(t, ctx, nil)
	l, err := client.NewMutex(fs.s, "/t/superseded").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := fs.m.nextKA(t, ctx) // sent at t0; left parked
	_ = first
	// Past the probe point (the lease end less a sixteenth of the grant),
	// the loop sends two KeepAlives at once.
	sent := fs.t0.Add(shortened(fakeLease) - fakeLease/16 + time.Millisecond)
	fs.clk.Advance(sent.Sub(fs.clk.Now()))
	aborted := fs.m.nextKA(t, ctx)
	aborted.reply <- &api.Error{Code: api.Aborted, Msg: "a newer KeepAlive of this session replaced this one"}
	newer := fs.m.nextKA(t, ctx)
	fs.m.answer(t, ctx, newer, 0, time.Second)
	// One more round trip, so the aborted answer has surely been handled.
	fs.m.answer(t, ctx, fs.m.nextKA(t, ctx), 0, time.Second)
	expectLeaseEnd(t, fs, l, sent.Add(shortened(time.Second)))
}
