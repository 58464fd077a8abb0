package main_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// TestStatusWithoutQuorum: lockctl status asks every replica directly, so
// with a majority of the cell stopped it still shows what the survivor says
// of itself (role, epoch, slots, whom it believes master), names the
// replicas that did not answer, says there is no master, and exits 1 —
// within the bound of one question per replica, not after waiting for a
// master that will not come.
func TestStatusWithoutQuorum(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockctl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "test", DevTenant: "t",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
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
	code, out, errs := status()
	if code != 0 || !strings.Contains(out, "master replica") || strings.Contains(out, "did not answer") {
		t.Fatalf("status of a whole cell: exit %d\n%s%s", code, out, errs)
	}
	epoch := regexp.MustCompile(`(?m)^\d+\s+127\.0\.0\.1:\d+\s+(master|follower)\s+\d+\.\d+\s+\d+\s+\d+\s+\d+\s+\d+$`)
	if n := len(epoch.FindAllString(out, -1)); n != 3 {
		t.Fatalf("status of a whole cell: %d rows with role, epoch (round.replica), master, slots and lag; want 3:\n%s", n, out)
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
	code, out, errs = status()
	t.Logf("without quorum (exit %d):\n%s%s", code, out, errs)
	if code != 1 {
		t.Errorf("exit %d without quorum; want 1", code)
	}
	for _, want := range []string{"NO MASTER", "1 of 3 replicas answered", "did not answer:", "no answer"} {
		if !strings.Contains(out, want) {
			t.Errorf("status without quorum lacks %q", want)
		}
	}
	row := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(itoa(survivor)) + `\s+127\.0\.0\.1:\d+\s+(follower|candidate|leader)\s+\d+\.\d+\s+\S+( \S+)?\s+\d+\s+\d+\s+\d+$`)
	if !row.MatchString(out) {
		t.Errorf("status without quorum has no row for survivor %d with its role, epoch, belief and slots", survivor)
	}
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
