package peers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// scriptCluster is a cluster run by one of bench/scripts/*-cluster.sh:
// "pids" lists members, "start-member N" restarts one.
type scriptCluster struct {
	script string
	// replicas is the number of members; the script is told it in
	// BENCH_REPLICAS.
	replicas int
	// leader finds the leading member (1-based).
	leader func(ctx context.Context) (int, error)
	// healthy reports whether every member serves and one leads.
	healthy func(ctx context.Context) error
}

// run runs the script with args.
func (c *scriptCluster) run(ctx context.Context, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.script, args...)
	cmd.Env = append(os.Environ(), "BENCH_REPLICAS="+strconv.Itoa(c.replicas))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("peers: %s %s: %w: %s", c.script, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// start starts a fresh cluster ("start") and returns the function that
// stops it ("stop"), which is safe to call whatever start returned.
func (c *scriptCluster) start(ctx context.Context) (stop func(), err error) {
	stop = func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = c.run(sctx, "stop")
	}
	if _, err := c.run(ctx, "start"); err != nil {
		return stop, err
	}
	return stop, nil
}

// endpoints returns the client endpoints of the cluster the script runs
// ("endpoints"), one per member.
func (c *scriptCluster) endpoints(ctx context.Context) ([]string, error) {
	out, err := c.run(ctx, "endpoints")
	if err != nil {
		return nil, err
	}
	eps := strings.Split(strings.TrimSpace(out), ",")
	if len(eps) != c.replicas {
		return nil, fmt.Errorf("peers: %s endpoints gave %d endpoints %q for %d members", c.script, len(eps), out, c.replicas)
	}
	return eps, nil
}

// members returns member → pid of the running members.
func (c *scriptCluster) members(ctx context.Context) (map[int]int, error) {
	out, err := c.run(ctx, "pids")
	if err != nil {
		return nil, err
	}
	m := map[int]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		id, err1 := strconv.Atoi(f[0])
		pid, err2 := strconv.Atoi(f[1])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("peers: bad pids line %q", line)
		}
		m[id] = pid
	}
	return m, nil
}

func (c *scriptCluster) PIDs() []int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := c.members(ctx)
	if err != nil {
		return nil
	}
	var out []int
	for id := 1; id <= c.replicas; id++ {
		if pid, ok := m[id]; ok {
			out = append(out, pid)
		}
	}
	return out
}

func (c *scriptCluster) Leader(ctx context.Context) (int, error) { return c.leader(ctx) }

// Signal signals member's process and waits (up to 15 s) until it is gone.
func (c *scriptCluster) Signal(ctx context.Context, member int, sig syscall.Signal) error {
	pid, err := c.kill(ctx, member, sig)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			return fmt.Errorf("peers: member %d (pid %d) still running 15s after %v (killed)", member, pid, sig)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *scriptCluster) Restart(ctx context.Context, member int) error {
	_, err := c.run(ctx, "start-member", strconv.Itoa(member))
	return err
}

func (c *scriptCluster) Healthy(ctx context.Context) error {
	for {
		m, err := c.members(ctx)
		if err == nil && len(m) < c.replicas {
			err = fmt.Errorf("peers: %d of %d members running", len(m), c.replicas)
		}
		if err == nil {
			err = c.healthy(ctx)
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("peers: cluster not healthy: %w (last: %w)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Pause stops member's process (SIGSTOP): bench's failover-pause.
func (c *scriptCluster) Pause(ctx context.Context, member int) error {
	_, err := c.kill(ctx, member, syscall.SIGSTOP)
	return err
}

// Resume continues member's process (SIGCONT).
func (c *scriptCluster) Resume(ctx context.Context, member int) error {
	_, err := c.kill(ctx, member, syscall.SIGCONT)
	return err
}

// kill sends sig to member's process without waiting and returns its pid.
func (c *scriptCluster) kill(ctx context.Context, member int, sig syscall.Signal) (int, error) {
	m, err := c.members(ctx)
	if err != nil {
		return 0, err
	}
	pid, ok := m[member]
	if !ok {
		return 0, fmt.Errorf("peers: member %d is not running", member)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return 0, fmt.Errorf("peers: %v to member %d (pid %d): %w", sig, member, pid, err)
	}
	return pid, nil
}
