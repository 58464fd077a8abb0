package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockcell/lockcell/internal/proccell"
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
	ic, err := StartInProcCell(ctx, t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Stop()
	d := lockcellDriver(t, ic.Target)
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
	r, err = Run(ctx, d, Config{Workload: FailoverRolling, Clients: 4, Duration: 3 * time.Second, Warmup: -1})
	if err != nil {
		t.Fatal(err)
	}
	checkFailover(t, r)
	if r.Metrics[MetricRestarts] != 5 || r.Metrics[MetricMasterChanges] < 1 {
		t.Fatalf("rolling restart: %v restarts, %v master changes", r.Metrics[MetricRestarts], r.Metrics[MetricMasterChanges])
	}
}

// lockcellDriver makes a driver for the cell that target names.
func lockcellDriver(t *testing.T, target func() (LockcellTarget, error)) *LockcellDriver {
	t.Helper()
	tg, err := target()
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewLockcellDriver(tg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// checkFailover requires a fail-over run to have measured every client's
// outage and lost no session.
func checkFailover(t *testing.T, r Result) {
	t.Helper()
	if r.Skipped != "" || r.Ops == 0 || r.Metrics[MetricSessionsLost] != 0 {
		t.Fatalf("%s: skipped %q, %d ops, %v sessions lost", r.Workload, r.Skipped, r.Ops, r.Metrics[MetricSessionsLost])
	}
	for _, k := range []string{MetricOutageP50, MetricOutageP99, MetricOutageMax, MetricRecovery} {
		if v, ok := r.Metrics[k]; !ok || v <= 0 {
			t.Fatalf("%s: %s = %v (present %v)", r.Workload, k, v, ok)
		}
	}
	t.Logf("%s: outage p50 %.0f ms, max %.0f ms; %d errors; %v master changes", r.Workload,
		r.Metrics[MetricOutageP50], r.Metrics[MetricOutageMax], r.Errors, r.Metrics[MetricMasterChanges])
}

// TestSmokeProcessCell runs the fail-overs that need server processes
// (pause, partition) briefly against a cell of lockcelld processes with
// fault injection.
func TestSmokeProcessCell(t *testing.T) {
	if testing.Short() {
		t.Skip("builds lockcelld and starts a cell of processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := proccell.BuildLockcelld(ctx, t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	pc, err := StartProcCell(ctx, ProcCellConfig{Binary: bin, Dir: filepath.Join(t.TempDir(), "cell"), FaultInjection: true})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.StopAll()
	d := lockcellDriver(t, pc.Target)
	defer d.Close()
	for _, w := range []Workload{FailoverPause, FailoverPartition} {
		r, err := Run(ctx, d, Config{Workload: w, Clients: 4, Duration: 6 * time.Second, Warmup: -1})
		if err != nil {
			t.Fatalf("%s: %v", w, err)
		}
		checkFailover(t, r)
	}
}

// TestSmokeSessionsFailover runs sessions-failover briefly against a
// five-replica in-process cell, once with a kill and once with a
// hand-over: every session must be safe with the new master (the time is
// reported) and none lost, and the cell whole again afterwards.
func TestSmokeSessionsFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cell")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ic, err := StartInProcCell(ctx, t.TempDir(), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Stop()
	d := lockcellDriver(t, ic.Target)
	defer d.Close()
	for _, how := range []Workload{FailoverKill, FailoverStepDown} {
		r, err := Run(ctx, d, Config{Workload: SessionsFailover, SessionsDisrupt: how, Sessions: 300, Duration: time.Second, Warmup: -1})
		if err != nil {
			t.Fatalf("%s: %v", how, err)
		}
		safe, ok := r.Metrics[MetricSessionsSafe]
		if r.Skipped != "" || !ok || safe <= 0 || r.Metrics[MetricSessionsLost] != 0 || r.Metrics[MetricSessionsHeld] != 300 {
			t.Fatalf("%s: skipped %q, metrics %v, note %q", how, r.Skipped, r.Metrics, r.Note)
		}
		t.Logf("%s: 300 sessions, all safe with the new master %.0f ms after the disruption, at most %v unsafe at once; %v lost",
			how, safe, r.Metrics[MetricSessionsUnsafeMax], r.Metrics[MetricSessionsLost])
		if err := ic.Healthy(ctx); err != nil {
			t.Fatalf("%s: cell not restored: %v", how, err)
		}
	}
}
