package nemesis

import (
	"context"
	"encoding/json"
	"flag"
	"os"
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
	os.Exit(m.Run())
}

var (
	shortDuration = flag.Duration("nemesis.duration", 55*time.Second, "fault schedule of TestNemesisShort")
	shortSeed     = flag.Uint64("nemesis.seed", 0, "seed of TestNemesisShort (0: from the clock)")
)

// TestNemesisShort runs a short schedule on a real five-process cell and
// requires no violation.
func TestNemesisShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cell of real processes for about a minute")
	}
	seed := *shortSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := Run(ctx, Options{
		Duration:   *shortDuration,
		Seed:       seed,
		WorkerArgv: func(f string) []string { return []string{os.Args[0], "worker", f} },
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
	if res.Operations["fenced"]["ok"] == 0 || res.AckedCreates == 0 || res.RegisterOps == 0 {
		t.Fatalf("seed %d: a workload made no progress: %v", seed, res.Operations)
	}
	if n := totalFaults(res.Faults); n == 0 {
		t.Fatalf("seed %d: no fault was injected", seed)
	}
}

func totalFaults(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}
