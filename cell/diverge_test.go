package cell_test

import (
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/cell/celltest"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// metricValue sums the samples of metric name, with or without labels, in
// a Prometheus text exposition.
func metricValue(body, name string) float64 {
	var sum float64
	for _, line := range strings.Split(body, "\n") {
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		var v float64
		for _, c := range line[strings.LastIndexByte(line, ' ')+1:] {
			if c < '0' || c > '9' {
				break
			}
			v = v*10 + float64(c-'0')
		}
		sum += v
	}
	return sum
}

// Replicas compare their state checksums at equal applied slots: in a
// healthy cell they compare and agree; after one replica's store is made to
// apply a command the others never chose (a planted divergence), the
// mismatch metric counts it on the others. The cell runs on celltest under
// synctest; the metrics are read from the replicas without HTTP.
func TestReplicasCompareStateChecksums(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, nil)
		ctx := testCtx(t, 4*time.Minute) // a hang guard, never a measure
		dial := func() (*client.Client, *client.Session) {
			c := lc.Dial(ctx, lc.ClientConfig("t", "app"))
			s, err := c.NewSession(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return c, s
		}
		c, s := dial()
		for _, p := range []string{"/t/a", "/t/b"} {
			if _, err := s.Open(ctx, p, client.OpenOptions{Create: true, Contents: []byte("x")}); err != nil {
				t.Fatal(err)
			}
		}
		metrics := func(id uint64) string {
			r := lc.Replica(id)
			if r == nil {
				return ""
			}
			return r.MetricsText()
		}
		// waitMetric polls until cond holds on every listed replica. It waits
		// on the condition only: the test's context is the hang guard, and
		// when it ends the failure names each replica's progress (a replica
		// that stopped applying is a bug, not a slow machine).
		waitMetric := func(what string, ids []uint64, cond func(body string) bool) {
			t.Helper()
			for {
				ok := true
				for _, id := range ids {
					ok = ok && cond(metrics(id))
				}
				if ok {
					return
				}
				select {
				case <-ctx.Done():
					var progress strings.Builder
					for id := uint64(1); id <= 3; id++ {
						if r := lc.Replica(id); r != nil {
							st := r.Status()
							fmt.Fprintf(&progress, " replica %d: %+v;", id, st)
						}
					}
					t.Fatalf("gave up waiting for %s (test context ended):%s", what, progress.String())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		// Healthy: every replica compares (the floor: at least 5 comparisons
		// each) and finds no mismatch.
		waitMetric("comparisons", []uint64{1, 2, 3}, func(b string) bool { return metricValue(b, "lockcell_state_comparisons_total") >= 5 })
		for id := uint64(1); id <= 3; id++ {
			if n := metricValue(metrics(id), "lockcell_state_checksum_mismatches_total"); n != 0 {
				t.Fatalf("replica %d counts %v mismatches in a healthy cell", id, n)
			}
		}
		c.Close()

		// Plant: a stopped replica's log gets a chosen value of its own for
		// the slot after its last: as if it had learned a different value than
		// the cell chooses there (what a broken acceptor or learner would do).
		// It applies it at its next start; the cell chooses another value for
		// that slot, which the replica, holding the slot chosen already, never
		// applies.
		victim := uint64(3)
		if m := lc.Master(); m != nil && m.ID() == victim {
			victim = 2
		}
		cfg, err := lc.Config(victim)
		if err != nil {
			t.Fatal(err)
		}
		lc.Crash(victim)
		db, err := pebble.Open(cfg.DataDir, &pebble.Options{FormatMajorVersion: pebble.FormatWALSyncChunks, Logger: quietPebble{}})
		if err != nil {
			t.Fatal(err)
		}
		ns, err := namespace.Open(db, namespace.Config{AdminPrincipal: cell.DefaultAdminPrincipal})
		if err != nil {
			t.Fatal(err)
		}
		logdb, err := paxos.NewPebbleStorage(db)
		if err != nil {
			t.Fatal(err)
		}
		hs, err := logdb.InitialState()
		if err != nil {
			t.Fatal(err)
		}
		now, _, _ := ns.Clock()
		cmd, err := namespace.EncodeCommand(namespace.Command{Time: now, Caller: namespace.Caller{Tenant: "t", Principal: "app"},
			Op: &namespace.OpenNode{Path: "/t/rogue", Create: true}})
		if err != nil {
			t.Fatal(err)
		}
		slot := max(paxos.Slot(ns.AppliedSlot()), hs.Chosen) + 1
		hs.Chosen = slot
		if err := logdb.Save(hs, []paxos.Entry{{Slot: slot, Ballot: hs.Promised, Value: paxos.Value{Cmds: []paxos.Command{{ID: paxos.ProposalID{Ballot: hs.Promised, Seq: 1 << 40}, Data: cmd}}}}}, true); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		lc.Restart(victim)
		c, s = dial()
		defer c.Close()
		var others []uint64
		for id := uint64(1); id <= 3; id++ {
			if id != victim {
				others = append(others, id)
			}
		}
		// Writes move the cell on; once the victim applies a slot after the
		// planted one, its checksum differs from the others' at equal slots.
		for i := 0; i < 3; i++ {
			if _, err := s.Open(ctx, "/t/after"+string(rune('0'+i)), client.OpenOptions{Create: true}); err != nil {
				t.Fatal(err)
			}
		}
		waitMetric("a mismatch counted by the healthy replicas", others, func(b string) bool {
			return metricValue(b, "lockcell_state_checksum_mismatches_total") >= 1
		})
	})
}

// The replica directory (who votes, who learns, where each listens, which
// IDs were ever used) is compared like the namespace: after a fourth
// replica joins a three-replica cell (catching up by snapshot, so its
// directory comes from the snapshot while the others derived theirs from
// the log), every replica compares its directory with its peers' at equal
// slots (the floor: five comparisons each, the new replica included) and
// finds them equal.
func TestReplicasCompareDirectories(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lc := simCell(t, 3, func(c *cell.Config) { c.SnapshotEvery = 50 })
		ctx := testCtx(t, 4*time.Minute) // a hang guard, never a measure
		c := lc.Dial(ctx, lc.ClientConfig("t", "app"))
		s, err := c.NewSession(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 120 { // past a snapshot, so the new replica installs one
			if _, err := s.Open(ctx, fmt.Sprintf("/t/f%d", i), client.OpenOptions{Create: true}); err != nil {
				t.Fatal(err)
			}
		}
		lc.Join(4)
		op := operator.New(lc.Dial(ctx, lc.ClientConfig("_cell", "admin")))
		if _, err := op.AddReplica(ctx, 4, celltest.Addr(4)); err != nil {
			t.Fatal(err)
		}
		ids := []uint64{1, 2, 3, 4}
		counts := func(id uint64) (dirs, mismatches float64) {
			r := lc.Replica(id)
			if r == nil {
				return 0, 0
			}
			b := r.MetricsText()
			return metricValue(b, "lockcell_state_directory_comparisons_total"), metricValue(b, "lockcell_state_checksum_mismatches_total")
		}
		base := map[uint64]float64{}
		for _, id := range ids {
			base[id], _ = counts(id)
		}
		for {
			done := true
			for _, id := range ids {
				dirs, mism := counts(id)
				if mism != 0 {
					t.Fatalf("replica %d counts %v mismatches after replica 4 joined", id, mism)
				}
				done = done && dirs-base[id] >= 5
			}
			if done {
				break
			}
			select {
			case <-ctx.Done():
				var got strings.Builder
				for _, id := range ids {
					dirs, _ := counts(id)
					fmt.Fprintf(&got, " replica %d: %v;", id, dirs-base[id])
				}
				t.Fatalf("directories not compared five times on every replica (test context ended):%s", got.String())
			case <-time.After(50 * time.Millisecond):
			}
		}
		if n := metricValue(lc.Replica(4).MetricsText(), "lockcell_snapshots_installed_total"); n == 0 {
			t.Fatal("replica 4 caught up without a snapshot: its directory was not taken from one")
		}
	})
}
