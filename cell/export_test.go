package cell

import (
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockcell/lockcell/paxos"
)

// Test hooks for the package's external tests.

// SetWallClock makes the replica that c configures read its wall clock
// from wall instead of time.Now (a skewed clock). In-process tests only:
// nothing outside the package can set it.
func SetWallClock(c *Config, wall func() time.Time) { c.wallClock = wall }

// CellClock returns the replica's applied cell clock (namespace
// Store.Clock).
func (r *Replica) CellClock() (int64, error) {
	now, _, err := r.ns.Clock()
	return now, err
}

// SetHeadOutcomeHook makes the master of the replica that c configures
// pass the outcome of each Acquire it proposes for a lock's head waiter
// (err nil for a grant) to hook instead of handling it at once: deliver
// handles it, from any goroutine; gone is closed once that waiter's caller
// has canceled. hook runs on the run loop goroutine and must not block.
func SetHeadOutcomeHook(c *Config, hook func(path string, err error, gone <-chan struct{}, deliver func())) {
	c.headOutcomeHook = hook
}

// SetTwoRoundHandOver makes the master of the replica that c configures
// hand a freed lock to its head waiter in two Paxos rounds, as it did
// before the grant rode on the release: tests compare the two.
func SetTwoRoundHandOver(c *Config) { c.twoRoundHandOver = true }

// SetFeatures makes the replica that c configures advertise what features
// returns (read at every progress report) instead of AllFeatures, as an
// older binary would.
func SetFeatures(c *Config, features func() Features) { c.featuresHook = features }

// MetricsText returns what the replica's /metrics serves (Prometheus text)
// without an HTTP server, for tests on the simulated network.
func (r *Replica) MetricsText() string {
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// PeerFramesSent returns how many frames the replica has sent its peers
// (Paxos messages and progress reports, duplicates included).
func (r *Replica) PeerFramesSent() uint64 { return r.ep.Stats().PeerFramesSent }

// Readiness returns what /readyz answers.
func (r *Replica) Readiness() (bool, string) { return r.readiness() }

// LogWriterCounts returns how many batches the replica's Paxos log writer
// has written and how many Readies' writes they held.
func (r *Replica) LogWriterCounts() (batches, writes uint64) {
	return r.logw.batches.Load(), r.logw.writes.Load()
}

// CoreStatus returns the Paxos core's status as of the run loop's latest
// step.
func (r *Replica) CoreStatus() paxos.Status { return *r.status.Load() }
