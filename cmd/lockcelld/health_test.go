package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// probe GETs path on replica id's HTTP listener and returns the status
// code and body (code 0 if the request failed).
func (c *procCell) probe(ctx context.Context, id int, path string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.httpAddr(id)+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := c.httpc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// pollUntil calls cond every 50 ms until it holds or ctx ends; it reports
// whether cond held.
func pollUntil(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
	return true
}

// TestReadyzWithoutQuorum: in a cell of three real processes every replica
// is ready; once a majority (the master and one follower) is killed, the
// survivor's /readyz answers 503 with a reason that names the missing
// master, while /healthz keeps answering 200 (the process lives and
// restarting it would not help).
func TestReadyzWithoutQuorum(t *testing.T) {
	c := startProcCell(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	m := c.waitMaster()
	for id := 1; id <= 3; id++ {
		var code int
		var body string
		if !pollUntil(ctx, func() bool { code, body = c.probe(ctx, id, "/readyz"); return code == http.StatusOK }) {
			t.Fatalf("replica %d never ready: %d %q", id, code, body)
		}
		t.Logf("replica %d /readyz: %s", id, body)
	}
	f := c.followers(m)
	survivor := f[1]
	c.stop(m, syscall.SIGKILL)
	c.stop(f[0], syscall.SIGKILL)

	var code int
	var body string
	healthy := true
	if !pollUntil(ctx, func() bool {
		if hc, hb := c.probe(ctx, survivor, "/healthz"); hc != http.StatusOK {
			t.Errorf("survivor %d /healthz: %d %q; want 200 (it lives)", survivor, hc, hb)
			healthy = false
			return true
		}
		code, body = c.probe(ctx, survivor, "/readyz")
		return code == http.StatusServiceUnavailable
	}) {
		t.Fatalf("survivor %d still ready without quorum: %d %q", survivor, code, body)
	}
	if !healthy {
		return
	}
	if !strings.Contains(body, "master") {
		t.Errorf("readyz reason %q does not say that no master is heard", body)
	}
	t.Logf("survivor %d /readyz without quorum: %d %s", survivor, code, body)
	// It stays unready, and alive, while the majority is gone.
	for range 5 {
		if hc, _ := c.probe(ctx, survivor, "/healthz"); hc != http.StatusOK {
			t.Fatalf("survivor /healthz %d without quorum; want 200", hc)
		}
		if rc, rb := c.probe(ctx, survivor, "/readyz"); rc != http.StatusServiceUnavailable {
			t.Fatalf("survivor /readyz %d %q without quorum; want 503", rc, rb)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
