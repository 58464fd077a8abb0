package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

func quietLogger() *slog.Logger {
	if os.Getenv("LOCKCTL_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Environment variables lock passes to its command.
const (
	envSequencer  = "LOCKCELL_SEQUENCER"
	envLockPath   = "LOCKCELL_LOCK"
	envGeneration = "LOCKCELL_LOCK_GENERATION"
)

func cmdLock(e *env, args []string) int {
	fs := e.flags("lock", "[flags] PATH -- CMD [ARGS...]", `Runs CMD while holding the lock on PATH (the node is created if missing).
CMD gets the lock's sequencer in $`+envSequencer+` (pass it to protected
servers), the path in $`+envLockPath+` and the generation in
$`+envGeneration+`. If the lock may be lost while CMD runs (the session
enters jeopardy or expires), CMD gets SIGTERM (SIGKILL after --kill-after)
and lockctl exits 75. Otherwise lockctl releases the lock and exits with
CMD's status. With --try it exits 4 at once if the lock is held.`)
	shared := fs.Bool("shared", false, "take the lock in shared (reader) mode")
	try := fs.Bool("try", false, "fail at once (exit 4) if the lock is held")
	wait := fs.Duration("wait", 0, "give up waiting for the lock after this long (0: wait forever)")
	killAfter := fs.Duration("kill-after", 5*time.Second, "after SIGTERM, SIGKILL CMD if it has not exited")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	rest := fs.Args()
	if len(rest) < 2 || rest[1] != "--" || len(rest) < 3 {
		fmt.Fprintln(e.stderr, "lockctl lock: want PATH -- CMD [ARGS...] (see 'lockctl lock --help')")
		return exitUsage
	}
	path, argv := rest[0], rest[2:]
	mode := api.LockExclusive
	if *shared {
		mode = api.LockShared
	}

	dctx, cancel := e.bounded()
	s, closeAll, err := e.session(dctx)
	cancel()
	if err != nil {
		return e.fail("lock", err)
	}
	defer closeAll()
	actx, cancel := context.WithCancel(e.ctx)
	if *wait > 0 {
		actx, cancel = context.WithTimeout(e.ctx, *wait)
	}
	defer cancel()
	h, err := s.Open(actx, path, client.OpenOptions{Create: true})
	if err != nil {
		return e.fail("lock", err)
	}
	var l *client.Lock
	if *try {
		l, err = h.TryAcquire(actx, mode)
	} else {
		l, err = h.Acquire(actx, mode)
	}
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && *wait > 0 {
			fmt.Fprintf(e.stderr, "lockctl lock: %s still held after waiting %v\n", path, *wait)
			return exitLocked
		}
		return e.fail("lock", err)
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(),
		envSequencer+"="+l.Sequencer().String(),
		envLockPath+"="+path,
		envGeneration+"="+strconv.FormatUint(l.Generation(), 10))
	if err := cmd.Start(); err != nil {
		_ = l.Release(context.Background())
		return e.fail("lock", fmt.Errorf("starting %s: %w", argv[0], err))
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var lost error
	select {
	case err = <-exited:
	case <-l.Done():
		lost = context.Cause(l.Context())
		err = stopCommand(cmd, exited, *killAfter)
	case <-e.ctx.Done():
		err = stopCommand(cmd, exited, *killAfter)
	}
	if lost != nil {
		fmt.Fprintf(e.stderr, "lockctl lock: the lock on %s may be lost (%v); stopped %s\n", path, lost, argv[0])
		return exitLockLost
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	if rerr := l.Release(rctx); rerr != nil && !errors.Is(rerr, client.ErrNotHeld) {
		fmt.Fprintf(e.stderr, "lockctl lock: releasing %s: %v\n", path, rerr)
	}
	rcancel()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		if ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		return exitError
	}
	return e.fail("lock", err)
}

// stopCommand sends SIGTERM, then SIGKILL after grace, and returns the
// command's exit.
func stopCommand(cmd *exec.Cmd, exited <-chan error, grace time.Duration) error {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-exited:
		return err
	case <-t.C:
		_ = cmd.Process.Kill()
		return <-exited
	}
}

func cmdElect(e *env, args []string) int {
	fs := e.flags("elect", "[flags] PATH VALUE | --observe PATH", `Campaigns for leadership of the election at PATH with VALUE; once
elected, prints "elected" and holds leadership until interrupted (exit 0,
resigning) or until leadership may be lost (exit 75). With --observe,
prints each new leader's value as it is elected, until interrupted.`)
	observe := fs.Bool("observe", false, "print each leader instead of campaigning")
	count := fs.Int("count", 0, "with --observe, exit after this many leaders (0: never)")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if (*observe && fs.NArg() != 1) || (!*observe && fs.NArg() != 2) {
		fmt.Fprintln(e.stderr, "lockctl elect: want PATH VALUE, or --observe PATH (see 'lockctl elect --help')")
		return exitUsage
	}
	path := fs.Arg(0)
	dctx, cancel := e.bounded()
	s, closeAll, err := e.session(dctx)
	cancel()
	if err != nil {
		return e.fail("elect", err)
	}
	defer closeAll()
	el := client.NewElection(s, path)
	if *observe {
		n := 0
		for ld := range el.Observe(e.ctx) {
			fmt.Fprintf(e.stdout, "leader: %s (generation %d)\n", ld.Value, ld.Sequencer.Generation)
			n++
			if *count > 0 && n >= *count {
				return exitOK
			}
		}
		if err := s.Err(); err != nil {
			return e.fail("elect", err)
		}
		return exitOK
	}
	l, err := el.Campaign(e.ctx, []byte(fs.Arg(1)))
	if err != nil {
		if e.ctx.Err() != nil {
			return exitOK
		}
		return e.fail("elect", err)
	}
	fmt.Fprintf(e.stdout, "elected: %s leads %s (generation %d)\n", fs.Arg(1), path, l.Generation())
	select {
	case <-l.Done():
		fmt.Fprintf(e.stderr, "lockctl elect: leadership of %s may be lost (%v)\n", path, context.Cause(l.Context()))
		return exitLockLost
	case <-e.ctx.Done():
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := el.Resign(rctx); err != nil {
			return e.fail("elect", err)
		}
		fmt.Fprintln(e.stdout, "resigned")
		return exitOK
	}
}
