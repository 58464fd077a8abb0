package cell

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/namespace"
	"github.com/lockcell/lockcell/paxos"
)

// Tests of the evidence rules in store.go: each builds a data directory in
// one of the states a replica can find at start and checks the verdict.

func testOpener(dir string, id uint64) *storeOpener {
	log := slog.New(slog.DiscardHandler)
	return &storeOpener{
		cfg: Config{ID: id, Cell: "t", DataDir: dir, AdminPrincipal: DefaultAdminPrincipal},
		log: log,
		openNS: func(db *pebble.DB) (*namespace.Store, error) {
			return namespace.Open(db, namespace.Config{AdminPrincipal: DefaultAdminPrincipal, Logger: log})
		},
		corrupt: func(pebble.DataCorruptionInfo) {},
	}
}

// openTest opens dir as replica 1 and returns the store (closed at cleanup)
// and its verdict ("" for none).
func openTest(t *testing.T, dir string) (*store, string) {
	t.Helper()
	st, err := testOpener(dir, 1).open()
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(st.close)
	if st.loss == nil {
		return st, ""
	}
	return st, st.loss.Kind
}

// closeClean closes st as a replica's Close does: everything synced and the
// guard recorded.
func closeClean(t *testing.T, st *store) {
	t.Helper()
	if err := st.logdb.Save(paxos.HardState{}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := st.recordGuard(true); err != nil {
		t.Fatal(err)
	}
	st.close()
	st.guard, st.db = nil, nil
}

// newMemberWithLog makes dir a member that accepted n slots (each save
// synced, the guard recorded after each, as the run loop does) and closes
// it cleanly.
func newMemberWithLog(t *testing.T, dir string, n int) {
	t.Helper()
	if err := InitDataDir(dir); err != nil {
		t.Fatal(err)
	}
	st, kind := openTest(t, dir)
	if kind != "" || !st.fresh {
		t.Fatalf("new member: loss %q, fresh %v", kind, st.fresh)
	}
	b := paxos.MakeBallot(3, 2)
	data := strings.Repeat("x", 300)
	for s := 1; s <= n; s++ {
		e := paxos.Entry{Slot: paxos.Slot(s), Ballot: b, Value: paxos.Value{Cmds: []paxos.Command{{ID: paxos.ProposalID{Ballot: b, Seq: uint64(s)}, Data: []byte(data)}}}}
		if err := st.logdb.Save(paxos.HardState{Promised: b, Chosen: paxos.Slot(s - 1)}, []paxos.Entry{e}, true); err != nil {
			t.Fatal(err)
		}
		if err := st.recordGuard(false); err != nil {
			t.Fatal(err)
		}
	}
	closeClean(t, st)
}

func TestStoreNewMemberThenRestart(t *testing.T) {
	dir := t.TempDir()
	newMemberWithLog(t, dir, 3)
	if _, err := os.Stat(filepath.Join(dir, newMemberFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the first start left the new-member marker: %v", err)
	}
	st, kind := openTest(t, dir)
	if kind != "" || st.fresh {
		t.Fatalf("clean restart: loss %q, fresh %v", kind, st.fresh)
	}
	if err := InitDataDir(dir); err == nil {
		t.Fatal("InitDataDir accepted a directory that holds a store")
	}
}

func TestStoreWipedIsLoss(t *testing.T) {
	for _, how := range []string{"removed", "emptied", "never initialised"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if how != "never initialised" {
				newMemberWithLog(t, dir, 3)
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if how == "emptied" {
					if err := os.Mkdir(dir, 0o700); err != nil {
						t.Fatal(err)
					}
				}
			}
			st, kind := openTest(t, dir)
			if kind != lossWiped {
				t.Fatalf("loss %q, want %q", kind, lossWiped)
			}
			hs, _ := st.logdb.InitialState()
			if !hs.Rebuilding {
				t.Fatal("the Rebuilding flag was not made durable before the node starts")
			}
			closeClean(t, st)
			// A restart mid-rebuild resumes it.
			if _, kind := openTest(t, dir); kind != lossInterrupted {
				t.Fatalf("restart during the rebuild: loss %q, want %q", kind, lossInterrupted)
			}
		})
	}
}

func TestStoreGuardEvidence(t *testing.T) {
	cases := []struct {
		name string
		harm func(t *testing.T, dir string)
		want string
	}{
		{"intact", func(*testing.T, string) {}, ""},
		{"guard missing", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, guardFileName)); err != nil {
				t.Fatal(err)
			}
		}, lossNoGuard},
		{"guard damaged", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, guardFileName), make([]byte, 2*guardSlotLen), 0o600); err != nil {
				t.Fatal(err)
			}
		}, lossBadGuard},
		{"guard ahead of the store", func(t *testing.T, dir string) {
			g, err := openGuard(filepath.Join(dir, guardFileName), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer g.close()
			if err := g.record(guardState{Promised: paxos.MakeBallot(3, 2), LastSlot: 9, Chosen: 2}, true); err != nil {
				t.Fatal(err)
			}
		}, lossBehindGuard},
		{"torn latest guard slot", func(t *testing.T, dir string) {
			// The slot written last is damaged; the other still holds a
			// record the store satisfies.
			g, err := readGuard(filepath.Join(dir, guardFileName), 1)
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(filepath.Join(dir, guardFileName), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("torn"), int64(g.seq%2)*guardSlotLen+30); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			newMemberWithLog(t, dir, 3)
			c.harm(t, dir)
			if _, kind := openTest(t, dir); kind != c.want {
				t.Fatalf("loss %q, want %q", kind, c.want)
			}
		})
	}
}

// A store from before member records and guards is trusted and guarded
// from then on.
func TestStoreLegacyIsTrusted(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebbleLogger{slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	logdb, err := paxos.NewPebbleStorage(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := logdb.Save(paxos.HardState{Promised: paxos.MakeBallot(2, 1), Chosen: 0}, nil, true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st, kind := openTest(t, dir)
	if kind != "" {
		t.Fatalf("legacy store: loss %q", kind)
	}
	closeClean(t, st)
	if err := os.Remove(filepath.Join(dir, guardFileName)); err != nil {
		t.Fatal(err)
	}
	if _, kind := openTest(t, dir); kind != lossNoGuard {
		t.Fatalf("guarded store without its guard: loss %q, want %q", kind, lossNoGuard)
	}
}

func TestStoreOfAnotherReplicaRefused(t *testing.T) {
	dir := t.TempDir()
	newMemberWithLog(t, dir, 1)
	_, err := testOpener(dir, 2).open()
	if !errors.Is(err, ErrDataDir) {
		t.Fatalf("replica 2 opening replica 1's store: %v, want ErrDataDir", err)
	}
}

// files lists dir's entries matching suffix, largest first.
func files(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	size := map[string]int64{}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			info, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, filepath.Join(dir, e.Name()))
			size[out[len(out)-1]] = info.Size()
		}
	}
	sort.Slice(out, func(i, j int) bool { return size[out[i]] > size[out[j]] })
	return out
}

// overwriteMiddle overwrites n bytes in the middle of file with garbage.
func overwriteMiddle(t *testing.T, file string, n int) {
	t.Helper()
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() < int64(2*n) {
		t.Fatalf("%s has %d bytes, too few to damage its middle", file, info.Size())
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, n)
	for i := range junk {
		junk[i] = byte(i*131 + 7)
	}
	if _, err := f.WriteAt(junk, info.Size()/2-int64(n)/2); err != nil {
		t.Fatal(err)
	}
}

// A WAL damaged in the middle is damage, found by the scan before Pebble
// opens it (whether or not the guard survived), and the store is moved
// aside. A WAL whose acknowledged tail is damaged (nothing after it to
// vouch for it) looks like a torn tail to the scan; the guard shows the
// lost writes. A torn tail of writes never acknowledged is normal.
func TestStoreDamagedWAL(t *testing.T) {
	cases := []struct {
		name string
		harm func(t *testing.T, dir, wal string)
		want string
	}{
		{"middle", func(t *testing.T, _, wal string) { overwriteMiddle(t, wal, 4096) }, lossCorrupt},
		{"middle, guard lost", func(t *testing.T, dir, wal string) {
			overwriteMiddle(t, wal, 4096)
			if err := os.Remove(filepath.Join(dir, guardFileName)); err != nil {
				t.Fatal(err)
			}
		}, lossCorrupt},
		{"acknowledged tail", func(t *testing.T, _, wal string) { overwriteTail(t, wal, 600) }, lossBehindGuard},
		{"torn unacknowledged tail", func(t *testing.T, dir, _ string) {
			// One more synced write the guard never recorded (the crash
			// came before the run loop could), torn in the middle.
			st, kind := openTest(t, dir)
			if kind != "" {
				t.Fatalf("reopen: %q", kind)
			}
			b := paxos.MakeBallot(3, 2)
			e := paxos.Entry{Slot: 201, Ballot: b, Value: paxos.Value{Cmds: []paxos.Command{{ID: paxos.ProposalID{Ballot: b, Seq: 201}, Data: []byte(strings.Repeat("y", 300))}}}}
			if err := st.logdb.Save(paxos.HardState{}, []paxos.Entry{e}, true); err != nil {
				t.Fatal(err)
			}
			st.close()
			st.guard, st.db = nil, nil
			torn := newestWAL(t, dir) // the reopen started a new one
			info, _ := os.Stat(torn)
			if err := os.Truncate(torn, info.Size()-100); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			newMemberWithLog(t, dir, 200)
			c.harm(t, dir, newestWAL(t, dir))
			st, kind := openTest(t, dir)
			if kind != c.want {
				t.Fatalf("loss %q, want %q", kind, c.want)
			}
			if kind != "" {
				t.Logf("%s: %s (moved aside to %q)", kind, st.loss.Detail, st.loss.MovedAside)
			} else if last, _ := st.logdb.LastSlot(); last != 200 {
				t.Fatalf("the torn write survived: last slot %d, want 200", last)
			}
		})
	}
}

// newestWAL returns the path of the highest-numbered WAL in dir.
func newestWAL(t *testing.T, dir string) string {
	t.Helper()
	wals := files(t, dir, ".log")
	if len(wals) == 0 {
		t.Fatalf("no WAL in %s", dir)
	}
	sort.Strings(wals) // Pebble's names are zero-padded numbers
	return wals[len(wals)-1]
}

// overwriteTail overwrites the last n bytes of file with garbage.
func overwriteTail(t *testing.T, file string, n int) {
	t.Helper()
	info, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xa5", n)), info.Size()-int64(n)); err != nil {
		t.Fatal(err)
	}
}

// A damaged table is found by the read of every key at start, and the
// store moved aside rather than failing every start.
func TestStoreDamagedTableMovedAside(t *testing.T) {
	dir := t.TempDir()
	newMemberWithLog(t, dir, 200)
	// Reopening flushes the replayed WAL into a table.
	st, kind := openTest(t, dir)
	if kind != "" {
		t.Fatalf("reopen: loss %q", kind)
	}
	if err := st.db.Flush(); err != nil {
		t.Fatal(err)
	}
	closeClean(t, st)
	tables := files(t, dir, ".sst")
	if len(tables) == 0 {
		t.Fatal("no table")
	}
	overwriteMiddle(t, tables[0], 512)
	st, kind = openTest(t, dir)
	if kind != lossCorrupt || st.loss.MovedAside == "" {
		t.Fatalf("damaged table: loss %+v", st.loss)
	}
	if _, err := os.Stat(filepath.Join(st.loss.MovedAside, filepath.Base(tables[0]))); err != nil {
		t.Fatalf("the damaged table is not in %s: %v", st.loss.MovedAside, err)
	}
	closeClean(t, st)
	// The next start resumes the rebuild on the fresh store.
	if _, kind := openTest(t, dir); kind != lossInterrupted {
		t.Fatalf("after moving aside: loss %q, want %q", kind, lossInterrupted)
	}
}

// A replica that met corruption while running leaves a note; the next
// start moves the store aside.
func TestStoreCorruptionNote(t *testing.T) {
	dir := t.TempDir()
	newMemberWithLog(t, dir, 3)
	if err := noteCorruption(dir, errors.New("pebble: corruption in 000004.sst")); err != nil {
		t.Fatal(err)
	}
	st, kind := openTest(t, dir)
	if kind != lossCorrupt || st.loss.MovedAside == "" || !strings.Contains(st.loss.Detail, "000004.sst") {
		t.Fatalf("after a corruption note: %+v", st.loss)
	}
	if _, err := os.Stat(filepath.Join(dir, damagedNoteFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the note survived: %v", err)
	}
}

// A replica whose store reports corruption while it runs stops, leaves the
// note, and its next start moves the store aside and rebuilds.
func TestCorruptionWhileRunning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lc, err := StartLocal(ctx, LocalConfig{Dir: t.TempDir(), Replicas: 3, Cell: "t", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	var r *Replica
	for _, x := range lc.Running() {
		if !x.Status().Master {
			r = x
		}
	}
	r.onCorruption(pebble.DataCorruptionInfo{Path: "000009.sst", Details: errors.New("block checksum mismatch")})
	select {
	case <-r.Done():
	case <-ctx.Done():
		t.Fatal("the replica kept running on a corrupt store")
	}
	if !pebble.IsCorruptionError(r.Err()) {
		t.Fatalf("stopped with %v, want a corruption error", r.Err())
	}
	if _, err := os.Stat(filepath.Join(r.cfg.DataDir, damagedNoteFile)); err != nil {
		t.Fatalf("no corruption note: %v", err)
	}
	lc.Stop(r.ID())
	if err := lc.Start(ctx, r.ID()); err != nil {
		t.Fatal(err)
	}
	rs := lc.Replica(r.ID()).Status().Rebuild
	if rs == nil || rs.Kind != lossCorrupt || rs.MovedAside == "" || !strings.Contains(rs.Reason, "000009.sst") {
		t.Fatalf("after the restart: %+v", rs)
	}
}
