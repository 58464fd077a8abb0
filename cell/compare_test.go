package cell

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// The comparison judges a peer's checksum only at a slot it remembers,
// counts equal ones, and counts and logs a differing one loudly.
func TestSumCompare(t *testing.T) {
	var s sumCompare
	reg := prometheus.NewRegistry()
	registerSumMetrics(reg, &s)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	for slot := uint64(1); slot <= 2*sumHistoryLen; slot++ {
		s.record(slot, slot*7, slot*11)
	}
	if slot, sum, dir := s.latest(); slot != 2*sumHistoryLen || sum != slot*7 || dir != slot*11 {
		t.Fatalf("latest: %d %d %d", slot, sum, dir)
	}
	cases := []struct {
		slot, sum, dir     uint64
		compared, diverged bool
	}{
		{2 * sumHistoryLen, 2 * sumHistoryLen * 7, 2 * sumHistoryLen * 11, true, false},
		{sumHistoryLen + 1, (sumHistoryLen + 1) * 7, 0, true, false},         // a peer without directory checksums
		{sumHistoryLen, sumHistoryLen * 7, sumHistoryLen * 11, false, false}, // forgotten
		{2*sumHistoryLen + 1, 0, 0, false, false},                            // not reached yet
		{0, 0, 0, false, false}, // peer knows none
		{2*sumHistoryLen - 5, 1, (2*sumHistoryLen - 5) * 11, true, true}, // namespaces diverged
		{2*sumHistoryLen - 6, (2*sumHistoryLen - 6) * 7, 3, true, true},  // directories diverged
	}
	for _, c := range cases {
		compared, diverged := s.compare(log, 1, 2, c.slot, c.sum, c.dir)
		if compared != c.compared || diverged != c.diverged {
			t.Errorf("compare at slot %d: compared %v diverged %v, want %v %v", c.slot, compared, diverged, c.compared, c.diverged)
		}
	}
	if n := gathered(t, reg, "lockcell_state_comparisons_total"); n != 2 {
		t.Errorf("comparisons counted: %v, want 2", n)
	}
	if n := gathered(t, reg, "lockcell_state_directory_comparisons_total"); n != 3 {
		t.Errorf("directory comparisons counted: %v, want 3", n)
	}
	if n := gathered(t, reg, "lockcell_state_checksum_mismatches_total"); n != 2 {
		t.Errorf("mismatches counted: %v, want 2", n)
	}
	if n := gathered(t, reg, "lockcell_state_compared_slot"); n != 2*sumHistoryLen-6 {
		t.Errorf("last compared slot: %v, want %d", n, 2*sumHistoryLen-6)
	}
	if !strings.Contains(logs.String(), "REPLICAS DIVERGED") || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("no loud log line for the divergence:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "replica directory checksum differs") {
		t.Errorf("the directories' divergence is not named in the log:\n%s", logs.String())
	}
	// A replica that has recorded no directory checksum (0) compares only
	// namespaces.
	var old sumCompare
	old.record(5, 35, 0)
	if compared, diverged := old.compare(log, 1, 2, 5, 35, 99); !compared || diverged {
		t.Errorf("compare against a peer's directory with none recorded: compared %v diverged %v, want true false", compared, diverged)
	}
}

// gathered sums the samples of metric name (counters and gauges) in reg.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}
