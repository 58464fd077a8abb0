package cell

import (
	"log/slog"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Replica state comparison (Paxos Made Live §6.2: "the database checksum").
//
// Every replica at the same applied slot must hold the same state, so the
// same state checksum (DESIGN.md invariant 1). The state is the namespace
// and, beside it, the cell's directory of replicas (directory.go), which is
// as replicated as the namespace but kept apart from it: each has its own
// checksum. Each replica remembers both checksums after each of its last
// sumHistoryLen applied slots, and puts its latest (slot, checksums) into
// the progress report it sends every peer every progressInterval
// (progressIdleInterval while the report stays the same). A replica that receives a report for a slot it
// remembers compares: equal counts as a comparison
// (lockcell_state_comparisons_total, lockcell_state_compared_slot); unequal
// is a divergence, counted (lockcell_state_checksum_mismatches_total{peer})
// and logged at error level, loudly, every time it is seen. Nothing else is
// done about it: which side is wrong is not knowable from two numbers, and
// an operator must look (lockcelld check on a stopped replica, then rebuild
// the wrong one by wiping its data directory).
//
// Replicas apply at different moments, so a report often names a slot the
// receiver has not reached yet or has forgotten; such reports are skipped.
// At the usual rates (tens of reports a second per peer, a history of
// hundreds of slots) comparisons are frequent; in an idle cell every
// report compares.

// sumHistoryLen is how many recent applied slots' checksums a replica
// remembers for comparison.
const sumHistoryLen = 1024

// sumCompare is one replica's state comparison: its recent checksums and
// the metrics. Its methods are safe for concurrent use (the run loop calls
// them; the zero value is usable before registerSumMetrics).
type sumCompare struct {
	mu struct {
		sync.Mutex
		slots  [sumHistoryLen]uint64
		sums   [sumHistoryLen]uint64
		dirs   [sumHistoryLen]uint64 // the directory's checksum (0: none recorded)
		latest uint64                // the latest slot recorded (0: none)
	}
	compared   prometheus.Counter
	dirs       prometheus.Counter
	lastSlot   prometheus.Gauge
	mismatches *prometheus.CounterVec
}

// registerSumMetrics creates s's metrics in reg.
func registerSumMetrics(reg *prometheus.Registry, s *sumCompare) {
	s.compared = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockcell", Name: "state_comparisons_total",
		Help: "Peer state checksums compared with this replica's at the same applied slot and found equal."})
	s.dirs = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lockcell", Name: "state_directory_comparisons_total",
		Help: "Peer state comparisons that also compared the replica directory's checksum (a peer whose binary predates it sends none)."})
	s.lastSlot = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "lockcell", Name: "state_compared_slot",
		Help: "The latest applied slot at which a peer's state checksum was compared with this replica's."})
	s.mismatches = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "lockcell", Name: "state_checksum_mismatches_total",
		Help: "Peer state checksums that differ from this replica's at the same applied slot: the replicas diverged."}, []string{"peer"})
	reg.MustRegister(s.compared, s.dirs, s.lastSlot, s.mismatches)
}

// record remembers the namespace's checksum sum and the directory's dir
// after applied slot slot.
func (s *sumCompare) record(slot, sum, dir uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slot % sumHistoryLen
	s.mu.slots[i], s.mu.sums[i], s.mu.dirs[i] = slot, sum, dir
	// NB: slots only grow, but should one move back (a snapshot install),
	// what lies above it is forgotten: at() ignores slots above latest.
	s.mu.latest = slot
}

// latest returns the latest recorded slot and its checksums (zeros if
// none).
func (s *sumCompare) latest() (slot, sum, dir uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.latest == 0 {
		return 0, 0, 0
	}
	i := s.mu.latest % sumHistoryLen
	return s.mu.latest, s.mu.sums[i], s.mu.dirs[i]
}

// at returns the checksums recorded for slot, if it is remembered.
func (s *sumCompare) at(slot uint64) (sum, dir uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slot % sumHistoryLen
	if slot == 0 || slot > s.mu.latest || s.mu.slots[i] != slot {
		return 0, 0, false
	}
	return s.mu.sums[i], s.mu.dirs[i], true
}

// compare checks peer's checksums at slot (the namespace's sum, the
// directory's dir) against this replica's. A directory checksum of zero
// is not compared: a peer whose binary predates it sends none. It reports
// whether a comparison was made and whether the states differ.
func (s *sumCompare) compare(log *slog.Logger, self, peer, slot, sum, dir uint64) (compared, diverged bool) {
	if slot == 0 {
		return false, false
	}
	mine, myDir, ok := s.at(slot)
	if !ok {
		return false, false
	}
	if s.lastSlot != nil {
		s.lastSlot.Set(float64(slot))
	}
	dirCompared := dir != 0 && myDir != 0
	if dirCompared && s.dirs != nil {
		s.dirs.Inc()
	}
	dirDiffers := dirCompared && dir != myDir
	if mine == sum && !dirDiffers {
		if s.compared != nil {
			s.compared.Inc()
		}
		return true, false
	}
	if s.mismatches != nil {
		s.mismatches.WithLabelValues(strconv.FormatUint(peer, 10)).Inc()
	}
	what := "state checksum"
	switch {
	case mine != sum && dirDiffers:
		what = "state checksum and replica directory checksum"
	case dirDiffers:
		what = "replica directory checksum"
	}
	log.Error("REPLICAS DIVERGED: a peer's "+what+" differs from this replica's at the same applied slot; one of them applied differently or its store was changed outside Paxos. Stop both, run lockcelld check on each, and rebuild the wrong one (wipe its data directory)",
		"slot", slot, "replica", self, "checksum", checksumHex(mine), "peer", peer, "peer_checksum", checksumHex(sum),
		"directory_checksum", checksumHex(myDir), "peer_directory_checksum", checksumHex(dir))
	return true, true
}
