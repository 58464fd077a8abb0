package cell

import (
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// lossyFS is the file system of a replica run with Config.UnsafeNoFsync, a
// test-only knob: the writes of a Pebble WAL file stay in this process's
// memory and reach the operating system only every lossyFlushEvery (and at
// Close), and its syncs do nothing. A replica killed with SIGKILL so loses
// its latest writes — acknowledged ones included — as a machine that loses
// power loses the writes a disk that lies about fsync had not yet stored.
// The fault-injection suite uses it to prove that its ack-set checker sees
// lost acknowledged writes. Every other file (tables, manifest, options)
// passes through unchanged, so what survives is a consistent prefix of the
// store's writes.
type lossyFS struct {
	vfs.FS

	mu    sync.Mutex
	files map[*lossyFile]struct{}
	stop  chan struct{}
	done  chan struct{}
}

// lossyFlushEvery is how often a lossyFS hands buffered WAL writes to the
// operating system: the longest a SIGKILL can take back.
const lossyFlushEvery = 500 * time.Millisecond

// newLossyFS wraps fs; buffered WAL writes reach it every flushEvery.
func newLossyFS(fs vfs.FS, flushEvery time.Duration) *lossyFS {
	l := &lossyFS{FS: fs, files: map[*lossyFile]struct{}{}, stop: make(chan struct{}), done: make(chan struct{})}
	go l.flushLoop(flushEvery)
	return l
}

func (l *lossyFS) flushLoop(every time.Duration) {
	defer close(l.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		l.mu.Lock()
		files := make([]*lossyFile, 0, len(l.files))
		for f := range l.files {
			files = append(files, f)
		}
		l.mu.Unlock()
		for _, f := range files {
			_ = f.flush()
		}
	}
}

// close stops the flush loop (the files flush at their own Close).
func (l *lossyFS) close() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

func isWAL(name string) bool { return strings.HasSuffix(name, ".log") }

func (l *lossyFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !isWAL(name) {
		return f, err
	}
	lf := &lossyFile{File: f, fs: l}
	l.mu.Lock()
	l.files[lf] = struct{}{}
	l.mu.Unlock()
	return lf, nil
}

// Create wraps WAL files.
func (l *lossyFS) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := l.FS.Create(name, category)
	return l.wrap(name, f, err)
}

// ReuseForWrite wraps recycled WAL files.
func (l *lossyFS) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := l.FS.ReuseForWrite(oldname, newname, category)
	return l.wrap(newname, f, err)
}

// Unwrap returns the wrapped file system.
func (l *lossyFS) Unwrap() vfs.FS { return l.FS }

// lossyFile is a WAL file whose writes wait in memory (see lossyFS).
type lossyFile struct {
	vfs.File
	fs *lossyFS

	mu      sync.Mutex
	buf     []byte
	written int64 // bytes handed to the operating system
}

// Write keeps a copy of p in memory.
func (f *lossyFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buf = append(f.buf, p...)
	return len(p), nil
}

func (f *lossyFile) flush() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.buf) == 0 {
		return nil
	}
	n, err := f.File.Write(f.buf)
	f.written += int64(n)
	f.buf = f.buf[:copy(f.buf, f.buf[n:])]
	return err
}

// Sync does nothing: that is the knob.
func (f *lossyFile) Sync() error { return nil }

// SyncData does nothing.
func (f *lossyFile) SyncData() error { return nil }

// SyncTo does nothing.
func (f *lossyFile) SyncTo(length int64) (bool, error) { return false, nil }

// Preallocate does nothing.
func (f *lossyFile) Preallocate(offset, length int64) error { return nil }

// Fd hides the descriptor, so that nothing syncs the file behind the
// buffer's back.
func (f *lossyFile) Fd() uintptr { return vfs.InvalidFd }

// Close hands the buffered writes over and closes the file.
func (f *lossyFile) Close() error {
	err := f.flush()
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}
