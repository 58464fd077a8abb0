package session

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
)

// TestConcurrentUse runs clients, a publisher, a closer and a load-shedder
// against one Manager at once for two fake minutes, then stops it in the
// middle of everything. Run under -race (and -tags invariants) it checks
// that the Manager's locking holds up; it also checks that every client
// either kept its session or was told why not.
func TestConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, Config{MaxEvents: 8, MaxLease: 30 * time.Second}, true, 1, 2, 3, 4)
		mustAdd(t, m, 5, 6, 7, 8)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for id := ID(1); id <= 8; id++ {
			wg.Go(func() {
				ack := uint64(0)
				for {
					r, err := m.KeepAlive(ctx, id, ack)
					if err != nil {
						errs <- err
						return
					}
					if n := len(r.Events); n > 0 {
						ack = r.Events[n-1].Seq
					}
				}
			})
		}
		wg.Go(func() { // publisher
			for i := 0; ctx.Err() == nil; i++ {
				_ = m.Publish(ID(1+i%8), api.Event{Kind: api.EventContentsModified, Path: "/ls/p"})
				time.Sleep(37 * time.Millisecond)
			}
		})
		wg.Go(func() { // load: lengthen and shorten grants
			for i := 0; ctx.Err() == nil; i++ {
				_ = m.SetLeaseExtension(time.Duration(i%3) * 9 * time.Second)
				_ = m.Stats()
				time.Sleep(time.Second)
			}
		})
		wg.Go(func() { // closes session 8 after a while
			time.Sleep(40 * time.Second)
			_ = m.Remove(8)
		})
		time.Sleep(time.Minute)
		m.Stop()
		wg.Wait()
		close(errs)
		for err := range errs {
			if !errors.Is(err, ErrNotServing) && !errors.Is(err, ErrExpired) {
				t.Errorf("client ended with %v", err)
			}
		}
		if st := m.Stats(); st.Expiries != 0 {
			t.Errorf("clients kept alive, yet %d expiries", st.Expiries)
		}
	})
}
