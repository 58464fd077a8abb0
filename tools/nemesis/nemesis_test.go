package nemesis

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as the worker binary: `TESTBIN worker
// FILE` runs a worker, so the short schedule needs no second build.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 && os.Args[1] == "worker" {
		b, err := os.ReadFile(os.Args[2])
		if err != nil {
			os.Exit(1)
		}
		var cfg WorkerConfig
		if err := json.Unmarshal(b, &cfg); err != nil {
			os.Exit(1)
		}
		os.Exit(WorkerMain(cfg, os.Stderr))
	}
	code := m.Run()
	if lockcelldBin != "" {
		_ = os.RemoveAll(filepath.Dir(lockcelldBin))
	}
	os.Exit(code)
}

var (
	shortDuration = flag.Duration("nemesis.duration", 45*time.Second, "fault schedule of TestNemesisShort (at least one of every fault kind)")
	shortSeed     = flag.Uint64("nemesis.seed", 0, "seed of TestNemesisShort (0: from the clock)")
)

// TestNemesisShort runs a short schedule on a real five-process cell (a 3 s
// session lease, so that zombies come often) and requires no violation,
// floors included: every checker judged enough and every fault kind was
// applied. It runs in parallel with the weakened runs (TestWeakenedRuns).
func TestNemesisShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cell of real processes for about a minute")
	}
	t.Parallel()
	seed := *shortSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Duration:     *shortDuration,
		Lockcelld:    testLockcelld(t),
		Seed:         seed,
		SessionLease: 3 * time.Second,
		WorkerArgv:   func(f string) []string { return []string{os.Args[0], "worker", f} },
	})
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	var sb strings.Builder
	res.WriteReport(&sb)
	t.Log("\n" + sb.String())
	if !res.OK() {
		t.Fatalf("%s", res.Verdict())
	}
}
