package cell

import (
	"encoding/json"
	"fmt"
	"html/template"
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
	mux.HandleFunc("/{$}", r.serveStatusPage)
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

var statusPage = template.Must(template.New("status").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>lockcell {{.Cell}} — replica {{.Replica}}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}.m{font-weight:bold;color:#060}.w{font-weight:bold;color:#a40}</style>
</head><body>
<h1>lockcell cell <code>{{.Cell}}</code></h1>
<p>Replica {{.Replica}} ({{.Role}}). Master: {{if .Master}}replica {{.Master}}{{else}}none known{{end}}, epoch {{.Epoch}}.</p>
<p class="{{if not .Ready}}w{{end}}">Ready: {{.Readiness}}</p>
{{with .Rebuild}}<p class="{{if .Rebuilding}}w{{end}}">{{if .Rebuilding}}This replica is a learner: it lost durable state and votes in nothing (no promise, no accept, no lease grant) until it has rebuilt from its peers.{{else}}This replica rebuilt lost state after it started.{{end}}<br>
What was lost ({{.Kind}}): {{.Reason}}{{if .MovedAside}}<br>The damaged store was moved to <code>{{.MovedAside}}</code>; delete it once it is no longer wanted.{{end}}<br>
Rebuild: {{.Phase}}, since {{.Since.Format "2006-01-02 15:04:05 MST"}}{{if not .Done.IsZero}}, done {{.Done.Format "2006-01-02 15:04:05 MST"}}{{end}}.</p>{{end}}
<p>Chosen slot {{.Chosen}}, applied slot {{.Applied}}, state checksum <code>{{.Checksum}}</code>.</p>
<h2>Replicas</h2>
<p>Each replica as it last reported itself to this one.</p>
<table><tr><th>id</th><th>address</th><th>role</th><th>epoch</th><th>chosen</th><th>applied</th><th>lag</th><th>heard</th></tr>
{{range .Replicas}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{if .Master}}<span class="m">{{.Role}}</span>{{else}}{{.Role}}{{end}}</td>{{if lt .HeardMillis 0}}<td>-</td><td>-</td><td>-</td><td>-</td><td>never</td>{{else}}<td>{{.Epoch}}</td><td>{{.Chosen}}</td><td>{{.Applied}}</td><td>{{.Lag}}</td><td>{{if eq .HeardMillis 0}}this replica{{else}}{{.HeardMillis}} ms ago{{end}}</td>{{end}}</tr>
{{end}}</table>
<p><a href="/metrics">metrics</a> · <a href="/status">status (JSON)</a> · <a href="/healthz">healthz</a> · <a href="/readyz">readyz</a></p>
</body></html>`))

func (r *Replica) serveStatusPage(w http.ResponseWriter, _ *http.Request) {
	cs := r.cellStatus()
	ready, why := r.readiness()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusPage.Execute(w, struct {
		*api.CellStatusResponse
		Ready     bool
		Readiness string
		Rebuild   *RebuildStatus
	}{cs, ready, why, r.rebuild.Load()})
}
