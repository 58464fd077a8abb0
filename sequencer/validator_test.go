package sequencer_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/lockcell/lockcell/sequencer"
)

func signed(t *testing.T, key ed25519.PrivateKey, gen, inst uint64, mode sequencer.Mode) sequencer.Sequencer {
	t.Helper()
	s := sequencer.Sequencer{Cell: "c", Tenant: "t", Path: "/t/lock", Mode: mode, Generation: gen, Instance: inst}
	s, err := s.Sign(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newKey(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestValidatorFencing(t *testing.T) {
	pub, priv := newKey(t)
	_, other := newKey(t)
	v, err := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub, Cell: "c"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ok := func(s sequencer.Sequencer) {
		t.Helper()
		if err := v.Check(ctx, s); err != nil {
			t.Fatalf("%+v rejected: %v", s, err)
		}
	}
	bad := func(s sequencer.Sequencer, want error) {
		t.Helper()
		if err := v.Check(ctx, s); !errors.Is(err, want) {
			t.Fatalf("%+v: %v; want %v", s, err, want)
		}
	}
	ok(signed(t, priv, 5, 1, sequencer.Exclusive))
	ok(signed(t, priv, 5, 1, sequencer.Exclusive)) // the same grant again
	bad(signed(t, priv, 4, 1, sequencer.Exclusive), sequencer.ErrStale)
	bad(signed(t, priv, 5, 2, sequencer.Exclusive), sequencer.ErrConflict)
	bad(signed(t, priv, 5, 1, sequencer.Shared), sequencer.ErrConflict)
	ok(signed(t, priv, 9, 2, sequencer.Shared))
	bad(signed(t, priv, 5, 1, sequencer.Exclusive), sequencer.ErrStale) // valid once, never again
	bad(signed(t, other, 10, 2, sequencer.Exclusive), sequencer.ErrForged)
	unsigned := signed(t, priv, 11, 2, sequencer.Exclusive)
	unsigned.Signature = nil
	bad(unsigned, sequencer.ErrForged)
	tampered := signed(t, priv, 11, 2, sequencer.Exclusive)
	tampered.Generation = 12
	bad(tampered, sequencer.ErrForged)
	wrongCell := sequencer.Sequencer{Cell: "d", Tenant: "t", Path: "/t/lock", Mode: sequencer.Exclusive, Generation: 20, Instance: 2}
	wrongCell, _ = wrongCell.Sign(priv)
	bad(wrongCell, sequencer.ErrForged)
	bad(sequencer.Sequencer{Cell: "c"}, sequencer.ErrMalformed)
	// Rejections changed nothing.
	if g, seen := v.Highest("c", "/t/lock"); !seen || g != 9 {
		t.Fatalf("Highest = %d, %v; want 9", g, seen)
	}
	if _, err := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub[:5]}); !errors.Is(err, sequencer.ErrInvalid) {
		t.Fatalf("short key: %v", err)
	}
}

type fakeChecker struct{ valid map[uint64]bool }

func (f fakeChecker) CheckSequencer(_ context.Context, s sequencer.Sequencer) (bool, string, error) {
	if f.valid == nil {
		return false, "", errors.New("cell unreachable")
	}
	return f.valid[s.Generation], "released", nil
}

func TestValidatorChecker(t *testing.T) {
	pub, priv := newKey(t)
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub, Checker: fakeChecker{valid: map[uint64]bool{3: true}}})
	ctx := context.Background()
	ran := false
	if err := v.Do(ctx, signed(t, priv, 2, 1, sequencer.Exclusive), func() error { ran = true; return nil }); !errors.Is(err, sequencer.ErrStale) || ran {
		t.Fatalf("released grant: %v (ran %v); want ErrStale without running", err, ran)
	}
	if err := v.Do(ctx, signed(t, priv, 3, 1, sequencer.Exclusive), func() error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("current grant: %v (ran %v)", err, ran)
	}
	v2, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub, Checker: fakeChecker{}})
	if err := v2.Check(ctx, signed(t, priv, 3, 1, sequencer.Exclusive)); !errors.Is(err, sequencer.ErrUnconfirmed) {
		t.Fatalf("checker failure: %v; want ErrUnconfirmed", err)
	}
}

// TestValidatorAtomic: while an operation with generation g runs, a newer
// grant's operation waits; an older one is refused after it. Many
// goroutines write with random generations; the writes that ran, in order,
// have non-decreasing generations.
func TestValidatorAtomic(t *testing.T) {
	pub, priv := newKey(t)
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub})
	seqs := make([]sequencer.Sequencer, 40)
	for i := range seqs {
		seqs[i] = signed(t, priv, uint64(1+(i*7)%40), uint64(1+(i*7)%40), sequencer.Exclusive)
	}
	var mu sync.Mutex
	var applied []uint64
	var wg sync.WaitGroup
	for _, s := range seqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = v.Do(context.Background(), s, func() error {
				mu.Lock()
				applied = append(applied, s.Generation)
				mu.Unlock()
				return nil
			})
		}()
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("generation %d applied after %d: %v", applied[i], applied[i-1], applied)
		}
	}
	if len(applied) == 0 {
		t.Fatal("no operation ran")
	}
}

func TestMiddleware(t *testing.T) {
	pub, priv := newKey(t)
	_, other := newKey(t)
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub})
	var rejected []string
	h := sequencer.Middleware(v, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := sequencer.FromContext(r.Context())
		if !ok {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.Header().Set("X-Generation", strings.Repeat("g", int(s.Generation)))
		w.WriteHeader(http.StatusNoContent)
	}), sequencer.HTTPOptions{
		Exempt:   func(r *http.Request) bool { return r.Method == http.MethodGet },
		OnReject: func(_ *http.Request, err error) { rejected = append(rejected, err.Error()) },
	})
	do := func(method, hdr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "/x", nil)
		if hdr != "" {
			r.Header.Set(sequencer.DefaultHeader, hdr)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	cases := []struct {
		method, hdr string
		status      int
		reason      string
	}{
		{"PUT", signed(t, priv, 5, 1, sequencer.Exclusive).String(), 204, ""},
		{"PUT", "", 428, "missing"},
		{"PUT", "!!notbase64", 400, "malformed"},
		{"PUT", signed(t, other, 6, 1, sequencer.Exclusive).String(), 403, "forged"},
		{"PUT", signed(t, priv, 4, 1, sequencer.Exclusive).String(), 409, "stale"},
		{"PUT", signed(t, priv, 5, 2, sequencer.Exclusive).String(), 409, "conflict"},
		{"GET", "", 200, ""},
		{"PUT", signed(t, priv, 6, 1, sequencer.Exclusive).String(), 204, ""},
	}
	for i, c := range cases {
		w := do(c.method, c.hdr)
		if w.Code != c.status || w.Header().Get(sequencer.RejectHeader) != c.reason {
			t.Fatalf("case %d: status %d reason %q body %q; want %d %q", i, w.Code, w.Header().Get(sequencer.RejectHeader), w.Body.String(), c.status, c.reason)
		}
		if c.reason != "" && !strings.Contains(w.Body.String(), c.reason) {
			t.Fatalf("case %d: body %q does not explain %q", i, w.Body.String(), c.reason)
		}
	}
	if len(rejected) != 5 {
		t.Fatalf("OnReject saw %d rejections, want 5", len(rejected))
	}
}

// BenchmarkValidatorDo: one signed sequencer checked (Ed25519 verify plus
// the fencing rule) around an empty operation.
func BenchmarkValidatorDo(b *testing.B) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	v, _ := sequencer.NewValidator(sequencer.ValidatorConfig{PublicKey: pub})
	s, _ := sequencer.Sequencer{Cell: "c", Tenant: "t", Path: "/t/lock", Mode: sequencer.Exclusive, Generation: 1, Instance: 1}.Sign(priv)
	ctx := context.Background()
	for b.Loop() {
		if err := v.Do(ctx, s, func() error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
}
