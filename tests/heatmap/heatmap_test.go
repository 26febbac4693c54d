// Package heatmap tests the token-load heatmap end to end with the real
// parts: sluiced (the Rust engine, built by scripts/build-ffi.sh) on a
// throwaway config with three shards, real frames over io_uring UDP from
// the Go client with a known skew (one shard gets 10x the tokens), and
// the page /ui/heatmap loaded in a real headless Chromium (Debian's
// /usr/bin/chromium, driven by chromedp). It checks that the page's
// hottest cell, and the tooltip of the hottest-looking pixel, name the
// shard that got the load, that /metrics agrees, and keeps a screenshot
// (target/heatmap/heatmap.png, or $HEATMAP_OUT/heatmap.png).
//
//	eval "$(scripts/build-ffi.sh)"; cd tests/heatmap && go test -v ./...
package heatmap

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sluice "github.com/sluice-ai/sluice/clients/go"
)

const hotShard, coolShard = "hbm2-batch", "hbm2-inference"

func root(t *testing.T) string {
	r, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// config: cfg/sluice.toml with ephemeral ports, no auth, and a third
// (local) shard that the intent "batch" routes to, ahead of the others.
func config(t *testing.T, dir string) string {
	b, err := os.ReadFile(filepath.Join(root(t), "cfg/sluice.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	tenants := regexp.MustCompile(`(?s)\n\[\[tenants\]\].*?\ntokens = \[[^\]]*\]\n`)
	for _, e := range []struct{ old, new string }{
		{`listen = "127.0.0.1:7070"`, `listen = "127.0.0.1:0"`},
		{`admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`},
		{`data_dir = "../.cache/sluice-data"`, `data_dir = "data"`},
		{`mode = "tenants"`, `mode = "none"`},
		{"[[shards]]\nname = \"hbm2-inference\"", "[[shards]]\nname = \"" + hotShard + "\"\nlabels = { \"hardware.gpu.memory\" = \"hbm2\" }\n\n[[shards]]\nname = \"hbm2-inference\""},
		{"[[routes]]\nname = \"mlp\"", "[[routes]]\nname = \"batch\"\nintent = \"batch\"\nshard = \"" + hotShard + "\"\n\n[[routes]]\nname = \"mlp\""},
	} {
		if strings.Count(s, e.old) != 1 {
			t.Fatalf("cfg/sluice.toml no longer has exactly one %q", e.old)
		}
		s = strings.Replace(s, e.old, e.new, 1)
	}
	if !tenants.MatchString(s) {
		t.Fatal("cfg/sluice.toml: no [[tenants]] table to drop")
	}
	s = tenants.ReplaceAllString(s, "\n")
	s = strings.ReplaceAll(s, `"../models/`, `"`+root(t)+`/models/`)
	s = strings.ReplaceAll(s, `"../.cache/onnxruntime/`, `"`+root(t)+`/.cache/onnxruntime/`)
	p := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// startSluiced runs the daemon and returns its admin base URL.
func startSluiced(t *testing.T, dir, cfg string) string {
	bin := os.Getenv("SLUICED")
	if bin == "" {
		bin = filepath.Join(root(t), ".cache/bin/sluiced")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s missing: run scripts/build-ffi.sh (or set SLUICED)", bin)
	}
	cmd := exec.Command(bin, "-config", cfg)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Getenv("SLUICE_ORT_LIB") == "" {
		cmd.Env = append(os.Environ(), "SLUICE_ORT_LIB="+root(t)+"/.cache/onnxruntime/libonnxruntime.so.1.31.1")
	}
	logf, err := os.Create(filepath.Join(dir, "sluiced.log"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "sluiced.log"))
			t.Logf("sluiced log:\n%s", b)
		}
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`sluiced serving" admin=(\S+)`)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(30 * time.Second):
		t.Fatal("sluiced did not come up in 30 s")
	}
	return ""
}

func getJSON(t *testing.T, url string, v any) {
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// drive sends n requests of the null model with the intent and declared
// tokens given, each answered.
func drive(t *testing.T, c *sluice.Client, intent string, tokens uint32, n int) {
	for i := range n {
		req := sluice.NewRequest("null", "1", sluice.NewTensor("x", []uint64{1}, []float32{float32(i)}))
		req.Intent, req.TokenCount = intent, tokens
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := c.Infer(ctx, req)
		cancel()
		if err != nil {
			t.Fatalf("request %d (intent %q): %v", i, intent, err)
		}
	}
}

func TestHeatmapShowsTheLoadedShard(t *testing.T) {
	if _, err := os.Stat("/usr/bin/chromium"); err != nil {
		t.Fatal("/usr/bin/chromium missing: scripts/setup.sh installs Debian's chromium")
	}
	outDir := os.Getenv("HEATMAP_OUT")
	if outDir == "" {
		outDir = filepath.Join(root(t), "target/heatmap")
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := startSluiced(t, dir, config(t, dir))
	var st struct {
		Engine struct{ Listen string } `json:"engine"`
	}
	getJSON(t, base+"/v1/status", &st)
	if st.Engine.Listen == "" {
		t.Fatal("status names no data-plane address")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := sluice.Dial(ctx, st.Engine.Listen, sluice.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The skew: the hot shard gets 10x the requests at 10x the tokens.
	drive(t, c, "", 20, 20)        // -> hbm2-inference (route "null")
	drive(t, c, "batch", 200, 200) // -> hbm2-batch

	// The JSON behind the page agrees before the browser looks.
	var doc struct {
		Series []struct {
			Key      string
			Tokens   []uint64
			Requests []uint64
		}
	}
	getJSON(t, base+"/v1/load?from=-60&to=0&step=60", &doc)
	sum := map[string][2]uint64{}
	for _, s := range doc.Series {
		var v [2]uint64
		for c := range s.Tokens {
			v[0] += s.Tokens[c]
			v[1] += s.Requests[c]
		}
		sum[s.Key] = v
	}
	if sum[hotShard] != [2]uint64{200 * 200, 200} || sum[coolShard] != [2]uint64{20 * 20, 20} {
		t.Fatalf("/v1/load: %v, want %s 40000 tokens in 200 requests, %s 400 in 20", sum, hotShard, coolShard)
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"), chromedp.NoSandbox, chromedp.Headless,
		chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1200, 500))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	type cell struct {
		Key        string  `json:"key"`
		Row        int     `json:"row"`
		Col        int     `json:"col"`
		TokensPerS float64 `json:"tokens_per_s"`
	}
	type point struct {
		X float64 `json:"x"`
		Y float64 `json:"y"`
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base+"/ui/heatmap#window=60"), chromedp.WaitVisible("#map")); err != nil {
		t.Fatalf("page: %v", err)
	}
	wait, wcancel := context.WithTimeout(bctx, 20*time.Second)
	defer wcancel()
	if _, err := chromedp.Run(wait, chromedp.Poll[bool](`!!(window.heatmap && window.heatmap.state.hot)`)); err != nil {
		t.Fatalf("the page found no hottest cell: %v", err)
	}
	hot, err := chromedp.Run(bctx, chromedp.Evaluate[cell](`window.heatmap.state.hot`))
	if err != nil {
		t.Fatal(err)
	}
	legend, err := chromedp.Run(bctx, chromedp.Text("#hottest"))
	if err != nil {
		t.Fatal(err)
	}
	if hot.Key != hotShard || hot.TokensPerS < 1000 {
		t.Fatalf("the page's hottest cell: %+v, want shard %s", hot, hotShard)
	}
	if !strings.Contains(legend, hotShard) {
		t.Fatalf("legend %q does not name %s", legend, hotShard)
	}
	// Hover where the hottest cell is drawn: the tooltip names the shard.
	at, err := chromedp.Run(bctx, chromedp.Evaluate[point](`(() => {
		const h = window.heatmap.state.hot, c = window.heatmap.cellCentre(h.row, h.col);
		const r = document.getElementById("map").getBoundingClientRect();
		return {x: r.left + c.x, y: r.top + c.y};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.MouseEvent("mouseMoved", at.X, at.Y)); err != nil {
		t.Fatal(err)
	}
	wait2, wcancel2 := context.WithTimeout(bctx, 5*time.Second)
	defer wcancel2()
	if _, err := chromedp.Run(wait2, chromedp.Poll[bool](`document.getElementById("tip").style.display === "block"`)); err != nil {
		t.Fatalf("no tooltip on hover: %v", err)
	}
	tip, err := chromedp.Run(bctx, chromedp.Text("#tip"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tip, hotShard) || !strings.Contains(tip, "requests ") {
		t.Fatalf("tooltip over the hottest cell: %q", tip)
	}
	shot, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	shotPath := filepath.Join(outDir, "heatmap.png")
	if err := os.WriteFile(shotPath, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	// The screenshot is a real rendering: the hottest cell's pixel is the
	// scale's top colour (red), the cool shard's row is not.
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	r, g, b, _ := img.At(int(at.X), int(at.Y)).RGBA()
	if r>>8 < 180 || g>>8 > 80 || b>>8 > 80 {
		t.Fatalf("the hottest cell is drawn rgb(%d,%d,%d), want the scale's red", r>>8, g>>8, b>>8)
	}
	t.Logf("screenshot: %s; tooltip: %q", shotPath, tip)

	// Prometheus gets the same series.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	mb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The gauges average the last 10 whole seconds: on a slow host the
	// load may have left that window, so the series' presence is checked.
	if !strings.Contains(string(mb), `sluice_load_tokens_per_second{by="shard",key="`+hotShard+`"}`) {
		t.Fatalf("/metrics has no load series for %s", hotShard)
	}
}
