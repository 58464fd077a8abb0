package bench

import (
	"context"
	"testing"
	"time"
)

// TestSmokeInProcessCell runs the workloads briefly against a five-replica
// in-process cell (real QUIC on loopback, real Pebble) through the client
// library: ops must succeed, the contended lock must show no overlap, and
// a killed master must be replaced with no session lost.
func TestSmokeInProcessCell(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ic, err := StartInProcCell(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Stop()
	target, err := ic.Target()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewLockcellDriver(target)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, w := range []Workload{Uncontended, Contended, ReadHeavyCache, Sessions} {
		r, err := Run(ctx, d, Config{Workload: w, Clients: 4, Duration: time.Second, Warmup: -1, Sessions: 60})
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		if r.Ops == 0 || r.Errors != 0 || r.Skipped != "" {
			t.Fatalf("%s: %d ops, %d errors, skipped %q, note %q", w, r.Ops, r.Errors, r.Skipped, r.Note)
		}
		t.Logf("%s: %.0f %s, p99 %.1f ms", w, r.Throughput, r.Unit, r.Latency.P99)
	}
	r, err := Run(ctx, d, Config{Workload: FailoverKill, Clients: 4, Duration: 6 * time.Second, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec, ok := r.Metrics[MetricRecovery]
	if !ok || r.Metrics[MetricSessionsLost] != 0 {
		t.Fatalf("fail-over: %+v", r)
	}
	t.Logf("fail-over: next acquire %.0f ms after the kill, longest gap %.0f ms", rec, r.Metrics[MetricLongestGap])
	if err := ic.Healthy(ctx); err != nil {
		t.Fatalf("cell not restored after the fail-over: %v", err)
	}
}
