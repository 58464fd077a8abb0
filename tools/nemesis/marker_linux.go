package nemesis

import (
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// mapMarker maps the first 4 bytes of file into memory as a word that
// another process sets: the nemesis sets a zombie's marker while the zombie
// is stopped, so that the zombie, spinning on a plain memory load, sees it
// at the first instruction after SIGCONT.
func mapMarker(file string) (*atomic.Uint32, error) {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, err := syscall.Mmap(int(f.Fd()), 0, 4, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return (*atomic.Uint32)(unsafe.Pointer(&mem[0])), nil
}
