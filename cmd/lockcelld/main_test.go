package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/internal/proccell"
)

// freePorts returns n free loopback ports of the given network.
func freePorts(t *testing.T, network string, n int) []int {
	t.Helper()
	var ports []int
	for i := 0; i < n; i++ {
		switch network {
		case "udp":
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ports = append(ports, pc.LocalAddr().(*net.UDPAddr).Port)
			defer pc.Close()
		default:
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
			defer ln.Close()
		}
	}
	return ports
}

// TestServeProcesses runs `lockcelld init` and three `lockcelld serve`
// processes, waits for a master through the status endpoint, then stops
// the master with SIGTERM (a planned hand-over) and sees another take over.
func TestServeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := proccell.Start(ctx, proccell.Config{Binary: lockcelldBinary(t), Dir: filepath.Join(t.TempDir(), "cell"), Name: "proc", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.KillAll)
	master, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(ctx, master, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := c.Process(master).Err(); err != nil {
		t.Fatalf("master exited with %v after SIGTERM", err)
	}
	next, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == master {
		t.Fatalf("replica %d reported master after it exited", next)
	}
	t.Logf("replica %d handed over to replica %d", master, next)
}

// TestUsage: unknown commands and missing flags are usage errors.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{{}, {"bogus"}, {"serve"}} {
		out.Reset()
		if code := run(args, &out, &out); code != exitUsage {
			t.Errorf("lockcelld %v exited %d, want %d (%s)", args, code, exitUsage, out.String())
		}
	}
	if code := run([]string{"serve", "--config", "/nonexistent.json"}, &out, &out); code != exitError {
		t.Errorf("serve with a missing config exited %d, want %d", code, exitError)
	}
	for _, cmd := range []string{"serve", "dev", "init"} {
		for _, h := range []string{"--help", "-h"} {
			var stdout, stderr bytes.Buffer
			code := run([]string{cmd, h}, &stdout, &stderr)
			if code != exitOK || !strings.Contains(stdout.String(), "usage of lockcelld "+cmd) || stderr.Len() != 0 {
				t.Errorf("lockcelld %s %s: exit %d, stdout %q, stderr %q; want exit 0 and the flags on stdout", cmd, h, code, stdout.String(), stderr.String())
			}
		}
	}
}

// TestInitDefaults: init with no --dir writes ./deploy (git-ignored, not
// a package folder), status pages on loopback by default, the
// administrator's settings and the first tenant's, and says what to do
// next.
func TestInitDefaults(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ignore, err := os.ReadFile(filepath.Join(repo, ".gitignore"))
	if err != nil || !strings.Contains(string(ignore), "/deploy/") {
		t.Fatalf(".gitignore does not ignore /deploy/ (%v)", err)
	}
	t.Chdir(t.TempDir())
	var out bytes.Buffer
	if code := run([]string{"init", "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	for _, f := range []string{"deploy/admin.json", "deploy/app.json", "deploy/certs/app-user.pem", "deploy/certs/ca-key.pem", "deploy/replica-3.json"} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("init wrote no %s: %v", f, err)
		}
	}
	for id := 1; id <= 3; id++ {
		fc, err := readFileConfig(fmt.Sprintf("deploy/replica-%d.json", id))
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("127.0.0.1:%d", 7100+id); fc.HTTPAddr != want {
			t.Errorf("replica %d http_addr %q; want %q (status pages on loopback by default)", id, fc.HTTPAddr, want)
		}
	}
	tf, err := client.ReadConfigFile("deploy/app.json")
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := tf.Config(false); err != nil || cfg.Certificate == nil {
		t.Fatalf("deploy/app.json gives no client certificate: %v", err)
	}
	for _, want := range []string{"Next:", "lockcelld serve --config deploy/replica-1.json", "lockctl --config deploy/admin.json status", "tenant create app", "deploy/app.json put /app/hello"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("init's output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestInitMarksNewMembers: init leaves each replica's data directory
// holding only the new-member marker, so that the first start of a new
// cell does not take its empty stores for lost ones; it refuses to mark a
// directory that already holds a store.
func TestInitMarksNewMembers(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cell")
	var out bytes.Buffer
	if code := run([]string{"init", "--dir", dir, "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	for id := 1; id <= 3; id++ {
		ents, err := os.ReadDir(filepath.Join(dir, "data", fmt.Sprintf("replica-%d", id)))
		if err != nil || len(ents) != 1 || ents[0].Name() != "lockcell-new-member" {
			t.Fatalf("replica %d's data directory after init: %v, %v", id, ents, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "replica-2", "000001.log"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(dir, "certs", "ca.pem"))
	out.Reset()
	if code := run([]string{"init", "--dir", dir, "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, &out, &out); code != exitError || !strings.Contains(out.String(), "already holds a store") {
		t.Fatalf("init over a store: exit %d, %s", code, out.String())
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "certs", "ca.pem")); !bytes.Equal(ca, again) {
		t.Fatal("a refused init replaced the cell CA")
	}
}
