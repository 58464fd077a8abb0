package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeDataDirInUse: a second `lockcelld serve` on the data directory
// of a running one exits 1 at once, saying the directory is in use and by
// which process (not Pebble's "resource temporarily unavailable").
func TestServeDataDirInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	bin := lockcelldBinary(t)
	dir := filepath.Join(t.TempDir(), "cell")
	addr := "127.0.0.1:" + strconv.Itoa(freePorts(t, "udp", 1)[0])
	cfgFile := initOneReplica(t, dir, "inuse", addr, "--http-port", "0")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	logf, err := os.Create(filepath.Join(t.TempDir(), "first.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	first := exec.Command(bin, "serve", "--config", cfgFile)
	first.Stdout, first.Stderr = logf, logf
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Process.Kill(); _ = first.Wait() }()
	pid := strconv.Itoa(first.Process.Pid)
	pidFile := filepath.Join(dir, "data", "replica-1", "lockcell-pid")
	if !pollUntil(ctx, func() bool {
		b, _ := os.ReadFile(pidFile)
		return strings.TrimSpace(string(b)) == pid
	}) {
		b, _ := os.ReadFile(logf.Name())
		t.Fatalf("the first replica never took its data directory; log:\n%s", b)
	}
	second, err := exec.CommandContext(ctx, bin, "serve", "--config", cfgFile).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("second serve: %v; want exit 1\n%s", err, second)
	}
	if !strings.Contains(string(second), "data directory in use") || !strings.Contains(string(second), "process "+pid) {
		t.Fatalf("second serve says %q; want the directory in use by process %s", second, pid)
	}
	t.Logf("second serve: %s", strings.TrimSpace(string(second)))
}
