package session

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"testing/quick"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// refLeases is the dumb reference: a map of lease ends, scanned in full.
type refLeases map[ID]monotime.Time

func (r refLeases) due(now monotime.Time) []ID {
	type e struct {
		id  ID
		end monotime.Time
	}
	var es []e
	for id, end := range r {
		if end <= now {
			es = append(es, e{id, end})
		}
	}
	slices.SortFunc(es, func(a, b e) int {
		if c := cmp.Compare(a.end, b.end); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})
	var out []ID
	for _, x := range es {
		out = append(out, x.id)
	}
	return out
}

func (r refLeases) next(now monotime.Time) (monotime.Time, bool) {
	var best monotime.Time
	found := false
	for _, end := range r {
		if !found || end < best {
			best, found = end, true
		}
	}
	if !found {
		return 0, false
	}
	return max(best, now), true
}

// indexOp is one random operation on a leaseIndex.
type indexOp struct {
	Kind uint8
	ID   uint8
	D    uint16 // milliseconds
}

// TestLeaseIndexMatchesReference drives the heap and the reference with the
// same random operations (renewals only move lease ends, as the Manager's
// do, leaving stale keys in the lazy heap) and compares due and next at now
// and at a probe instant after every step, and what popDue takes out with
// what the reference finds due.
func TestLeaseIndexMatchesReference(t *testing.T) {
	f := func(ops []indexOp, probe uint16) bool {
		var idx leaseIndex
		ref := refLeases{}
		live := map[ID]*sess{}
		now := monotime.Time(0)
		for i, op := range ops {
			id := ID(op.ID % 16)
			d := time.Duration(op.D) * time.Millisecond
			s := live[id]
			switch op.Kind % 6 {
			case 0: // add
				if s == nil {
					s = &sess{id: id, leaseEnd: now.Add(d)}
					idx.add(s)
					live[id], ref[id] = s, s.leaseEnd
				}
			case 1: // renew: never backwards, no heap operation
				if s != nil {
					s.leaseEnd = max(s.leaseEnd, now.Add(d))
					ref[id] = s.leaseEnd
				}
			case 2: // renew far beyond the keys of the others
				if s != nil {
					s.leaseEnd = max(s.leaseEnd, now.Add(d+30*time.Second))
					ref[id] = s.leaseEnd
				}
			case 3: // remove
				if s != nil {
					idx.remove(s)
					delete(live, id)
					delete(ref, id)
				}
			case 4: // advance time
				now = now.Add(d)
			case 5: // decide what is due
				var got []ID
				for _, s := range idx.popDue(now) {
					if s.heapIdx != -1 {
						t.Logf("step %d: popDue left session %d at heap position %d", i, s.id, s.heapIdx)
						return false
					}
					got = append(got, s.id)
					delete(live, s.id)
				}
				want := ref.due(now)
				if !slices.Equal(got, want) {
					t.Logf("step %d %+v: popDue(%d) = %v, reference %v", i, op, now, got, want)
					return false
				}
				for _, id := range want {
					delete(ref, id)
				}
			}
			idx.check()
			for _, at := range []monotime.Time{now, now.Add(time.Duration(probe) * time.Millisecond)} {
				var got []ID
				for _, s := range idx.due(at) {
					got = append(got, s.id)
				}
				if want := ref.due(at); !slices.Equal(got, want) {
					t.Logf("step %d %+v: due(%d) = %v, reference %v", i, op, at, got, want)
					return false
				}
				gn, gok := idx.next(at)
				wn, wok := ref.next(at)
				if gn != wn || gok != wok {
					t.Logf("step %d %+v: next(%d) = %d,%v, reference %d,%v", i, op, at, gn, gok, wn, wok)
					return false
				}
			}
		}
		return true
	}
	if err := quick.Check(f, &quick.Config{MaxCount: 500}); err != nil {
		t.Error(err)
	}
}

// TestManagerDeadlinesMatchReference drives a whole Manager, its expiry
// goroutine included, with random creations, answered KeepAlives, removals,
// load-extension changes and time steps on the fake clock, and checks after
// every step that the decisions made (their order and lease ends), Expired,
// NextDeadline and Lease agree with a naive model.
func TestManagerDeadlinesMatchReference(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runDeadlineModel(t, seed) })
		})
	}
}

func runDeadlineModel(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0))
	const maxLease = 60 * time.Second
	m := newManager(t, Config{MaxLease: maxLease}, true, 1, 2, 3)
	start := monotime.Now()
	ref := refLeases{1: start.Add(maxLease), 2: start.Add(maxLease), 3: start.Add(maxLease)}
	acked := map[ID]uint64{1: 0, 2: 0, 3: 0} // what the model client has acknowledged
	last := map[ID]uint64{1: 1, 2: 1, 3: 1}  // the fail-over event is Seq 1
	ext := time.Duration(0)
	nextID := ID(4)
	decided, answered := 0, 0
	for step := range 300 {
		now := monotime.Now()
		ids := make([]ID, 0, len(ref))
		for id := range ref {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		var what string
		switch k := rng.IntN(10); {
		case k < 2:
			what = fmt.Sprintf("add %d", nextID)
			got, err := m.Add(nextID)
			if err != nil || got != DefaultLease+ext {
				t.Fatalf("step %d: Add = %v, %v; want %v", step, got, err, DefaultLease+ext)
			}
			ref[nextID] = now.Add(DefaultLease + ext)
			acked[nextID], last[nextID] = 0, 0
			nextID++
		case k < 5 && len(ids) > 0:
			// A KeepAlive answered at once: an event is pending.
			id := ids[rng.IntN(len(ids))]
			what = fmt.Sprintf("keepalive %d", id)
			if err := m.Publish(id, api.Event{Kind: api.EventChildAdded, Path: "/ls/d", Child: "c"}); err != nil {
				t.Fatalf("step %d: Publish(%d): %v", step, id, err)
			}
			last[id]++
			r, err := m.KeepAlive(t.Context(), id, acked[id])
			if err != nil || len(r.Events) == 0 || r.Events[len(r.Events)-1].Seq != last[id] {
				t.Fatalf("step %d: KeepAlive(%d) = %+v, %v", step, id, r, err)
			}
			acked[id] = last[id] - uint64(rng.IntN(2)) // sometimes the reply is "lost"
			answered++
			ref[id] = max(ref[id], now.Add(DefaultLease+ext))
		case k < 6 && len(ids) > 0:
			id := ids[rng.IntN(len(ids))]
			what = fmt.Sprintf("remove %d", id)
			if err := m.Remove(id); err != nil {
				t.Fatalf("step %d: Remove(%d): %v", step, id, err)
			}
			delete(ref, id)
		case k < 7:
			ext = []time.Duration{0, 10 * time.Second, maxLease - DefaultLease}[rng.IntN(3)]
			what = fmt.Sprintf("extension %v", ext)
			if err := m.SetLeaseExtension(ext); err != nil {
				t.Fatal(err)
			}
		default:
			d := time.Duration(rng.IntN(20000)) * time.Millisecond
			what = fmt.Sprintf("sleep %v", d)
			sleep(d)
		}
		now = monotime.Now()

		// The decisions made are exactly the model's due sessions, in order.
		var want []Decision
		for _, id := range ref.due(now) {
			want = append(want, Decision{Session: id, LeaseEnd: ref[id]})
		}
		got := drain(m)
		if !slices.Equal(got, want) {
			t.Fatalf("step %d (%s): decisions %v, model %v", step, what, got, want)
		}
		decided += len(got)
		for _, d := range got {
			if err := m.Remove(d.Session); err != nil {
				t.Fatal(err)
			}
			delete(ref, d.Session)
		}
		for _, probe := range []time.Duration{0, time.Second, 13 * time.Second, maxLease} {
			at := now.Add(probe)
			if got, want := m.Expired(at), ref.due(at); !slices.Equal(got, want) {
				t.Fatalf("step %d (%s): Expired(now+%v) = %v, model %v", step, what, probe, got, want)
			}
			gn, gok := m.NextDeadline(at)
			wn, wok := ref.next(at)
			if gn != wn || gok != wok {
				t.Fatalf("step %d (%s): NextDeadline(now+%v) = %d,%v, model %d,%v", step, what, probe, gn, gok, wn, wok)
			}
		}
		for id, end := range ref {
			if got, err := m.Lease(id); err != nil || got != end.Sub(now) {
				t.Fatalf("step %d (%s): Lease(%d) = %v, %v; model %v", step, what, id, got, err, end.Sub(now))
			}
		}
	}
	// The run must have exercised both renewals and expiries.
	if decided < 5 || answered < 20 {
		t.Fatalf("weak run: %d expiries, %d keepalives", decided, answered)
	}
	t.Logf("%d expiries, %d keepalives", decided, answered)
}

// TestRenewedSessionExpiresAtLastDeadline renews one session every second
// for more than three leases while a second session is never renewed. The
// lazy lease index keeps the renewed session filed under stale, earlier
// keys; the session must still expire exactly at the lease end of its last
// renewal (not at any earlier key), and the index must hold one entry per
// live session however often it is renewed.
func TestRenewedSessionExpiresAtLastDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			cadence = time.Second
			rounds  = 40 // > 3 leases of 12 s
		)
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		start := monotime.Now()
		mustAdd(t, m, 1, 2)
		var lastEnd monotime.Time
		maxStale := 0
		sawOther := false
		for round := range rounds {
			ka := goKeepAlive(t.Context(), m, 1, 0)
			sleep(cadence)
			r, ok := returned(ka)
			if !ok || r.err != nil {
				t.Fatalf("round %d: KeepAlive %+v (returned %v)", round, r, ok)
			}
			if r.reply.LeaseTimeout != lease {
				t.Fatalf("round %d: lease %v, want %v", round, r.reply.LeaseTimeout, lease)
			}
			lastEnd = r.reply.At.Add(r.reply.LeaseTimeout)
			for _, d := range drain(m) {
				// Only the unrenewed session 2 may expire, at its first deadline.
				if d.Session != 2 || d.LeaseEnd != start.Add(lease) || monotime.Now() != d.LeaseEnd {
					t.Fatalf("round %d at %v: decision %+v; only session 2 may expire, at %v",
						round, monotime.Now().Sub(start), d, start.Add(lease))
				}
				sawOther = true
			}
			live := 2
			if sawOther {
				live = 1
			}
			entries, stale := m.leaseEntries()
			if entries != live {
				t.Fatalf("round %d: lease index holds %d entries for %d live sessions", round, entries, live)
			}
			maxStale = max(maxStale, stale)
		}
		if !sawOther {
			t.Fatal("session 2 was never decided: the test judged no expiry")
		}
		if maxStale == 0 {
			t.Fatal("no renewal left a stale key: the test never exercised the lazy index")
		}
		// Renewals stop. Session 1 lives until exactly lastEnd.
		if lastEnd != start.Add(rounds*cadence+lease) {
			t.Fatalf("last lease end %v after start, want %v", lastEnd.Sub(start), rounds*cadence+lease)
		}
		sleep(lastEnd.Sub(monotime.Now()) - 1)
		if got := drain(m); len(got) != 0 {
			t.Fatalf("decided %+v at %v, before the last lease end %v", got, monotime.Now().Sub(start), lastEnd.Sub(start))
		}
		if l, err := m.Lease(1); err != nil || l != 1 {
			t.Fatalf("Lease(1) = %v, %v one nanosecond before the end", l, err)
		}
		sleep(1)
		got := drain(m)
		if len(got) != 1 || got[0].Session != 1 || got[0].LeaseEnd != lastEnd {
			t.Fatalf("decisions %+v at the last lease end, want session 1 at %v", got, lastEnd.Sub(start))
		}
		if entries, _ := m.leaseEntries(); entries != 0 {
			t.Fatalf("lease index holds %d entries after every session expired", entries)
		}
	})
}
