package session_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/session"
)

// The cell's side of a term: start serving the recorded sessions after a
// fail-over, answer KeepAlives, publish an event, hand an expiry to Paxos.
func Example() {
	clock := monotime.NewManual(0)                         // the cell passes nothing: the real clock
	m, err := session.New(session.Config{Epoch: 7<<16 | 3, // round 7, led by replica 3
		Clock: clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer m.Stop() // when mastership is lost

	// Became master: sessions 1 and 2 are in the applied state.
	if err := m.Start(true, []session.ID{1, 2}); err != nil {
		panic(err)
	}

	// Session 1's first KeepAlive, 5 s later, returns at once with the
	// fail-over event.
	clock.Advance(5 * time.Second)
	r, _ := m.KeepAlive(context.Background(), 1, 0)
	fmt.Println(r.LeaseTimeout, r.Events)

	// An applied write concerns session 1; its next KeepAlive acknowledges
	// the fail-over event and gets the invalidation.
	_ = m.Publish(1, api.Event{Kind: api.EventContentsModified, Path: "/ls/cell/cfg", Generation: 3})
	r, _ = m.KeepAlive(context.Background(), 1, 1)
	fmt.Println(r.LeaseTimeout, r.Events)

	// Session 2 never calls: 12 s after the fail-over its expiry is
	// decided; the cell proposes ExpireSession and removes it once applied.
	// (Session 1 was renewed and lives on.)
	clock.Advance(session.DefaultLease - 5*time.Second)
	select {
	case d := <-m.Decisions():
		fmt.Println("expire", d.Session)
		_ = m.Remove(d.Session)
	case <-time.After(time.Minute): // a guard so a broken build fails, not hangs
		fmt.Println("no expiry decided")
	}
	// Output:
	// 12s [#1 master-failover (epoch 7.3)]
	// 12s [#2 contents-modified /ls/cell/cfg (gen 3)]
	// expire 2
}
