package main

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/clientfile"
)

// treeDigest returns every file under dir with a hash of its contents, so
// that a test can tell whether anything was written.
func treeDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[p+"/"] = [32]byte{}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[p] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestInitJoin: `lockcelld init --join` adds to a cell directory the new
// replica's certificate (signed by the cell CA, naming the new ID), its
// config (the cell's settings, the current peers and itself) and its data
// directory holding only the new-member marker, and lists the new address
// in admin.json.
func TestInitJoin(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cell")
	var out bytes.Buffer
	if code := run([]string{"init", "--dir", dir, "--cell", "joiny", "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "--fault-injection"}, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	out.Reset()
	if code := run([]string{"init", "--join", "--dir", dir, "--id", "4", "--addr", "127.0.0.1:4", "--http-port", "7200"}, &out, &out); code != 0 {
		t.Fatalf("init --join exited %d: %s", code, out.String())
	}
	for _, want := range []string{"Prepared replica 4", "lockcelld serve --config " + dir + "/replica-4.json", "cell add-replica 4 127.0.0.1:4", "cell replace-replica OLD-ID 4 127.0.0.1:4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("init --join's output lacks %q:\n%s", want, out.String())
		}
	}
	cfgFile := filepath.Join(dir, "replica-4.json")
	fc, err := readFileConfig(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"1": "127.0.0.1:1", "2": "127.0.0.1:2", "3": "127.0.0.1:3", "4": "127.0.0.1:4"}
	if fc.ID != 4 || !fc.Join || fc.Cell != "joiny" || !fc.FaultInjection || fc.DataDir != "data/replica-4" || fc.HTTPAddr != "127.0.0.1:7203" || fmt.Sprint(fc.Replicas) != fmt.Sprint(want) {
		t.Errorf("replica-4.json: %+v; want id 4 of cell joiny with fault injection, data/replica-4, http 127.0.0.1:7203, replicas %v", fc, want)
	}
	// The config loads as serve loads it: certificate and key, CA, signing
	// key, and the replica starts outside the membership.
	cfg, err := fc.replicaConfig(cfgFile, nil)
	if err != nil {
		t.Fatalf("replica-4.json does not load: %v", err)
	}
	if !cfg.Join {
		t.Error("replica-4.json loads as one of the cell's first replicas (cell.Config.Join false)")
	}
	leaf, err := x509.ParseCertificate(cfg.Certificate.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if id, err := certs.ReplicaID(leaf); err != nil || id != 4 {
		t.Errorf("the certificate names replica %d (%v); want 4", id, err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: cfg.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("the certificate does not chain to the cell CA: %v", err)
	}
	ents, err := os.ReadDir(filepath.Join(dir, "data", "replica-4"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "lockcell-new-member" {
		t.Errorf("replica 4's data directory: %v, %v; want only the new-member marker", ents, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "admin.json"))
	if err != nil {
		t.Fatal(err)
	}
	af, err := clientfile.Parse(b)
	if err != nil || !slices.Contains(af.Addrs, "127.0.0.1:4") || len(af.Addrs) != 4 {
		t.Errorf("admin.json addrs %v (%v); want the three and 127.0.0.1:4", af.Addrs, err)
	}

	// With --peers, the config names exactly those (and itself).
	if code := run([]string{"init", "--join", "--dir", dir, "--id", "5", "--addr", "127.0.0.1:5", "--peers", "2=127.0.0.1:2,3=127.0.0.1:3,4=127.0.0.1:4"}, &out, &out); code != 0 {
		t.Fatalf("init --join --peers exited %d: %s", code, out.String())
	}
	if fc, err = readFileConfig(filepath.Join(dir, "replica-5.json")); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(fc.Replicas); got != "map[2:127.0.0.1:2 3:127.0.0.1:3 4:127.0.0.1:4 5:127.0.0.1:5]" {
		t.Errorf("replica-5.json replicas %s; want 2, 3, 4 and itself", got)
	}
}

// TestInitJoinRefuses: init --join refuses, with a typed error and
// without writing anything, an ID that is or was in use, an address in
// use, a missing or wrong CA key, a data directory that is not empty, a
// directory that holds no cell, and flags that belong to a new cell.
func TestInitJoinRefuses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cell")
	var out bytes.Buffer
	if code := run([]string{"init", "--dir", dir, "--replicas", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	if code := run([]string{"init", "--join", "--dir", dir, "--id", "4", "--addr", "127.0.0.1:4"}, &out, &out); code != 0 {
		t.Fatalf("init --join exited %d: %s", code, out.String())
	}
	// Another cell's CA key.
	other := filepath.Join(t.TempDir(), "other")
	if code := run([]string{"init", "--dir", other, "--replicas", "127.0.0.1:1"}, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	if err := os.MkdirAll(filepath.Join(dir, "data", "replica-7"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data", "replica-7", "000002.log"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A former replica: its config is gone from the directory, but the
	// others still name it.
	if err := os.Rename(filepath.Join(dir, "replica-3.json"), filepath.Join(t.TempDir(), "replica-3.json")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want error // nil: a usage error
		msg  string
	}{
		{"a current replica's ID", []string{"--id", "2", "--addr", "127.0.0.1:9"}, ErrIDInUse, "replica 2 is (or was) a replica"},
		{"a joined replica's ID", []string{"--id", "4", "--addr", "127.0.0.1:9"}, ErrIDInUse, "replica 4 is (or was)"},
		{"a former replica's ID", []string{"--id", "3", "--addr", "127.0.0.1:9"}, ErrIDInUse, "IDs are never reused"},
		{"an ID in --peers", []string{"--id", "8", "--addr", "127.0.0.1:9", "--peers", "1=127.0.0.1:1,8=127.0.0.1:8"}, ErrIDInUse, "replica 8 is one of the peers"},
		{"an address in use", []string{"--id", "5", "--addr", "127.0.0.1:2"}, ErrIDInUse, "address 127.0.0.1:2 is replica 2's"},
		{"a missing CA key", []string{"--id", "5", "--addr", "127.0.0.1:9", "--ca-key", filepath.Join(dir, "nope.pem")}, ErrCAKeyMissing, "nope.pem"},
		{"another cell's CA key", []string{"--id", "5", "--addr", "127.0.0.1:9", "--ca-key", filepath.Join(other, "certs", "ca-key.pem")}, ErrCAKeyMissing, "does not match"},
		{"a data directory with a store", []string{"--id", "7", "--addr", "127.0.0.1:9"}, ErrDataDirNotEmpty, "000002.log"},
		{"no ID", []string{"--addr", "127.0.0.1:9"}, errNoID, "--id is required"},
		{"a bad address", []string{"--id", "5", "--addr", "nowhere"}, errBadAddr, "want host:port"},
		{"--cell", []string{"--id", "5", "--addr", "127.0.0.1:9", "--cell", "x"}, nil, "--cell does not go with --join"},
		{"--replicas", []string{"--id", "5", "--addr", "127.0.0.1:9", "--replicas", "127.0.0.1:1"}, nil, "--replicas does not go with --join"},
	}
	before := treeDigest(t, dir)
	for _, tc := range cases {
		out.Reset()
		code := run(append([]string{"init", "--join", "--dir", dir}, tc.args...), &out, &out)
		wantCode := exitError
		if tc.want == nil {
			wantCode = exitUsage
		}
		if code != wantCode || !strings.Contains(out.String(), tc.msg) {
			t.Errorf("%s: exit %d, %q; want exit %d and %q", tc.name, code, out.String(), wantCode, tc.msg)
		}
		if tc.want != nil && tc.want != errNoID && tc.want != errBadAddr {
			o := joinOptions{dir: dir}
			for i := 0; i+1 < len(tc.args); i += 2 {
				switch tc.args[i] {
				case "--id":
					fmt.Sscan(tc.args[i+1], &o.id)
				case "--addr":
					o.addr = tc.args[i+1]
				case "--peers":
					o.peers = tc.args[i+1]
				case "--ca-key":
					o.caKey = tc.args[i+1]
				}
			}
			if _, err := prepareJoin(o); !errors.Is(err, tc.want) {
				t.Errorf("%s: prepareJoin: %v; want %v", tc.name, err, tc.want)
			}
		}
		if after := treeDigest(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("%s: the refused init --join changed the cell directory", tc.name)
			before = after
		}
	}
	// A directory with no cell in it.
	_, err := prepareJoin(joinOptions{dir: t.TempDir(), id: 5, addr: "127.0.0.1:9"})
	if !errors.Is(err, ErrNotACell) {
		t.Errorf("an empty directory: %v; want ErrNotACell", err)
	}
	// The CA key in its default place, gone.
	if err := os.Remove(filepath.Join(dir, "certs", "ca-key.pem")); err != nil {
		t.Fatal(err)
	}
	before = treeDigest(t, dir)
	if _, err := prepareJoin(joinOptions{dir: dir, id: 5, addr: "127.0.0.1:9"}); !errors.Is(err, ErrCAKeyMissing) {
		t.Errorf("without certs/ca-key.pem: %v; want ErrCAKeyMissing", err)
	}
	if code := run([]string{"init", "--join", "--dir", dir, "--id", "5", "--addr", "127.0.0.1:9"}, &out, &out); code != exitError {
		t.Errorf("without certs/ca-key.pem: exit %d", code)
	}
	if after := treeDigest(t, dir); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Error("a refused init --join (no CA key) changed the cell directory")
	}
	t.Logf("%d refusals judged", len(cases)+2)
}

// Markers for the cases above that are checked by their message only.
var (
	errNoID    = errors.New("no id")
	errBadAddr = errors.New("bad address")
)

// TestReplacingDocs checks the runbook "Replacing a replica" in
// docs/operations.md: the lockcelld commands and flags it tells operators
// to run exist, and the tests it says follow it exist.
func TestReplacingDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n## Replacing a replica\n")
	if i < 0 {
		t.Fatal(`docs/operations.md has no "Replacing a replica" section`)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	n := checkInvocations(t, "docs/operations.md", s)
	if n < 6 {
		t.Fatalf("checked only %d lockcelld commands and flags; want at least 6", n)
	}
	src, err := os.ReadFile("replace_test.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"TestReplaceKilledReplica", "TestReplaceThreeOfFive"} {
		if !strings.Contains(s, name) || !strings.Contains(string(src), "func "+name+"(") {
			t.Errorf("the runbook names %s, or replace_test.go defines it: not both", name)
		}
	}
	if !strings.Contains(s, "cell replace-replica 3 6 10.0.0.6:7001") {
		t.Error("the runbook does not show lockctl cell replace-replica")
	}
	t.Logf(`"Replacing a replica": %d lockcelld commands and flags checked`, n)
}
