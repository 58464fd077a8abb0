package bench

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	line := "1234 (a (weird) name) S 1 1234 1234 0 -1 4194560 500 0 0 0 250 130 0 0 20 0 12 0 100 1000000 2000 18446744073709551615\n"
	cpu, err := parseStatCPU([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := 380 * 10 * time.Millisecond; cpu != want {
		t.Fatalf("cpu = %v, want %v", cpu, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 x y"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded", bad)
		}
	}
	rss, err := parseStatusRSS([]byte("Name:\tx\nVmRSS:\t  2048 kB\nThreads:\t3\n"))
	if err != nil || rss != 2048*1024 {
		t.Fatalf("rss = %d, %v", rss, err)
	}
	if _, err := parseStatusRSS([]byte("Name:\tx\n")); err == nil {
		t.Error("no VmRSS line accepted")
	}
}

func TestReadProcUsageSelf(t *testing.T) {
	u, err := ReadProcUsage([]int{osGetpid()})
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	if u.RSS <= 0 {
		t.Fatalf("own RSS %d", u.RSS)
	}
	if _, err := ReadProcUsage([]int{1 << 30}); err == nil {
		t.Fatal("a missing process was measured")
	}
}

func TestFencedCounter(t *testing.T) {
	var f FencedCounter
	f.Enter(1)
	f.Exit()
	f.Enter(0) // no token: order not checked
	f.Exit()
	f.Enter(3)
	f.Exit()
	if ov, st, _ := f.Violations(); ov != 0 || st != 0 {
		t.Fatalf("clean history: %d overlaps, %d stale", ov, st)
	}
	f.Enter(4)
	f.Enter(5) // overlap
	f.Exit()
	f.Exit()
	f.Enter(2) // stale
	f.Exit()
	ov, st, first := f.Violations()
	if ov != 1 || st != 1 || !strings.Contains(first, "overlap") {
		t.Fatalf("got %d overlaps, %d stale, first %q", ov, st, first)
	}
	if f.Value() != 6 {
		t.Fatalf("value %d", f.Value())
	}
}

func TestRecovery(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	win := window{at(0), at(10000)}
	marks := [][]acquireMark{
		{{at(100), at(200)}, {at(2900), at(4500)}, {at(4600), at(4700)}},
		// Began before the kill and finished after it: not a recovery.
		{{at(2990), at(3100)}, {at(3200), at(9000)}},
	}
	rec, gap, ok := recovery(marks, at(3000), win)
	// The first acquire begun after the kill ends at 4700 (the one ending
	// at 3100 began before it).
	if !ok || rec != 1700*time.Millisecond {
		t.Fatalf("recovery %v %v, want 1.7s", rec, ok)
	}
	// Completions: 200, 3100, 4500, 4700, 9000, then the window ends at
	// 10000: the longest gap is 4700→9000.
	if gap != 4300*time.Millisecond {
		t.Fatalf("gap %v, want 4.3s", gap)
	}
	if _, _, ok := recovery(marks, at(9500), win); ok {
		t.Fatal("recovery found with no acquire after the kill")
	}
}

func TestConfigRejectsBadInput(t *testing.T) {
	for _, c := range []Config{
		{Workload: "nope"},
		{Workload: Uncontended, Clients: -1},
		{Workload: Uncontended, Clients: MaxClients + 1},
		{Workload: Uncontended, Duration: time.Hour},
		{Workload: Sessions, Sessions: MaxSessions + 1},
		{Workload: ReadHeavy, WriteFraction: 2},
		{Workload: Noisy, QuietRate: -3},
	} {
		if _, err := Run(context.Background(), &memDriver{}, c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%+v: err %v, want ErrInvalidConfig", c, err)
		}
	}
}

func TestMainUsageErrors(t *testing.T) {
	f := DriverFactory{Name: "mem", Open: func(context.Context, *slogLogger, OpenConfig) (Driver, func(), error) {
		return &memDriver{}, func() {}, nil
	}}
	for _, args := range [][]string{
		{"--systems", "nope"}, {"--workloads", "x"}, {"--clients", "0"}, {"--duration", "2h"}, {"extra"},
		{"--replicas", "4"}, {"--replicas", "1"},
	} {
		var out, errb bytes.Buffer
		if code := Main(args, &out, &errb, []DriverFactory{f}); code != 2 {
			t.Errorf("%v: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
}

// memDriver is an in-memory system: a lock is a sync.Mutex with a counter
// for tokens. With broken set, Lock does not exclude anyone: the contended
// workload must report the overlap.
type memDriver struct {
	broken bool
	mu     sync.Mutex
	locks  map[string]*memLock
	files  map[string][]byte
}

type memLock struct {
	mu  sync.Mutex
	gen uint64
}

func (d *memDriver) Name() string { return "mem" }
func (d *memDriver) Connect(context.Context, ClientOptions) (Client, error) {
	return &memClient{d: d}, nil
}
func (d *memDriver) OpenSessions(_ context.Context, _ string, n int, progress func(int)) (SessionSet, error) {
	progress(n)
	return memSessions{}, nil
}
func (d *memDriver) Cluster() Cluster { return nil }
func (d *memDriver) Close() error     { return nil }

type memSessions struct{}

func (memSessions) Lost() int                   { return 0 }
func (memSessions) Close(context.Context) error { return nil }

type memClient struct{ d *memDriver }

func (c *memClient) Mutex(name string) Mutex {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.locks == nil {
		c.d.locks = map[string]*memLock{}
	}
	l := c.d.locks[name]
	if l == nil {
		l = &memLock{}
		c.d.locks[name] = l
	}
	return &memMutex{l: l, broken: c.d.broken}
}

func (c *memClient) Read(_ context.Context, name string) ([]byte, error) {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	b, ok := c.d.files[name]
	if !ok {
		return nil, fmt.Errorf("no file %s", name)
	}
	return b, nil
}

func (c *memClient) Write(_ context.Context, name string, data []byte) error {
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	if c.d.files == nil {
		c.d.files = map[string][]byte{}
	}
	c.d.files[name] = append([]byte(nil), data...)
	return nil
}

func (c *memClient) Lost() bool                  { return false }
func (c *memClient) Close(context.Context) error { return nil }

type memMutex struct {
	l      *memLock
	broken bool
}

func (m *memMutex) Lock(context.Context) (uint64, error) {
	if !m.broken {
		m.l.mu.Lock()
	}
	m.l.gen++
	time.Sleep(50 * time.Microsecond) // hold it a moment, so a broken lock overlaps
	return m.l.gen, nil
}

func (m *memMutex) Unlock(context.Context) error {
	if !m.broken {
		m.l.mu.Unlock()
	}
	return nil
}

func TestWorkloadsOnMemDriver(t *testing.T) {
	ctx := context.Background()
	for _, w := range []Workload{Uncontended, Contended, ReadHeavy, Noisy, Sessions} {
		r, err := Run(ctx, &memDriver{}, Config{Workload: w, Clients: 4, Duration: 200 * time.Millisecond, Warmup: -1, Sessions: 10})
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if r.Ops == 0 || r.Throughput <= 0 {
			t.Errorf("%s: no ops: %+v", w, r)
		}
		if w != Sessions && r.Latency.Count == 0 {
			t.Errorf("%s: no latencies", w)
		}
	}
	r, err := Run(ctx, &memDriver{}, Config{Workload: FailoverKill, Duration: 100 * time.Millisecond})
	if err != nil || r.Skipped == "" {
		t.Errorf("failover without a cluster: %v, skipped %q", err, r.Skipped)
	}
}

// TestContendedCatchesOverlap: a lock that excludes nobody must be reported
// as a violation, through Run's error and the Result.
func TestContendedCatchesOverlap(t *testing.T) {
	r, err := Run(context.Background(), &memDriver{broken: true},
		Config{Workload: Contended, Clients: 8, Duration: 300 * time.Millisecond, Warmup: -1, Hold: time.Millisecond})
	if !errors.Is(err, ErrViolation) || r.Violation == "" || r.Metrics[MetricOverlaps] == 0 {
		t.Fatalf("broken lock not caught: err %v, result %+v", err, r)
	}
	r, err = Run(context.Background(), &memDriver{},
		Config{Workload: Contended, Clients: 8, Duration: 300 * time.Millisecond, Warmup: -1})
	if err != nil || r.Violation != "" {
		t.Fatalf("working lock reported: %v %q", err, r.Violation)
	}
}

func TestOutputs(t *testing.T) {
	rs := []Result{
		{System: "lockcell", Workload: Uncontended, Clients: 64, Throughput: 12000, Unit: "acquire+release/s",
			Latency: LatencySummary{Count: 10, P50: 2, P90: 3, P99: 5, P999: 9, Max: 12}},
		{System: "etcd<&>", Workload: Uncontended, Clients: 64, Throughput: 2000,
			Latency: LatencySummary{Count: 10, P50: 20, P90: 30, P99: 65, P999: 90, Max: 120}},
		{System: "lockcell", Workload: FailoverKill, Clients: 8, Metrics: map[string]float64{MetricRecovery: 812.5}},
		{System: "zookeeper", Workload: ReadHeavyCache, Skipped: "no cache"},
	}
	var js bytes.Buffer
	for _, r := range rs {
		if err := WriteJSONLine(&js, r); err != nil {
			t.Fatal(err)
		}
	}
	back, err := ReadJSONLines(&js)
	if err != nil || len(back) != len(rs) || back[0].Latency.P99 != 5 || back[2].Metrics[MetricRecovery] != 812.5 {
		t.Fatalf("JSON round trip: %v %+v", err, back)
	}
	var tb bytes.Buffer
	if err := WriteTable(&tb, rs); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"12000", "recovery_ms=812.5", "skipped: no cache"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, rs, "t"); err != nil {
		t.Fatal(err)
	}
	text := svg.String()
	dec := xml.NewDecoder(&svg)
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
	}
	if !strings.Contains(text, "etcd&lt;&amp;&gt;") {
		t.Error("system name not escaped in the SVG")
	}
}

// selfCluster is a Cluster whose only server process is the test itself,
// so that the CPU meter has a process to read.
type selfCluster struct{}

func (selfCluster) PIDs() []int                                       { return []int{os.Getpid()} }
func (selfCluster) Leader(context.Context) (int, error)               { return 0, ErrUnsupported }
func (selfCluster) Signal(context.Context, int, syscall.Signal) error { return ErrUnsupported }
func (selfCluster) Restart(context.Context, int) error                { return ErrUnsupported }
func (selfCluster) Healthy(context.Context) error                     { return nil }

// procDriver is the in-memory driver with the test process as its server.
type procDriver struct{ memDriver }

func (d *procDriver) Cluster() Cluster { return selfCluster{} }

// TestServerCPUPerOp: the lock workloads report the servers' CPU per
// operation when the servers are processes, and say nothing when not.
func TestServerCPUPerOp(t *testing.T) {
	ctx := context.Background()
	for _, w := range []Workload{Uncontended, Contended} {
		cfg := Config{Workload: w, Clients: 4, Duration: 300 * time.Millisecond, Warmup: -1}
		r, err := Run(ctx, &procDriver{}, cfg)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		v, ok := r.Metrics[MetricCPUPerOp]
		if !ok || v < 0 || r.Ops == 0 {
			t.Errorf("%s with a server process: %s = %v (present %v) over %d ops", w, MetricCPUPerOp, v, ok, r.Ops)
		}
		r, err = Run(ctx, &memDriver{}, cfg)
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if v, ok := r.Metrics[MetricCPUPerOp]; ok {
			t.Errorf("%s without server processes reports %s = %v", w, MetricCPUPerOp, v)
		}
	}
}

// TestMutexesOnePerClient: mutexes gives client i the mutex named name(i),
// one lock per name.
func TestMutexesOnePerClient(t *testing.T) {
	d := &memDriver{}
	cs, err := connect(context.Background(), d, 3, ClientOptions{Tenant: "bench"})
	if err != nil {
		t.Fatal(err)
	}
	mus := mutexes(cs, func(i int) string { return fmt.Sprintf("m%d", i) })
	if len(mus) != len(cs) || len(d.locks) != len(cs) {
		t.Fatalf("%d mutexes on %d locks for %d clients", len(mus), len(d.locks), len(cs))
	}
	for i, m := range mus {
		if want := d.locks[fmt.Sprintf("m%d", i)]; want == nil || m.(*memMutex).l != want {
			t.Errorf("client %d's mutex is not the lock m%d", i, i)
		}
	}
}
