package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
)

func TestLoadSeriesAndRefusals(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	now := uint64(time.Now().Unix())
	r.fake.SetLoad(engine.LoadByShard, []engine.LoadRow{{Second: now - 5, Key: 1, Tokens: 400, Requests: 4, Errors: 1, QueueDepthMax: 2}})
	r.fake.SetLoad(engine.LoadByTenant, []engine.LoadRow{{Second: now - 5, Key: 7, Tokens: 400, Requests: 4}})
	doc := decodeAs[heatmap.Doc](t, r.must("GET", fmt.Sprintf("/v1/load?from=%d&to=%d", now-9, now-1), "", 200))
	if len(doc.Times) != 9 || len(doc.Series) != 2 || doc.Series[0].Key != "hbm2-inference" || doc.SecondsMax != 900 {
		t.Fatalf("doc: %+v", doc)
	}
	if s := doc.Series[1]; s.Tokens[4] != 400 || s.TokensPerS[4] != 400 || s.Errors[4] != 1 || s.QueueDepthMax[4] != 2 {
		t.Fatalf("the loaded shard: %+v", s)
	}
	ten := decodeAs[heatmap.Doc](t, r.must("GET", "/v1/load?by=tenant&from=-60&to=-1&step=60", "", 200))
	if len(ten.Series) != 1 || ten.Series[0].Key != "tenant-7" || ten.Series[0].Tokens[0] != 400 {
		t.Fatalf("by tenant: %+v", ten)
	}
	for _, q := range []string{"step=0", "by=gpu", "from=x", "nope=1"} {
		r.apiErr("GET", "/v1/load?"+q, "", 400, "invalid_argument")
	}
	for _, q := range []string{"from=-1000&to=-1", "from=5&to=4", "from=-9223372036854775808"} {
		r.apiErr("GET", "/v1/load?"+q, "", 422, "out_of_range")
	}
}

func TestHeatmapPageNeedsNoTokenButItsDataDoes(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, "", `admin_token = ""`, `admin_token = "s3cret"`))
	code, b := r.do("GET", "/ui/heatmap", "")
	if code != 200 || !strings.Contains(string(b), "<canvas") || !strings.Contains(string(b), "/v1/load") {
		t.Fatalf("page: %d %.200s", code, b)
	}
	// Self-contained: no URL to anywhere else.
	if m := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//`).FindString(string(b)); m != "" {
		t.Fatalf("the page loads something from elsewhere: %s", m)
	}
	if code, _ := r.do("GET", "/v1/load", ""); code != 401 {
		t.Fatalf("/v1/load without the token: %d", code)
	}
	if code, _ := r.do("GET", "/v1/load", "", "Authorization", "Bearer s3cret"); code != 200 {
		t.Fatalf("/v1/load with the token: %d", code)
	}
	if code, _ := r.do("POST", "/ui/heatmap", ""); code != 401 {
		t.Fatalf("only GET of the page is open: %d", code)
	}
}

func TestLoadMetrics(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	now := uint64(time.Now().Unix())
	r.fake.SetLoad(engine.LoadByShard, []engine.LoadRow{{Second: now - 2, Key: 0, Tokens: 1000, Requests: 10, QueueDepthMax: 4}})
	b := string(r.must("GET", "/metrics", "", 200))
	for _, want := range []string{
		`sluice_load_tokens_per_second{by="shard",key="hbm2-inference"} 100`,
		`sluice_load_requests_per_second{by="shard",key="hbm2-inference"} 1`,
		`sluice_load_queue_depth_max{by="shard",key="hbm2-inference"} 4`,
		`sluice_load_tokens_per_second{by="shard",key="`,
	} {
		if !strings.Contains(b, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// The Grafana dashboard in docs/ parses and names only metrics sluiced
// exports.
func TestGrafanaDashboardUsesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/grafana/sluice-load.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 512)
	go func() { newCollector(nil).Describe(ch); close(ch) }()
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		if m := name.FindStringSubmatch(d.String()); m != nil {
			known[m[1]] = true
		}
	}
	used := 0
	metric := regexp.MustCompile(`\bsluice_[a-z_]+`)
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				used++
				if !known[m] {
					t.Errorf("panel %q uses %s, which sluiced does not export", p.Title, m)
				}
			}
		}
	}
	if used == 0 {
		t.Fatal("the dashboard queries no sluice metric")
	}
}

func TestFleetLoadOnOneHost(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.apiErr("GET", "/v1/load/fleet", "", 404, "not_found")
	r.apiErr("GET", "/v1/load/fleet?x=1", "", 400, "invalid_argument")
}
