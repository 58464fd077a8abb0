package main_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestCellStepDown: `lockctl cell stepdown` makes the master hand over,
// and lockctl status then names another master; with --to N, replica N.
func TestCellStepDown(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	lc := startLocalCell(t, ctx, nil)
	t0 := time.Now()
	m, err := lc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("master after %v", time.Since(t0))
	code, out, errs := runLockctl(t, ctx, bin, lc.ClientFilePath(), 30*time.Second, "cell", "stepdown")
	if code != 0 || !strings.Contains(out, "stepped down") {
		t.Fatalf("cell stepdown: exit %d, %q %q", code, out, errs)
	}
	t.Logf("%s (after %v)", out, time.Since(t0))
	// The new master: polled within a bound of its own.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, _ = runLockctl(t, ctx, bin, lc.ClientFilePath(), 20*time.Second, "status")
		if code == 0 && strings.Contains(out, "master replica") && !strings.Contains(out, "master replica "+itoa(m.ID())+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no other master 30 s after the step-down of replica %d; last status:\n%s", m.ID(), out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("after step-down of replica %d:\n%s", m.ID(), out)
	// --to names the successor: the master hands over to it.
	m2, err := lc.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	to := m2.ID()%3 + 1 // the local cell has three replicas
	code, out, errs = runLockctl(t, ctx, bin, lc.ClientFilePath(), 30*time.Second, "cell", "stepdown", "--to", itoa(to))
	if code != 0 || !strings.Contains(out, "handing over to replica "+itoa(to)+";") {
		t.Fatalf("cell stepdown --to %d: exit %d, %q %q", to, code, out, errs)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, out, _ = runLockctl(t, ctx, bin, lc.ClientFilePath(), 20*time.Second, "status")
		if code == 0 && strings.Contains(out, "master replica "+itoa(to)+" ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %d is not master 30 s after a step-down --to it; last status:\n%s", to, out)
		}
	}
}

// TestCellMembershipCommands: `lockctl cell remove-replica` removes a
// replica and prints the steps and the membership; run again it has
// nothing to do; the removed ID is refused by add-replica for good; bad
// arguments are usage errors (exit 2) and a non-member a clear error.
func TestCellMembershipCommands(t *testing.T) {
	bin := buildLockctl(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	lc := startLocalCell(t, ctx, nil)
	if _, err := lc.WaitMaster(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		return runLockctl(t, ctx, bin, lc.ClientFilePath(), 60*time.Second, append([]string{"cell"}, args...)...)
	}
	code, out, errs := run("remove-replica", "3")
	if code != 0 || !strings.Contains(out, "remove 3 at slot ") || !strings.Contains(out, "replica 1  voter") ||
		!strings.Contains(out, "replica 2  voter") || strings.Contains(out, "replica 3 ") {
		t.Fatalf("cell remove-replica 3: exit %d, %q %q", code, out, errs)
	}
	t.Logf("remove-replica 3:\n%s", out)
	if code, out, errs = run("remove-replica", "3"); code != 0 || !strings.Contains(out, "nothing to change") {
		t.Fatalf("cell remove-replica 3 again: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs = run("add-replica", "3", "127.0.0.1:9"); code != 1 || !strings.Contains(errs, "never reused") {
		t.Fatalf("cell add-replica of the removed ID 3: exit %d, %q %q", code, out, errs)
	}
	if code, out, errs = run("remove-replica", "9"); code != 1 || !strings.Contains(errs, "not a member") {
		t.Fatalf("cell remove-replica 9: exit %d, %q %q", code, out, errs)
	}
	for _, args := range [][]string{{"add-replica", "4"}, {"add-replica", "x", "127.0.0.1:9"}, {"remove-replica"}, {"replace-replica", "1", "127.0.0.1:9"}} {
		if code, out, errs = run(args...); code != 2 {
			t.Fatalf("cell %v: exit %d, want 2 (usage); %q %q", args, code, out, errs)
		}
	}
}
