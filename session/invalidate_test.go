package session

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
)

// goInvalidate runs Invalidate in a goroutine and lets the bubble settle.
func goInvalidate(ctx context.Context, m *Manager, id ID) <-chan error {
	ch := make(chan error, 1)
	go func() {
		ch <- m.Invalidate(ctx, id, api.Event{Kind: api.EventContentsModified, Path: "/t/x"})
	}()
	synctest.Wait()
	return ch
}

func settled(ch <-chan error) (error, bool) {
	synctest.Wait()
	select {
	case err := <-ch:
		return err, true
	default:
		return nil, false
	}
}

// "Modification of the data is blocked until every caching client has
// acknowledged the invalidation" (Chubby §2.5, paraphrased): Invalidate
// waits for the session's acknowledgement.
func TestInvalidateWaitsForAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		done := goInvalidate(t.Context(), m, 1)
		if _, ok := settled(done); ok {
			t.Fatal("Invalidate returned before the session acknowledged")
		}
		// The session's KeepAlive answers at once with the event...
		r := <-goKeepAlive(t.Context(), m, 1, 0)
		if r.err != nil || len(r.reply.Events) != 1 {
			t.Fatalf("KeepAlive = %+v, %v; want the invalidation", r.reply, r.err)
		}
		if _, ok := settled(done); ok {
			t.Fatal("Invalidate returned when the event was sent, before it was acknowledged")
		}
		// ...and the next KeepAlive acknowledges it.
		goKeepAlive(t.Context(), m, 1, r.reply.Events[0].Seq)
		if err, ok := settled(done); !ok || err != nil {
			t.Fatalf("Invalidate after the ack: %v, returned %v", err, ok)
		}
	})
}

// "...or let its lease expire": a session that never acknowledges stops
// blocking the write when its lease runs out.
func TestInvalidateEndsWithLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		start := time.Now()
		done := goInvalidate(t.Context(), m, 1)
		err := <-done
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < lease {
			t.Fatalf("Invalidate returned after %v, before the %v lease ran out", waited, lease)
		}
	})
}

func TestInvalidateCanceledAndStopped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1, 2)
		ctx, cancel := context.WithCancel(t.Context())
		done := goInvalidate(ctx, m, 1)
		cancel()
		if err, ok := settled(done); !ok || !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled Invalidate: %v, returned %v", err, ok)
		}
		done = goInvalidate(t.Context(), m, 2)
		m.Stop()
		if err, ok := settled(done); !ok || !errors.Is(err, ErrNotServing) {
			t.Fatalf("Invalidate across Stop: %v, returned %v", err, ok)
		}
		if err := m.Invalidate(t.Context(), 99, api.Event{Kind: api.EventContentsModified}); !errors.Is(err, ErrNotServing) {
			t.Fatalf("Invalidate on a stopped manager: %v", err)
		}
	})
}

// A removed session caches nothing: the wait ends.
func TestInvalidateEndsOnRemove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{}, false)
		mustAdd(t, m, 1)
		done := goInvalidate(t.Context(), m, 1)
		if err := m.Remove(1); err != nil {
			t.Fatal(err)
		}
		if err, ok := settled(done); !ok || err != nil {
			t.Fatalf("Invalidate after Remove: %v, returned %v", err, ok)
		}
		if err := m.Invalidate(t.Context(), 1, api.Event{Kind: api.EventContentsModified}); err != nil {
			t.Fatalf("Invalidate of an unknown session: %v", err)
		}
	})
}
