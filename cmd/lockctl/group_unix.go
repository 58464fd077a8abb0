//go:build unix

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
	"unsafe"
)

// procGroup is lock's command running in a process group of its own, with
// what lockctl needs to stop all of it.
//
// The command and everything it starts share the group unless they leave
// it (setsid, setpgid); stop signals the whole group, so a grandchild is
// stopped as surely as the command. On Linux lockctl is also a child
// subreaper (see becomeSubreaper), so a descendant that left the group is
// re-parented to lockctl once its parent dies, and stop finds and stops it
// as well. What still escapes: work handed to another process tree (a
// service manager, a container runtime, a remote host), descendants adopted
// by another subreaper below lockctl, and on systems other than Linux any
// process that left the group. If lockctl itself is killed with SIGKILL it
// stops nothing; the lock then ends with its session, after lock-delay.
type procGroup struct {
	cmd  *exec.Cmd
	pgid int
	// exited is closed once cmd.Wait has returned; waitErr is its result.
	exited  chan struct{}
	waitErr error
	// tty is the terminal whose foreground group the command got, or -1.
	tty int
}

// startGroup starts cmd as the leader of a new process group. When stdin
// is the terminal and lockctl is in its foreground, the new group becomes
// the foreground group, so that ^C and ^Z reach the command (and not
// lockctl) as they would without lockctl.
func startGroup(cmd *exec.Cmd) (*procGroup, error) {
	g := &procGroup{cmd: cmd, tty: -1, exited: make(chan struct{})}
	attr := &syscall.SysProcAttr{Setpgid: true}
	if f, ok := cmd.Stdin.(*os.File); ok && inForeground(int(f.Fd())) {
		attr.Foreground, attr.Ctty = true, int(f.Fd())
		g.tty = int(f.Fd())
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g.pgid = cmd.Process.Pid
	go func() {
		g.waitErr = cmd.Wait()
		close(g.exited)
	}()
	return g, nil
}

// Exited is closed when the command (the group's leader) has exited; other
// processes of the group may still run.
func (g *procGroup) Exited() <-chan struct{} { return g.exited }

// stopPoll is how often stop looks whether processes are left.
const stopPoll = 20 * time.Millisecond

// stopBound is how long stop waits, after SIGKILL, for the last processes
// to go (a process in uninterruptible sleep dies only when it wakes).
const stopBound = 30 * time.Second

// errSurvivors: processes were still there stopBound after SIGKILL.
var errSurvivors = errors.New("processes of the command survive SIGKILL")

// Stop stops every process of the group, and every orphan of it that
// lockctl adopted: SIGTERM (with SIGCONT, so that a stopped process gets
// it), then SIGKILL to whatever is left after grace. It returns once no
// process is left, with the command's exit (cmd.Wait's error), and
// errSurvivors if processes were still there long after SIGKILL. It is also
// what ends a normal run: background processes the command left behind
// are stopped before the lock is released.
func (g *procGroup) Stop(grace time.Duration) (waitErr, err error) {
	defer g.restoreTTY()
	self := os.Getpid()
	signalled := map[int]bool{}
	term := func(pid int) {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	term(-g.pgid)
	killAt := time.Now().Add(grace)
	killed := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		leaderDone := isClosed(g.exited)
		if !leaderDone && !signalled[g.pgid] {
			// The command itself, should it have left its own group.
			term(g.pgid)
			signalled[g.pgid] = true
		}
		left := 0
		for _, pid := range adoptedChildren(self) {
			if pid == g.pgid && !leaderDone {
				continue // cmd.Wait reaps it
			}
			var ws syscall.WaitStatus
			if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
				continue // reaped
			}
			left++
			switch {
			case killed:
				_ = syscall.Kill(pid, syscall.SIGKILL)
			case !signalled[pid]:
				term(pid)
				signalled[pid] = true
			}
		}
		if err := syscall.Kill(-g.pgid, 0); errors.Is(err, syscall.ESRCH) && left == 0 && leaderDone {
			return g.waitErr, nil
		}
		now := time.Now()
		if !killed && !now.Before(killAt) {
			killed = true
			_ = syscall.Kill(-g.pgid, syscall.SIGKILL)
			_ = syscall.Kill(g.pgid, syscall.SIGKILL)
			continue
		}
		if killed && now.After(killAt.Add(stopBound)) {
			return nil, fmt.Errorf("%w (process group %d, %d adopted)", errSurvivors, g.pgid, left)
		}
		t.Reset(stopPoll)
		select {
		case <-t.C:
		case <-g.exited:
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// inForeground reports whether fd is a terminal whose foreground process
// group is lockctl's own.
func inForeground(fd int) bool {
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(syscall.TIOCGPGRP), uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return false
	}
	return int(pgrp) == syscall.Getpgrp()
}

// restoreTTY gives the terminal's foreground back to lockctl's group once
// the command's group is gone.
func (g *procGroup) restoreTTY() {
	if g.tty < 0 {
		return
	}
	// NB: a process outside the foreground group that sets it gets
	// SIGTTOU, which would stop lockctl; ignore it meanwhile.
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(g.tty), uintptr(syscall.TIOCSPGRP), uintptr(unsafe.Pointer(&pgrp)))
	g.tty = -1
}
