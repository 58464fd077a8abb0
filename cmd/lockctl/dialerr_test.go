package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLockctlDialErrors checks that lockctl tells a wrong CA, a revoked
// token, a cell without quorum and a stopped cell apart, each with its own
// message, and exits 1 well before its 30 s --timeout (the test's context
// only bounds a hang; it claims no speed).
func TestLockctlDialErrors(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc, env := startTestCell(t, ctx)

	// A config file naming another cell's CA, beside the real one so that
	// its relative paths still resolve.
	otherCA := t.TempDir()
	if code, _, stderr := runBin(t, ctx, bin, env, "", "certs", "ca", "--dir", otherCA, "--cell", "other"); code != 0 {
		t.Fatalf("certs ca: %s", stderr)
	}
	b, err := os.ReadFile(lc.ClientFilePath())
	if err != nil {
		t.Fatal(err)
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	f["ca"] = filepath.Join(otherCA, "ca.pem")
	b, _ = json.Marshal(f)
	wrongCA := filepath.Join(filepath.Dir(lc.ClientFilePath()), "wrong-ca.json")
	if err := os.WriteFile(wrongCA, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// A revoked token.
	tok := filepath.Join(t.TempDir(), "tok")
	code, out, stderr := runBin(t, ctx, bin, env, "", "tenant", "token", "t", "robot", "--out", tok)
	if code != 0 {
		t.Fatalf("tenant token: %s", stderr)
	}
	tokID := strings.Fields(out)[1]
	if code, _, stderr := runBin(t, ctx, bin, env, "", "tenant", "revoke", "t", tokID); code != 0 {
		t.Fatalf("tenant revoke: %s", stderr)
	}

	type step struct {
		name  string
		setup func()
		args  []string
		words []string
	}
	steps := []step{
		{"wrong CA", nil, []string{"--config", wrongCA, "get", "/t/x"},
			[]string{"certificate refused", "does not verify with the configured CA", otherCA}},
		{"revoked token", nil, []string{"--token-file", tok, "get", "/t/x"},
			[]string{"credentials refused", "token lct1_" + tokID, "revoked"}},
		{"no quorum", func() {
			rs := lc.Running()
			lc.Stop(rs[0].ID())
			lc.Stop(rs[1].ID())
			for i := 0; rs[2].Status().Master; i++ {
				if i == 300 {
					t.Fatal("the survivor still serves as master after 30 s")
				}
				time.Sleep(100 * time.Millisecond)
			}
		}, []string{"get", "/t/x"}, []string{"no master", "answered", "none is master", "no quorum", "lockctl status"}},
		{"stopped cell", lc.Close, []string{"get", "/t/x"}, []string{"no replica answered", "is the cell running"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			if s.setup != nil {
				s.setup()
			}
			code, _, stderr := runBin(t, ctx, bin, env, "", append([]string{"--timeout", "30s"}, s.args...)...)
			if code != 1 {
				t.Fatalf("exit %d, stderr %q; want 1", code, stderr)
			}
			if strings.Contains(stderr, "deadline exceeded") {
				t.Fatalf("lockctl waited out its --timeout: %q", stderr)
			}
			for _, w := range s.words {
				if !strings.Contains(stderr, w) {
					t.Fatalf("stderr %q does not say %q", stderr, w)
				}
			}
			t.Logf("%s", stderr)
		})
	}
}
