package session

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/lockcell/lockcell/api"
)

// TestStartTakesOverInAnyOrder: Start takes over the same sessions the same
// way whatever the order of their IDs (a new master's scan yields them in
// ascending order): each gets the full fail-over lease and one fail-over
// event of its own, and they expire in ID order when nobody renews them.
func TestStartTakesOverInAnyOrder(t *testing.T) {
	const n = 300
	asc := make([]ID, n)
	for i := range asc {
		asc[i] = ID(10 + 3*i)
	}
	shuffled := slices.Clone(asc)
	rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	desc := slices.Clone(asc)
	slices.Reverse(desc)
	for name, order := range map[string][]ID{"ascending": asc, "shuffled": shuffled, "descending": desc} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := Config{Epoch: 9}
				m := newManager(t, cfg, true, order...)
				m.mu.Lock()
				end := m.clock.Now().Add(m.cfg.MaxLease)
				if len(m.mu.sessions) != n || len(m.mu.leases) != n || m.mu.failoverCount != n {
					t.Fatalf("%d sessions, %d filed, %d fail-overs pending; want %d each",
						len(m.mu.sessions), len(m.mu.leases), m.mu.failoverCount, n)
				}
				m.mu.leases.check()
				for _, id := range asc {
					s := m.mu.sessions[id]
					want := []api.Event{{Kind: api.EventMasterFailover, Seq: 1, Epoch: 9}}
					if s == nil || s.leaseEnd != end || s.failoverSeq != 1 || !slices.Equal(s.q.events, want) {
						t.Fatalf("session %d: %+v; want lease end %v and one fail-over event", id, s, end)
					}
				}
				m.mu.Unlock()
				sleep(m.cfg.MaxLease + early)
				if got := ids(drain(m)); !slices.Equal(got, asc) {
					t.Fatalf("expired %v; want every session in ID order", got)
				}
			})
		})
	}
}

// TestStartRefusesRepeats: an ID listed twice, adjacent in an otherwise
// ascending list or anywhere in another, fails Start and changes nothing.
func TestStartRefusesRepeats(t *testing.T) {
	for _, list := range [][]ID{{1, 2, 2, 3}, {3, 1, 3}, {5, 5}} {
		m, err := New(Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(true, list); !errors.Is(err, ErrDuplicateSession) {
			t.Fatalf("Start(%v): %v; want ErrDuplicateSession", list, err)
		}
		if len(m.mu.sessions) != 0 || len(m.mu.leases) != 0 || m.mu.failoverCount != 0 || m.mu.state != stateNew {
			t.Fatalf("Start(%v) failed but changed the Manager", list)
		}
		m.Stop()
	}
}

// TestTakenOverEventsStayApart: the fail-over events of sessions taken
// over together stay each session's own: a later event queued for one, or
// its acknowledgement, leaves its neighbours' events as they were.
func TestTakenOverEventsStayApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{Epoch: 4}, true, 1, 2, 3)
		ev := api.Event{Kind: api.EventContentsModified, Path: "/t/x", Handle: 7, Generation: 2}
		if err := m.Publish(2, ev); err != nil {
			t.Fatal(err)
		}
		failover := api.Event{Kind: api.EventMasterFailover, Seq: 1, Epoch: 4}
		check := func(when string, want2 []api.Event) {
			t.Helper()
			m.mu.Lock()
			defer m.mu.Unlock()
			for id, want := range map[ID][]api.Event{1: {failover}, 2: want2, 3: {failover}} {
				if got := m.mu.sessions[id].q.events; !slices.Equal(got, want) {
					t.Fatalf("%s: session %d holds %+v; want %+v", when, id, got, want)
				}
			}
		}
		ev.Seq = 2
		check("after a publish to session 2", []api.Event{failover, ev})
		r, ok := returned(goKeepAlive(t.Context(), m, 2, 1))
		if !ok || r.err != nil {
			t.Fatalf("KeepAlive(2, ack 1): returned %v, %v", ok, r.err)
		}
		check("after session 2 acknowledged its fail-over event", []api.Event{ev})
	})
}
