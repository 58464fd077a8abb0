package main_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// buildLockctl builds the lockctl binary once per test run, into a
// temporary directory removed when the tests end.
func buildLockctl(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "lockctl-test-"); buildErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "lockctl")
		if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
			return
		}
		builtBin = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// startTestCell starts a 3-replica in-process cell with tenant "t" and a 2 s
// session lease, and returns it with the environment that points lockctl
// at it.
func startTestCell(t *testing.T, ctx context.Context) (*cell.LocalCell, []string) {
	t.Helper()
	lc := startLocalCell(t, ctx, func(c *cell.Config) { c.SessionLease = 2 * time.Second })
	return lc, append(os.Environ(), "LOCKCELL_CONFIG="+lc.ClientFilePath())
}

// startLocalCell starts a 3-replica in-process cell "test" with tenant "t",
// its settings adjusted by tune (nil: the defaults); it stops when the test
// ends.
func startLocalCell(t *testing.T, ctx context.Context, tune func(*cell.Config)) *cell.LocalCell {
	t.Helper()
	lc, err := cell.StartLocal(ctx, cell.LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "test", DevTenant: "t",
		Tune: tune, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lc.Close)
	return lc
}

// tenantSession dials lc as tenant "t" with a certificate for name and
// opens a session; the client closes when the test ends.
func tenantSession(t *testing.T, ctx context.Context, lc *cell.LocalCell, name string) *client.Session {
	t.Helper()
	cert, err := lc.ClientCertificate("t", name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{Addrs: lc.Addrs(), CA: lc.CA.Pool(), Certificate: &cert, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runBin runs lockctl with env and stdin and returns its exit code, stdout
// and stderr.
func runBin(t *testing.T, ctx context.Context, bin string, env []string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	cmd.Stdin = bytes.NewReader([]byte(stdin))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}
