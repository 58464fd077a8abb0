package nemesis

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// WorkerMain runs a worker process's main loop on this process's stdin
// and stdout (logs to stderr) and returns its exit code. It is what
// `nemesis worker FILE` and the test binary in worker mode run.
func WorkerMain(cfg WorkerConfig, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := RunWorker(ctx, cfg, os.Stdin, os.Stdout, log); err != nil {
		fmt.Fprintln(stderr, "nemesis worker:", err)
		return 1
	}
	return 0
}
