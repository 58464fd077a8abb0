package main_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/sequencer"
	"github.com/lockcell/lockcell/transport"
)

// TestLockctl builds lockctl and runs it as a user would against an
// in-process cell, checking output and exit codes.
func TestLockctl(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	faults := transport.NewFaults(1)
	lc := startLocalCell(t, ctx, func(c *cell.Config) { c.SessionLease = 2 * time.Second; c.Faults = faults })
	env := append(os.Environ(), "LOCKCELL_CONFIG="+lc.ClientFilePath())

	type result struct {
		code           int
		stdout, stderr string
	}
	run := func(stdin string, args ...string) result {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = env
		cmd.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return result{code, out.String(), errb.String()}
	}
	expect := func(r result, code int, outHas, errHas string) {
		t.Helper()
		if r.code != code || !strings.Contains(r.stdout, outHas) || !strings.Contains(r.stderr, errHas) {
			t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q", r.code, r.stdout, r.stderr, code, outHas, errHas)
		}
	}

	// Help everywhere, and usage errors.
	expect(run("", "--help"), 0, "Commands:", "")
	for _, c := range []string{"lock", "elect", "get", "put", "mkdir", "ls", "stat", "rm", "sessions", "locks", "status", "tenant", "certs"} {
		r := run("", c, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "usage: lockctl "+c) {
			t.Fatalf("%s --help: exit %d, stdout %q", c, r.code, r.stdout)
		}
	}
	expect(run("", "frobnicate"), 2, "", `unknown command "frobnicate"`)
	expect(run("", "get"), 2, "", "want 1 arguments")
	expect(run("", "lock", "/t/x", "true"), 2, "", "PATH -- CMD")
	expect(run("", "--config", "/nonexistent/client.json", "status"), 1, "", "make run")

	// Files.
	expect(run("", "status"), 0, "master replica", "")
	expect(run("", "put", "/t/hello", "world"), 0, "", "")
	expect(run("", "get", "/t/hello"), 0, "world", "")
	expect(run("again", "put", "/t/hello", "-"), 0, "", "")
	expect(run("", "get", "/t/hello"), 0, "again", "")
	expect(run("", "stat", "/t/hello"), 0, "content generation: 2", "")
	expect(run("", "mkdir", "/t/dir"), 0, "", "")
	r := run("", "ls", "/t")
	if r.code != 0 || !strings.Contains(r.stdout, "hello\n") || !strings.Contains(r.stdout, "dir/\n") {
		t.Fatalf("ls: %+v", r)
	}
	expect(run("", "rm", "/t/hello"), 0, "", "")
	expect(run("", "get", "/t/hello"), 3, "", "not found")
	expect(run("", "put", "/other/x", "y"), 1, "", "")

	// lock: the sequencer reaches the command; its exit status passes.
	r = run("", "lock", "/t/demo", "--", "sh", "-c", "echo $LOCKCELL_SEQUENCER; echo $LOCKCELL_LOCK")
	if r.code != 0 {
		t.Fatalf("lock: %+v", r)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	seq, err := sequencer.ParseString(lines[0])
	if err != nil || seq.Path != "/t/demo" || !seq.Verify(lc.PublicKey()) || lines[1] != "/t/demo" {
		t.Fatalf("lock passed sequencer %q (%v, %+v)", r.stdout, err, seq)
	}
	expect(run("", "lock", "/t/demo", "--", "sh", "-c", "exit 7"), 7, "", "")

	// lock --try on a held lock exits 4 at once.
	hs := tenantSession(t, ctx, lc, "holder")
	held, err := client.NewMutex(hs, "/t/held").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect(run("", "lock", "--try", "/t/held", "--", "true"), 4, "", "locked")
	expect(run("", "lock", "--wait", "200ms", "/t/held", "--", "true"), 4, "", "still held")
	expect(run("", "locks"), 0, "/t/held", "")
	expect(run("", "sessions"), 0, "holder", "")
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// Administration.
	expect(run("", "tenant", "create", "acme", "--max-nodes", "10"), 0, "acme", "")
	expect(run("", "tenant", "list"), 0, "acme", "")
	expect(run("", "tenant", "update", "acme", "--max-nodes", "20"), 0, "/20", "")
	expect(run("", "tenant", "create", "acme"), 1, "", "already exists")
	expect(run("", "tenant", "update", "acme", "--max-nodes", "20", "--ops-per-second", "50", "--weight", "3"), 0, "50", "")

	// Tenant tokens: issue, use instead of a certificate, list, revoke.
	tokFile := filepath.Join(t.TempDir(), "tok")
	r = run("", "tenant", "token", "t", "robot", "--out", tokFile)
	if r.code != 0 || !strings.Contains(r.stdout, "written to") {
		t.Fatalf("tenant token: %+v", r)
	}
	tokID := strings.Fields(r.stdout)[1]
	expect(run("", "--token-file", tokFile, "put", "/t/bytoken", "hi"), 0, "", "")
	expect(run("", "--token-file", tokFile, "sessions"), 0, "", "")
	expect(run("", "tenant", "tokens", "t"), 0, tokID, "")
	expect(run("", "tenant", "revoke", "t", tokID), 0, "revoked token "+tokID, "")
	expect(run("", "--token-file", tokFile, "get", "/t/bytoken"), 1, "", "unauthenticated")
	expect(run("", "tenant", "revoke", "t", tokID), 3, "", "not found")
	expect(run("", "tenant", "token", "t"), 2, "", "")
	certDir := t.TempDir()
	expect(run("", "certs", "ca", "--dir", certDir, "--cell", "c2"), 0, "ca.pem", "")
	expect(run("", "certs", "client", "--dir", certDir, "--tenant", "acme", "--principal", "bob"), 0, "acme-bob.pem", "")
	expect(run("", "certs", "ca", "--dir", certDir, "--cell", "c2"), 1, "", "refusing")

	// elect and elect --observe.
	camp := exec.CommandContext(ctx, bin, "elect", "/t/el", "one")
	camp.Env = env
	campOut, _ := camp.StdoutPipe()
	if err := camp.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(campOut)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "elected: one") {
		t.Fatalf("elect printed %q", sc.Text())
	}
	expect(run("", "elect", "--observe", "--count", "1", "/t/el"), 0, "leader: one", "")
	_ = camp.Process.Signal(syscall.SIGINT)
	if !sc.Scan() || sc.Text() != "resigned" {
		t.Fatalf("elect after SIGINT printed %q", sc.Text())
	}
	if err := camp.Wait(); err != nil {
		t.Fatalf("elect exit: %v", err)
	}

	// lock: when the lock may be lost, the command is stopped and lockctl
	// exits 75.
	lost := exec.CommandContext(ctx, bin, "lock", "/t/lost", "--", "sh", "-c", "echo running; exec sleep 60")
	lost.Env = env
	lostOut, _ := lost.StdoutPipe()
	var lostErr bytes.Buffer
	lost.Stderr = &lostErr
	if err := lost.Start(); err != nil {
		t.Fatal(err)
	}
	sc = bufio.NewScanner(lostOut)
	if !sc.Scan() || sc.Text() != "running" {
		t.Fatalf("lock printed %q", sc.Text())
	}
	for _, r := range lc.Running() {
		faults.CutClients(r.ID(), true)
	}
	err = lost.Wait()
	for _, r := range lc.Running() {
		faults.CutClients(r.ID(), false)
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 75 || !strings.Contains(lostErr.String(), "may be lost") {
		t.Fatalf("lock through a cut: %v, stderr %q; want exit 75", err, lostErr.String())
	}

	// status names a replica that lost its state and what it lost.
	var follower uint64
	for _, r := range lc.Running() {
		if !r.Status().Master {
			follower = r.ID()
		}
	}
	cfg, err := lc.Config(follower)
	if err != nil {
		t.Fatal(err)
	}
	lc.Stop(follower)
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	if err := lc.Start(ctx, follower); err != nil {
		t.Fatal(err)
	}
	r = run("", "status")
	if r.code != 0 || !strings.Contains(r.stdout, "lost state (wiped)") {
		t.Fatalf("status after wiping replica %d: %+v", follower, r)
	}
	t.Logf("lockctl status:\n%s", r.stdout)
}
