package client_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
)

// countingHandler counts the log records whose message contains substr.
type countingHandler struct {
	substr string
	n      *atomic.Int64
}

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.substr) {
		h.n.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// shedTenant creates a tenant whose quota allows two calls per second and
// returns a client of it whose logger counts the CreateSession retries.
func shedTenant(t *testing.T, ctx context.Context, c *celltest.Cell, retries *atomic.Int64) *client.Client {
	t.Helper()
	m, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CreateTenant(ctx, "slow", api.TenantQuota{OpsPerSecond: 2}); err != nil {
		t.Fatal(err)
	}
	cfg := c.ClientConfig("slow", "p")
	cfg.Logger = slog.New(countingHandler{substr: "CreateSession shed", n: retries})
	return c.Dial(ctx, cfg)
}

// TestNewSessionRetriesShed: a tenant allowed two calls per second opens
// eight sessions one after another. The master sheds the CreateSessions
// over the rate with ResourceExhausted and a RetryAfter; NewSession waits
// that long and asks again, so every session opens, and the eight take
// the rate's time (at least three seconds of the bubble's clock).
func TestNewSessionRetriesShed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var retries atomic.Int64
		cl := shedTenant(t, ctx, c, &retries)
		start := time.Now()
		for i := range 8 {
			s, err := cl.NewSession(ctx)
			if err != nil {
				t.Fatalf("session %d: %v", i, err)
			}
			defer s.Close(context.Background())
		}
		took := time.Since(start)
		// Floors: the rate was enforced, and NewSession retried.
		if took < 2500*time.Millisecond {
			t.Errorf("8 sessions at 2 calls/s opened in %v: the quota did not shed them", took)
		}
		if retries.Load() == 0 {
			t.Error("no CreateSession was shed and retried")
		}
		t.Logf("8 sessions in %v of bubble time, %d retries", took, retries.Load())
	})
}

// TestNewSessionShedHonoursContext: while the master keeps shedding, a
// NewSession whose context ends returns ctx's error (naming the shedding
// too) at the deadline, not after its retries.
func TestNewSessionShedHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var retries atomic.Int64
		cl := shedTenant(t, ctx, c, &retries)
		// Sessions asked for back to back, each given 100 ms: once the
		// two calls per second are spent, one is shed and cannot open in
		// time.
		for i := range 4 {
			sctx, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
			start := time.Now()
			s, err := cl.NewSession(sctx)
			took := time.Since(start)
			scancel()
			if err == nil {
				defer s.Close(context.Background())
				continue
			}
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, api.ErrResourceExhausted) {
				t.Errorf("err = %v, want the deadline and the shedding", err)
			}
			if took > 150*time.Millisecond {
				t.Errorf("NewSession returned %v after its 100 ms deadline began", took)
			}
			if retries.Load() == 0 {
				t.Error("the refused CreateSession was not shed")
			}
			t.Logf("session %d shed; NewSession returned after %v", i, took)
			return
		}
		t.Fatal("four sessions opened within 100 ms each at two calls per second: nothing was shed")
	})
}
