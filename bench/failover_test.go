package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func TestClientOutages(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	win := window{at(0), at(10000)}
	marks := [][]acquireMark{
		{{at(100), at(200)}, {at(4000), at(4500)}, {at(4600), at(4700)}},
		{{at(2990), at(3100)}, {at(3200), at(9000)}},
		{}, // never succeeded: out for the whole window
		// Its longest gap in 5000..6000 begins inside the interval.
		{{at(4800), at(4900)}, {at(5400), at(5500)}, {at(9900), at(9950)}},
	}
	ms := func(d time.Duration) int { return int(d / time.Millisecond) }
	got := clientOutages(marks, win, span{at(3000), at(3000)})
	// Client 0: 200→4500 holds the instant; client 1: 0→3100; client 2:
	// 0→10000; client 3: 0→4900.
	if want := []int{4300, 3100, 10000, 4900}; !slices.Equal([]int{ms(got[0]), ms(got[1]), ms(got[2]), ms(got[3])}, want) {
		t.Fatalf("outages at 3000: %v, want %v ms", got, want)
	}
	// An interval: every gap that overlaps 5000..6000 counts, and the
	// longest of each client's wins.
	got = clientOutages(marks, win, span{at(5000), at(6000)})
	if want := []int{5300, 5900, 10000, 4450}; !slices.Equal([]int{ms(got[0]), ms(got[1]), ms(got[2]), ms(got[3])}, want) {
		t.Fatalf("outages over 5000..6000: %v, want %v ms", got, want)
	}
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if o := outageSummary(ds); o.p50 != 50*time.Millisecond || o.p99 != 99*time.Millisecond || o.max != 100*time.Millisecond {
		t.Fatalf("summary of 1..100 ms: %+v", o)
	}
	if o := outageSummary(nil); o != (outages{}) {
		t.Fatalf("summary of nothing: %+v", o)
	}
}

// fakeCluster is a five-member cluster whose disruptions are stand-ins:
// while its leader is stopped its lockDriver's locks fail, and a new
// leader serves failoverDelay after a kill, a partition or a hand-over.
type fakeCluster struct {
	mu        sync.Mutex
	leader    int
	paused    bool
	downUntil time.Time
	log       []string
}

const failoverDelay = 300 * time.Millisecond

func (c *fakeCluster) record(format string, args ...any) {
	c.log = append(c.log, fmt.Sprintf(format, args...))
}

func (c *fakeCluster) serving() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.paused && !time.Now().Before(c.downUntil)
}

func (c *fakeCluster) PIDs() []int { return nil }
func (c *fakeCluster) Leader(context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leader, nil
}
func (c *fakeCluster) Signal(_ context.Context, m int, sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("signal %d %v", m, sig)
	if m == c.leader {
		c.downUntil = time.Now().Add(failoverDelay)
		c.leader = m%5 + 1
	}
	return nil
}
func (c *fakeCluster) Restart(_ context.Context, m int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("restart %d", m)
	return nil
}
func (c *fakeCluster) Healthy(context.Context) error { return nil }
func (c *fakeCluster) Pause(_ context.Context, m int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("pause %d", m)
	c.paused = m == c.leader
	return nil
}
func (c *fakeCluster) Resume(_ context.Context, m int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("resume %d", m)
	c.paused = false
	return nil
}
func (c *fakeCluster) Partition(_ context.Context, side []int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("partition %v", side)
	if slices.Contains(side, c.leader) {
		c.downUntil = time.Now().Add(failoverDelay)
		for m := 1; m <= 5; m++ {
			if !slices.Contains(side, m) {
				c.leader = m
				break
			}
		}
	}
	return nil
}
func (c *fakeCluster) Heal(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("heal")
	return nil
}
func (c *fakeCluster) HandOver(_ context.Context, m int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.record("handover %d", m)
	c.downUntil = time.Now().Add(failoverDelay)
	c.leader = m%5 + 1
	return nil
}

// lockDriver is memDriver whose locks fail while its cluster serves
// nothing.
type lockDriver struct {
	memDriver
	c *fakeCluster
}

func (d *lockDriver) Cluster() Cluster { return d.c }
func (d *lockDriver) Connect(ctx context.Context, o ClientOptions) (Client, error) {
	return &lockClient{memClient{d: &d.memDriver}, d.c}, nil
}

type lockClient struct {
	memClient
	c *fakeCluster
}

func (c *lockClient) Mutex(name string) Mutex { return &lockMutex{c.memClient.Mutex(name), c.c} }

type lockMutex struct {
	Mutex
	c *fakeCluster
}

var errNotServing = errors.New("fake cluster: not serving")

func (m *lockMutex) Lock(ctx context.Context) (uint64, error) {
	time.Sleep(time.Millisecond) // one round trip
	if !m.c.serving() {
		return 0, errNotServing
	}
	return m.Mutex.Lock(ctx)
}

// TestFailoverWorkloads runs each fail-over workload against the fake
// cluster on synctest's clock: the disruption is done to the leader, in
// the right order, and every client's outage covers it.
func TestFailoverWorkloads(t *testing.T) {
	for _, tc := range []struct {
		w Workload
		// wantLog is the fake's log; minOutage the least every client's
		// outage must be.
		wantLog   []string
		minOutage time.Duration
		// replicas is the cluster's size (0: DefaultReplicas).
		replicas int
	}{
		{FailoverKill, []string{"signal 1 killed", "restart 1"}, failoverDelay, 0},
		{FailoverStepDown, []string{"signal 1 terminated", "restart 1"}, failoverDelay, 0},
		{FailoverPause, []string{"pause 1", "resume 1"}, 400 * time.Millisecond, 0},
		{FailoverPartition, []string{"partition [1 2]", "heal"}, failoverDelay, 0},
		{FailoverRolling, []string{
			"signal 2 terminated", "restart 2", "signal 3 terminated", "restart 3", "signal 4 terminated", "restart 4",
			"signal 5 terminated", "restart 5", "handover 1", "signal 1 terminated", "restart 1"}, failoverDelay, 0},
		// Of three members the leader is a minority alone, and a rolling
		// restart stops three.
		{FailoverPartition, []string{"partition [1]", "heal"}, failoverDelay, 3},
		{FailoverRolling, []string{
			"signal 2 terminated", "restart 2", "signal 3 terminated", "restart 3",
			"handover 1", "signal 1 terminated", "restart 1"}, failoverDelay, 3},
	} {
		t.Run(fmt.Sprintf("%s/replicas=%d", tc.w, tc.replicas), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := &fakeCluster{leader: 1}
				r, err := Run(context.Background(), &lockDriver{c: c},
					Config{Workload: tc.w, Clients: 4, Duration: 3 * time.Second, Warmup: -1, PauseFor: 400 * time.Millisecond, Replicas: tc.replicas})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(c.log, tc.wantLog) {
					t.Fatalf("cluster saw %q, want %q", c.log, tc.wantLog)
				}
				if r.Ops == 0 || r.Errors == 0 {
					t.Fatalf("%d ops, %d errors: the run did not see the disruption", r.Ops, r.Errors)
				}
				p50, max := r.Metrics[MetricOutageP50], r.Metrics[MetricOutageMax]
				if p50 < ms(tc.minOutage) || max < p50 || max >= ms(3*time.Second) {
					t.Fatalf("outage p50 %v ms, max %v ms; want at least %v", p50, max, tc.minOutage)
				}
				if _, ok := r.Metrics[MetricRecovery]; !ok {
					t.Fatalf("no recovery measured: %+v", r)
				}
				if r.Metrics[MetricSessionsLost] != 0 || r.Metrics[MetricLeader] != 1 {
					t.Fatalf("sessions lost %v, leader %v", r.Metrics[MetricSessionsLost], r.Metrics[MetricLeader])
				}
				n := cmp.Or(tc.replicas, DefaultReplicas)
				if r.Replicas != n || (n == DefaultReplicas) != (r.Label() == r.System) {
					t.Fatalf("result of %d replicas, labelled %q; want %d", r.Replicas, r.Label(), n)
				}
				if tc.w == FailoverRolling {
					last := fmt.Sprintf("restart%d_", n)
					if r.Metrics[MetricRestarts] != float64(n) || r.Metrics[last+"member"] != 1 || r.Metrics[MetricMasterChanges] < 1 {
						t.Fatalf("rolling: %v restarts, last member %v, %v master changes",
							r.Metrics[MetricRestarts], r.Metrics[last+"member"], r.Metrics[MetricMasterChanges])
					}
					if o := r.Metrics[last+"outage_max_ms"]; o < ms(failoverDelay) {
						t.Fatalf("the master's restart: outage %v ms, want at least %v", o, failoverDelay)
					}
				}
			})
		})
	}
}

// TestFailoverUnsupported: a cluster that cannot pause or partition gets
// the row skipped with the reason, not a failure.
func TestFailoverUnsupported(t *testing.T) {
	for _, w := range []Workload{FailoverPause, FailoverPartition} {
		r, err := Run(context.Background(), &procDriver{}, Config{Workload: w, Duration: 100 * time.Millisecond})
		if err != nil || r.Skipped == "" {
			t.Errorf("%s on a cluster without it: %v, skipped %q", w, err, r.Skipped)
		}
	}
}
