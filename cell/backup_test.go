package cell_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/namespace"
)

// backupFixture is a cell with a file, a held lock and an ephemeral node,
// and a backup of it taken by the administrator.
type backupFixture struct {
	lc     *cell.LocalCell
	file   string // the backup
	head   api.SaveSnapshotResponse
	oldGen uint64 // the held lock's generation
}

func newBackupFixture(t *testing.T) *backupFixture {
	t.Helper()
	lc := startCell(t, 3, nil)
	ctx := testCtx(t, 2*time.Minute)
	quiet := slog.New(slog.DiscardHandler)
	cert, err := lc.ClientCertificate("t", "app")
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, client.Config{Addrs: lc.Addrs(), CA: lc.CA.Pool(), Certificate: &cert, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.NewSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "/t/keep", client.OpenOptions{Create: true, Contents: []byte("v1")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, "/t/eph", client.OpenOptions{Create: true, Ephemeral: true}); err != nil {
		t.Fatal(err)
	}
	// Enough contents that the backup streams in several chunks.
	big := bytes.Repeat([]byte("0123456789abcdef"), 200<<10/16)
	for i := range 3 {
		if _, err := s.Open(ctx, fmt.Sprintf("/t/big%d", i), client.OpenOptions{Create: true, Contents: big}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := client.NewMutex(s, "/t/lock").Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// A tenant principal may not take a backup: a typed error.
	if _, err := operator.New(c).SaveSnapshot(ctx, &bytes.Buffer{}); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("SaveSnapshot as a tenant principal: %v, want permission denied", err)
	}
	adminCert, err := lc.AdminCertificate()
	if err != nil {
		t.Fatal(err)
	}
	ac, err := client.Dial(ctx, client.Config{Addrs: lc.Addrs(), CA: lc.CA.Pool(), Certificate: &adminCert, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer ac.Close()
	var buf bytes.Buffer
	head, err := operator.New(ac).SaveSnapshot(ctx, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if head.Cell != "test" || head.Size != uint64(buf.Len()) || head.Size < 2*api.SnapshotChunkSize || head.Format != cell.BackupFormat || head.Slot == 0 {
		t.Fatalf("backup head %+v for %d bytes", head, buf.Len())
	}
	f := &backupFixture{lc: lc, file: filepath.Join(t.TempDir(), "backup.lcb"), head: head, oldGen: l.Generation()}
	if err := os.WriteFile(f.file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func checksumOf(sum uint64) string { return strings.Repeat("0", 16-len(hex(sum))) + hex(sum) }

func hex(x uint64) string {
	const digits = "0123456789abcdef"
	if x == 0 {
		return "0"
	}
	var b []byte
	for ; x > 0; x >>= 4 {
		b = append([]byte{digits[x&15]}, b...)
	}
	return string(b)
}

// The administrator's backup restores into the replicas of a new cell: the
// installed state recomputes to the backup's checksum, every replica starts
// from the same state, sessions are gone, and the checker finds nothing
// wrong.
func TestBackupRestoreCheck(t *testing.T) {
	f := newBackupFixture(t)
	rep, err := cell.CheckBackup(f.file)
	if err != nil || !rep.OK() {
		t.Fatalf("CheckBackup: %v %+v", err, rep)
	}
	info, _, err := cell.ReadBackup(f.file)
	if err != nil {
		t.Fatal(err)
	}
	if info.Slot != f.head.Slot || info.Checksum != checksumOf(f.head.Checksum) || info.Cell != "test" {
		t.Fatalf("backup header %+v, reply %+v", info, f.head)
	}

	if _, err := cell.Restore(cell.RestoreConfig{From: f.file, DataDir: filepath.Join(t.TempDir(), "same"), ID: 1, Cell: "test"}); !errors.Is(err, cell.ErrRestoreSameCell) {
		t.Fatalf("restore under the old cell's name: %v, want ErrRestoreSameCell", err)
	}
	base := t.TempDir()
	var sums []string
	for id := uint64(1); id <= 3; id++ {
		dir := filepath.Join(base, "r"+string(rune('0'+id)))
		rec, err := cell.Restore(cell.RestoreConfig{From: f.file, DataDir: dir, ID: id, Cell: "restored"})
		if err != nil {
			t.Fatalf("restore replica %d: %v", id, err)
		}
		if rec.From.Checksum != info.Checksum || rec.From.Slot != info.Slot || rec.Slot != info.Slot+1 {
			t.Fatalf("restore record %+v, backup %+v", rec, info)
		}
		if rec.Sessions < 1 || rec.LocksReleased < 1 || rec.EphemeralDeleted < 1 {
			t.Fatalf("restore ended %d sessions, released %d locks, deleted %d ephemeral nodes; want at least one of each", rec.Sessions, rec.LocksReleased, rec.EphemeralDeleted)
		}
		if rec.NextLockGen < f.oldGen+namespace.RestoreGap {
			t.Fatalf("lock generations continue above %d, want at least %d", rec.NextLockGen, f.oldGen+namespace.RestoreGap)
		}
		sums = append(sums, rec.Checksum)
		rep, err := cell.CheckDataDir(dir)
		if err != nil || !rep.OK() {
			t.Fatalf("check of restored replica %d: %v\n%s", id, err, reportText(rep))
		}
		if txt := reportText(rep); !strings.Contains(txt, "checksum "+info.Checksum) || !strings.Contains(txt, "state checksum "+rec.Checksum+", recomputed") {
			t.Fatalf("check of restored replica %d does not show both checksums:\n%s", id, txt)
		}
		if _, err := cell.Restore(cell.RestoreConfig{From: f.file, DataDir: dir, ID: id, Cell: "restored"}); !errors.Is(err, cell.ErrDataDir) {
			t.Fatalf("restore over a store: %v, want ErrDataDir", err)
		}
	}
	if len(slices.Compact(slices.Clone(sums))) != 1 {
		t.Fatalf("restored replicas start from different states: %v", sums)
	}

	// A damaged backup is refused, saying where.
	b, _ := os.ReadFile(f.file)
	b[len(b)/2] ^= 0x40
	bad := filepath.Join(t.TempDir(), "bad.lcb")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = cell.CheckBackup(bad)
	if err != nil || rep.OK() || !strings.Contains(reportText(rep), "damaged") {
		t.Fatalf("CheckBackup of a flipped byte: %v\n%s", err, reportText(rep))
	}
	if _, err := cell.Restore(cell.RestoreConfig{From: bad, DataDir: filepath.Join(t.TempDir(), "x"), ID: 1, Cell: "restored"}); !errors.Is(err, cell.ErrBadBackup) {
		t.Fatalf("restore of a damaged backup: %v, want ErrBadBackup", err)
	}
}

func reportText(r *cell.CheckReport) string {
	if r == nil {
		return "<no report>"
	}
	var b strings.Builder
	_, _ = r.WriteTo(&b)
	return b.String()
}

// The offline check finds planted damage in a replica's data directory and
// says what it is; on the untouched directory it finds nothing.
func TestCheckFindsPlantedDamage(t *testing.T) {
	f := newBackupFixture(t)
	cfg, err := f.lc.Config(1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cell.CheckDataDir(cfg.DataDir); !errors.Is(err, cell.ErrDataDirInUse) {
		t.Fatalf("check of a running replica's directory: %v, want ErrDataDirInUse", err)
	}
	f.lc.Close()
	rep, err := cell.CheckDataDir(cfg.DataDir)
	if err != nil || !rep.OK() {
		t.Fatalf("check of a healthy directory: %v\n%s", err, reportText(rep))
	}
	t.Logf("the healthy directory:\n%s", reportText(rep))
	judged := len(rep.Findings)
	if judged < 5 {
		t.Fatalf("the check judged only %d things:\n%s", judged, reportText(rep))
	}

	plants := []struct {
		name  string
		plant func(t *testing.T, dir string)
		want  string
	}{
		{"delete a node record", func(t *testing.T, dir string) {
			editStore(t, dir, func(db *pebble.DB) { deleteFirst(t, db, []byte("nN")) })
		}, "hashes to"},
		{"delete a chosen log entry", func(t *testing.T, dir string) {
			editStore(t, dir, func(db *pebble.DB) { deleteFirst(t, db, []byte("pe")) })
		}, "the Paxos log lacks 1 chosen slot(s)"},
		{"flip a byte in a table", func(t *testing.T, dir string) {
			editStore(t, dir, func(db *pebble.DB) {
				if err := db.Flush(); err != nil {
					t.Fatal(err)
				}
			})
			ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
			if len(ssts) == 0 {
				t.Fatal("no table to damage")
			}
			b, err := os.ReadFile(ssts[0])
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/3] ^= 0x01
			if err := os.WriteFile(ssts[0], b, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "checksum mismatch"},
		{"remove the guard", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "lockcell-guard")); err != nil {
				t.Fatal(err)
			}
		}, "the guard record lockcell-guard is missing"},
	}
	for _, p := range plants {
		t.Run(p.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "copy")
			if err := os.CopyFS(dir, os.DirFS(cfg.DataDir)); err != nil {
				t.Fatal(err)
			}
			p.plant(t, dir)
			rep, err := cell.CheckDataDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("lockcelld check says:\n%s", reportText(rep))
			if rep.OK() {
				t.Fatalf("the check missed it:\n%s", reportText(rep))
			}
			if !slices.ContainsFunc(rep.Problems(), func(s string) bool { return strings.Contains(s, p.want) }) {
				t.Fatalf("no problem says %q:\n%s", p.want, reportText(rep))
			}
		})
	}
}

// editStore opens a copied store for writing (as the replica does) and
// runs edit on it.
func editStore(t *testing.T, dir string, edit func(db *pebble.DB)) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FormatMajorVersion: pebble.FormatWALSyncChunks, Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	edit(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// deleteFirst deletes the first key with prefix, synced.
func deleteFirst(t *testing.T, db *pebble.DB, prefix []byte) {
	t.Helper()
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if !it.First() || !bytes.HasPrefix(it.Key(), prefix) {
		t.Fatalf("no key with prefix %q", prefix)
	}
	k := bytes.Clone(it.Key())
	_ = it.Close()
	if err := db.Delete(k, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// quietPebble discards Pebble's log lines.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)  {}
func (quietPebble) Errorf(string, ...any) {}
func (quietPebble) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
