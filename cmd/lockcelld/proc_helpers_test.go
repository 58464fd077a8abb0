package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/cell"
	"github.com/lockcell/lockcell/client"
	"github.com/lockcell/lockcell/client/operator"
	"github.com/lockcell/lockcell/internal/certs"
	"github.com/lockcell/lockcell/internal/proccell"
)

// A cell of real `lockcelld serve` processes for the tests in this
// package: `lockcelld init` writes it, each replica gets an HTTP listener
// (status, metrics, fault injection), its stderr is kept, and a tenant "t"
// with a client certificate exists.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// lockcelldBinary builds this command once per test run.
func lockcelldBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if buildDir, buildErr = os.MkdirTemp("", "lockcelld-test-"); buildErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		builtBin, buildErr = proccell.BuildLockcelld(ctx, buildDir, "")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// syncBuffer is a bytes.Buffer safe for one writer and many readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// procCell is a cell of `lockcelld serve` processes run by
// internal/proccell, seen through this package's tests: replica ids are
// ints, failures fail the test.
type procCell struct {
	t  *testing.T
	pc *proccell.Cell
	// dir is the cell directory lockcelld init wrote.
	dir string
	n   int
	// tenant is the client config of tenant "t".
	tenant client.Config
	httpc  *http.Client
}

// startProcCell writes a cell of n replicas and starts them all.
func startProcCell(t *testing.T, n int) *procCell {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs processes")
	}
	c := initProcCell(t, "proc", n)
	for id := 1; id <= n; id++ {
		c.start(id)
	}
	c.setupTenant()
	return c
}

// initProcCell writes a cell of n replicas named name with `lockcelld
// init` (fault injection on, replicas logging at info), and starts
// nothing. The processes are killed when the test ends; the logs of a
// failed test are shown.
func initProcCell(t *testing.T, name string, n int) *procCell {
	t.Helper()
	return initProcCellExtra(t, name, n, nil)
}

// initProcCellExtra is initProcCell with further keys in every replica's
// config (proccell.Config.Extra).
func initProcCellExtra(t *testing.T, name string, n int, extra map[string]any) *procCell {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := proccell.Init(ctx, proccell.Config{Binary: lockcelldBinary(t), Dir: filepath.Join(t.TempDir(), name), Name: name,
		Replicas: n, FaultInjection: true, Knobs: proccell.Knobs{LogLevel: "info"}, Extra: extra})
	if err != nil {
		t.Fatal(err)
	}
	c := &procCell{t: t, pc: pc, dir: pc.Dir(), n: n, httpc: &http.Client{Timeout: 2 * time.Second}}
	t.Cleanup(func() {
		for _, id := range c.ids() {
			if run, _ := pc.Running(uint64(id)); run {
				pc.Kill(uint64(id))
				if t.Failed() {
					t.Logf("cell %s replica %d log (tail):\n%s", name, id, tail(c.log(id), 40))
				}
			}
		}
		pc.KillAll()
	})
	return c
}

// ids returns the cell's replicas (not retired), in id order: 1 to n and
// those joined since.
func (c *procCell) ids() []int {
	var out []int
	for _, id := range c.pc.IDs() {
		out = append(out, int(id))
	}
	return out
}

// log returns what replica id has written to its log so far.
func (c *procCell) log(id int) string {
	b, err := os.ReadFile(c.pc.LogFile(uint64(id)))
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func tail(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

func (c *procCell) configFile(id int) string { return c.pc.ConfigFile(uint64(id)) }

// dataDir is replica id's data directory.
func (c *procCell) dataDir(id int) string { return c.pc.DataDir(uint64(id)) }

// httpAddr is replica id's HTTP listener.
func (c *procCell) httpAddr(id int) string { return c.pc.HTTPAddr(uint64(id)) }

// running reports whether replica id's process runs.
func (c *procCell) running(id int) bool {
	run, _ := c.pc.Running(uint64(id))
	return run
}

// start starts replica id's process.
func (c *procCell) start(id int) {
	c.t.Helper()
	if err := c.pc.StartReplica(uint64(id)); err != nil {
		c.t.Fatal(err)
	}
}

// stop stops replica id with sig and waits for the process to end.
func (c *procCell) stop(id int, sig syscall.Signal) {
	c.t.Helper()
	if !c.running(id) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.pc.Stop(ctx, uint64(id), sig); err != nil {
		c.t.Fatal(err)
	}
}

// procStatus is replica's /status: the CellStatus answer and the rebuild.
type procStatus struct {
	api.CellStatusResponse
	RebuildDetail *cell.RebuildStatus
}

// status reads replica id's /status.
func (c *procCell) status(id int) (procStatus, bool) {
	var st procStatus
	resp, err := c.httpc.Get("http://" + c.httpAddr(id) + "/status")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st) == nil
}

// metric returns the value of the metric line that starts with name (name
// including any labels), or false.
func (c *procCell) metric(id int, name string) (float64, bool) {
	resp, err := c.httpc.Get("http://" + c.httpAddr(id) + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// faults posts a fault-injection request to replica id.
func (c *procCell) faults(id int, path, body string) {
	c.t.Helper()
	resp, err := c.httpc.Post("http://"+c.httpAddr(id)+"/debug/faults/"+path, "application/json", strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("faults %s on %d: %s", path, id, b)
	}
}

// isolate cuts replica id off from every peer (it drops what it sends and
// what it receives); heal undoes it.
func (c *procCell) isolate(id int) {
	c.faults(id, "rules", fmt.Sprintf(`{"rules":[{"from":%d,"partition":true},{"to":%d,"partition":true}]}`, id, id))
}

func (c *procCell) heal(id int) { c.faults(id, "heal", "") }

// waitFor polls cond every 50 ms until it holds; it fails the test after
// limit (a bound generous enough for a loaded machine, never a measure).
func (c *procCell) waitFor(what string, limit time.Duration, cond func() bool) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			c.t.Fatalf("waited %v for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// master returns the replica that reports itself master, or 0.
func (c *procCell) master() int {
	for _, id := range c.ids() {
		if !c.running(id) {
			continue
		}
		if st, ok := c.status(id); ok && st.Master == uint64(id) && st.Role == "master" {
			return id
		}
	}
	return 0
}

func (c *procCell) waitMaster() int {
	c.t.Helper()
	var m int
	c.waitFor("a master", 60*time.Second, func() bool { m = c.master(); return m != 0 })
	return m
}

// followers returns the running replicas other than the master, in id
// order.
func (c *procCell) followers(master int) []int {
	var out []int
	for _, id := range c.ids() {
		if c.running(id) && id != master {
			out = append(out, id)
		}
	}
	return out
}

// setupTenant creates tenant "t" and a client certificate for it.
func (c *procCell) setupTenant() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.waitMaster()
	f, err := client.ReadConfigFile(filepath.Join(c.dir, "admin.json"))
	if err != nil {
		c.t.Fatal(err)
	}
	admin, err := f.Config(true)
	if err != nil {
		c.t.Fatal(err)
	}
	admin.Logger = slog.New(slog.DiscardHandler)
	admin.ReconnectMax = 200 * time.Millisecond
	ac, err := client.Dial(ctx, admin)
	if err != nil {
		c.t.Fatal(err)
	}
	defer ac.Close()
	for {
		_, err := operator.New(ac).CreateTenant(ctx, "t", api.TenantQuota{}, api.ACLNames{})
		if err == nil || errors.Is(err, api.ErrAlreadyExists) {
			break
		}
		if ctx.Err() != nil {
			c.t.Fatalf("creating tenant: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	caPEM, err1 := os.ReadFile(filepath.Join(c.dir, "certs", "ca.pem"))
	caKey, err2 := os.ReadFile(filepath.Join(c.dir, "certs", "ca-key.pem"))
	if err := errors.Join(err1, err2); err != nil {
		c.t.Fatal(err)
	}
	ca, err := certs.LoadCA(caPEM, caKey)
	if err != nil {
		c.t.Fatal(err)
	}
	cert, err := ca.IssueClient(certs.ClientID{Tenant: "t", Principal: "writer"}, certs.Options{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.tenant = admin
	c.tenant.Certificate = &cert
}

// session opens a session of tenant "t".
func (c *procCell) session(ctx context.Context) (*client.Client, *client.Session) {
	c.t.Helper()
	cl, err := client.Dial(ctx, c.tenant)
	if err != nil {
		c.t.Fatal(err)
	}
	s, err := cl.NewSession(ctx)
	if err != nil {
		_ = cl.Close()
		c.t.Fatalf("session: %v", err)
	}
	return cl, s
}

// writer creates files /t/w<n> one after another until stopped and
// remembers every create the cell acknowledged.
type writer struct {
	mu     sync.Mutex
	acked  []string
	failed int
	cancel context.CancelFunc
	done   chan struct{}
}

func (c *procCell) startWriter(prefix string) *writer {
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{cancel: cancel, done: make(chan struct{})}
	cl, s := c.session(ctx)
	go func() {
		defer close(w.done)
		defer cl.Close()
		for i := 0; ctx.Err() == nil; i++ {
			if s.Err() != nil { // expired during a long outage: start another
				ns, err := cl.NewSession(ctx)
				if err != nil {
					continue
				}
				s = ns
			}
			path := fmt.Sprintf("/t/%s%d", prefix, i)
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			h, err := s.Open(cctx, path, client.OpenOptions{MustCreate: true})
			ccancel()
			w.mu.Lock()
			if err == nil {
				w.acked = append(w.acked, path)
				_ = h
			} else {
				w.failed++
			}
			w.mu.Unlock()
		}
	}()
	c.t.Cleanup(w.stop)
	return w
}

func (w *writer) stop() {
	w.cancel()
	<-w.done
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *writer) ackedPaths() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.acked...)
}

// missing returns the acknowledged paths the cell no longer has.
func (c *procCell) missing(paths []string) []string {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cl, s := c.session(ctx)
	defer cl.Close()
	var out []string
	for _, p := range paths {
		h, err := s.Open(ctx, p, client.OpenOptions{})
		switch {
		case errors.Is(err, api.ErrNotFound):
			out = append(out, p)
		case err != nil:
			c.t.Fatalf("checking %s: %v", p, err)
		default:
			_ = h
		}
	}
	return out
}

// diverged reports two running replicas at the same applied slot with
// different state checksums, or "".
func (c *procCell) diverged() string {
	seen := map[uint64]struct {
		id  int
		sum api.Checksum
	}{}
	for _, id := range c.ids() {
		if !c.running(id) {
			continue
		}
		st, ok := c.status(id)
		if !ok {
			continue
		}
		if o, ok := seen[st.Applied]; ok && o.sum != st.Checksum {
			return fmt.Sprintf("replicas %d and %d both applied slot %d with checksums %s and %s", o.id, id, st.Applied, o.sum, st.Checksum)
		}
		seen[st.Applied] = struct {
			id  int
			sum api.Checksum
		}{id, st.Checksum}
	}
	return ""
}

// converged reports whether every running replica reports the same applied
// slot and checksum.
func (c *procCell) converged() bool {
	var first *procStatus
	for _, id := range c.ids() {
		if !c.running(id) {
			continue
		}
		st, ok := c.status(id)
		if !ok {
			return false
		}
		if first == nil {
			first = &st
		} else if st.Applied != first.Applied || st.Checksum != first.Checksum {
			return false
		}
	}
	return first != nil
}

// initOneReplica runs `lockcelld init` for a one-replica cell named name at
// addr in dir (extra flags appended) and returns replica 1's config file.
func initOneReplica(t *testing.T, dir, name, addr string, extra ...string) string {
	t.Helper()
	var out bytes.Buffer
	args := append([]string{"init", "--dir", dir, "--cell", name, "--replicas", addr}, extra...)
	if code := run(args, &out, &out); code != 0 {
		t.Fatalf("init exited %d: %s", code, out.String())
	}
	return filepath.Join(dir, "replica-1.json")
}
