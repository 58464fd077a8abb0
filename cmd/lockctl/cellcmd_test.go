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
