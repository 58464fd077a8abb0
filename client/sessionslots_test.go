package client_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/cell/celltest"
)

// TestCreateSessionsShareSlots: sessions opened with 192 CreateSessions in
// flight at once (as the benchmark's harness opens them) take far fewer
// Paxos slots than sessions: the creations that arrive while a slot is in
// flight go together into the next one (up to paxos.Config.MaxBatch
// commands a slot). LOCKCELL_OPEN_SESSIONS sets how many sessions it
// opens (960 if unset), for counting the instructions of an open under
// callgrind at two sizes.
func TestCreateSessionsShareSlots(t *testing.T) {
	n := 960
	if v := os.Getenv("LOCKCELL_OPEN_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("LOCKCELL_OPEN_SESSIONS=%q: want a positive count", v)
		}
	}
	synctest.Test(t, func(t *testing.T) {
		c := celltest.Start(t, celltest.Options{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cl := c.Dial(ctx, c.ClientConfig("", "alice"))
		m := c.Master()
		if m == nil {
			t.Fatal("no master")
		}
		before := m.Status()
		sessions := openSessions(t, ctx, cl, n, 192)
		after := m.Status()
		slots := after.Chosen - before.Chosen
		t.Logf("%d sessions opened in %d slots (%.1f a slot); the master holds %d sessions", n, slots, float64(n)/float64(max(slots, 1)), after.Sessions)
		// Floors: every session opened and the master holds it, and the
		// creations went through Paxos.
		if len(sessions) != n || after.Sessions < n || slots == 0 {
			t.Fatalf("%d sessions opened, %d held, %d slots", len(sessions), after.Sessions, slots)
		}
		if n >= 192 && slots*8 > uint64(n) {
			t.Errorf("%d sessions took %d slots; want at least 8 creations a slot with 192 in flight", n, slots)
		}
	})
}
