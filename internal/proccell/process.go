package proccell

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
)

// ErrNotRunning reports an action on a process (or a replica) that is not
// running.
var ErrNotRunning = errors.New("proccell: process not running")

// Process is one child process in its own process group: signals go to the
// whole group, so that SIGSTOP, SIGCONT and SIGKILL also reach anything it
// started. Its methods are safe for concurrent use.
type Process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}

	mu struct {
		sync.Mutex
		stopped bool // SIGSTOPped by us
		err     error
	}
}

// ProcessSpec describes a process to start.
type ProcessSpec struct {
	// Name names the process in errors ("replica 3"). Required.
	Name string
	// Argv is the command and its arguments. Required.
	Argv []string
	// LogFile receives the process's stderr, and its stdout unless Stdout
	// is set; it is appended to. Required.
	LogFile string
	// Stdin, if set, is the process's standard input.
	Stdin io.Reader
	// Stdout, if set, receives the process's standard output.
	Stdout io.Writer
	// Env is added to this process's environment.
	Env []string
	// DeathSignal is the signal the child gets if this process dies (on
	// Linux; elsewhere it gets none). If zero, SIGKILL; a dev cell asks
	// for SIGTERM, so that its replicas stop as they would on Ctrl-C.
	DeathSignal syscall.Signal
}

// StartProcess starts spec in a process group of its own. On Linux the
// child gets spec.DeathSignal (SIGKILL unless set) if this process dies.
// Its log file is readable by its owner only.
func StartProcess(spec ProcessSpec) (*Process, error) {
	if spec.Name == "" || len(spec.Argv) == 0 || spec.LogFile == "" {
		return nil, fmt.Errorf("%w: ProcessSpec needs Name, Argv and LogFile", ErrInvalidConfig)
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	if len(spec.Env) > 0 {
		cmd.Env = append(os.Environ(), spec.Env...)
	}
	death := spec.DeathSignal
	if death == 0 {
		death = syscall.SIGKILL
	}
	cmd.SysProcAttr = sysProcAttr(death)
	lf, err := os.OpenFile(spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("proccell: log of %s: %w", spec.Name, err)
	}
	cmd.Stderr = lf
	cmd.Stdout = lf
	if spec.Stdout != nil {
		cmd.Stdout = spec.Stdout
	}
	cmd.Stdin = spec.Stdin
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("proccell: starting %s: %w", spec.Name, err)
	}
	p := &Process{name: spec.Name, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		lf.Close()
		p.mu.Lock()
		p.mu.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// PID returns the process id (also the process group id).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process ended (nil while it runs, or if it exited 0).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.err
}

// Alive reports whether the process has not exited (a paused process is
// alive).
func (p *Process) Alive() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process group. It fails with ErrNotRunning once
// the process has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Alive() {
		return fmt.Errorf("%w: %s", ErrNotRunning, p.describe())
	}
	if err := syscall.Kill(-p.PID(), sig); err != nil {
		return fmt.Errorf("proccell: %s to %s: %w", sig, p.name, err)
	}
	p.mu.Lock()
	switch sig {
	case syscall.SIGSTOP:
		p.mu.stopped = true
	case syscall.SIGCONT:
		p.mu.stopped = false
	}
	p.mu.Unlock()
	return nil
}

func (p *Process) describe() string {
	if p == nil {
		return "no process"
	}
	return p.name
}

// Stopped reports whether the process was SIGSTOPped by Signal and not
// continued since.
func (p *Process) Stopped() bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.stopped
}

// Kill SIGKILLs the group (continuing it too, so that nothing in it stays
// stopped) and waits for the process to exit. It does nothing on a nil or
// exited process.
func (p *Process) Kill() {
	if !p.Alive() {
		return
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = syscall.Kill(-p.PID(), syscall.SIGCONT)
	<-p.done
}
