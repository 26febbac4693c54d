// Package statusview renders GET /v1/status as text for `sluicectl
// status` (apart from the command, so that it is tested without the
// engine's library, which the command's own tests link).
package statusview

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Write prints the status: the engine and daemon, then the backend pools
// when the front door has any.
func Write(w io.Writer, st api.StatusDoc) {
	e := st.Engine
	state := "stopped"
	switch {
	case e.Draining:
		state = "draining"
	case e.Running:
		state = "running"
	}
	pages := "hugepages"
	if !e.Hugepages {
		pages = "normal pages (fallback or off)"
	}
	fmt.Fprintf(w, "engine     %s (%s)\ntransport  %s on %s\nbuffers    %s\n", state, st.Daemon.Engine, e.Transport, or(e.Listen, "-"), pages)
	if e.HugepagesNote != "" {
		fmt.Fprintf(w, "note       %s\n", e.HugepagesNote)
	}
	fmt.Fprintf(w, "workers    %d\nmodels     %d\nschemas    %d\nepoch      %d\nconfig     %s\nstore      %s\nuptime     %s\nreloads    %d ok, %d refused\n",
		len(e.Workers), len(e.Models), e.Schemas, e.Epoch, st.Daemon.Config, st.Daemon.Store,
		time.Duration(st.Daemon.UptimeS)*time.Second, st.Daemon.ReloadsOK, st.Daemon.ReloadsFailed)
	for _, wk := range e.Workers {
		if wk.Failed() {
			fmt.Fprintf(w, "FAILED     worker %d (core %d): %s\n", wk.Index, wk.Core, wk.Failure)
		}
	}
	for _, u := range e.SchemasUnenforced {
		fmt.Fprintf(w, "schema     not fully enforced: %s\n", u)
	}
	keys := make([]string, 0, len(e.Versions))
	for k := range e.Versions {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "version    %s %s\n", k, e.Versions[k])
	}
	if e.Frontdoor != nil && e.Frontdoor.Backends != nil {
		Backends(w, e.Frontdoor.Backends)
	}
}

// Duration prints a time in µs for a person: 850µs, 35.0ms, 1.20s.
func Duration(us uint64) string {
	switch {
	case us < 1_000:
		return fmt.Sprintf("%dµs", us)
	case us < 1_000_000:
		return fmt.Sprintf("%.1fms", float64(us)/1e3)
	default:
		return fmt.Sprintf("%.2fs", float64(us)/1e6)
	}
}

// quantile is one percentile of h, or "-" before its first sample (the
// engine reports 0 then).
func quantile(h engine.Hist, us uint64) string {
	if h.Count == 0 {
		return "-"
	}
	return Duration(us)
}

// EndpointState is how an endpoint stands: "ready", or what keeps it from
// taking requests ("not ready": its health check fails; "ejected": after
// errors in a row; "draining"), several joined by ", ".
func EndpointState(e engine.BackendEndpoint) string {
	var s []string
	if !e.Healthy {
		s = append(s, "not ready")
	}
	if e.Ejected {
		s = append(s, "ejected")
	}
	if e.Draining {
		s = append(s, "draining")
	}
	if len(s) == 0 {
		return "ready"
	}
	return strings.Join(s, ", ")
}

// errorsLine is the non-zero error causes, by name: "connect 2, timeout 1".
func errorsLine(m map[string]uint64) string {
	causes := make([]string, 0, len(m))
	for c, n := range m {
		if n > 0 {
			causes = append(causes, c)
		}
	}
	if len(causes) == 0 {
		return "none"
	}
	sort.Strings(causes)
	for i, c := range causes {
		causes[i] = fmt.Sprintf("%s %d", c, m[c])
	}
	return strings.Join(causes, ", ")
}

// Backends prints one line per pool (its counters, the error causes that
// are not zero, and its timings) and under it one line per endpoint.
func Backends(w io.Writer, b *engine.BackendsStatus) {
	n := 0
	for _, p := range b.Pools {
		n += len(p.Endpoints)
	}
	fmt.Fprintf(w, "backends   %d pools, %d endpoints\n", len(b.Pools), n)
	for _, p := range b.Pools {
		fmt.Fprintf(w, "pool       %s (%s): requests %d, ok %d, retries %d, waiting %d; errors %s; latency p50 %s p99 %s; TTFT p50 %s; ITL p50 %s\n",
			p.Name, p.Protocol, p.Requests, p.OK, p.Retries, p.Waiting, errorsLine(p.Errors),
			quantile(p.Latency, p.Latency.P50US), quantile(p.Latency, p.Latency.P99US),
			quantile(p.TTFT, p.TTFT.P50US), quantile(p.ITL, p.ITL.P50US))
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		for _, e := range p.Endpoints {
			models := "-"
			if len(e.Models) > 0 {
				models = strings.Join(e.Models, ",")
			}
			fmt.Fprintf(tw, "endpoint   %s\t%s\tin flight %d/%d\trequests %d\tfailures %d\tmodels %s\n",
				e.URL, EndpointState(e), e.InFlight, p.MaxConcurrency, e.Requests, e.Failures, models)
		}
		tw.Flush()
	}
}
