package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
)

// freeDevPorts returns a base port with n free UDP ports from it and n
// free TCP ports from base+100 (the layout of lockcelld dev).
func freeDevPorts(t *testing.T, n int) int {
	t.Helper()
	return freePortBase(t, "udp", func(base int) bool {
		return portsFree("udp", base, n) && portsFree("tcp", base+100, n)
	})
}

// freePortBase returns a free loopback port of network for which fits
// holds, trying up to 200 candidates.
func freePortBase(t *testing.T, network string, fits func(base int) bool) int {
	t.Helper()
	for range 200 {
		if base := freePorts(t, network, 1)[0]; base+200 <= 65535 && fits(base) {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// portsFree reports whether the n loopback ports of network ("udp" or
// "tcp") from base can all be bound now.
func portsFree(network string, base, n int) bool {
	for i := range n {
		addr := "127.0.0.1:" + strconv.Itoa(base+i)
		if network == "udp" {
			pc, err := net.ListenPacket("udp", addr)
			if err != nil {
				return false
			}
			pc.Close()
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// TestDevProcs: `lockcelld dev --procs` runs one process per replica;
// killing the master's process (its pid from the pid file) leaves a cell
// that elects another master while the dev command keeps running and says
// which replica exited; SIGTERM then stops every replica.
func TestDevProcs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	bin := lockcelldBinary(t)
	dir := filepath.Join(t.TempDir(), "dev")
	const n = 3
	base := freeDevPorts(t, n)
	outPath := filepath.Join(t.TempDir(), "dev.out")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	dev := exec.Command(bin, "dev", "--procs", "--dir", dir, "--port", strconv.Itoa(base), "--replicas", strconv.Itoa(n))
	dev.Stdout, dev.Stderr = out, out
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	devDone := make(chan struct{})
	go func() { _ = dev.Wait(); close(devDone) }()
	pids := map[int]int{}
	defer func() {
		_ = dev.Process.Kill()
		<-devDone
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			b, _ := os.ReadFile(outPath)
			t.Logf("dev output:\n%s", b)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	output := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	if !pollUntil(ctx, func() bool { return strings.Contains(output(), "dev cell is up") }) {
		t.Fatal("the dev cell never came up")
	}
	for id := 1; id <= n; id++ {
		b, err := os.ReadFile(filepath.Join(dir, "data", "replica-"+strconv.Itoa(id), "lockcell-pid"))
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || perr != nil || pid == dev.Process.Pid {
			t.Fatalf("replica %d pid file: %q %v %v", id, b, err, perr)
		}
		pids[id] = pid
	}
	hc := &http.Client{Timeout: 2 * time.Second}
	status := func(id int) (api.CellStatusResponse, bool) {
		var st api.CellStatusResponse
		resp, err := hc.Get("http://127.0.0.1:" + strconv.Itoa(base+100+id-1) + "/status")
		if err != nil {
			return st, false
		}
		defer resp.Body.Close()
		return st, json.NewDecoder(resp.Body).Decode(&st) == nil
	}
	master := func(except int) int {
		for id := 1; id <= n; id++ {
			if st, ok := status(id); ok && id != except && st.Role == api.RoleMaster {
				return id
			}
		}
		return 0
	}
	var m int
	if !pollUntil(ctx, func() bool { m = master(0); return m != 0 }) {
		t.Fatal("no master")
	}
	if err := syscall.Kill(pids[m], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	delete(pids, m)
	var next int
	if !pollUntil(ctx, func() bool { next = master(m); return next != 0 }) {
		t.Fatalf("no new master after killing replica %d's process", m)
	}
	if !pollUntil(ctx, func() bool { return strings.Contains(output(), "replica "+strconv.Itoa(m)+" exited") }) {
		t.Fatalf("dev did not say that replica %d exited", m)
	}
	select {
	case <-devDone:
		t.Fatal("dev stopped when one replica died")
	default:
	}
	t.Logf("killed master %d; replica %d took over", m, next)
	if err := dev.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-devDone:
	case <-ctx.Done():
		t.Fatal("dev did not stop on SIGTERM")
	}
	for id, pid := range pids {
		if !pollUntil(ctx, func() bool { return syscall.Kill(pid, 0) != nil }) {
			t.Errorf("replica %d (pid %d) still runs after dev stopped", id, pid)
		}
	}
}
