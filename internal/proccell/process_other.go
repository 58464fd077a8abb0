//go:build !linux

package proccell

import "syscall"

// sysProcAttr puts a child in its own process group; this platform has no
// signal on the parent's death, so death is not used.
func sysProcAttr(death syscall.Signal) *syscall.SysProcAttr {
	_ = death
	return &syscall.SysProcAttr{Setpgid: true}
}
