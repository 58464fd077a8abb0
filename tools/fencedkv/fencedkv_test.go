package fencedkv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/sequencer"
	. "github.com/lockcell/lockcell/tools/fencedkv"
)

type testCell struct{ *cell.LocalCell }

func startCell(t *testing.T) *testCell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "test", DevTenant: "t",
		Tune:   func(c *cell.Config) { c.SessionLease = 2 * time.Second },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return &testCell{lc}
}

func (tc *testCell) dial(t *testing.T, ctx context.Context, principal string) *client.Client {
	t.Helper()
	cert, err := tc.ClientCertificate("t", principal)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{Addrs: tc.Addrs(), CA: tc.CA.Pool(), Certificate: &cert,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestMutexExclusion: 20 clients increment a counter in a protected store
// under one mutex, each write carrying its sequencer through the
// Validator. No update is lost, and writes with sequencers of released
// grants are rejected.
func TestMutexExclusion(t *testing.T) {
	tc := startCell(t)
	ctx := testCtx(t, 90*time.Second)
	v, err := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: tc.PublicKey(), Cell: "test"})
	if err != nil {
		t.Fatal(err)
	}
	kv := New(v, func(string) string { return "/t/counter-lock" })
	const clients, rounds = 20, 3
	c := tc.dial(t, ctx, "worker")
	var wg sync.WaitGroup
	stale := make(chan sequencer.Sequencer, clients*rounds)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.NewSession(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer s.Close(ctx)
			m := client.NewMutex(s, "/t/counter-lock")
			for r := 0; r < rounds; r++ {
				l, err := m.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				cur, _ := kv.Get("counter")
				n := 0
				if len(cur) > 0 {
					fmt.Sscan(string(cur), &n)
				}
				if err := kv.Put(ctx, "counter", []byte(fmt.Sprint(n+1)), l.Sequencer()); err != nil {
					t.Errorf("write under a held lock rejected: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Error(err)
					return
				}
				stale <- l.Sequencer()
			}
		}()
	}
	wg.Wait()
	close(stale)
	got, _ := kv.Get("counter")
	if string(got) != fmt.Sprint(clients*rounds) {
		t.Fatalf("counter = %s after %d increments: lost updates", got, clients*rounds)
	}
	// Every released grant but the last is older than the newest seen, so
	// its writes must be rejected.
	var newest uint64
	var olds []sequencer.Sequencer
	for s := range stale {
		olds = append(olds, s)
		newest = max(newest, s.Generation)
	}
	for _, s := range olds {
		if s.Generation == newest {
			continue
		}
		if err := kv.Put(ctx, "counter", []byte("stale"), s); !errors.Is(err, sequencer.ErrStale) {
			t.Fatalf("write with released generation %d (newest %d): %v; want ErrStale", s.Generation, newest, err)
		}
	}
	if err := CheckFencing(kv.Records()); err != nil {
		t.Fatal(err)
	}
	if got, _ := kv.Get("counter"); string(got) != fmt.Sprint(clients*rounds) {
		t.Fatalf("a stale write got in: counter = %s", got)
	}
}

// TestHTTP: the store over HTTP accepts a write with the current sequencer,
// rejects a stale one, a forged one and one for another lock with a clear
// status, and records every attempt.
func TestHTTP(t *testing.T) {
	tc := startCell(t)
	ctx := testCtx(t, 30*time.Second)
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: tc.PublicKey(), Cell: "test"})
	kv := New(v, func(key string) string { return "/t/kv/" + key })
	srv := httptest.NewServer(kv.Handler())
	defer srv.Close()
	s, err := tc.dial(t, ctx, "app").NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "/t/kv", client.OpenOptions{Create: true, Dir: true}); err != nil {
		t.Fatal(err)
	}
	m := client.NewMutex(s, "/t/kv/a")
	l1, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	put := func(key, value string, seq *sequencer.Sequencer) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/kv/"+key, strings.NewReader(value))
		if seq != nil {
			sequencer.SetHeader(req.Header, *seq)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(sequencer.RejectHeader)
	}
	s1 := l1.Sequencer()
	if code, _ := put("a", "one", &s1); code != http.StatusNoContent {
		t.Fatalf("write with the current grant: %d", code)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := m.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s2 := l2.Sequencer()
	if code, _ := put("a", "two", &s2); code != http.StatusNoContent {
		t.Fatalf("write with the new grant: %d", code)
	}
	forged := s2
	forged.Generation += 10
	for _, c := range []struct {
		key    string
		seq    *sequencer.Sequencer
		status int
		reason string
	}{
		{"a", &s1, http.StatusConflict, "stale"},
		{"a", &forged, http.StatusForbidden, "forged"},
		{"a", nil, http.StatusPreconditionRequired, "missing"},
		{"b", &s2, http.StatusForbidden, "wrong-lock"},
	} {
		if code, reason := put(c.key, "bad", c.seq); code != c.status || reason != c.reason {
			t.Fatalf("put %s: %d %q; want %d %q", c.key, code, reason, c.status, c.reason)
		}
	}
	resp, err := http.Get(srv.URL + "/kv/a")
	if err != nil {
		t.Fatal(err)
	}
	b := new(strings.Builder)
	_, _ = io.Copy(b, resp.Body)
	resp.Body.Close()
	if b.String() != "two" {
		t.Fatalf("GET = %q, want two", b.String())
	}
	recs := kv.Records()
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	accepted := 0
	for _, r := range recs {
		if r.Accepted {
			accepted++
		} else if r.Reason == "" {
			t.Fatalf("rejected record %d has no reason", r.Seq)
		}
	}
	if accepted != 2 {
		t.Fatalf("%d accepted writes, want 2", accepted)
	}
	if err := CheckFencing(recs); err != nil {
		t.Fatal(err)
	}
	// The checker catches an out-of-order acceptance.
	bad := append([]Record(nil), recs...)
	bad = append(bad, Record{Seq: 99, Key: "a", Sequencer: s1, Accepted: true})
	if err := CheckFencing(bad); err == nil {
		t.Fatal("CheckFencing missed a stale accepted write")
	}
	_ = errors.Is
}
