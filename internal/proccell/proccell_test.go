package proccell

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildDir  string
	builtBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// lockcelld builds the replica binary once per test run.
func lockcelld(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs lockcelld processes")
	}
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "proccell-test-"); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		builtBin, buildErr = BuildLockcelld(ctx, buildDir, "invariants")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// startCell builds lockcelld (before the test's time starts), then starts
// a three-replica cell with fault injection. It returns the test's context,
// which ends after 3 minutes or with the test; the cell is killed when the
// test ends.
func startCell(t *testing.T) (context.Context, *Cell) {
	t.Helper()
	lockcelld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	c, err := Start(ctx, Config{Binary: lockcelld(t), Dir: filepath.Join(t.TempDir(), "cell"), Replicas: 3, FaultInjection: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.KillAll)
	return ctx, c
}

// waitNewMaster waits for a master other than old and returns it.
func waitNewMaster(t *testing.T, ctx context.Context, c *Cell, old uint64) uint64 {
	t.Helper()
	for {
		m, err := c.FindMaster(ctx)
		if err == nil && m != old {
			return m
		}
		if !sleep(ctx, 50*time.Millisecond) {
			t.Fatalf("no master other than %d: %v (logs in %s)", old, ctx.Err(), filepath.Dir(c.LogFile(1)))
		}
	}
}

func TestKillMasterNewMaster(t *testing.T) {
	ctx, c := startCell(t)
	if got := len(c.PIDs()); got != 3 {
		t.Fatalf("%d processes run, want 3", got)
	}
	old, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if st.Replica != old || st.Master != old || st.Cell != "proccell" {
		t.Fatalf("master %d's status: replica %d, master %d, cell %q", old, st.Replica, st.Master, st.Cell)
	}
	c.Kill(old)
	if run, _ := c.Running(old); run {
		t.Fatalf("replica %d still runs after Kill", old)
	}
	if err := c.Signal(old, 0); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("signal to a killed replica: %v, want ErrNotRunning", err)
	}
	nm := waitNewMaster(t, ctx, c, old)
	t.Logf("master %d killed, %d took over", old, nm)
	if err := c.StartReplica(old); err != nil {
		t.Fatal(err)
	}
	if _, inc := c.Running(old); inc != 2 {
		t.Fatalf("replica %d's incarnation after a restart: %d, want 2", old, inc)
	}
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	// A client of a tenant made through the harness works on the new
	// master.
	if err := c.CreateTenant(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	cfg, err := c.ClientConfig("t", "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := putFile(ctx, cfg, "/t/x"); err != nil {
		t.Fatal(err)
	}
}

func TestPauseResumeMaster(t *testing.T) {
	ctx, c := startCell(t)
	old, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(old); err != nil {
		t.Fatal(err)
	}
	if !c.Paused(old) {
		t.Fatalf("replica %d not reported paused", old)
	}
	if run, _ := c.Running(old); !run {
		t.Fatalf("paused replica %d reported not running", old)
	}
	nm := waitNewMaster(t, ctx, c, old)
	t.Logf("master %d paused, %d took over", old, nm)
	if err := c.Resume(old); err != nil {
		t.Fatal(err)
	}
	if c.Paused(old) {
		t.Fatalf("replica %d still reported paused", old)
	}
	if _, inc := c.Running(old); inc != 2 {
		t.Fatalf("replica %d's incarnation after a resume: %d, want 2", old, inc)
	}
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	// The resumed replica follows: once the cell has settled, it is not
	// the master it was.
	ms, err := c.MasterOf(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Master && ms.Known != old {
		t.Fatalf("replica %d claims the master role while it names %d master", old, ms.Known)
	}
}

func TestPartitionMinorityWithMaster(t *testing.T) {
	ctx, c := startCell(t)
	old, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.FaultsAvailable(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := c.Partition(ctx, []uint64{old}); err != nil {
		t.Fatal(err)
	}
	nm := waitNewMaster(t, ctx, c, old)
	t.Logf("master %d cut off, %d took over", old, nm)
	if err := c.HealAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStopAndRestartKnobs(t *testing.T) {
	ctx, c := startCell(t)
	id := uint64(2)
	if err := c.Restart(id, Knobs{ClockScale: 1.5, SyncDelay: time.Millisecond, LogLevel: "info"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(c.ConfigFile(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"clock_scale": 1.5`, `"sync_delay": "1ms"`, `"http_addr": "` + c.HTTPAddr(id) + `"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("replica %d's config lacks %s:\n%s", id, want, b)
		}
	}
	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	// Restarting without knobs drops them from the config.
	if err := c.Restart(id, Knobs{}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(c.ConfigFile(id)); strings.Contains(string(b), "clock_scale") {
		t.Errorf("clock_scale outlived a restart without it:\n%s", b)
	}
	if err := c.Stop(ctx, id, 15); err != nil { // SIGTERM
		t.Fatal(err)
	}
	if slices.Contains(c.PIDs(), 0) || len(c.PIDs()) != 2 {
		t.Fatalf("PIDs after one stop: %v", c.PIDs())
	}
	c.StopAll(ctx)
	if n := len(c.PIDs()); n != 0 {
		t.Fatalf("%d processes run after StopAll", n)
	}
}

func TestConfigErrors(t *testing.T) {
	ctx := context.Background()
	for _, cfg := range []Config{
		{},
		{Binary: "lockcelld"},
		{Binary: "lockcelld", Dir: t.TempDir(), Replicas: 4},
		{Binary: "lockcelld", Dir: t.TempDir(), Knobs: Knobs{ClockScale: 2}},
		{Binary: "lockcelld", Dir: t.TempDir(), FaultInjection: true, Knobs: Knobs{SyncDelay: -1}},
	} {
		if _, err := Init(ctx, cfg); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("Init(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := StartProcess(ProcessSpec{Name: "x"}); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("StartProcess without argv: %v, want ErrInvalidConfig", err)
	}
	a := Attach([]Attached{{HTTPAddr: "127.0.0.1:1"}})
	if err := a.StartReplica(1); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("starting an attached replica: %v, want ErrInvalidConfig", err)
	}
	if err := a.StartReplica(7); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("starting replica 7 of 1: %v, want ErrInvalidConfig", err)
	}
	if err := a.Pause(1); !errors.Is(err, ErrNotRunning) {
		t.Errorf("pausing a replica with no process: %v, want ErrNotRunning", err)
	}
}

// TestJoinAndRetire: JoinReplica prepares a new replica at a new address
// with the current replicas as its peers (through `lockcelld init
// --join`), and Retire stops one for good and removes its data; ids are
// never issued twice.
func TestJoinAndRetire(t *testing.T) {
	ctx, c := startCell(t)
	if _, err := c.WaitMaster(ctx); err != nil {
		t.Fatal(err)
	}
	addr, err := c.JoinReplica(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.IDs(); !slices.Equal(got, []uint64{1, 2, 3, 4}) || c.Addr(4) != addr || slices.Contains(c.Addrs()[:3], addr) {
		t.Fatalf("after JoinReplica(4): ids %v, addrs %v, Addr(4) %q; want 1-4 and a new address %q", got, c.Addrs(), c.Addr(4), addr)
	}
	b, err := os.ReadFile(c.ConfigFile(4))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"id": 4`, `"1": "` + c.Addr(1) + `"`, `"3": "` + c.Addr(3) + `"`, `"4": "` + addr + `"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("replica 4's config lacks %s:\n%s", want, b)
		}
	}
	if ents, err := os.ReadDir(c.DataDir(4)); err != nil || len(ents) != 1 || ents[0].Name() != "lockcell-new-member" {
		t.Errorf("replica 4's data directory: %v, %v; want only the new-member marker", ents, err)
	}
	for _, id := range []uint64{2, 4} {
		if _, err := c.JoinReplica(ctx, id); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("JoinReplica(%d) of an existing replica: %v; want ErrInvalidConfig", id, err)
		}
	}

	// Retire a running follower: it stops, its data goes, and it is no
	// longer one of the cell's replicas.
	m, err := c.WaitMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := uint64(1)
	if m == 1 {
		f = 2
	}
	p := c.Process(f)
	if err := c.Retire(ctx, f, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if p.Alive() {
		t.Fatalf("replica %d's process runs after Retire", f)
	}
	if _, err := os.Stat(c.DataDir(f)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("replica %d's data directory after Retire: %v; want it gone", f, err)
	}
	if slices.Contains(c.IDs(), f) || slices.Contains(c.Addrs(), c.Addr(f)) {
		t.Errorf("retired replica %d is still listed: ids %v, addrs %v", f, c.IDs(), c.Addrs())
	}
	if err := c.StartReplica(f); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("starting retired replica %d: %v; want ErrInvalidConfig", f, err)
	}
	if _, err := c.JoinReplica(ctx, f); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("JoinReplica(%d) of a retired replica: %v; want ErrInvalidConfig", f, err)
	}
	if _, err := c.FindMaster(ctx); err != nil {
		t.Errorf("no master found among %v after retiring %d: %v", c.IDs(), f, err)
	}
	// The next new replica's peers are the replicas left.
	if _, err := c.JoinReplica(ctx, 5); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(c.ConfigFile(5))
	if strings.Contains(string(b), `"`+strconv.FormatUint(f, 10)+`": "`) {
		t.Errorf("replica 5's config names retired replica %d:\n%s", f, b)
	}
	// Its id is never issued again, even by lockcelld init --join itself.
	out, err := exec.CommandContext(ctx, lockcelld(t), "init", "--join", "--dir", c.Dir(), "--id", strconv.FormatUint(f, 10), "--addr", "127.0.0.1:9").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "IDs are never reused") {
		t.Errorf("lockcelld init --join of retired replica %d: %v, %s", f, err, out)
	}
}
