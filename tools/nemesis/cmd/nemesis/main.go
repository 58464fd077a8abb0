// Command nemesis runs lockcell's fault-injection suite on real processes
// (see package tools/nemesis):
//
//	nemesis -duration 2m -seed 1            one run
//	nemesis -weaken nofence -runs 5 ...     weakened runs (nofence, skew, nofsync, lockctx)
//	nemesis worker FILE                     (internal) a worker process
//
// It exits 0 when every run passed — a normal run without violations, a
// weakened run when the checker it targets fired —, 1 otherwise (a
// violation, or a weakening its checker missed), 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/tools/nemesis"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "worker" {
		return worker(args[1:], stderr)
	}
	fs := flag.NewFlagSet("nemesis", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 2*time.Minute, "how long to inject faults")
	seed := fs.Uint64("seed", 0, "seed of the schedule (0: from the clock)")
	workers := fs.Int("workers", 0, "worker processes (at least 4; 0: 7)")
	weaken := fs.String("weaken", "", "weakened run that must be caught by its checker: nofence, skew, nofsync or lockctx")
	lease := fs.Duration("session-lease", 0, "the cell's session lease (0: 12s)")
	runs := fs.Int("runs", 1, "number of runs (seeds seed, seed+1, ...)")
	dir := fs.String("dir", "", "keep the run's files here (default: a temporary directory, kept on failure)")
	lockcelld := fs.String("lockcelld", "", "lockcelld binary (default: build it)")
	verbose := fs.Bool("v", false, "log progress")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano() % 1_000_000)
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *lockcelld == "" {
		tmp, err := os.MkdirTemp("", "nemesis-bin-")
		if err != nil {
			fmt.Fprintln(stderr, "nemesis:", err)
			return 1
		}
		defer os.RemoveAll(tmp)
		if *lockcelld, err = nemesis.BuildLockcelld(ctx, tmp); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	failed, detected := 0, 0
	for i := range *runs {
		opts := nemesis.Options{Duration: *duration, Seed: *seed + uint64(i), Workers: *workers, Weaken: *weaken, Lockcelld: *lockcelld, Logger: log, SessionLease: *lease}
		if *dir != "" {
			opts.Dir = fmt.Sprintf("%s/run-%d", *dir, opts.Seed)
		}
		res, err := nemesis.Run(ctx, opts)
		if err != nil {
			fmt.Fprintf(stdout, "nemesis: ERROR seed=%d: %v\n", opts.Seed, err)
			failed++
			continue
		}
		res.WriteReport(stdout)
		if !res.Passed() {
			failed++
		}
		if res.Detected() {
			detected++
		}
		if ctx.Err() != nil {
			break
		}
	}
	if *weaken != "" {
		fmt.Fprintf(stdout, "nemesis: weaken=%s: its checker %s fired in %d of %d runs\n", *weaken, nemesis.TargetChecker(*weaken), detected, *runs)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// worker runs one worker process: its config in a JSON file, its history on
// stdout, "resume" lines on stdin.
func worker(args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: nemesis worker CONFIG.json")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(stderr, "nemesis worker:", err)
		return 1
	}
	var cfg nemesis.WorkerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		fmt.Fprintln(stderr, "nemesis worker:", err)
		return 1
	}
	return nemesis.WorkerMain(cfg, stderr)
}
