package proccell

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHelperParent is not a test: TestDeathSignal runs the test binary
// with PROCCELL_TEST_PARENT set to a directory, and this function then
// plays the parent that dies: it starts a child shell through StartProcess
// (DeathSignal SIGTERM if PROCCELL_TEST_TERM is set) that writes "TERM" to
// dir/got when it gets SIGTERM, writes the child's pid to dir/pid and
// waits to be killed.
func TestHelperParent(t *testing.T) {
	dir := os.Getenv("PROCCELL_TEST_PARENT")
	if dir == "" {
		t.Skip("run by TestDeathSignal")
	}
	spec := ProcessSpec{
		Name:    "child",
		Argv:    []string{"/bin/sh", "-c", `trap 'echo TERM > "$0/got"; exit 0' TERM; while :; do sleep 0.05; done`, dir},
		LogFile: filepath.Join(dir, "child.log"),
	}
	if os.Getenv("PROCCELL_TEST_TERM") != "" {
		spec.DeathSignal = syscall.SIGTERM
	}
	p, err := StartProcess(spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pid"), []byte(strconv.Itoa(p.PID())), 0o600); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
}

// TestDeathSignal: a child started with DeathSignal SIGTERM gets SIGTERM
// when its parent dies (lockcelld dev --procs relies on it, so that its
// replicas stop as on Ctrl-C); without it the child is killed (the
// harness's default), so it never sees a SIGTERM.
func TestDeathSignal(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	for _, term := range []bool{true, false} {
		dir := t.TempDir()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperParent$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PROCCELL_TEST_PARENT="+dir)
		if term {
			cmd.Env = append(cmd.Env, "PROCCELL_TEST_TERM=1")
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := 0
		deadline := time.Now().Add(30 * time.Second)
		for pid == 0 && time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(dir, "pid")); err == nil {
				pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if pid == 0 {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatal("the helper parent never started its child")
		}
		// The child's shell has set its trap once it runs its loop; give
		// it a moment, then kill the parent.
		time.Sleep(200 * time.Millisecond)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			t.Fatalf("DeathSignal set %v: the child (pid %d) outlived its parent", term, pid)
		}
		got, err := os.ReadFile(filepath.Join(dir, "got"))
		switch {
		case term && (err != nil || strings.TrimSpace(string(got)) != "TERM"):
			t.Errorf("DeathSignal SIGTERM: the child did not get SIGTERM when its parent died (%q, %v)", got, err)
		case !term && err == nil:
			t.Errorf("DeathSignal unset: the child got SIGTERM (%q); want it killed", got)
		}
	}
}
