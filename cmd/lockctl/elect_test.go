package main_test

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
)

// TestElectObserveVacancy kills an elected `lockctl elect` and checks that
// `lockctl elect --observe` prints the leader, then that leadership is
// vacant, then the next leader, in that order.
func TestElectObserveVacancy(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc, env := startTestCell(t, ctx)

	// The election's node, with a short lock-delay so that the next leader
	// need not wait 10 s.
	s := tenantSession(t, ctx, lc, "setup")
	if _, err := s.Open(ctx, "/t/v", client.OpenOptions{Create: true, LockDelay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}

	start := func(args ...string) (*exec.Cmd, <-chan string) {
		t.Helper()
		return startLines(t, ctx, bin, env, args...)
	}
	// next returns the next line that is not skip, failing if ctx ends.
	next := func(lines <-chan string, skip string) string {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatal("the command ended")
				}
				if skip != "" && strings.HasPrefix(l, skip) {
					continue
				}
				return l
			case <-ctx.Done():
				t.Fatal("no line before the test's deadline")
			}
		}
	}

	one, oneOut := start("elect", "/t/v", "one")
	if l := next(oneOut, ""); !strings.HasPrefix(l, "elected: one") {
		t.Fatalf("elect one printed %q", l)
	}
	_, obs := start("elect", "--observe", "/t/v")
	if l := next(obs, "no leader"); !strings.HasPrefix(l, "leader: one") {
		t.Fatalf("observer printed %q; want leader: one", l)
	}
	// The leader dies: its session ends when its lease runs out.
	_ = one.Process.Kill()
	if l := next(obs, ""); !strings.HasPrefix(l, "no leader") {
		t.Fatalf("observer printed %q after the leader died; want no leader", l)
	}
	_, twoOut := start("elect", "/t/v", "two")
	if l := next(twoOut, ""); !strings.HasPrefix(l, "elected: two") {
		t.Fatalf("elect two printed %q", l)
	}
	if l := next(obs, ""); !strings.HasPrefix(l, "leader: two") {
		t.Fatalf("observer printed %q; want leader: two", l)
	}
}

// TestElectObserveResignEvent: an observer whose vacancy poll is an hour
// still prints "no leader" when the leader resigns, because the resignation
// clears the election's node and that event wakes it; then it prints the
// next leader.
func TestElectObserveResignEvent(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc, env := startTestCell(t, ctx)
	s := tenantSession(t, ctx, lc, "setup")
	if _, err := s.Open(ctx, "/t/r", client.OpenOptions{Create: true, LockDelay: 200 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	start := func(args ...string) (*exec.Cmd, <-chan string) {
		t.Helper()
		return startLines(t, ctx, bin, env, args...)
	}
	next := func(lines <-chan string, what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the command ended before printing %s", what)
			}
			return l
		case <-ctx.Done():
			t.Fatalf("nothing printed (want %s) before the test's deadline", what)
		}
		return ""
	}
	one, oneOut := start("elect", "/t/r", "one")
	if l := next(oneOut, "elected"); !strings.HasPrefix(l, "elected: one") {
		t.Fatalf("elect one printed %q", l)
	}
	_, obs := start("elect", "--observe", "--poll", "1h", "/t/r")
	if l := next(obs, "leader: one"); !strings.HasPrefix(l, "leader: one") {
		t.Fatalf("observer printed %q; want leader: one", l)
	}
	if err := one.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if l := next(oneOut, "resigned"); l != "resigned" {
		t.Fatalf("elect one printed %q; want resigned", l)
	}
	if l := next(obs, "no leader"); !strings.HasPrefix(l, "no leader") {
		t.Fatalf("observer printed %q after the leader resigned; want no leader", l)
	}
	_, twoOut := start("elect", "/t/r", "two")
	if l := next(twoOut, "elected"); !strings.HasPrefix(l, "elected: two") {
		t.Fatalf("elect two printed %q", l)
	}
	if l := next(obs, "leader: two"); !strings.HasPrefix(l, "leader: two") {
		t.Fatalf("observer printed %q; want leader: two", l)
	}
}

// startLines starts bin with args and env, and returns the command and the
// lines of its standard output (closed at its end); the process is killed
// when the test ends.
func startLines(t *testing.T, ctx context.Context, bin string, env []string, args ...string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}
