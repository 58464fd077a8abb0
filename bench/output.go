package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// WriteJSONLine writes r as one JSON line.
func WriteJSONLine(w io.Writer, r Result) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadJSONLines reads results written by WriteJSONLine (blank lines and
// lines that are not results are errors).
func ReadJSONLines(r io.Reader) ([]Result, error) {
	dec := json.NewDecoder(r)
	var out []Result
	for {
		var res Result
		if err := dec.Decode(&res); err == io.EOF {
			return out, nil
		} else if err != nil {
			return out, fmt.Errorf("%w: results: %w", ErrInvalidConfig, err)
		}
		out = append(out, res)
	}
}

// WriteTable writes the summary table of results.
func WriteTable(w io.Writer, rs []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tworkload\tclients\tops/s\tp50 ms\tp90 ms\tp99 ms\tp99.9 ms\tmax ms\terrors\t")
	for _, r := range rs {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t%d\tskipped\t\t\t\t\t\t\t\n", r.Label(), r.Workload, r.Clients)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t\n", r.Label(), r.Workload, r.Clients,
			r.Throughput, r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.P999, r.Latency.Max, r.Errors)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Workload-specific figures, one line per run that has any.
	for _, r := range rs {
		line := r.Label() + " " + string(r.Workload) + ": "
		var parts []string
		if r.Skipped != "" {
			parts = append(parts, "skipped: "+r.Skipped)
		}
		keys := make([]string, 0, len(r.Metrics))
		for k := range r.Metrics {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%s", k, trimFloat(r.Metrics[k])))
		}
		if r.Violation != "" {
			parts = append(parts, "VIOLATION: "+r.Violation)
		}
		if r.Note != "" {
			parts = append(parts, "note: "+r.Note)
		}
		if len(parts) > 0 {
			if _, err := fmt.Fprintln(w, line+strings.Join(parts, "  ")); err != nil {
				return err
			}
		}
	}
	return nil
}

func trimFloat(v float64) string {
	s := fmt.Sprintf("%.4f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// Progress prints l's line over itself on w (a terminal) every interval
// until stop is called, which erases it.
func Progress(w io.Writer, l *Live, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				fmt.Fprintf(w, "\r\033[K%s", l.Line())
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); wg.Wait() }) }
}

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// svg palette per system, in order of first appearance.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// WriteSVG draws, for every workload that ran, a panel with one group per
// system: a throughput bar (left axis, linear) and p50, p99 and p99.9
// latency markers (right axis, logarithmic). It is plain SVG with no
// scripts, readable in any browser.
func WriteSVG(w io.Writer, rs []Result, title string) error {
	var workloads []Workload
	var systems []string
	for _, r := range rs {
		if r.Skipped != "" {
			continue
		}
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
		if !slices.Contains(systems, r.Label()) {
			systems = append(systems, r.Label())
		}
	}
	const (
		panelW, panelH = 420, 300
		cols           = 2
		padL, padR     = 60, 60
		padT, padB     = 40, 50
	)
	rows := (len(workloads) + cols - 1) / cols
	W, H := cols*panelW, 60+rows*panelH+30
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="24" font-size="16" text-anchor="middle">%s</text>`+"\n", W/2, html.EscapeString(title))
	// Legend.
	lx := 20
	for i, s := range systems {
		fmt.Fprintf(&b, `<rect x="%d" y="36" width="12" height="12" fill="%s"/><text x="%d" y="46">%s</text>`+"\n",
			lx, palette[i%len(palette)], lx+16, html.EscapeString(s))
		lx += 110
	}
	fmt.Fprintf(&b, `<text x="%d" y="46">bars: throughput (left axis) · ○ p50 ◆ p99 ▲ p99.9 latency (right axis, log ms)</text>`+"\n", lx)
	for wi, wl := range workloads {
		ox := (wi % cols) * panelW
		oy := 60 + (wi/cols)*panelH
		plotW := float64(panelW - padL - padR)
		plotH := float64(panelH - padT - padB)
		var rsW []Result
		for _, r := range rs {
			if r.Workload == wl && r.Skipped == "" {
				rsW = append(rsW, r)
			}
		}
		maxT, minL, maxL := 0.0, math.Inf(1), 0.0
		for _, r := range rsW {
			maxT = max(maxT, r.Throughput)
			for _, v := range []float64{r.Latency.P50, r.Latency.P99, r.Latency.P999} {
				if v > 0 {
					minL, maxL = min(minL, v), max(maxL, v)
				}
			}
		}
		if maxT == 0 {
			maxT = 1
		}
		tTop := niceCeil(maxT)
		lLo, lHi := 0.01, 1.0
		if maxL > 0 {
			lLo = math.Pow(10, math.Floor(math.Log10(minL)))
			lHi = math.Pow(10, math.Ceil(math.Log10(maxL)))
			if lHi <= lLo {
				lHi = lLo * 10
			}
		}
		x0, y0 := float64(ox+padL), float64(oy+padT)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" text-anchor="middle" font-weight="bold">%s</text>`+"\n",
			ox+panelW/2, oy+22, html.EscapeString(string(wl)))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", x0, y0, plotW, plotH)
		// Left axis: throughput.
		for k := 0; k <= 4; k++ {
			v := tTop * float64(k) / 4
			y := y0 + plotH - plotH*float64(k)/4
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eee"/>`, x0, x0+plotW, y, y)
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-4, y+4, siShort(v))
		}
		fmt.Fprintf(&b, `<text x="%d" y="%.0f" transform="rotate(-90 %d %.0f)" text-anchor="middle">ops/s</text>`+"\n",
			ox+14, y0+plotH/2, ox+14, y0+plotH/2)
		// Right axis: latency, log scale.
		ly := func(v float64) float64 {
			if v <= 0 {
				v = lLo
			}
			return y0 + plotH - plotH*(math.Log10(v)-math.Log10(lLo))/(math.Log10(lHi)-math.Log10(lLo))
		}
		for v := lLo; v <= lHi*1.0001; v *= 10 {
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f">%s ms</text>`+"\n", x0+plotW+4, ly(v)+4, trimFloat(v))
		}
		// Groups.
		gw := plotW / float64(max(len(rsW), 1))
		for i, r := range rsW {
			col := palette[slices.Index(systems, r.Label())%len(palette)]
			cx := x0 + gw*(float64(i)+0.5)
			bh := plotH * r.Throughput / tTop
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.75"><title>%s: %.0f %s</title></rect>`+"\n",
				cx-gw*0.3, y0+plotH-bh, gw*0.6, bh, col, html.EscapeString(r.Label()), r.Throughput, html.EscapeString(r.Unit))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", cx, y0+plotH-bh-3, siShort(r.Throughput))
			label := r.Label()
			if r.Clients > 0 {
				label += fmt.Sprintf(" c=%d", r.Clients)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>`+"\n", cx, y0+plotH+14, html.EscapeString(label))
			// Latency markers.
			if r.Latency.Count > 0 {
				y50, y99, y999 := ly(r.Latency.P50), ly(r.Latency.P99), ly(r.Latency.P999)
				fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`, cx, cx, y50, y999)
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="white" stroke="black"><title>p50 %.2f ms</title></circle>`, cx, y50, r.Latency.P50)
				fmt.Fprintf(&b, `<path d="M%.1f %.1f l5 5 l-5 5 l-5 -5 z" fill="black"><title>p99 %.2f ms</title></path>`, cx, y99-5, r.Latency.P99)
				fmt.Fprintf(&b, `<path d="M%.1f %.1f l5 9 l-10 0 z" fill="#555"><title>p99.9 %.2f ms</title></path>`+"\n", cx, y999-5, r.Latency.P999)
				fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle" fill="#444">p99 %s ms</text>`+"\n", cx, y0+plotH+28, trimFloat(math.Round(r.Latency.P99*100)/100))
			}
		}
	}
	fmt.Fprintf(&b, `<text x="10" y="%d" fill="#666">%s</text>`+"\n", H-10, html.EscapeString("generated "+time.Now().UTC().Format(time.RFC3339)))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func siShort(v float64) string {
	switch {
	case v >= 1e6:
		return trimFloat(math.Round(v/1e5)/10) + "M"
	case v >= 1e3:
		return trimFloat(math.Round(v/1e2)/10) + "k"
	}
	return trimFloat(math.Round(v*10) / 10)
}
