package main_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStatusWithoutQuorum: lockctl status asks every replica directly, so
// with a majority of the cell stopped it still shows what the survivor says
// of itself (role, epoch, slots, whom it believes master), names the
// replicas that did not answer, says there is no master, and exits 1 —
// within the bound of one question per replica, not after waiting for a
// master that will not come.
func TestStatusWithoutQuorum(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lc := startLocalCell(t, ctx, nil)
	// status must finish well before a client's 30 s wait for a master.
	status := func() (int, string, string) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		defer scancel()
		cmd := exec.CommandContext(sctx, bin, "status")
		cmd.Env = append(os.Environ(), "LOCKCELL_CONFIG="+lc.ClientFilePath())
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		if sctx.Err() != nil {
			t.Fatalf("lockctl status did not finish within 20 s (it must not wait for a master); stdout %q", out.String())
		}
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String()
	}

	m, err := lc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A whole cell: every replica answers (asked again, within a bound,
	// if a loaded machine made one miss its three seconds).
	epoch := regexp.MustCompile(`(?m)^\d+\s+127\.0\.0\.1:\d+\s+(master|follower)\s+\d+\.\d+\s+\d+\s+\d+\s+\d+\s+\d+$`)
	var code int
	var out, errs string
	for {
		code, out, errs = status()
		if code == 0 && strings.Contains(out, "master replica") && !strings.Contains(out, "did not answer") && len(epoch.FindAllString(out, -1)) == 3 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("status of a whole cell never showed three rows with role, epoch (round.replica), master, slots and lag: exit %d\n%s%s", code, out, errs)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("with quorum:\n%s", out)

	var survivor uint64
	for _, r := range lc.Running() {
		if r.ID() != m.ID() {
			survivor = r.ID()
		}
	}
	for _, r := range lc.Running() {
		if r.ID() != survivor {
			lc.Stop(r.ID())
		}
	}
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(itoa(survivor)) + `\s+127\.0\.0\.1:\d+\s+(follower|candidate|leader)\s+\d+\.\d+\s+\S+( \S+)?\s+\d+\s+\d+\s+\d+$`)
	for {
		code, out, errs = status()
		if row.MatchString(out) || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("without quorum (exit %d):\n%s%s", code, out, errs)
	if !row.MatchString(out) {
		t.Errorf("status without quorum has no row for survivor %d with its role, epoch, belief and slots", survivor)
	}
	if code != 1 {
		t.Errorf("exit %d without quorum; want 1", code)
	}
	for _, want := range []string{"NO MASTER", "1 of 3 replicas answered", "did not answer:", "no answer"} {
		if !strings.Contains(out, want) {
			t.Errorf("status without quorum lacks %q", want)
		}
	}
}

// runLockctl runs lockctl with the cell's settings and returns its exit
// code and output; it fails the test if lockctl does not finish within
// limit.
func runLockctl(t *testing.T, ctx context.Context, bin, config string, limit time.Duration, args ...string) (int, string, string) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(sctx, bin, args...)
	cmd.Env = append(os.Environ(), "LOCKCELL_CONFIG="+config)
	// SIGQUIT: a lockctl that hangs prints its goroutines.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if sctx.Err() != nil {
		t.Fatalf("lockctl %v did not finish within %v; stdout %q, stderr:\n%s", args, limit, out.String(), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errb.String()
}

func itoa(n uint64) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}
