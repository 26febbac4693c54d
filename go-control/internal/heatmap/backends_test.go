package heatmap_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
)

// The page's backends panel reads GET /v1/status as JSON (backendRows in
// page.html): the keys it walks are the ones the daemon writes, and the
// page names each of them. tests/heatmap renders the panel in Chromium
// from a served status of the same shape.
func TestBackendsPanelReadsTheStatusJSON(t *testing.T) {
	doc := api.StatusDoc{Engine: engine.Status{Running: true,
		Frontdoor: &engine.FrontdoorStatus{HTTP: "127.0.0.1:8000", Backends: enginetest.Backends()}}}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	at := func(v any, path ...string) any {
		for _, k := range path {
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not an object at %q", path, k)
			}
			if v, ok = m[k]; !ok {
				t.Fatalf("status JSON has no %s", strings.Join(path, "."))
			}
		}
		return v
	}
	pools := at(v, "engine", "frontdoor", "backends", "pools").([]any)
	if len(pools) != 2 {
		t.Fatalf("%d pools", len(pools))
	}
	p := pools[0]
	if at(p, "name") != "llama" || at(p, "max_concurrency") != 4.0 || at(p, "ttft", "count") != 80.0 || at(p, "ttft", "p50_us") != 35000.0 {
		t.Fatalf("pool: %v", p)
	}
	e := at(p, "endpoints").([]any)[1]
	if at(e, "url") != "http://127.0.0.1:8102" || at(e, "in_flight") != 0.0 || at(e, "healthy") != true || at(e, "ejected") != true || at(e, "draining") != false {
		t.Fatalf("endpoint: %v", e)
	}
	page, err := os.ReadFile("page.html")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{`fetch("/v1/status"`, "status.engine", ".frontdoor", ".backends", ".pools", ".endpoints", ".name", ".url",
		".in_flight", ".max_concurrency", ".ttft", ".count", ".p50_us", ".healthy", ".ejected", ".draining"} {
		if !strings.Contains(string(page), k) {
			t.Errorf("page.html does not read %s", k)
		}
	}
}
