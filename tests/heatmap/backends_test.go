package heatmap

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// backendsStatus is a GET /v1/status body with two pools, as the daemon
// writes it (engine.frontdoor.backends; dataplane/backends/src/stats.rs):
// llama with a serving endpoint at inFlight of 4 and an ejected one, and
// triton whose one endpoint fails its health check and has no TTFT yet.
func backendsStatus(inFlight int) string {
	return fmt.Sprintf(`{"daemon": {"version": "test"}, "engine": {"running": true, "transport": "io_uring",
  "frontdoor": {"http": "127.0.0.1:8000", "stats": {}, "backends": {
    "pools": [
      {"name": "llama", "protocol": "openai", "labels": {}, "max_concurrency": 4, "queue_depth": 64, "waiting": 0,
       "requests": 120, "ok": 110, "retries": 3, "errors": {"connect": 2},
       "latency": {"count": 110, "mean_us": 150000, "p50_us": 120000, "p90_us": 300000, "p99_us": 900000},
       "ttft": {"count": 80, "mean_us": 40000, "p50_us": 35000, "p90_us": 70000, "p99_us": 120000},
       "itl": {"count": 4000, "mean_us": 10000, "p50_us": 9000, "p90_us": 15000, "p99_us": 30000},
       "endpoints": [
         {"url": "http://127.0.0.1:8101", "healthy": true, "ejected": false, "draining": false, "in_flight": %d,
          "requests": 70, "failures": 1, "ejections": 0, "models": ["gemma-3-270m"]},
         {"url": "http://127.0.0.1:8102", "healthy": true, "ejected": true, "draining": false, "in_flight": 0,
          "requests": 53, "failures": 6, "ejections": 1, "models": ["gemma-3-270m"]}]},
      {"name": "triton", "protocol": "kserve-http", "labels": {}, "max_concurrency": 16, "queue_depth": 0, "waiting": 0,
       "requests": 0, "ok": 0, "retries": 0, "errors": {},
       "latency": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
       "ttft": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
       "itl": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
       "endpoints": [
         {"url": "http://10.0.0.7:8000", "healthy": false, "ejected": false, "draining": false, "in_flight": 0,
          "requests": 0, "failures": 0, "ejections": 0, "models": []}]}],
    "models": {}}}}}`, inFlight)
}

// TestBackendsPanel renders the page's backends panel in Chromium from a
// stand-in for sluiced: the page file as sluiced embeds it, a /v1/load of
// one idle shard and a /v1/status with backend pools. No model server and
// no engine: the panel only reads the status JSON (its shape from the
// daemon is tested in go-control/internal/heatmap). The live refresh
// picks up a change of in-flight count.
func TestBackendsPanel(t *testing.T) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Fatal("/usr/bin/chromium missing: scripts/setup.sh installs Debian's chromium")
	}
	page, err := os.ReadFile(filepath.Join(root(t), "go-control/internal/heatmap/page.html"))
	if err != nil {
		t.Fatal(err)
	}
	var inFlight atomic.Int32
	inFlight.Store(3)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ui/heatmap", func(w http.ResponseWriter, _ *http.Request) {
		// The header sluiced sends (internal/heatmap/page.go).
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(page)
	})
	mux.HandleFunc("GET /v1/load", func(w http.ResponseWriter, _ *http.Request) {
		now := time.Now().Unix() - 1
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"appliance": "test", "by": "shard", "from": %d, "to": %d, "step": 1, "times": [%d],
  "series": [{"key": "hbm2-inference", "tokens": [0], "tokens_per_s": [0], "requests": [0], "errors": [0], "queue_depth_max": [0]}]}`, now, now, now)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, backendsStatus(int(inFlight.Load())))
	})
	srv := httptest.NewServer(mux) // /v1/load/fleet: 404, as on one host
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1200, 700))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/ui/heatmap"), chromedp.WaitVisible("#map")); err != nil {
		t.Fatalf("page: %v", err)
	}
	shown, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if _, err := chromedp.Run(shown, chromedp.Poll[bool](`!document.getElementById("backends").hidden && document.querySelectorAll("#brows tr").length > 0`)); err != nil {
		t.Fatalf("the backends panel never showed: %v", err)
	}
	rowsJS := `[...document.querySelectorAll("#brows tr")].map(tr => [...tr.children].map(td => td.textContent))`
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[][]string](rowsJS))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"llama", "http://127.0.0.1:8101", "3 / 4", "ready", "35.0ms"},
		{"llama", "http://127.0.0.1:8102", "0 / 4", "ejected", "35.0ms"},
		{"triton", "http://10.0.0.7:8000", "0 / 16", "not ready", "–"},
	}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("panel rows:\n%q\nwant:\n%q", rows, want)
	}
	// The in-flight bar: 3 of 4 is three quarters wide, coloured by the
	// map's scale (not the empty grey).
	bar, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`(() => {
		const s = document.querySelector("#brows tr .bar > span");
		return [s.style.width, getComputedStyle(s).backgroundColor];
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if bar[0] != "75%" || bar[1] == "rgb(240, 240, 240)" {
		t.Fatalf("in-flight bar: width %s colour %s", bar[0], bar[1])
	}
	cls, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#brows tr td:nth-child(4)")].map(td => td.className)`))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(cls) != "[ready down down]" {
		t.Fatalf("state classes: %v", cls)
	}
	// Live: the next refresh (every 2 s) shows the new count.
	inFlight.Store(4)
	wait, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`document.querySelector("#brows tr td:nth-child(3)").textContent === "4 / 4"`)); err != nil {
		t.Fatalf("the panel did not refresh: %v", err)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	outDir := os.Getenv("HEATMAP_OUT")
	if outDir == "" {
		outDir = filepath.Join(root(t), "target/heatmap")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "backends.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
}
