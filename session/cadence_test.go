package session

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/internal/monotime"
)

// TestKeepAliveCadence: with a cadence set, a parked KeepAlive is answered
// exactly one cadence after it arrived, with a full lease and the cadence
// in the reply, so a client that hears nothing for longer knows something
// is wrong; a cadence longer than the lease allows changes nothing (the
// answer still comes KeepAliveEarly before the lease ends).
func TestKeepAliveCadence(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cadence time.Duration
		want    time.Duration // answer after
	}{
		{"short", 2 * time.Second, 2 * time.Second},
		{"longer than the lease allows", lease, lease - early},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, Config{KeepAliveCadence: tc.cadence}, false)
				mustAdd(t, m, 1)
				// Let the lease age a little, so that "after arrival" and
				// "after the lease's start" differ.
				sleep(time.Second)
				start := monotime.Now()
				ka := goKeepAlive(t.Context(), m, 1, 0)
				sleep(tc.want - 1)
				if _, ok := returned(ka); ok {
					t.Fatalf("answered before %v", tc.want)
				}
				sleep(1)
				r, ok := returned(ka)
				if !ok || r.err != nil {
					t.Fatalf("not answered %v after arrival: %+v", tc.want, r)
				}
				if r.at.Sub(start) != tc.want || r.reply.LeaseTimeout != lease || r.reply.Cadence != tc.cadence {
					t.Fatalf("answered after %v with lease %v, cadence %v; want %v, %v, %v",
						r.at.Sub(start), r.reply.LeaseTimeout, r.reply.Cadence, tc.want, lease, tc.cadence)
				}
				// The next one parks a whole cadence again.
				ka = goKeepAlive(t.Context(), m, 1, 0)
				sleep(tc.want - 1)
				if _, ok := returned(ka); ok {
					t.Fatalf("second KeepAlive answered before %v", tc.want)
				}
				sleep(1)
				if r, ok := returned(ka); !ok || r.err != nil {
					t.Fatalf("second KeepAlive not answered after %v: %+v", tc.want, r)
				}
			})
		})
	}
	if _, err := New(Config{KeepAliveCadence: -1}); err == nil {
		t.Fatal("a negative cadence was accepted")
	}
}
