package celltest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

// Floors of TestHandOverInFlightWritesDefinite: the writes that must have
// spanned the hand-overs (begun while the old master served, ended at its
// successor) for the run to count, over all rounds.
const spanningWritesFloor = 3

// TestHandOverInFlightWritesDefinite: writers that share one client (one
// connection to the master) keep non-idempotent writes (SetContents) in
// flight through planned hand-overs. The old master refuses what it no
// longer serves with NotMaster naming its successor; the client sends new
// calls there at once but keeps the old connection open until the calls
// on it are answered, so every write ends with a definite answer: it
// succeeds (at once or after the redirect), never "outcome unknown"
// because a neighbour's redirect closed the connection under it. Three
// hand-overs in a row.
func TestHandOverInFlightWritesDefinite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, ctx := startHandOverCell(t)
		cl := c.Dial(ctx, c.ClientConfig("", "writer"))
		s, err := cl.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		const writers = 8
		var handles []*client.Handle
		for i := 0; i < writers; i++ {
			h, err := s.Open(ctx, fmt.Sprintf("/t/w%d", i), client.OpenOptions{Create: true})
			if err != nil {
				t.Fatal(err)
			}
			handles = append(handles, h)
		}

		var (
			mu       sync.Mutex
			ok       int
			spanning int // writes begun at the old master, ended at another
			failures []string
			old      *cell.Replica // the master of the current round
		)
		master := func() *cell.Replica { return c.Master() }
		wctx, wcancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for i, h := range handles {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; wctx.Err() == nil; n++ {
					mu.Lock()
					round := old
					mu.Unlock()
					began := master()
					_, err := h.SetContents(wctx, []byte(fmt.Sprint(n)))
					if wctx.Err() != nil {
						return
					}
					ended := master()
					mu.Lock()
					switch {
					case err == nil:
						ok++
						if round != nil && began == round && ended != nil && ended != round {
							spanning++
						}
					case len(failures) < 20:
						failures = append(failures, fmt.Sprintf("writer %d: %v (outcome unknown: %v)", i, err, errors.Is(err, client.ErrOutcomeUnknown)))
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(time.Millisecond)
					}
				}
			}()
		}
		for round := 0; round < 3; round++ {
			m, err := c.WaitMaster(ctx)
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond) // steady state
			mu.Lock()
			old = m
			mu.Unlock()
			if err := m.StepDown(ctx, 0); err != nil {
				t.Fatalf("round %d: StepDown at %d: %v", round, m.ID(), err)
			}
			time.Sleep(300 * time.Millisecond)
		}
		wcancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d writes succeeded, %d of them begun at a master that handed over and ended at its successor", ok, spanning)
		if len(failures) > 0 {
			t.Fatalf("%d writes ended without a definite answer, first: %v", len(failures), failures)
		}
		if spanning < spanningWritesFloor {
			t.Fatalf("only %d writes spanned a hand-over (floor %d): the test judged too little", spanning, spanningWritesFloor)
		}
	})
}
