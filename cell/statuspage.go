package cell

// The status page: the HTML page at / on each replica's HTTP listener. It
// shows what /status shows (the replica set, the master, the epoch, chosen
// and applied slots and lag per replica, the state checksum, each value in
// the representation lockctl status uses), and beside it what only this
// replica's memory holds: the sessions and locks in the applied state, the
// log writer's backlog, the master changes this replica saw, and
// per-tenant call rates measured from its metrics. The page reloads its
// own body every few seconds.
//
// NB: the line "Replica N (role). Master: replica M, epoch E." keeps the
// form it had before the page grew (scripts that polled the page read it);
// programs should read /status instead.

import (
	"html/template"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockcell/lockcell/api"
	"github.com/lockcell/lockcell/internal/monotime"
	"github.com/lockcell/lockcell/paxos"
)

// pageRefresh is how often the status page reloads its body.
const pageRefresh = 2 * time.Second

// maxFailovers bounds the master changes the status page remembers.
const maxFailovers = 10

// Per-tenant rates are measured over at least minRateWindow (or since the
// replica started, if that is shorter) and at most rateWindow.
const (
	minRateWindow = 10 * time.Second
	rateWindow    = 60 * time.Second
)

// pageState is what the status page remembers between renders and status
// changes. Its methods are safe for concurrent use.
type pageState struct {
	mu struct {
		sync.Mutex
		// started is when the first status or render came (valid once
		// begun is set).
		started    monotime.Time
		begun      bool
		lastLeader paxos.ID
		lastEpoch  paxos.Ballot
		failovers  []failover     // oldest first, at most maxFailovers
		samples    []tenantSample // oldest first, within rateWindow
	}
}

// failover is a change of master this replica saw.
type failover struct {
	wall     time.Time // for people only
	at       monotime.Time
	master   paxos.ID
	epoch    paxos.Ballot
	previous paxos.ID
}

// tenantSample is the per-tenant call counters at one moment.
type tenantSample struct {
	at     monotime.Time
	counts map[string]tenantCounts
}

type tenantCounts struct{ calls, refused, shed float64 }

// noteStatus records a change of the known master in st.
// The run loop calls it after every step.
func (p *pageState) noteStatus(st *paxos.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beginLocked(monotime.Now())
	if st.Leader == 0 || st.Leader == p.mu.lastLeader && st.Epoch == p.mu.lastEpoch {
		return
	}
	p.mu.failovers = append(p.mu.failovers, failover{wall: time.Now().UTC(), at: monotime.Now(),
		master: st.Leader, epoch: st.Epoch, previous: p.mu.lastLeader})
	if n := len(p.mu.failovers); n > maxFailovers {
		p.mu.failovers = append(p.mu.failovers[:0:0], p.mu.failovers[n-maxFailovers:]...)
	}
	p.mu.lastLeader, p.mu.lastEpoch = st.Leader, st.Epoch
}

// beginLocked notes now as the start, the first time.
// REQUIRES: p.mu held.
func (p *pageState) beginLocked(now monotime.Time) {
	if !p.mu.begun {
		p.mu.started, p.mu.begun = now, true
	}
}

// rates records cur as a sample taken now and returns, per tenant, the
// calls, refusals and sheds per second, and the window they were measured
// over: since the newest sample at least minRateWindow old, or else since
// the replica started. Samples are kept for rateWindow, and the newest
// older one besides (when nobody looked at the page for a while).
func (p *pageState) rates(cur map[string]tenantCounts) (map[string]tenantCounts, time.Duration) {
	now := monotime.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beginLocked(now)
	// Drop the samples older than rateWindow but the newest of them.
	i := 0
	for i+1 < len(p.mu.samples) && now.Sub(p.mu.samples[i+1].at) > rateWindow {
		i++
	}
	p.mu.samples = p.mu.samples[i:]
	base := tenantSample{at: p.mu.started}
	for _, s := range p.mu.samples {
		if now.Sub(s.at) >= minRateWindow {
			base = s
		}
	}
	if n := len(p.mu.samples); n == 0 || now.Sub(p.mu.samples[n-1].at) >= time.Second {
		p.mu.samples = append(p.mu.samples, tenantSample{at: now, counts: cur})
	}
	window := now.Sub(base.at)
	out := make(map[string]tenantCounts, len(cur))
	if window <= 0 {
		return out, 0
	}
	per := window.Seconds()
	for t, c := range cur {
		b := base.counts[t]
		out[t] = tenantCounts{calls: (c.calls - b.calls) / per, refused: (c.refused - b.refused) / per, shed: (c.shed - b.shed) / per}
	}
	return out, window
}

// tenantCounters reads the per-tenant call counters from a replica's
// metrics (lockcell_rpcs_total and lockcell_tenant_shed_total).
func tenantCounters(g prometheus.Gatherer) map[string]tenantCounts {
	out := map[string]tenantCounts{}
	fams, err := g.Gather()
	if err != nil {
		return out
	}
	for _, f := range fams {
		name := f.GetName()
		if name != "lockcell_rpcs_total" && name != "lockcell_tenant_shed_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var tenant, code string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "tenant":
					tenant = l.GetValue()
				case "code":
					code = l.GetValue()
				}
			}
			v := m.GetCounter().GetValue()
			c := out[tenant]
			if name == "lockcell_tenant_shed_total" {
				c.shed += v
			} else {
				c.calls += v
				if code != api.OK.String() {
					c.refused += v
				}
			}
			out[tenant] = c
		}
	}
	return out
}

// pageTenant is one row of the status page's tenant table.
type pageTenant struct {
	Name                   string
	Sessions, Locks, Nodes uint64
	Calls, Refused, Shed   float64
}

// pageFailover is one row of the status page's master changes.
type pageFailover struct {
	At       string
	Ago      time.Duration
	Master   uint64
	Epoch    api.Epoch
	Previous uint64
}

// pageData is what the status page template renders.
type pageData struct {
	*api.CellStatusResponse
	MasterAddr string
	Ready      bool
	Readiness  string
	Rebuild    *RebuildStatus
	Sessions   uint64
	Locks      int
	Tenants    []pageTenant
	RateWindow time.Duration
	Failovers  []pageFailover
	Updated    string
	RefreshMs  int64
	// WritesInFlight and HeldMessages are the log writer's backlog (see
	// pageSources.logWriter).
	WritesInFlight, HeldMessages int
}

// pageSources is where the status page's data comes from; the replica
// builds them when it starts its HTTP listener (http.go). Every function
// must be set; each is called once per render.
type pageSources struct {
	// status is the replica's CellStatus answer (what /status shows).
	status func() *api.CellStatusResponse
	// readiness is what /readyz answers.
	readiness func() (ok bool, reason string)
	// rebuild describes the loss of state the replica started with; nil
	// if it started with its state.
	rebuild func() *RebuildStatus
	// tenants lists the tenants of the applied state with their usage.
	tenants func() ([]api.TenantInfo, error)
	// counters returns the per-tenant call counters (tenantCounters).
	counters func() map[string]tenantCounts
	// locksHeld returns the lock grants held in the applied state.
	locksHeld func() int
	// logWriter returns the Paxos log writes handed to the log writer and
	// not yet durable, and the messages the core holds back until one of
	// them is (paxos.Status.WritesInFlight and HeldMessages).
	logWriter func() (writesInFlight, heldMessages int)
}

// statusPageHandler serves the status page from its sources and what the
// page remembers between renders (state, which the run loop also tells of
// every status change).
type statusPageHandler struct {
	src   pageSources
	state *pageState
}

func (h *statusPageHandler) data() pageData {
	cs := h.src.status()
	ready, why := h.src.readiness()
	d := pageData{CellStatusResponse: cs, Ready: ready, Readiness: why, Rebuild: h.src.rebuild(),
		Updated: time.Now().UTC().Format("2006-01-02 15:04:05 MST"), RefreshMs: pageRefresh.Milliseconds()}
	for _, rs := range cs.Replicas {
		if rs.Master {
			d.MasterAddr = rs.Addr
		}
	}
	rates, window := h.state.rates(h.src.counters())
	d.RateWindow = window.Round(time.Second)
	rows := map[string]*pageTenant{}
	if tenants, err := h.src.tenants(); err == nil {
		for _, t := range tenants {
			rows[t.Name] = &pageTenant{Name: t.Name, Sessions: t.Usage.Sessions, Locks: t.Usage.Locks, Nodes: t.Usage.Nodes}
			d.Sessions += t.Usage.Sessions
		}
	}
	for name, c := range rates {
		row := rows[name]
		if row == nil {
			row = &pageTenant{Name: name}
			rows[name] = row
		}
		row.Calls, row.Refused, row.Shed = c.calls, c.refused, c.shed
	}
	for _, row := range rows {
		d.Tenants = append(d.Tenants, *row)
	}
	sort.Slice(d.Tenants, func(i, j int) bool { return d.Tenants[i].Name < d.Tenants[j].Name })
	d.Locks = h.src.locksHeld()
	d.WritesInFlight, d.HeldMessages = h.src.logWriter()
	now := monotime.Now()
	h.state.mu.Lock()
	for i := len(h.state.mu.failovers) - 1; i >= 0; i-- {
		f := h.state.mu.failovers[i]
		d.Failovers = append(d.Failovers, pageFailover{At: f.wall.Format("2006-01-02 15:04:05.000 MST"),
			Ago: now.Sub(f.at).Round(time.Second), Master: uint64(f.master), Epoch: api.Epoch(f.epoch), Previous: uint64(f.previous)})
	}
	h.state.mu.Unlock()
	return d
}

// ServeHTTP renders the page.
func (h *statusPageHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = statusPage.Execute(w, h.data())
}

// statusPage is the page's template. Its script fetches the page again
// every RefreshMs and swaps in the new body (counting the swaps in the html
// element's data-refreshes); while the replica does not answer it keeps the
// last body and says since when.
var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"rate": func(v float64) string {
		if v < 0.05 {
			return "0"
		}
		return formatRate(v)
	},
}).Parse(`<!doctype html>
<html data-refreshes="0"><head><meta charset="utf-8"><title>lockcell {{.Cell}} — replica {{.Replica}}</title>
<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1em}td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}td.n{text-align:right}.m{font-weight:bold;color:#060}.w{font-weight:bold;color:#a40}.s{color:#666;font-size:90%}</style>
<script>
(function () {
  var failing = null, refreshes = 0;
  function refresh() {
    fetch(location.pathname, {cache: "no-store"}).then(function (resp) {
      if (!resp.ok) { throw new Error("HTTP " + resp.status); }
      return resp.text();
    }).then(function (html) {
      var doc = new DOMParser().parseFromString(html, "text/html");
      document.body.innerHTML = doc.body.innerHTML;
      document.title = doc.title;
      failing = null;
      refreshes++;
      document.documentElement.setAttribute("data-refreshes", refreshes);
    }).catch(function (err) {
      if (failing === null) { failing = new Date(); }
      var b = document.getElementById("unreachable");
      if (b) {
        b.textContent = "This replica has not answered since " + failing.toISOString() + " (" + err + "); the page below is the last it sent.";
        b.hidden = false;
      }
    });
  }
  setInterval(refresh, {{.RefreshMs}});
})();
</script>
</head><body>
<p id="unreachable" class="w" hidden></p>
<h1>lockcell cell <code>{{.Cell}}</code></h1>
<p id="master" class="m">{{if .Master}}Master: replica {{.Master}} ({{.MasterAddr}}), epoch {{.Epoch}}.{{else}}NO MASTER known to this replica; epoch {{.Epoch}}.{{end}}</p>
<p>Replica {{.Replica}} ({{.Role}}). Master: {{if .Master}}replica {{.Master}}{{else}}none known{{end}}, epoch {{.Epoch}}.</p>
<p class="{{if not .Ready}}w{{end}}">Ready: {{.Readiness}}</p>
{{with .Rebuild}}<p class="{{if .Rebuilding}}w{{end}}">{{if .Rebuilding}}This replica is a learner: it lost durable state and votes in nothing (no promise, no accept, no lease grant) until it has rebuilt from its peers.{{else}}This replica rebuilt lost state after it started.{{end}}<br>
What was lost ({{.Kind}}): {{.Reason}}{{if .MovedAside}}<br>The damaged store was moved to <code>{{.MovedAside}}</code>; delete it once it is no longer wanted.{{end}}<br>
Rebuild: {{.Phase}}, since {{.Since.Format "2006-01-02 15:04:05 MST"}}{{if not .Done.IsZero}}, done {{.Done.Format "2006-01-02 15:04:05 MST"}}{{end}}.</p>{{end}}
<p>Chosen slot {{.Chosen}}, applied slot {{.Applied}}, state checksum <code>{{.Checksum}}</code>.</p>
<p id="logwriter">Log writer: {{.WritesInFlight}} writes in flight (handed out, not yet durable), {{.HeldMessages}} messages held until a write is durable.</p>
<h2>Replicas</h2>
<p class="s">Each replica as it last reported itself to this one; lag is how many slots it has yet to apply of the highest chosen slot known here.</p>
<table id="replicas"><tr><th>replica</th><th>address</th><th>role</th><th>epoch</th><th>chosen</th><th>applied</th><th>lag</th><th>heard</th></tr>
{{range .Replicas}}<tr><td>{{.ID}}</td><td>{{.Addr}}</td><td>{{if .Master}}<span class="m">{{.Role}}</span>{{else}}{{.Role}}{{end}}{{if .Learner}} (learner: votes once caught up){{end}}</td>{{if lt .HeardMillis 0}}<td>-</td><td>-</td><td>-</td><td>-</td><td>never</td>{{else}}<td>{{.Epoch}}</td><td class="n">{{.Chosen}}</td><td class="n">{{.Applied}}</td><td class="n">{{.Lag}}</td><td>{{if eq .HeardMillis 0}}this replica{{else}}{{.HeardMillis}} ms ago{{end}}</td>{{end}}</tr>
{{end}}</table>
<h2>Sessions and locks</h2>
<p id="totals">Sessions open: {{.Sessions}}. Lock grants held: {{.Locks}}. (In the state this replica applied.)</p>
<h2>Tenants</h2>
<p class="s">Sessions, locks and nodes from the applied state; call rates (KeepAlives included) as this replica counted them over the last {{.RateWindow}} (a master counts every call; a follower only those sent to it). "-" counts calls without valid credentials.</p>
<table id="tenants"><tr><th>tenant</th><th>sessions</th><th>locks</th><th>nodes</th><th>calls/s</th><th>refused/s</th><th>shed/s</th></tr>
{{range .Tenants}}<tr><td>{{.Name}}</td><td class="n">{{.Sessions}}</td><td class="n">{{.Locks}}</td><td class="n">{{.Nodes}}</td><td class="n">{{rate .Calls}}</td><td class="n">{{rate .Refused}}</td><td class="n">{{rate .Shed}}</td></tr>
{{else}}<tr><td colspan="7">no tenants</td></tr>
{{end}}</table>
<h2>Recent fail-overs</h2>
<p class="s">Master changes this replica saw since it started, newest first (the last ten at most).</p>
<table id="failovers"><tr><th>when (UTC)</th><th>ago</th><th>new master</th><th>epoch</th><th>previous master</th></tr>
{{range .Failovers}}<tr><td>{{.At}}</td><td>{{.Ago}}</td><td>replica {{.Master}}</td><td>{{.Epoch}}</td><td>{{if .Previous}}replica {{.Previous}}{{else}}none known (this replica had just started){{end}}</td></tr>
{{else}}<tr><td colspan="5">none seen</td></tr>
{{end}}</table>
<p class="s">Updated {{.Updated}}; this page reloads itself every {{.RefreshMs}} ms. <a href="/metrics">metrics</a> · <a href="/status">status (JSON)</a> · <a href="/healthz">healthz</a> · <a href="/readyz">readyz</a></p>
</body></html>`))

// formatRate formats a rate per second for people: no decimals from 100
// up, one from 10, two below.
func formatRate(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
