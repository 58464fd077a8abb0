package cell

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestLossyFS: a WAL file's writes under UnsafeNoFsync stay in memory
// (a SIGKILL would lose them) until the flush loop or Close hands them to
// the operating system, and its syncs do nothing; other files pass
// through.
func TestLossyFS(t *testing.T) {
	dir := t.TempDir()
	fs := newLossyFS(vfs.Default, time.Hour) // NB: no flush during the test

	defer fs.close()
	wal, err := fs.Create(filepath.Join(dir, "000001.log"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	other, err := fs.Create(filepath.Join(dir, "MANIFEST-000001"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []vfs.File{wal, other} {
		if _, err := f.Write([]byte("acknowledged")); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	size := func(name string) int64 {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if n := size("000001.log"); n != 0 {
		t.Fatalf("the WAL holds %d bytes after a sync: its writes reached the OS", n)
	}
	if n := size("MANIFEST-000001"); n != int64(len("acknowledged")) {
		t.Fatalf("another file holds %d bytes after a sync", n)
	}
	if fd := wal.Fd(); fd != vfs.InvalidFd {
		t.Fatalf("the WAL's descriptor is exposed (%d): something could sync it", fd)
	}
	if err := wal.Close(); err != nil {
		t.Fatal(err)
	}
	if n := size("000001.log"); n != int64(len("acknowledged")) {
		t.Fatalf("the WAL holds %d bytes after Close", n)
	}
	_ = other.Close()
}
