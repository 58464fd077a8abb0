package cell

import (
	"encoding/json"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lockcell/lockcell/paxos"
)

// startHTTP serves /metrics, /healthz, /status (JSON), the status page at /
// and, when fault injection is configured, /debug/faults.
func (r *Replica) startHTTP() error {
	ln, err := net.Listen("tcp", r.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("cell: http listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(r.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", r.serveHealthz)
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.cellStatus())
	})
	mux.HandleFunc("/{$}", r.serveStatusPage)
	if r.cfg.Faults != nil {
		h := http.StripPrefix("/debug/faults", r.cfg.Faults.Handler())
		mux.Handle("/debug/faults", h)
		mux.Handle("/debug/faults/", h)
	}
	r.httpLn = ln
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = r.httpSrv.Serve(ln) }()
	return nil
}

// serveHealthz answers 200 while the run loop runs, 503 after it stopped.
func (r *Replica) serveHealthz(w http.ResponseWriter, _ *http.Request) {
	select {
	case <-r.done:
		http.Error(w, "stopped: "+fmt.Sprint(r.Err()), http.StatusServiceUnavailable)
	default:
		fmt.Fprintln(w, "ok")
	}
}

var statusPage = template.Must(template.New("status").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>lockcell {{.Cell}} — replica {{.Replica}}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}.m{font-weight:bold;color:#060}</style>
</head><body>
<h1>lockcell cell <code>{{.Cell}}</code></h1>
<p>Replica {{.Replica}} ({{.Role}}). Master: {{if .Master}}replica {{.Master}}{{else}}none known{{end}}, epoch {{.Epoch}}.</p>
<p>Chosen slot {{.Chosen}}, applied slot {{.Applied}}, state checksum <code>{{printf "%016x" .Checksum}}</code>.</p>
<h2>Replicas</h2>
<table><tr><th>id</th><th>address</th><th>role</th></tr>
{{range .Replicas}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{if .Master}}<span class="m">master</span>{{else}}replica{{end}}</td></tr>{{end}}
</table>
<p><a href="/metrics">metrics</a> · <a href="/status">status (JSON)</a> · <a href="/healthz">healthz</a></p>
</body></html>`))

func (r *Replica) serveStatusPage(w http.ResponseWriter, _ *http.Request) {
	cs := r.cellStatus()
	role := "replica"
	if r.serving() != nil {
		role = "master"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusPage.Execute(w, struct {
		Cell, Role                       string
		Replica, Master, Chosen, Applied uint64
		Checksum                         uint64
		Epoch                            string
		Replicas                         any
	}{cs.Cell, role, cs.Replica, cs.Master, cs.Chosen, cs.Applied, cs.Checksum, paxos.Ballot(cs.Epoch).String(), cs.Replicas})
}
