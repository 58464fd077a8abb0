package session

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// Test configuration: Chubby's defaults (12 s lease, answer 1.5 s early).
const (
	lease = DefaultLease
	early = DefaultLease / 8
)

// newManager returns a started Manager with a discarding logger. It must be
// called inside the synctest bubble of the test when cfg.Clock is nil.
func newManager(t *testing.T, cfg Config, failover bool, existing ...ID) *Manager {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := m.Start(failover, existing); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { stopUnlessAbandoned(t, m) })
	return m
}

// stopUnlessAbandoned stops m, unless its mutex stays held: then a panic
// (a broken invariant) unwound a goroutine that held it, and Stop would
// wait for the lock forever, hiding the panic behind a test timeout.
func stopUnlessAbandoned(t *testing.T, m *Manager) {
	for range 1000 {
		if m.mu.TryLock() {
			m.mu.Unlock()
			m.Stop()
			return
		}
		runtime.Gosched()
	}
	t.Errorf("session.Manager mutex abandoned while held (after a panic?); not stopping it")
}

func mustAdd(t *testing.T, m *Manager, ids ...ID) {
	t.Helper()
	for _, id := range ids {
		if _, err := m.Add(id); err != nil {
			t.Fatalf("Add(%d): %v", id, err)
		}
	}
}

// kaResult is the outcome of a KeepAlive run in its own goroutine.
type kaResult struct {
	reply Reply
	err   error
	at    monotime.Time // when it returned
}

// goKeepAlive runs KeepAlive in a goroutine and returns where its result
// will arrive, after letting the bubble settle so that it has either
// returned or parked.
func goKeepAlive(ctx context.Context, m *Manager, id ID, ack uint64) <-chan kaResult {
	ch := make(chan kaResult, 1)
	go func() {
		r, err := m.KeepAlive(ctx, id, ack)
		ch <- kaResult{reply: r, err: err, at: monotime.Now()}
	}()
	synctest.Wait()
	return ch
}

// returned reports the KeepAlive's result if it has returned by now.
func returned(ch <-chan kaResult) (kaResult, bool) {
	synctest.Wait()
	select {
	case r := <-ch:
		return r, true
	default:
		return kaResult{}, false
	}
}

// drain returns every decision the expiry loop has made by now.
func drain(m *Manager) []Decision {
	var out []Decision
	for {
		synctest.Wait()
		select {
		case d, ok := <-m.Decisions():
			if !ok {
				return out
			}
			out = append(out, d)
		default:
			return out
		}
	}
}

func ids(ds []Decision) []ID {
	var out []ID
	for _, d := range ds {
		out = append(out, d.Session)
	}
	return out
}

// sleep advances the bubble's fake clock by d.
func sleep(d time.Duration) { time.Sleep(d) }

// leaseEntries is a test hook into the lazy lease index: how many entries it
// holds, and how many of them are filed under a key earlier than their
// session's real lease end.
func (m *Manager) leaseEntries() (entries, stale int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.mu.leases {
		if s.heapKey != s.leaseEnd {
			stale++
		}
	}
	return len(m.mu.leases), stale
}
