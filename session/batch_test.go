package session

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
)

// batchResult is the outcome of a KeepAliveBatch run in its own goroutine.
type batchResult struct {
	out []BatchResult
	err error
	at  monotime.Time
}

// goBatch runs KeepAliveBatch for ids (ack 0 each) in a goroutine, after
// letting the bubble settle so that it has returned or parked.
func goBatch(ctx context.Context, m *Manager, ids ...ID) <-chan batchResult {
	entries := make([]BatchEntry, len(ids))
	for i, id := range ids {
		entries[i] = BatchEntry{Session: id}
	}
	ch := make(chan batchResult, 1)
	go func() {
		out := make([]BatchResult, len(entries))
		err := m.KeepAliveBatch(ctx, entries, out)
		ch <- batchResult{out: out, err: err, at: monotime.Now()}
	}()
	synctest.Wait()
	return ch
}

func batchReturned(ch <-chan batchResult) (batchResult, bool) {
	synctest.Wait()
	select {
	case r := <-ch:
		return r, true
	default:
		return batchResult{}, false
	}
}

// leaseEnds returns each session's lease end on the Manager's clock.
func leaseEnds(t *testing.T, m *Manager, ids ...ID) []monotime.Time {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]monotime.Time, len(ids))
	for i, id := range ids {
		s, ok := m.mu.sessions[id]
		if !ok {
			t.Fatalf("session %d unknown", id)
		}
		out[i] = s.leaseEnd
	}
	return out
}

// TestKeepAliveBatchCadence: a batch of sessions parks as one waiter and
// is answered at the cadence, every entry with a full lease from the
// answer and Held the time parked; Parked counts each session once.
func TestKeepAliveBatchCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 50
		cadence := lease / 12
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		ids := make([]ID, n)
		for i := range ids {
			ids[i] = ID(i + 1)
		}
		mustAdd(t, m, ids...)
		sleep(time.Second)
		start := monotime.Now()
		ch := goBatch(t.Context(), m, ids...)
		if st := m.Stats(); st.Parked != n || st.KeepAlives != n || st.Sessions != n || m.Sessions() != n {
			t.Fatalf("after arrival: %+v, want %d parked and counted", st, n)
		}
		sleep(cadence - 1)
		if _, ok := batchReturned(ch); ok {
			t.Fatal("answered before the cadence")
		}
		sleep(1)
		r, ok := batchReturned(ch)
		if !ok || r.err != nil {
			t.Fatalf("not answered at the cadence: %+v", r)
		}
		judged := 0
		for i, res := range r.out {
			if res.Err != nil || res.Reply.LeaseTimeout != lease || res.Reply.Held != cadence || res.Reply.At != start.Add(cadence) {
				t.Fatalf("entry %d: %+v, want lease %v held %v", i, res, lease, cadence)
			}
			judged++
		}
		for i, end := range leaseEnds(t, m, ids...) {
			if end != start.Add(cadence+lease) {
				t.Fatalf("session %d lease ends %v after start, want %v", ids[i], end.Sub(start), cadence+lease)
			}
		}
		if judged != n || m.Stats().Parked != 0 {
			t.Fatalf("judged %d entries, %d still parked", judged, m.Stats().Parked)
		}
	})
}

// TestKeepAliveBatchEventAnswersAll: an event for one session answers its
// whole batch at once; that entry carries the event, and every other entry
// has its lease renewed at that instant too.
func TestKeepAliveBatchEventAnswersAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cadence := lease / 12
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		ids := []ID{1, 2, 3, 4}
		mustAdd(t, m, ids...)
		start := monotime.Now()
		ch := goBatch(t.Context(), m, ids...)
		sleep(cadence / 2)
		if err := m.Publish(3, api.Event{Kind: api.EventChildAdded, Path: "/t", Child: "x"}); err != nil {
			t.Fatal(err)
		}
		r, ok := batchReturned(ch)
		if !ok || r.err != nil {
			t.Fatalf("an event did not answer the batch: %+v", r)
		}
		answered := start.Add(cadence / 2)
		for i, res := range r.out {
			wantEvents := 0
			if ids[i] == 3 {
				wantEvents = 1
			}
			if res.Err != nil || len(res.Reply.Events) != wantEvents || res.Reply.At != answered || res.Reply.LeaseTimeout != lease {
				t.Fatalf("entry %d: %+v, want %d events, a full lease at the event", i, res, wantEvents)
			}
		}
		for i, end := range leaseEnds(t, m, ids...) {
			if end != answered.Add(lease) {
				t.Fatalf("session %d: lease not renewed at the early answer (ends %v after it)", ids[i], end.Sub(answered))
			}
		}
	})
}

// TestKeepAliveBatchOneSessionLeaves: the removal of one session and a
// bad entry touch only their own entries: the rest of the batch stays
// parked and is answered at the cadence.
func TestKeepAliveBatchOneSessionLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cadence := lease / 12
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		mustAdd(t, m, 1, 2, 3)
		start := monotime.Now()
		entries := []BatchEntry{{Session: 1}, {Session: 2}, {Session: 3}, {Session: 99}, {Session: 3, Ack: 7}}
		ch := make(chan batchResult, 1)
		go func() {
			out := make([]BatchResult, len(entries))
			err := m.KeepAliveBatch(t.Context(), entries, out)
			ch <- batchResult{out: out, err: err, at: monotime.Now()}
		}()
		synctest.Wait()
		sleep(cadence / 4)
		if err := m.Remove(2); err != nil {
			t.Fatal(err)
		}
		if _, ok := batchReturned(ch); ok {
			t.Fatal("the batch returned when one of its sessions left it")
		}
		sleep(cadence - cadence/4)
		r, ok := batchReturned(ch)
		if !ok || r.err != nil {
			t.Fatalf("not answered at the cadence: %+v", r)
		}
		out := r.out
		for _, i := range []int{0, 2} {
			if out[i].Err != nil || out[i].Reply.At != start.Add(cadence) || out[i].Reply.LeaseTimeout != lease {
				t.Fatalf("staying entry %d: %+v", i, out[i])
			}
		}
		if !errors.Is(out[1].Err, ErrExpired) {
			t.Fatalf("removed session's entry: %+v, want ErrExpired", out[1])
		}
		if !errors.Is(out[3].Err, ErrUnknownSession) || !errors.Is(out[4].Err, ErrBadAck) {
			t.Fatalf("bad entries: %+v / %+v", out[3], out[4])
		}
	})
}

// TestKeepAliveBatchSupersededAnswersAll: a newer KeepAlive of one session
// answers its parked entry at once with the lease its arrival renewed,
// and with it the rest of the batch, each renewed at that instant; the
// newer KeepAlive parks on its own.
func TestKeepAliveBatchSupersededAnswersAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cadence := lease / 12
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		mustAdd(t, m, 1, 2, 3)
		start := monotime.Now()
		ch := goBatch(t.Context(), m, 1, 2, 3)
		sleep(cadence / 4)
		single := goKeepAlive(t.Context(), m, 2, 0)
		r, ok := batchReturned(ch)
		if !ok || r.err != nil {
			t.Fatalf("a superseded entry did not answer the batch at once: %+v", r)
		}
		at := start.Add(cadence / 4)
		for i, res := range r.out {
			if res.Err != nil || res.Reply.At != at || res.Reply.LeaseTimeout != lease || res.Reply.Superseded != (i == 1) || res.Reply.Held != cadence/4 {
				t.Fatalf("entry %d: %+v", i, res)
			}
		}
		if _, ok := returned(single); ok {
			t.Fatal("the newer KeepAlive returned with the batch")
		}
		// Two KeepAlives of one session in one batch: the first is
		// superseded on arrival, and the batch answered at once.
		ch = goBatch(t.Context(), m, 1, 1)
		if r, ok := batchReturned(ch); !ok || r.err != nil || !r.out[0].Reply.Superseded || r.out[1].Reply.Superseded {
			t.Fatalf("a pair in one batch: %+v", r)
		}
	})
}

// TestKeepAliveBatchStop: Stop ends a parked batch with ErrNotServing.
func TestKeepAliveBatchStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1, 2)
		ch := goBatch(t.Context(), m, 1, 2)
		m.Stop()
		r, ok := batchReturned(ch)
		if !ok || !errors.Is(r.err, ErrNotServing) {
			t.Fatalf("after Stop: %+v, want ErrNotServing", r)
		}
	})
}

// TestKeepAliveBatchJoin: entries that join a parked batch are answered
// with it, each with Held counted from its own arrival (never from the
// batch's, which would overstate its lease); once the batch is answered,
// nothing can join it.
func TestKeepAliveBatchJoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cadence := lease / 12
		m := newManager(t, Config{KeepAliveCadence: cadence}, false)
		mustAdd(t, m, 1, 2, 3, 4)
		start := monotime.Now()
		b, err := m.ParkBatch([]BatchEntry{{Session: 1}, {Session: 2}})
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan batchResult, 1)
		go func() {
			out, err := b.Wait(t.Context())
			ch <- batchResult{out: out, err: err, at: monotime.Now()}
		}()
		sleep(cadence / 4)
		if !b.Join([]BatchEntry{{Session: 3}, {Session: 98}}) {
			t.Fatal("could not join a parked batch")
		}
		if _, ok := batchReturned(ch); ok {
			t.Fatal("joining answered the batch")
		}
		sleep(cadence - cadence/4)
		r, ok := batchReturned(ch)
		if !ok || r.err != nil || len(r.out) != 4 {
			t.Fatalf("not answered at the cadence: %+v", r)
		}
		wantHeld := []time.Duration{cadence, cadence, cadence - cadence/4}
		for i, want := range wantHeld {
			if res := r.out[i]; res.Err != nil || res.Reply.Held != want || res.Reply.At != start.Add(cadence) || res.Reply.LeaseTimeout != lease {
				t.Fatalf("entry %d: %+v, want Held %v", i, res, want)
			}
		}
		if !errors.Is(r.out[3].Err, ErrUnknownSession) {
			t.Fatalf("joined unknown session: %+v", r.out[3])
		}
		if b.Join([]BatchEntry{{Session: 4}}) {
			t.Fatal("joined an answered batch")
		}
		if st := m.Stats(); st.Parked != 0 {
			t.Fatalf("%d parked after the answer", st.Parked)
		}
	})
}
