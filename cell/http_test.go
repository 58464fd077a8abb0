package cell_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/transport"
)

// TestHTTPEndpoints: metrics, health, status, the status page and the
// fault-injection API answer on a replica's HTTP listener.
func TestHTTPEndpoints(t *testing.T) {
	faults := transport.NewFaults(1)
	lc := startCell(t, 3, func(c *cell.Config) {
		c.Faults = faults
		c.HTTPAddr = "127.0.0.1:0"
	})
	ctx := testCtx(t, 30*time.Second)
	m, err := lc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One lock held, for the locks_held gauge.
	c := newTestClient(t, lc, "t", "alice")
	c.createSession(ctx)
	if _, err := c.acquire(ctx, c.mustOpen(ctx, "/t/held"), api.LockExclusive, false); err != nil {
		t.Fatal(err)
	}
	base := "http://" + m.HTTPAddr()
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/metrics", "lockcell_paxos_chosen_slot"},
		{"GET", "/metrics", "lockcell_locks_held 1"},
		{"GET", "/metrics", "lockcell_paxos_writes_in_flight "},
		{"GET", "/metrics", "lockcell_paxos_held_messages "},
		{"GET", "/healthz", "ok"},
		{"GET", "/readyz", "ok: master"},
		{"GET", "/status", `"Cell":"test"`},
		{"GET", "/", "master"},
		{"GET", "/", `<p id="logwriter">Log writer: `},
		{"GET", "/debug/faults", ""},
		{"GET", "/debug/faults/", ""},
		{"POST", "/debug/faults/heal", ""},
	} {
		req, _ := http.NewRequestWithContext(ctx, tc.method, base+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			body.Write(buf[:n])
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(body.String(), tc.want) {
			t.Errorf("%s %s: %d %.200q; want 200 containing %q", tc.method, tc.path, resp.StatusCode, body.String(), tc.want)
		}
	}
}
