package nemesis

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// ErrNotRunning reports a signal for a process that is not running.
var ErrNotRunning = errors.New("nemesis: process not running")

// proc is one child process in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu      sync.Mutex
	stopped bool // SIGSTOPped by us
	err     error
}

// startProc starts argv in its own process group, its output appended to
// logFile, with env added to this process's environment.
func startProc(name string, argv []string, logFile string, stdin io.Reader, stdout io.Writer, env ...string) (*proc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.SysProcAttr = sysProcAttr()
	lf, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd.Stderr = lf
	cmd.Stdout = lf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("nemesis: starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		lf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	if !p.alive() {
		return ErrNotRunning
	}
	if err := syscall.Kill(-p.pid(), sig); err != nil {
		return fmt.Errorf("nemesis: %s to %s: %w", sig, p.name, err)
	}
	p.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		p.stopped = true
	case syscall.SIGCONT:
		p.stopped = false
	}
	p.mu.Unlock()
	return nil
}

func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

// kill SIGKILLs the group (continuing it first, so nothing stays stopped)
// and waits for the process to exit.
func (p *proc) kill() {
	if p == nil || !p.alive() {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	_ = syscall.Kill(-p.pid(), syscall.SIGCONT)
	<-p.done
}
