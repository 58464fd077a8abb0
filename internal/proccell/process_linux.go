package proccell

import "syscall"

// sysProcAttr puts a child in its own process group (so that SIGSTOP,
// SIGCONT and SIGKILL reach it and anything it starts) and sends it death
// if this process dies.
func sysProcAttr(death syscall.Signal) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: death}
}
