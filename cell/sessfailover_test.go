package cell_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// Targets of TestFailoverKeepsManySessions, in simulated time.
const (
	// failoverSessions is how many sessions the cell holds across the
	// kill (LOCKCELL_FAILOVER_SESSIONS overrides it, to try the fail-over
	// at a larger size by hand), failoverClients the client processes
	// (one connection each) they are spread over.
	failoverSessions = 3000
	failoverClients  = 6
	// failoverSettle bounds the time from the kill until every session
	// has heard from the new master: its master lease running out (under
	// a second), an election and the KeepAlive storm of every session at
	// once. It is well inside a session lease (12 s): no client needs its
	// grace period.
	failoverSettle = 5 * time.Second
	// failoverKeepAlives bounds the KeepAlives the new master serves per
	// session in the storm (the first cadence after it took over): one
	// that brings the session and learns of the fail-over, one that
	// acknowledges it and parks; the rest is margin. A second KeepAlive
	// sent while one already heads for the master, or one per event, goes
	// over it.
	failoverKeepAlives = 2.4
)

// TestFailoverKeepsManySessions: a five-replica cell holds a few thousand
// idle sessions from several clients when its master crashes (no
// hand-over). The new master takes over every session (it finds them in
// the applied state and extends their leases before it serves) and
// absorbs the KeepAlives of all of them arriving at once, with their
// fail-over acknowledgements:
//
//   - no session ends, and none leaves the safe state, at any 50 ms
//     sample from the crash until a session lease after it has passed;
//   - within failoverSettle of the crash every session has been answered
//     by the new master (its epoch is the new master's);
//   - the new master holds every session and expired none;
//   - within the first KeepAlive cadence after the new master took over,
//     it served at most failoverKeepAlives KeepAlives per session (a
//     session's next regular KeepAlive comes a cadence after its
//     acknowledgement parked, so the count is the storm's alone).
//
// Floors: every session is judged at every sample, the master changed,
// and every session had been answered by the new master before the
// KeepAlives were counted.
func TestFailoverKeepsManySessions(t *testing.T) {
	n := failoverSessions
	if v := os.Getenv("LOCKCELL_FAILOVER_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LOCKCELL_FAILOVER_SESSIONS=%q: want a positive count", v)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		sessions := openAcross(t, ctx, c, n, failoverClients)
		old, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := c.Config(old.ID())
		if err != nil {
			t.Fatal(err)
		}
		lease := cfg.SessionLease
		if lease <= 0 {
			lease = 12 * time.Second
		}
		// Settle: every session's KeepAlives have joined their
		// connection's batch.
		time.Sleep(lease / 2)
		oldEpoch := old.Status().Epoch
		if judged := judge(t, sessions, "before the crash", 0); judged != n {
			t.Fatalf("%d sessions on epoch %d before the crash, want %d", judged, oldEpoch, n)
		}

		crashed := time.Now()
		c.Crash(old.ID())
		cadence := cfg.KeepAliveCadence
		if cadence <= 0 {
			cadence = lease / cell.DefaultKeepAliveCadenceDivisor
		}
		var (
			next    *cell.Replica
			settled time.Duration
			samples int
			// took is when next was first seen as master, kaBase its
			// KeepAlives served by then; kaStorm those served in the
			// storm (-1: not counted), stormMoved how many sessions had
			// reached it by the count.
			took       time.Time
			kaBase     float64
			kaStorm    = -1.0
			stormMoved int
		)
		for time.Since(crashed) < lease+2*time.Second {
			time.Sleep(50 * time.Millisecond)
			if next == nil {
				if m := c.Master(); m != nil && m.ID() != old.ID() {
					next = m
					took = time.Now()
					kaBase = metricValue(next.MetricsText(), "lockcell_keepalives_total")
				}
			}
			var epoch uint64
			if next != nil {
				epoch = next.Status().Epoch
			}
			moved := judge(t, sessions, fmt.Sprintf("%v after the crash", time.Since(crashed)), epoch)
			samples++
			if next != nil && kaStorm < 0 && time.Since(took) >= cadence*9/10 {
				kaStorm = metricValue(next.MetricsText(), "lockcell_keepalives_total") - kaBase
				stormMoved = moved
			}
			if settled == 0 && next != nil && moved == n {
				settled = time.Since(crashed)
			}
		}
		if next == nil {
			t.Fatalf("no replica but the crashed %d became master", old.ID())
		}
		st := next.Status()
		expiries := metricValue(next.MetricsText(), "lockcell_session_expiries_total")
		t.Logf("replica %d crashed holding %d sessions; replica %d (epoch %d) answered all of them %v after the crash; it holds %d sessions and expired %v; %d samples",
			old.ID(), n, next.ID(), st.Epoch, settled, st.Sessions, expiries, samples)
		if st.Epoch == oldEpoch {
			t.Fatalf("the new master serves epoch %d, the crashed master's", st.Epoch)
		}
		if settled == 0 || settled > failoverSettle {
			t.Errorf("every session answered by the new master %v after the crash (0: never); want within %v", settled, failoverSettle)
		}
		if st.Sessions != n || expiries != 0 {
			t.Errorf("the new master holds %d sessions and expired %v; want %d and none", st.Sessions, expiries, n)
		}
		t.Logf("the new master served %.0f KeepAlives (%.2f per session) in the %v after it took over",
			kaStorm, kaStorm/float64(n), cadence*9/10)
		if kaStorm < 0 || stormMoved != n {
			t.Fatalf("KeepAlives counted with %d of %d sessions at the new master (count %v); want all", stormMoved, n, kaStorm)
		}
		if per := kaStorm / float64(n); per > failoverKeepAlives {
			t.Errorf("the new master served %.2f KeepAlives per session in the storm, want at most %v", per, failoverKeepAlives)
		}
		c.Restart(old.ID())
	})
}

// openAcross opens n sessions spread over clients client connections (one
// principal each), 32 CreateSessions in flight per client.
func openAcross(t *testing.T, ctx context.Context, c *celltest.Cell, n, clients int) []*client.Session {
	t.Helper()
	out := make([]*client.Session, n)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		fail atomic.Pointer[error]
	)
	for k := range clients {
		cl := c.Dial(ctx, c.ClientConfig("", fmt.Sprintf("p%d", k)))
		for range 32 {
			wg.Go(func() {
				for {
					i := int(next.Add(1)) - 1
					if i >= n || fail.Load() != nil {
						return
					}
					s, err := cl.NewSession(ctx)
					if err != nil {
						err = fmt.Errorf("session %d: %w", i, err)
						fail.Store(&err)
						return
					}
					out[i] = s
				}
			})
		}
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		t.Fatal(*err)
	}
	return out
}

// judge fails the test unless every session is alive and safe, and
// returns how many have heard from the master of epoch (0: count none).
func judge(t *testing.T, sessions []*client.Session, when string, epoch uint64) int {
	t.Helper()
	moved, judged := 0, 0
	for i, s := range sessions {
		if err := s.Err(); err != nil {
			t.Fatalf("%s: session %d (%d of %d) ended: %v", when, s.ID(), i, len(sessions), err)
		}
		if st := s.State(); st != client.StateSafe {
			t.Fatalf("%s: session %d (%d of %d) is %v, want safe", when, s.ID(), i, len(sessions), st)
		}
		judged++
		if epoch == 0 || s.Epoch() == epoch {
			moved++
		}
	}
	if judged != len(sessions) {
		t.Fatalf("%s: judged %d sessions of %d", when, judged, len(sessions))
	}
	return moved
}

// silenced is a client socket that can be made to send nothing (a client
// process that died without closing its sessions).
type silenced struct {
	net.PacketConn
	mute *atomic.Bool
}

func (s silenced) WriteTo(p []byte, addr net.Addr) (int, error) {
	if s.mute.Load() {
		return len(p), nil
	}
	return s.PacketConn.WriteTo(p, addr)
}

// TestManyExpiriesAtOnce: a client holding hundreds of sessions falls
// silent, so the master decides all of their expiries in the same instant
// (their KeepAlives travelled in one batch, so their leases end together),
// as a new master does for every session whose client did not reach it in
// a fail-over storm. The Paxos core here queues at most 64 commands, far
// fewer than the expiries: the master must pace its ExpireSession commands
// and retry those the core refuses as saturated, so that every session
// ends in the replicated state (its locks freed), rather than leave most
// of them, dead to their client, for a later master to expire.
//
// Floors: the master decided every expiry, and the sessions were there
// to expire.
func TestManyExpiriesAtOnce(t *testing.T) {
	const n = 400
	synctest.Test(t, func(t *testing.T) {
		// Sixteen commands per slot, one slot in flight: the core queues
		// 4*1*16 = 64 commands at most.
		lines := &expiryLines{}
		c := celltest.Start(t, celltest.Options{Tune: func(cfg *cell.Config) { cfg.MaxBatch = 16 },
			Logger: slog.New(lines)})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		var mute atomic.Bool
		cfg := c.ClientConfig("", "silent")
		cfg.PacketConn = func() (net.PacketConn, error) {
			pc, err := c.PacketConn()
			if err != nil {
				return nil, err
			}
			return silenced{pc, &mute}, nil
		}
		cl := c.Dial(ctx, cfg)

		for range n {
			if _, err := cl.NewSession(ctx); err != nil {
				t.Fatal(err)
			}
		}
		m, err := c.WaitMaster(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Let every session's KeepAlive join the connection's batch.
		time.Sleep(cell.DefaultSessionLease / 2)
		if got := m.Status().Sessions; got != n {
			t.Fatalf("the master holds %d sessions before the silence, want %d", got, n)
		}
		mute.Store(true)
		silent := time.Now()
		for m.Status().Sessions > 0 && time.Since(silent) < 2*cell.DefaultSessionLease {
			time.Sleep(100 * time.Millisecond)
		}
		left := m.Status().Sessions
		expiries := metricValue(m.MetricsText(), "lockcell_session_expiries_total")
		t.Logf("%v after its client fell silent the master decided %v expiries; %d of %d sessions left", time.Since(silent), expiries, left, n)
		if left != 0 {
			t.Fatalf("%d of %d sessions still at the master %v after their client fell silent (their ExpireSession commands failed)",
				left, n, time.Since(silent))
		}
		if expiries != n {
			t.Fatalf("the master decided %v expiries, want %d", expiries, n)
		}
		if c.Master() != m {
			t.Fatal("the master changed")
		}
		// The log names the first expiries of each second one by one and
		// sums up the rest: every expiry is accounted for, in a few lines.
		time.Sleep(2 * time.Second) // the last summary ends its second
		one, summed, summaries := lines.counts()
		t.Logf("expiries logged: %d one by one, %d in %d summary lines", one, summed, summaries)
		if one+summed != n {
			t.Fatalf("the log accounts for %d expiries (%d one by one, %d summed), want %d", one+summed, one, summed, n)
		}
		if one+summaries > n/4 {
			t.Fatalf("%d expiries took %d log lines (%d one by one, %d summaries), want at most %d", n, one+summaries, one, summaries, n/4)
		}
	})
}

// expiryLines is a slog.Handler counting the master's expiry log lines:
// those naming one session, and the summaries with how many they sum up.
type expiryLines struct {
	mu                   sync.Mutex
	one, summed, summary int
}

func (h *expiryLines) Enabled(context.Context, slog.Level) bool { return true }
func (h *expiryLines) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *expiryLines) WithGroup(string) slog.Handler            { return h }

func (h *expiryLines) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch r.Message {
	case "session lease ran out; expiring it":
		h.one++
	case "more sessions' leases ran out; expiring them":
		h.summary++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "sessions" {
				h.summed += int(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

func (h *expiryLines) counts() (one, summed, summaries int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.one, h.summed, h.summary
}
