package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/namespace"
)

// runCmd runs lockcelld in-process and returns its exit code and output.
func runCmd(args ...string) (int, string) {
	var out bytes.Buffer
	code := run(args, &out, &out)
	return code, out.String()
}

// Acceptance: save → restore → check on real processes. The administrator
// saves a backup with lockctl; a new cell (new name, new certificates) is
// restored from it, replica by replica; the offline check of every
// restored directory reproduces the backup's state checksum; and the
// restored cell serves: the file is there, the lock the old session held is
// free and granted at a generation above anything the old cell issued, the
// old session is gone, and the old cell's sequencer is refused.
func TestBackupSaveRestoreCheckProcs(t *testing.T) {
	old := startProcCell(t, 3)
	lockctl := lockctlBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	oc, os1 := old.session(ctx)
	defer oc.Close()
	if _, err := os1.Open(ctx, "/t/keep", client.OpenOptions{Create: true, Contents: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os1.Open(ctx, "/t/eph", client.OpenOptions{Create: true, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	oldLock, err := client.NewMutex(os1, "/t/lock").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	backupDir := t.TempDir()
	file := filepath.Join(backupDir, "cell.backup")
	// Not the administrator: a clear refusal, and no file, not even a
	// temporary one.
	cmd := exec.CommandContext(ctx, lockctl, "--config", filepath.Join(old.dir, "app.json"), "snapshot", "save", file)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "permission denied") {
		t.Fatalf("snapshot save as a tenant: %v\n%s", err, out)
	}
	if ents, _ := os.ReadDir(backupDir); len(ents) != 0 {
		t.Fatalf("a refused save left %v behind", ents)
	}
	out, err = exec.CommandContext(ctx, lockctl, "--config", filepath.Join(old.dir, "admin.json"), "snapshot", "save", file).CombinedOutput()
	if err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	t.Logf("lockctl snapshot save: %s", out)
	m := regexp.MustCompile(`cell "proc", slot (\d+), state checksum ([0-9a-f]{16})`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("snapshot save printed no slot and checksum: %s", out)
	}
	slot, sum := m[1], m[2]
	if ents, _ := os.ReadDir(backupDir); len(ents) != 1 {
		t.Fatalf("the backup directory holds %v, want the backup alone", ents)
	}
	if code, out := runCmd("check", "--backup", file); code != 0 || !strings.Contains(out, "state checksum "+sum+" (recomputed") {
		t.Fatalf("check --backup exited %d:\n%s", code, out)
	}
	oldSession, oldSeq := os1.ID(), oldLock.Sequencer()
	for id := 1; id <= old.n; id++ {
		old.stop(id, syscall.SIGTERM)
	}

	nc := initProcCell(t, "restored", 3)
	if code, out := runCmd("restore", "--from", file, "--dir", filepath.Join(t.TempDir(), "x"), "--id", "1", "--cell", "proc"); code == 0 || !strings.Contains(out, "new identity") {
		t.Fatalf("restore under the old name exited %d:\n%s", code, out)
	}
	var newSum string
	for id := 1; id <= nc.n; id++ {
		code, out := runCmd("restore", "--from", file, "--config", nc.configFile(id))
		if code != 0 || !strings.Contains(out, fmt.Sprintf(`from: cell "proc", slot %s, state checksum %s (verified`, slot, sum)) {
			t.Fatalf("restore of replica %d exited %d:\n%s", id, code, out)
		}
		code, out = runCmd("check", "--config", nc.configFile(id))
		if code != 0 || !strings.Contains(out, "(checksum "+sum+")") {
			t.Fatalf("check of restored replica %d exited %d (want the backup's checksum %s in it):\n%s", id, code, sum, out)
		}
		got := regexp.MustCompile(`the namespace at applied slot \d+: state checksum ([0-9a-f]{16}), recomputed`).FindStringSubmatch(out)
		if got == nil || (newSum != "" && got[1] != newSum) {
			t.Fatalf("restored replica %d starts from another state (first: %s):\n%s", id, newSum, out)
		}
		newSum = got[1]
		if id == 1 {
			t.Logf("lockcelld check of restored replica 1:\n%s", out)
		}
	}

	for id := 1; id <= nc.n; id++ {
		nc.start(id)
	}
	nc.setupTenant()
	cl, s := nc.session(ctx)
	defer cl.Close()
	h, err := s.Open(ctx, "/t/keep", client.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if data, _, err := h.GetContents(ctx); err != nil || string(data) != "kept" {
		t.Fatalf("restored /t/keep: %q, %v", data, err)
	}
	if _, err := s.Open(ctx, "/t/eph", client.OpenOptions{}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("the old session's ephemeral node: %v, want not found", err)
	}
	l, err := client.NewMutex(s, "/t/lock").TryLock(ctx)
	if err != nil {
		t.Fatalf("the lock the old session held: %v", err)
	}
	if l.Generation() < oldSeq.Generation+namespace.RestoreGap {
		t.Fatalf("restored cell granted generation %d, old cell had %d: want at least %d above", l.Generation(), oldSeq.Generation, namespace.RestoreGap)
	}
	valid, reason, err := s.CheckSequencer(ctx, oldSeq)
	if err != nil || valid {
		t.Fatalf("the old cell's sequencer on the restored cell: valid=%v %q %v", valid, reason, err)
	}
	t.Logf("old sequencer refused: %s", reason)
	sessions, err := operator.New(cl).ListSessions(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	for _, si := range sessions {
		if si.ID == oldSession {
			t.Fatalf("the old session %d lives on in the restored cell", oldSession)
		}
	}
}

// lockcelld check exits 0 on a new member's directory and 1, saying why,
// on one that lost its new-member marker and holds no store (wiped).
func TestCheckExitCodes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cell")
	if code, out := runCmd("init", "--dir", dir, "--cell", "c", "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"); code != 0 {
		t.Fatalf("init exited %d: %s", code, out)
	}
	data := filepath.Join(dir, "data", "replica-1")
	if code, out := runCmd("check", "--dir", data); code != 0 || !strings.Contains(out, "new member") {
		t.Fatalf("check of a new member's directory exited %d:\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(data, "lockcell-new-member")); err != nil {
		t.Fatal(err)
	}
	if code, out := runCmd("check", "--config", filepath.Join(dir, "replica-1.json")); code != 1 || !strings.Contains(out, "PROBLEM no store and no new-member marker") {
		t.Fatalf("check of a wiped directory exited %d:\n%s", code, out)
	}
	if code, out := runCmd("check"); code != exitUsage {
		t.Fatalf("check without a target exited %d:\n%s", code, out)
	}
	if code, out := runCmd("check", "--backup", filepath.Join(dir, "replica-1.json")); code != 1 || !strings.Contains(out, "not a lockcell backup") {
		t.Fatalf("check --backup of a non-backup exited %d:\n%s", code, out)
	}
}
