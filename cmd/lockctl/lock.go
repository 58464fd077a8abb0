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
$`+envGeneration+`.

CMD runs in a process group of its own. Before lockctl gives up the lock or
exits - CMD exited, the lock may be lost (the session entered jeopardy or
expired), or lockctl got SIGINT, SIGTERM or SIGHUP - it stops the whole
group: SIGTERM (with SIGCONT, for stopped processes), then SIGKILL after
--kill-grace; the lock is released only once no process of the group is
left. On Linux lockctl also stops descendants that left the group (setsid)
once their parent died; work handed to other process trees (service
managers, containers, remote hosts) is not stopped, nor is anything if
lockctl itself is killed with SIGKILL. Keep --kill-grace below the lock's
lock-delay (lockctl warns otherwise): after a loss, another holder may get
the lock once the lock-delay has passed.

When standard input is the terminal, CMD's group is the terminal's
foreground group, so ^C reaches CMD (lockctl then releases the lock and
exits with CMD's status); ^Z suspends CMD but not lockctl, which holds the
lock meanwhile.

If the lock may be lost, lockctl exits 75 after stopping the group.
Otherwise it releases the lock and exits with CMD's status. With --try it
exits 4 at once if the lock is held.`)
	shared := fs.Bool("shared", false, "take the lock in shared (reader) mode")
	try := fs.Bool("try", false, "fail at once (exit 4) if the lock is held")
	wait := fs.Duration("wait", 0, "give up waiting for the lock after this long (0: wait forever)")
	killGrace := fs.Duration("kill-grace", 5*time.Second, "after SIGTERM, SIGKILL what is left of CMD's process group after this long")
	fs.DurationVar(killGrace, "kill-after", 5*time.Second, "the former name of --kill-grace")
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
	path = resolve(s, path)
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

	if st, err := h.Stat(actx); err == nil && time.Duration(st.LockDelay) < *killGrace {
		fmt.Fprintf(e.stderr, "lockctl lock: warning: %s has lock-delay %v, shorter than --kill-grace %v: if the lock is lost, another client may take it while %s is still being stopped\n",
			path, time.Duration(st.LockDelay), *killGrace, argv[0])
	}

	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(),
		envSequencer+"="+l.Sequencer().String(),
		envLockPath+"="+path,
		envGeneration+"="+strconv.FormatUint(l.Generation(), 10))
	g, err := startGroup(cmd)
	if err != nil {
		_ = l.Release(context.Background())
		return e.fail("lock", fmt.Errorf("starting %s: %w", argv[0], err))
	}
	var lost error
	select {
	case <-g.Exited():
	case <-l.Done():
		lost = context.Cause(l.Context())
	case <-e.ctx.Done():
	}
	// INVARIANT: the lock is released (or given up) only after the whole
	// group is gone, also after a normal exit that left processes behind.
	err, serr := g.Stop(*killGrace)
	if serr != nil {
		// Processes survive SIGKILL: keep the lock until the session ends
		// rather than release it under them.
		fmt.Fprintf(e.stderr, "lockctl lock: stopping %s: %v; not releasing %s\n", argv[0], serr, path)
		return exitLockLost
	}
	if lost == nil && l.Err() != nil {
		lost = context.Cause(l.Context())
	}
	if lost != nil {
		fmt.Fprintf(e.stderr, "lockctl lock: the lock on %s may be lost (%v); stopped %s and its process group\n", path, lost, argv[0])
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
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			// As a shell reports a command killed by a signal.
			return 128 + int(ws.Signal())
		}
		return exitError
	}
	return e.fail("lock", err)
}

func cmdElect(e *env, args []string) int {
	fs := e.flags("elect", "[flags] PATH VALUE | --observe PATH", `Campaigns for leadership of the election at PATH with VALUE; once
elected, prints "elected" and holds leadership until interrupted (exit 0,
resigning) or until leadership may be lost (exit 75). With --observe,
prints each new leader's value as it is elected, and "no leader" when
leadership is vacant (the leader resigned or its session ended), until
interrupted.`)
	observe := fs.Bool("observe", false, "print each leader instead of campaigning")
	count := fs.Int("count", 0, "with --observe, exit after this many leaders (0: never)")
	poll := fs.Duration("poll", defaultVacancyPoll, "with --observe, how often to look for a vacancy that no event announces (a leader whose session ended)")
	if code, stop := e.parse(fs, args); stop {
		return code
	}
	if (*observe && fs.NArg() != 1) || (!*observe && fs.NArg() != 2) {
		fmt.Fprintln(e.stderr, "lockctl elect: want PATH VALUE, or --observe PATH (see 'lockctl elect --help')")
		return exitUsage
	}
	dctx, cancel := e.bounded()
	s, closeAll, err := e.session(dctx)
	cancel()
	if err != nil {
		return e.fail("elect", err)
	}
	defer closeAll()
	path := resolve(s, fs.Arg(0))
	el := client.NewElection(s, path)
	if *observe {
		if *poll <= 0 {
			fmt.Fprintln(e.stderr, "lockctl elect: --poll must be positive")
			return exitUsage
		}
		return observeElection(e, s, el, path, *count, *poll)
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

// defaultVacancyPoll is how often elect --observe looks whether the
// leader is still there when no event says so: a leader that resigns
// clears the node (an event), but a lock freed because its holder's
// session ended announces nothing.
const defaultVacancyPoll = 500 * time.Millisecond

// observeElection prints each new leader as the election reports it, and
// a line when leadership is vacant, until e.ctx ends or count leaders were
// printed. It looks for a vacancy at once on every event of the session
// that may announce one (an event on path, a fail-over or overflow, the
// session becoming safe again), and every poll besides.
func observeElection(e *env, s *client.Session, el *client.Election, path string, count int, poll time.Duration) int {
	leaders := el.Observe(e.ctx)
	events := s.Events()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	n := 0
	// vacant: "no leader" was printed since the last leader.
	vacant := false
	checkVacancy := func() {
		if vacant {
			return
		}
		ctx, cancel := context.WithTimeout(e.ctx, 5*defaultVacancyPoll)
		_, err := el.Leader(ctx)
		cancel()
		if errors.Is(err, client.ErrNoLeader) {
			fmt.Fprintf(e.stdout, "no leader: leadership of %s is vacant\n", path)
			vacant = true
		}
	}
	for {
		select {
		case ld, ok := <-leaders:
			if !ok {
				if err := s.Err(); err != nil {
					return e.fail("elect", err)
				}
				return exitOK
			}
			fmt.Fprintf(e.stdout, "leader: %s (generation %d)\n", ld.Value, ld.Sequencer.Generation)
			vacant = false
			n++
			if count > 0 && n >= count {
				return exitOK
			}
		case ev := <-events:
			if mayAnnounceVacancy(ev, path) {
				checkVacancy()
			}
		case <-tick.C:
			checkVacancy()
		}
	}
}

// mayAnnounceVacancy reports whether ev may mean that the election at path
// lost its leader: an event on the node itself, or one after which events
// may have been lost.
func mayAnnounceVacancy(ev client.Event, path string) bool {
	switch ev.Kind {
	case client.EventFailover, client.EventSafe:
		return true
	case client.EventNode:
		return ev.Node.Path == path || ev.Node.Kind == api.EventOverflow
	}
	return false
}
