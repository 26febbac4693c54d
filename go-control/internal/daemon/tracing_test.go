package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/otelcoltest"
)

// Control operations are spans, exported to a real collector: a change
// through the API (child of the caller's traceparent) with what it was and
// how it ended, and a reload.
func TestControlOperationsAreSpans(t *testing.T) {
	endpoint, out := otelcoltest.Start(t)
	dir := t.TempDir()
	cfg := testConfig(t, dir, `# endpoint = "http://127.0.0.1:4318"`, `endpoint = "`+endpoint+`"`+"\nservice_name = \"sluiced-test\"",
		"export_interval_ms = 200", "export_interval_ms = 50")
	r := start(t, dir, cfg)
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	if code, b := r.do("PUT", "/v1/routes", `[{"name":"all","shard":"hbm2-inference"}]`, "traceparent", tp); code != 200 {
		t.Fatalf("routes: %d %s", code, b)
	}
	if code, _ := r.do("PUT", "/v1/routes", `[{"name":"all","shard":"nowhere"}]`); code != 422 {
		t.Fatalf("bad routes: %d", code)
	}
	r.must("POST", "/v1/reload", "", 200)
	r.must("GET", "/v1/status", "", 200) // reads are not spans
	r.shutdown()                         // the final flush sends what is left
	var spans []otelcoltest.Span
	deadline := time.Now().Add(10 * time.Second)
	for {
		spans = otelcoltest.Read(t, out)
		if len(spans) >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := map[string]*otelcoltest.Span{}
	for i := range spans {
		s := &spans[i]
		if s.Service != "sluiced-test" {
			t.Errorf("span %s from service %q", s.Name, s.Service)
		}
		if strings.Contains(s.Name, "GET") {
			t.Errorf("a read became a span: %s", s.Name)
		}
		got[s.Name+" "+s.Attr("sluice.change.outcome")] = s
	}
	ok := got["sluice.control PUT /v1/routes ok"]
	if ok == nil || ok.TraceID != "0af7651916cd43dd8448eb211c80319c" || ok.ParentSpanID != "b7ad6b7169203331" ||
		ok.Attr("sluice.change.kind") != "routes" || ok.Attr("sluice.change.what") != "1 routes" || ok.Attr("http.response.status_code") != "200" {
		t.Fatalf("the route change span: %+v (all: %v)", ok, keys(got))
	}
	if bad := got["sluice.control PUT /v1/routes refused"]; bad == nil || bad.Attr("http.response.status_code") != "422" {
		t.Fatalf("the refused change span: %+v", bad)
	}
	if rl := got["sluice.control POST /v1/reload ok"]; rl == nil || rl.Attr("sluice.change.kind") != "reload" {
		t.Fatalf("the reload span: %+v", rl)
	}
}

func keys(m map[string]*otelcoltest.Span) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
