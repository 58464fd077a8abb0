//go:build linux

package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
)

// treeScript is lock's command in TestLockStopsProcessGroup: a tree three
// deep (sh → sh → sleep) whose inner part ignores SIGTERM, with a stopped
// process and, via setsid, one that left the process group. Every pid goes
// to the file $1; "ready" is printed once all are written.
const treeScript = `pids="$1"
echo $$ >> "$pids"
sleep 300 & echo $! >> "$pids"; kill -STOP $!
sh -c 'trap "" TERM
echo $$ >> "$1"
sleep 300 & echo $! >> "$1"
setsid sleep 300 & echo $! >> "$1"
echo ready
wait' inner "$pids" &
wait
`

// alive returns the pids among pids whose process still exists and is not
// a zombie (a zombie has stopped; only its exit status is left).
func alive(pids []int) []int {
	var out []int
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && len(s) > i+2 && s[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid file %q", b)
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestLockStopsProcessGroup runs `lockctl lock -- sh tree` with a real
// process tree whose grandchildren ignore SIGTERM, makes lockctl give up
// the lock (a signal to lockctl; the lock lost with its session), and
// checks, at the moment another client is granted the lock, that no
// process of the tree is left.
func TestLockStopsProcessGroup(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid(1)")
	}
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc, env := startTestCell(t, ctx)
	dir := t.TempDir()
	script := filepath.Join(dir, "tree.sh")
	if err := os.WriteFile(script, []byte(treeScript), 0o644); err != nil {
		t.Fatal(err)
	}

	// The other client; it creates the lock file with a lock-delay well
	// above lockctl's kill grace.
	ws := tenantSession(t, ctx, lc, "waiter")
	h, err := ws.Open(ctx, "/t/g", client.OpenOptions{Create: true, LockDelay: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}

	runLockctl := func(args ...string) (int, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), errb.String()
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, errb.String()
	}

	// A kill grace longer than the lock-delay is warned about.
	if code, stderr := runLockctl("lock", "--kill-grace", "10s", "/t/g", "--", "true"); code != 0 || !strings.Contains(stderr, "shorter than --kill-grace") {
		t.Fatalf("lock --kill-grace 10s: exit %d, stderr %q; want exit 0 and a warning", code, stderr)
	}
	if code, stderr := runLockctl("lock", "--kill-grace", "1s", "/t/g", "--", "true"); code != 0 || strings.Contains(stderr, "warning") {
		t.Fatalf("lock --kill-grace 1s: exit %d, stderr %q; want exit 0 and no warning", code, stderr)
	}

	tok := filepath.Join(dir, "token")
	mk := exec.CommandContext(ctx, bin, "tenant", "token", "t", "robot", "--out", tok)
	mk.Env = env
	out, err := mk.CombinedOutput()
	if err != nil {
		t.Fatalf("tenant token: %v\n%s", err, out)
	}
	tokID := strings.Fields(string(out))[1]

	for _, tc := range []struct {
		name     string
		args     []string
		giveUp   func(lockctl *exec.Cmd)
		wantCode int
	}{
		{"signal", nil, func(lockctl *exec.Cmd) { _ = lockctl.Process.Signal(syscall.SIGTERM) }, 128 + int(syscall.SIGTERM)},
		{"lost", []string{"--token-file", tok}, func(*exec.Cmd) {
			// Revoking the token expires lockctl's session at the master.
			rv := exec.CommandContext(ctx, bin, "tenant", "revoke", "t", tokID)
			rv.Env = env
			if out, err := rv.CombinedOutput(); err != nil {
				t.Errorf("tenant revoke: %v\n%s", err, out)
			}
		}, 75},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			args := append(append([]string{}, tc.args...), "lock", "--kill-grace", "300ms", "/t/g", "--", "sh", script, pidFile)
			lockctl := exec.CommandContext(ctx, bin, args...)
			lockctl.Env = env
			stdout, _ := lockctl.StdoutPipe()
			var stderr bytes.Buffer
			lockctl.Stderr = &stderr
			if err := lockctl.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = lockctl.Process.Kill() }()
			sc := bufio.NewScanner(stdout)
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("lockctl printed %q (stderr %q)", sc.Text(), stderr.String())
			}
			pids := readPids(t, pidFile)
			t.Cleanup(func() {
				// Whatever lockctl failed to stop, this test started.
				for _, pid := range alive(pids) {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			if len(pids) != 5 || len(alive(pids)) != 5 {
				t.Fatalf("tree pids %v, alive %v; want 5 running", pids, alive(pids))
			}

			granted := make(chan []int, 1)
			go func() {
				l, err := h.Acquire(ctx, api.LockExclusive)
				if err != nil {
					t.Errorf("waiter Acquire: %v", err)
					granted <- nil
					return
				}
				// The moment of the grant: what of the tree is still there?
				granted <- alive(pids)
				_ = l.Release(ctx)
			}()
			tc.giveUp(lockctl)
			var left []int
			select {
			case left = <-granted:
			case <-ctx.Done():
				t.Fatal("the waiter never got the lock")
			}
			if len(left) > 0 {
				t.Fatalf("when another client got the lock, processes %v of the command's tree %v were still running", left, pids)
			}
			_, _ = io.Copy(io.Discard, stdout)
			err := lockctl.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			if tc.wantCode >= 0 && code != tc.wantCode {
				t.Errorf("lockctl exit %d, stderr %q; want %d", code, stderr.String(), tc.wantCode)
			}
			if a := alive(pids); len(a) > 0 {
				t.Fatalf("after lockctl exited, processes %v of %v are still running", a, pids)
			}
			t.Logf("lockctl exit %d; tree of %d processes stopped before the lock moved on; stderr %q", code, len(pids), stderr.String())
		})
	}
}
