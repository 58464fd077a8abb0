//go:build !unix

package main

import (
	"os/exec"
	"time"
)

// procGroup runs lock's command; without Unix process groups only the
// command itself is stopped, not what it started.
type procGroup struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

func becomeSubreaper() {}

func startGroup(cmd *exec.Cmd) (*procGroup, error) {
	g := &procGroup{cmd: cmd, exited: make(chan struct{})}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		g.waitErr = cmd.Wait()
		close(g.exited)
	}()
	return g, nil
}

// Exited is closed when the command has exited.
func (g *procGroup) Exited() <-chan struct{} { return g.exited }

// Stop kills the command and waits for it.
func (g *procGroup) Stop(grace time.Duration) (waitErr, err error) {
	_ = g.cmd.Process.Kill()
	<-g.exited
	return g.waitErr, nil
}
