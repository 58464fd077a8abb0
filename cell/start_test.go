package cell_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockcell/lockcell/cell"
)

// dirNames lists dir's entries ("missing" if it does not exist).
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return []string{"missing"}
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestStartRefusesAnotherReplicasCertificate: a replica given a peer's
// certificate (or a client's) refuses to start, says whose certificate it
// is, and creates nothing.
func TestStartRefusesAnotherReplicasCertificate(t *testing.T) {
	lc := startCell(t, 3, nil)
	ctx := testCtx(t, 30*time.Second)
	cfg1, err := lc.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	cfg2, err := lc.Config(2)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, err := lc.ClientCertificate("t", "alice")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  cell.Config
		want string
	}{
		{"peer's", cfg1, "names replica 2, but this is replica 1"},
		{"client's", cfg1, "names no replica"},
	} {
		cfg := tc.cfg
		cfg.DataDir = filepath.Join(t.TempDir(), "new")
		if tc.name == "peer's" {
			cfg.Certificate = cfg2.Certificate
		} else {
			cfg.Certificate = clientCert
		}
		r, err := cell.Start(ctx, cfg)
		if err == nil {
			r.Close()
			t.Fatalf("%s certificate: started", tc.name)
		}
		if !errors.Is(err, cell.ErrWrongCertificate) || !errors.Is(err, cell.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s certificate: %v; want ErrWrongCertificate saying %q", tc.name, err, tc.want)
		}
		if got := dirNames(t, cfg.DataDir); !slices.Equal(got, []string{"missing"}) {
			t.Errorf("%s certificate: the refused start left %v behind", tc.name, got)
		}
		t.Logf("%s certificate: %v", tc.name, err)
	}
}

// TestFailedStartLeavesNothing: a start that fails after it opened its
// store (here: its UDP address is taken) removes what it created — a new
// directory whole; in a directory prepared by InitDataDir everything but
// the new-member marker, which it puts back — and leaves a directory that
// holds a store alone: the replica restarts on it with its state, not as
// one that lost it.
func TestFailedStartLeavesNothing(t *testing.T) {
	lc := startCell(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	cfg, err := lc.Config(1) // replica 1 runs: its UDP address is taken
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	cfg.DataDir = filepath.Join(base, "new")
	if r, err := cell.Start(ctx, cfg); err == nil {
		r.Close()
		t.Fatal("started on a taken address")
	} else {
		t.Logf("new directory: %v", err)
	}
	if got := dirNames(t, cfg.DataDir); !slices.Equal(got, []string{"missing"}) {
		t.Errorf("failed start in a new directory left %v", got)
	}

	cfg.DataDir = filepath.Join(base, "member")
	if err := cell.InitDataDir(cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	want := dirNames(t, cfg.DataDir)
	if r, err := cell.Start(ctx, cfg); err == nil {
		r.Close()
		t.Fatal("started on a taken address")
	}
	if got := dirNames(t, cfg.DataDir); !slices.Equal(got, want) {
		t.Errorf("failed start in a new member's directory left %v; want %v (the marker back, nothing else)", got, want)
	}

	// A directory with a store: stop replica 3, take its address, start.
	cfg3, err := lc.Config(3)
	if err != nil {
		t.Fatal(err)
	}
	applied := lc.Replica(3).Status().Applied
	lc.Stop(3)
	var pc net.PacketConn
	for range 100 {
		if pc, err = net.ListenPacket("udp", cfg3.Replicas[3]); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	if r, err := cell.Start(ctx, cfg3); err == nil {
		r.Close()
		t.Fatal("started on a taken address")
	}
	pc.Close()
	if err := lc.Start(ctx, 3); err != nil {
		t.Fatalf("replica 3 does not start after the failed start: %v", err)
	}
	if st := lc.Replica(3).Status(); st.Rebuild != nil || st.Applied < applied {
		t.Errorf("replica 3 after a failed start on its store: applied %d (had %d), rebuild %v; want its state kept", st.Applied, applied, st.Rebuild)
	}
}

// TestDataDirInUse: a second start on a data directory a running replica
// holds fails with ErrDataDirInUse naming the process, and leaves the
// running replica and its directory alone.
func TestDataDirInUse(t *testing.T) {
	lc := startCell(t, 3, nil)
	ctx := testCtx(t, 60*time.Second)
	cfg, err := lc.Config(2)
	if err != nil {
		t.Fatal(err)
	}
	want := dirNames(t, cfg.DataDir)
	r, err := cell.Start(ctx, cfg)
	if err == nil {
		r.Close()
		t.Fatal("a second replica started on a data directory in use")
	}
	if !errors.Is(err, cell.ErrDataDirInUse) || !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("second start: %v; want ErrDataDirInUse naming process %d", err, os.Getpid())
	}
	t.Logf("second start: %v", err)
	if got := dirNames(t, cfg.DataDir); !slices.Equal(got, want) {
		t.Errorf("the refused start changed the directory: %v; want %v", got, want)
	}
	if err := lc.Replica(2).Err(); err != nil {
		t.Fatalf("the running replica stopped: %v", err)
	}
	// Once the holder stops, the directory is free.
	lc.Stop(2)
	if err := lc.Start(ctx, 2); err != nil {
		t.Fatalf("restart after stop: %v", err)
	}
}
