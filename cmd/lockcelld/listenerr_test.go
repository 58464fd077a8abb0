package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListenInUse: a replica whose QUIC port is already bound stops at
// start with one line that says once what failed and why: the replica, the
// address and the system's cause, with no prefix repeated (not "cell:
// transport: transport: listen …: listen udp …: bind: …"). Both the real
// `lockcelld serve` process and `lockcelld dev` are tried.
func TestListenInUse(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	busy, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.LocalAddr().String()
	port := strconv.Itoa(busy.LocalAddr().(*net.UDPAddr).Port)

	t.Run("serve", func(t *testing.T) {
		bin := lockcelldBinary(t)
		dir := filepath.Join(t.TempDir(), "cell")
		cfgFile := initOneReplica(t, dir, "busy", addr, "--http-port", "0")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		got, err := exec.CommandContext(ctx, bin, "serve", "--config", cfgFile).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("serve on a bound port: %v; want exit 1\n%s", err, got)
		}
		checkListenMessage(t, lastLine(string(got)), addr)
	})
	t.Run("dev", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"dev", "--dir", filepath.Join(t.TempDir(), "dev"), "--port", port, "--replicas", "1", "--log-level", "error"}, &stdout, &stderr)
		if code != exitError {
			t.Fatalf("dev on a bound port exited %d; want %d\n%s%s", code, exitError, stdout.String(), stderr.String())
		}
		checkListenMessage(t, lastLine(stderr.String()), addr)
	})
}

// lastLine is the last non-empty line of s: the command's own message
// after any log lines.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// checkListenMessage fails t unless msg names replica 1, addr and the
// cause, and no ": "-separated part of it starts with the same word as an
// earlier part (a repeated prefix such as "transport: transport:" or
// "listen …: listen udp …").
func checkListenMessage(t *testing.T, msg, addr string) {
	t.Helper()
	t.Logf("message: %s", msg)
	for _, want := range []string{"replica 1", "listen on " + addr, "address already in use"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not say %q", msg, want)
		}
	}
	if strings.Count(msg, addr) != 1 {
		t.Errorf("message %q names the address %d times; want once", msg, strings.Count(msg, addr))
	}
	seen := map[string]bool{}
	for _, part := range strings.Split(msg, ": ") {
		word, _, _ := strings.Cut(part, " ")
		if seen[word] {
			t.Errorf("message %q repeats the prefix %q", msg, word)
		}
		seen[word] = true
	}
}
