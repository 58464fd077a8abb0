// Command lockcelld runs lockcell replicas.
//
//	lockcelld serve --config FILE   run one replica of a cell
//	lockcelld dev [flags]           run a whole five-replica cell in this process
//	lockcelld dev --procs           the same as five serve processes (make run-procs)
//	lockcelld init [flags]          write certificates and configs for a cell (in ./deploy)
//	lockcelld init --join --id N --addr HOST:PORT
//	                                prepare a new replica that joins the running cell in --dir
//	lockcelld restore --from FILE   build a new cell's replica data directory from a backup
//	lockcelld check --dir DIR       verify a replica's data directory offline
//
// Run any subcommand with --help for its flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return cmdServe(args[1:], stdout, stderr)
	case "dev":
		return cmdDev(args[1:], stdout, stderr)
	case "init":
		return cmdInit(args[1:], stdout, stderr)
	case "restore":
		return cmdRestore(args[1:], stdout, stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "lockcelld: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprint(w, `lockcelld runs lockcell replicas.

Usage:
  lockcelld serve --config FILE   run one replica of a cell
  lockcelld dev [flags]           run a whole local cell in this process (make run);
                                  with --procs, one process per replica (make run-procs)
  lockcelld init [flags]          write certificates, replica configs and new-member
                                  data directories for a new cell
  lockcelld init --join --id N --addr HOST:PORT [--dir DIR]
                                  prepare one new replica of the running cell in DIR:
                                  its certificate, config and empty data directory
  lockcelld restore --from FILE --config FILE
                                  build a replica's data directory of a NEW cell from a
                                  backup (lockctl snapshot save); once per replica
  lockcelld check --dir DIR       verify a stopped replica's data directory offline
                                  (or --backup FILE: a backup file); exit 1 on a problem

Run 'lockcelld COMMAND --help' for a command's flags.
`)
}

// parseFlags parses a subcommand's flags. --help prints its flags to
// stdout and stops with exit 0; a bad flag prints the error and the flags
// to stderr and stops with exitUsage.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (int, bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case err == nil:
		return 0, false
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage of %s:\n", fs.Name())
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return exitOK, true
	}
	fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
	fs.SetOutput(stderr)
	fs.PrintDefaults()
	return exitUsage, true
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q (debug, info, warn, error)", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// signalContext is cancelled by SIGINT or SIGTERM; term reports SIGTERM.
func signalContext() (ctx context.Context, term <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	t := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			if s == syscall.SIGTERM {
				close(t)
			}
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, t, func() { signal.Stop(sigs); cancel() }
}

func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockcelld serve", flag.ContinueOnError)
	configFile := fs.String("config", "", "replica config file (JSON; see 'lockcelld init')")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if code, stop := parseFlags(fs, args, stdout, stderr); stop {
		return code
	}
	if *configFile == "" {
		fmt.Fprintln(stderr, "lockcelld serve: --config is required")
		return exitUsage
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld serve:", err)
		return exitUsage
	}
	fc, err := readFileConfig(*configFile)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld serve:", err)
		return exitError
	}
	cfg, err := fc.replicaConfig(*configFile, log)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld serve:", err)
		return exitError
	}
	ctx, term, stop := signalContext()
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	r, err := cell.Start(startCtx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld serve:", err)
		return exitError
	}
	select {
	case <-ctx.Done():
	case <-r.Done():
		fmt.Fprintln(stderr, "lockcelld serve: replica stopped:", r.Err())
		_ = r.Close()
		return exitError
	}
	select {
	case <-term:
		// SIGTERM: a planned stop. A master hands over first, so the next
		// master need not wait out the lease.
		if r.Status().Master {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := r.StepDown(sctx, 0); err != nil {
				log.Warn("step-down before stopping failed", "err", err)
			}
			cancel()
		}
	default:
	}
	_ = r.Close()
	return exitOK
}

func cmdDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lockcelld dev", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory for the cell's data and certificates, reused on restart (default data/dev, with --procs data/dev-procs)")
	procs := fs.Bool("procs", false, "run each replica as its own 'lockcelld serve' process, so that one can be killed to watch a fail-over")
	port := fs.Int("port", 7001, "UDP port of replica 1; replica i listens on port+i-1, its HTTP status on port+100+i-1")
	replicas := fs.Int("replicas", 5, "number of replicas")
	tenant := fs.String("tenant", "dev", "the dev tenant created on first start")
	logLevel := fs.String("log-level", "warn", "log level: debug, info, warn, error")
	if code, stop := parseFlags(fs, args, stdout, stderr); stop {
		return code
	}
	log, err := newLogger(stderr, *logLevel)
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev:", err)
		return exitUsage
	}
	ctx, _, stop := signalContext()
	defer stop()
	if *procs {
		if *dir == "" {
			*dir = "data/dev-procs"
		}
		return runDevProcs(ctx, *dir, *port, *replicas, *tenant, *logLevel, stdout, stderr)
	}
	if *dir == "" {
		*dir = "data/dev"
	}
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	lc, err := cell.StartLocal(startCtx, cell.LocalConfig{
		Dir: *dir, Replicas: *replicas, Cell: "dev", BasePort: *port, DevTenant: *tenant, Logger: log,
	})
	cancel()
	if err != nil {
		fmt.Fprintln(stderr, "lockcelld dev:", err)
		return exitError
	}
	defer lc.Close()
	m := lc.Master()
	fmt.Fprintf(stdout, "lockcell dev cell is up: %d replicas on %s\n", *replicas, strings.Join(lc.Addrs(), " "))
	if m != nil {
		fmt.Fprintf(stdout, "master: replica %d; status page http://%s/\n", m.ID(), m.HTTPAddr())
	}
	fmt.Fprintf(stdout, "data and certificates: %s (client settings: %s)\n", *dir, lc.ClientFilePath())
	fmt.Fprintf(stdout, `
Try it (in another terminal):
  go run ./cmd/lockctl status
  go run ./cmd/lockctl put /%[1]s/hello world && go run ./cmd/lockctl get /%[1]s/hello
  go run ./cmd/lockctl lock /%[1]s/demo -- echo hi

Ctrl-C stops the cell; 'make run' again restarts it with its data.
`, *tenant)
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "stopping")
	case <-anyStopped(lc):
		fmt.Fprintln(stderr, "lockcelld dev: a replica stopped on a fatal error; see the log")
		return exitError
	}
	return exitOK
}

// anyStopped is closed when a replica of lc stops on its own.
func anyStopped(lc *cell.LocalCell) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	for _, r := range lc.Running() {
		go func(r *cell.Replica) {
			<-r.Done()
			if r.Err() != nil {
				once.Do(func() { close(ch) })
			}
		}(r)
	}
	return ch
}
