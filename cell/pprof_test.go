package cell_test

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// pprofGet fetches url and returns the status code and up to 64 KiB of the
// body.
func pprofGet(t *testing.T, ctx context.Context, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, string(body)
}

// TestPprofServesOnlyTheOperator: with Pprof set, a replica's HTTP listener
// serves /debug/pprof/ to the operator's addresses (loopback by default)
// and refuses every other address with 403 — including the CPU profile,
// which costs the replica CPU while it runs; without Pprof there is no
// /debug/pprof at all. Each request comes from 127.0.0.1 over real TCP.
// The three settings are those of the three replicas of one cell (each
// listener is its replica's alone), so the test starts one cell and waits
// for nothing but the answers; the one real wait is the CPU profile's
// second, the shortest net/http/pprof takes.
func TestPprofServesOnlyTheOperator(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	cases := []struct {
		name  string
		tune  func(*cell.Config)
		paths map[string]int // path → status wanted
	}{
		{"loopback operator by default", func(c *cell.Config) { c.Pprof = true }, map[string]int{
			"/debug/pprof/":                     http.StatusOK,
			"/debug/pprof/cmdline":              http.StatusOK,
			"/debug/pprof/goroutine?debug=1":    http.StatusOK,
			"/debug/pprof/profile?seconds=1":    http.StatusOK,
			"/debug/pprof/heap":                 http.StatusOK,
			"/metrics":                          http.StatusOK,
			"/debug/pprof/symbol":               http.StatusOK,
			"/debug/pprof/trace?seconds=0.01":   http.StatusOK,
			"/debug/pprof/allocs?debug=1&gc=1":  http.StatusOK,
			"/debug/pprof/../pprof/cmdline":     http.StatusOK,
			"/debug/pprof/threadcreate?debug=1": http.StatusOK,
		}},
		{"another operator address", func(c *cell.Config) {
			c.Pprof = true
			c.PprofAllow = []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}
		}, map[string]int{
			"/debug/pprof/":                  http.StatusForbidden,
			"/debug/pprof/cmdline":           http.StatusForbidden,
			"/debug/pprof/goroutine?debug=1": http.StatusForbidden,
			"/debug/pprof/profile?seconds=1": http.StatusForbidden,
			"/debug/pprof/heap":              http.StatusForbidden,
			"/debug/pprof/trace?seconds=1":   http.StatusForbidden,
			"/debug/pprof/symbol":            http.StatusForbidden,
			"/debug/pprof/../pprof/cmdline":  http.StatusForbidden,
			"/metrics":                       http.StatusOK,
		}},
		{"pprof off", func(*cell.Config) {}, map[string]int{
			"/debug/pprof/":         http.StatusNotFound,
			"/debug/pprof/cmdline":  http.StatusNotFound,
			"/debug/pprof/profile":  http.StatusNotFound,
			"/debug/pprof/heap":     http.StatusNotFound,
			"/debug/pprof/trace":    http.StatusNotFound,
			"/debug/pprof/symbol":   http.StatusNotFound,
			"/debug/pprof/allocs":   http.StatusNotFound,
			"/debug/pprof/block":    http.StatusNotFound,
			"/debug/pprof/mutex":    http.StatusNotFound,
			"/debug/pprof/nonsense": http.StatusNotFound,
		}},
	}
	lc := startCell(t, len(cases), func(c *cell.Config) {
		c.HTTPAddr = "127.0.0.1:0"
		cases[c.ID-1].tune(c)
	})
	judged := 0
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := lc.Replica(uint64(i + 1))
			if r == nil {
				t.Fatalf("replica %d is not running", i+1)
			}
			base := "http://" + r.HTTPAddr()
			for path, want := range tc.paths {
				rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				got, body := pprofGet(t, rctx, base+path)
				cancel()
				judged++
				if got != want {
					t.Errorf("GET %s: status %d, want %d (body %.200q)", path, got, want, body)
				}
				if want == http.StatusForbidden && !strings.Contains(body, "pprof_allow") {
					t.Errorf("GET %s: refusal %q does not say how to be allowed (pprof_allow)", path, body)
				}
			}
		})
	}
	// The checker's floor: every request above was judged.
	if judged < 30 {
		t.Fatalf("judged %d requests, want at least 30", judged)
	}
}
