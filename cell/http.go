package cell

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockcell/lockcell/api"
)

// startHTTP serves /metrics, /healthz, /readyz, /status (JSON), the status page at /,
// when fault injection is configured /debug/faults, and when Pprof is set
// /debug/pprof/ (to the operator's addresses only).
func (r *Replica) startHTTP() error {
	ln, err := net.Listen("tcp", r.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("cell: http listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", r.serveHealthz)
	mux.HandleFunc("/readyz", r.serveReadyz)
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// The CellStatus answer, plus the rebuild in structured form.
		_ = json.NewEncoder(w).Encode(struct {
			*api.CellStatusResponse
			RebuildDetail *RebuildStatus `json:"RebuildDetail,omitempty"`
		}{r.cellStatus(), r.rebuild.Load()})
	})
	mux.Handle("/{$}", &statusPageHandler{state: &r.page, src: pageSources{
		status:    r.cellStatus,
		readiness: r.readiness,
		rebuild:   r.rebuild.Load,
		tenants:   func() ([]api.TenantInfo, error) { return r.ns.ListTenants(r.admin()) },
		counters:  func() map[string]tenantCounts { return tenantCounters(r.metrics.reg) },
		locksHeld: r.locksHeld,
		logWriter: func() (int, int) {
			st := r.status.Load()
			return st.WritesInFlight, st.HeldMessages
		},
	}})
	if r.cfg.Faults != nil {
		h := http.StripPrefix("/debug/faults", r.cfg.Faults.Handler())
		mux.Handle("/debug/faults", h)
		mux.Handle("/debug/faults/", h)
	}
	if r.cfg.Pprof {
		mux.Handle("/debug/pprof/", pprofHandler(r.cfg.PprofAllow))
	}
	r.httpLn = ln
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.httpSrv.Serve(ln) }()
	return nil
}

// serveHealthz is liveness (a Kubernetes livenessProbe): 200 while the
// process serves and its run loop runs, 503 once the loop has stopped on a
// fatal error (restart it). It says nothing of the cell: a replica cut off
// from every peer is alive, and restarting it would not help.
func (r *Replica) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-r.done:
		http.Error(w, "stopped: "+fmt.Sprint(r.Err()), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

// serveReadyz is readiness (a Kubernetes readinessProbe): 200 while this
// replica is part of a cell that serves — it is the master, or it heard
// the master recently and has applied within ReadyMaxLag slots of the
// master's chosen slot — and 503 with the reason in plain words otherwise
// (no master it can hear, no quorum, rebuilding, behind, stopped).
func (r *Replica) serveReadyz(w http.ResponseWriter, _ *http.Request) {
	ok, reason := r.readiness()
	if !ok {
		http.Error(w, reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, reason)
}
