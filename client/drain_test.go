package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/transport"
)

// TestRedirectDrainsThenCloses: writers share one client through planned
// hand-overs; each redirect with calls still on the old connection leaves
// it open for them, and once they are over (and the writers stopped)
// every such connection is closed: draining leaks nothing. It waits, in
// bounded steps, for the retired connections to close (each closes within
// the drain grace at the latest, or when its last call ends). It runs on
// celltest in simulated time.
func TestRedirectDrainsThenCloses(t *testing.T) {
	synctest.Test(t, testRedirectDrainsThenCloses)
}

func testRedirectDrainsThenCloses(t *testing.T) {
	tc := celltest.Start(t, celltest.Options{Replicas: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := tc.Dial(ctx, tc.ClientConfig("", "alice"))
	var dmu sync.Mutex
	var retired []*transport.ClientConn
	client.OnDrain(c, func(cc *transport.ClientConn) {
		dmu.Lock()
		retired = append(retired, cc)
		dmu.Unlock()
	})
	nRetired := func() int {
		dmu.Lock()
		defer dmu.Unlock()
		return len(retired)
	}
	// open counts the retired connections not yet closed.
	open := func() int {
		dmu.Lock()
		defer dmu.Unlock()
		n := 0
		for _, cc := range retired {
			if cc.Context().Err() == nil {
				n++
			}
		}
		return n
	}
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const writers = 6
	wctx, wcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for i := 0; i < writers; i++ {
		h, err := s.Open(ctx, fmt.Sprintf("/t/d%d", i), client.OpenOptions{Create: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; wctx.Err() == nil; n++ {
				if _, err := h.SetContents(wctx, []byte(fmt.Sprint(n))); err != nil && wctx.Err() == nil {
					mu.Lock()
					failures = append(failures, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	// Hand over until some redirect found calls on the old connection
	// (bounded: a few hand-overs).
	for round := 0; round < 5; round++ {
		m := tc.Master()
		if m == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err := m.StepDown(ctx, 0); err != nil && !errors.Is(err, ctx.Err()) {
			t.Logf("round %d: StepDown: %v", round, err)
		}
		time.Sleep(300 * time.Millisecond)
		if nRetired() > 0 {
			break
		}
	}
	wcancel()
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d writes failed, first: %v", len(failures), failures[0])
	}
	n := nRetired()
	if n == 0 {
		t.Fatal("no redirect found calls on the old connection: the test judged nothing")
	}
	left := open()
	for i := 0; left > 0 && i < 500; i++ {
		time.Sleep(20 * time.Millisecond)
		left = open()
	}
	if left > 0 {
		t.Fatalf("%d of %d retired connections still open 10 s after the writers stopped", left, n)
	}
	t.Logf("%d connections retired with calls on them, all closed", n)
}
