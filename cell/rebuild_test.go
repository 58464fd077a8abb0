package cell_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
)

// TestReplicaRebuildsLostState: a follower's data directory is wiped, and
// later one of its tables is damaged; each time it starts as a learner,
// says what it lost, rebuilds from the others (by snapshot and log) while
// clients write, votes again, and ends with the same state as the master.
func TestReplicaRebuildsLostState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, func(c *cell.Config) { c.SnapshotEvery = 8 })
		ctx := testCtx(t, 120*time.Second)
		c := newTestClient(t, lc, "t", "alice")
		c.createSession(ctx)
		n := 0
		create := func(k int) {
			for i := 0; i < k; i++ {
				c.mustOpen(ctx, fmt.Sprintf("/t/f%d", n))
				n++
			}
		}
		create(20)
		follower := followerOf(t, lc)
		dataDir := dataDirOf(t, lc, follower)

		lc.Crash(follower)
		if err := os.RemoveAll(dataDir); err != nil {
			t.Fatal(err)
		}
		lc.Restart(follower)
		expectRebuild(t, lc, follower, "wiped")
		create(20)
		waitRebuilt(t, ctx, lc, follower)
		waitConverged(t, ctx, lc)

		// Damage a table of its store: it must not fail every start, but move
		// the store aside and rebuild.
		lc.Crash(follower)
		lc.Restart(follower) // the restart flushes the WAL into tables
		waitConverged(t, ctx, lc)
		lc.Crash(follower)
		tables := largestFirst(t, dataDir, ".sst")
		if len(tables) == 0 {
			t.Fatalf("no table in %s", dataDir)
		}
		damage(t, tables[0])
		lc.Restart(follower)
		rs := expectRebuild(t, lc, follower, "corrupt")
		if rs.MovedAside == "" {
			t.Fatalf("damaged store not moved aside: %+v", rs)
		}
		create(20)
		waitRebuilt(t, ctx, lc, follower)
		waitConverged(t, ctx, lc)
		for i := 0; i < n; i++ {
			if _, err := c.open(ctx, api.OpenRequest{Path: fmt.Sprintf("/t/f%d", i)}); err != nil {
				t.Fatalf("acknowledged create /t/f%d lost: %v", i, err)
			}
		}
	})
}

func followerOf(t *testing.T, lc *celltest.Cell) uint64 {
	t.Helper()
	m := lc.Master()
	for _, r := range lc.Running() {
		if m == nil || r.ID() != m.ID() {
			return r.ID()
		}
	}
	t.Fatal("no follower")
	return 0
}

func dataDirOf(t *testing.T, lc *celltest.Cell, id uint64) string {
	t.Helper()
	cfg, err := lc.Config(id)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.DataDir
}

// expectRebuild checks that replica id started as a learner that lost
// state of the given kind.
func expectRebuild(t *testing.T, lc *celltest.Cell, id uint64, kind string) cell.RebuildStatus {
	t.Helper()
	st := lc.Replica(id).Status()
	if st.Rebuild == nil || st.Rebuild.Kind != kind {
		t.Fatalf("replica %d after restart: rebuild %+v, want kind %q", id, st.Rebuild, kind)
	}
	t.Logf("replica %d: %s", id, st.Rebuild)
	return *st.Rebuild
}

// waitRebuilt waits until replica id votes again; while it rebuilds it
// must say so.
func waitRebuilt(t *testing.T, ctx context.Context, lc *celltest.Cell, id uint64) {
	t.Helper()
	for {
		st := lc.Replica(id).Status()
		if !st.Rebuild.Rebuilding() {
			if st.Role == "learner (rebuilding)" {
				t.Fatalf("replica %d rebuilt but reports role %q", id, st.Role)
			}
			return
		}
		if st.Role != "learner (rebuilding)" || st.Master || st.IsLeader {
			t.Fatalf("replica %d rebuilding, but role %q master %v leader %v", id, st.Role, st.Master, st.IsLeader)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replica %d still rebuilding: %s", id, st.Rebuild)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func largestFirst(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	size := map[string]int64{}
	var out []string
	for _, e := range ents {
		if info, err := e.Info(); err == nil && strings.HasSuffix(e.Name(), suffix) {
			p := filepath.Join(dir, e.Name())
			out = append(out, p)
			size[p] = info.Size()
		}
	}
	sort.Slice(out, func(i, j int) bool { return size[out[i]] > size[out[j]] })
	return out
}

// damage overwrites the middle third of file with garbage.
func damage(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(b) / 3; i < 2*len(b)/3; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
