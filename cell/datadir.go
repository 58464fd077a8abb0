package cell

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lockcell/lockcell/internal/certs"
)

// ErrDataDirInUse is returned (wrapped) by Start when another replica — in
// this process or another — runs on the same data directory. The message
// names the process that holds it.
var ErrDataDirInUse = errors.New("cell: data directory in use")

// ErrWrongCertificate is returned (wrapped, with ErrInvalidConfig) by Start
// when the replica's certificate is not its own: it names another replica
// (or none), or does not chain to the cell CA.
var ErrWrongCertificate = errors.New("cell: not this replica's certificate")

// pidFileName is the file in the data directory that a running replica
// holds an exclusive flock on and writes its process id into.
const pidFileName = ourFilePrefix + "pid"

// dirLock is a running replica's hold on its data directory.
type dirLock struct{ f *os.File }

// lockDataDir takes dir for this replica: an exclusive, non-blocking flock
// on dir/lockcell-pid, which then holds this process's id. The kernel
// drops the lock when the process ends, however it ends, so a stale pid
// file never blocks a start. It creates dir if needed.
func lockDataDir(dir string) (*dirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	path := filepath.Join(dir, pidFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDataDir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: locking %s: %w", ErrDataDir, path, err)
		}
		holder := "another process"
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "process " + pid
				if pid == strconv.Itoa(os.Getpid()) {
					holder += " (this process)"
				}
			}
		}
		return nil, fmt.Errorf("%w: %s is used by %s, which runs a replica on it; stop that one first, or give this replica a data directory of its own", ErrDataDirInUse, dir, holder)
	}
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("%w: writing %s: %w", ErrDataDir, path, err)
	}
	return &dirLock{f: f}, nil
}

// release gives the data directory up (the pid file stays; the lock is
// what counts).
func (l *dirLock) release() {
	if l != nil && l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}

// dirBefore records what a data directory held before a start, so that a
// start that fails can remove what it created and nothing else.
type dirBefore struct {
	dir     string
	existed bool
	names   map[string]bool
}

func recordDir(dir string) dirBefore {
	b := dirBefore{dir: dir, names: map[string]bool{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		// Missing (or unreadable: then nothing is removed, see undo).
		b.existed = !errors.Is(err, fs.ErrNotExist)
		if b.existed {
			b.names = nil
		}
		return b
	}
	b.existed = true
	for _, e := range ents {
		b.names[e.Name()] = true
	}
	return b
}

// undo removes what a failed start created in the data directory. A
// directory that did not exist is removed whole. One that held no store
// (only files of ours, such as the new-member marker) loses every entry
// it did not hold, and gets the new-member marker back if the start
// consumed it. One that held a store is left alone: a store's files must
// never be judged one by one. Call it only after the store is closed.
func (b dirBefore) undo() error {
	if !b.existed {
		return os.RemoveAll(b.dir)
	}
	if b.names == nil {
		return nil
	}
	for n := range b.names {
		if !strings.HasPrefix(n, ourFilePrefix) {
			return nil // it held a store
		}
	}
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if !b.names[e.Name()] {
			errs = append(errs, os.RemoveAll(filepath.Join(b.dir, e.Name())))
		}
	}
	if b.names[newMemberFile] {
		if _, err := os.Stat(filepath.Join(b.dir, newMemberFile)); errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, InitDataDir(b.dir))
		}
	}
	return errors.Join(errs...)
}

// checkCertificate makes sure the replica's certificate names this replica
// and chains to the cell CA. Without it a replica started with a peer's
// certificate would run under the peer's name.
func (c Config) checkCertificate() error {
	leaf := c.Certificate.Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.Certificate.Certificate[0]); err != nil {
			return fmt.Errorf("%w: %w: cannot parse it: %w", ErrInvalidConfig, ErrWrongCertificate, err)
		}
	}
	id, err := certs.ReplicaID(leaf)
	if err != nil {
		return fmt.Errorf("%w: %w: it names no replica (%w); use the replica-%d certificate that lockcelld init wrote", ErrInvalidConfig, ErrWrongCertificate, err, c.ID)
	}
	if id != c.ID {
		return fmt.Errorf("%w: %w: it names replica %d, but this is replica %d; each replica must run with its own certificate (replica-%d.pem from lockcelld init)", ErrInvalidConfig, ErrWrongCertificate, id, c.ID, c.ID)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: c.CA, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("%w: %w: it does not chain to the cell CA: %w", ErrInvalidConfig, ErrWrongCertificate, err)
	}
	return nil
}
