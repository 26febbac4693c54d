package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// testConfig is cfg/sluice.toml with the admin API on an ephemeral loopback
// port and the data dir in dir.
func testConfig(t *testing.T, dir string, edits ...string) string {
	t.Helper()
	b, err := os.ReadFile("../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = replaceOnce(t, s, `admin_listen = "127.0.0.1:7071"`, `admin_listen = "127.0.0.1:0"`)
	s = replaceOnce(t, s, `data_dir = "../.cache/sluice-data"`, `data_dir = "data"`)
	for i := 0; i+1 < len(edits); i += 2 {
		s = replaceOnce(t, s, edits[i], edits[i+1])
	}
	return s
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("cfg/sluice.toml no longer has exactly one %q", old)
	}
	return strings.Replace(s, old, new, 1)
}

type running struct {
	t    *testing.T
	d    *Daemon
	fake *enginetest.Fake
	path string // config file
	base string // http://addr
	http *http.Client
	stop context.CancelFunc
	done chan error
	once sync.Once
	err  error
}

// start runs a daemon in-process on the fake engine with config text src
// written to dir/sluice.toml.
func start(t *testing.T, dir, src string, opts ...func(*Options)) *running {
	t.Helper()
	path := filepath.Join(dir, "sluice.toml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ready := make(chan net.Addr, 1)
	o := Options{ConfigPath: path, Engine: "fake", ShutdownTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Ready: func(a net.Addr) { ready <- a }}
	for _, f := range opts {
		f(&o)
	}
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, d: d, fake: d.Engine().(*enginetest.Fake), path: path, stop: cancel, done: make(chan error, 1),
		http: &http.Client{Timeout: 10 * time.Second}}
	go func() { r.done <- d.Run(ctx) }()
	select {
	case a := <-ready:
		r.base = "http://" + a.String()
		if a.Network() == "unix" {
			r.base = "http://sluiced"
			sock := a.String()
			r.http.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, "unix", sock)
			}}
		}
	case err := <-r.done:
		t.Fatalf("daemon exited early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready in 10 s")
	}
	t.Cleanup(r.shutdown)
	return r
}

// shutdown stops the daemon once and returns Run's result.
func (r *running) shutdown() {
	r.once.Do(func() {
		r.stop()
		select {
		case r.err = <-r.done:
		case <-time.After(10 * time.Second):
			r.t.Error("daemon did not stop in 10 s")
		}
	})
}

// do sends a request and returns the status and body.
func (r *running) do(method, path, body string, hdr ...string) (int, []byte) {
	r.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", bodyTypeOf(path))
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := r.http.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// bodyTypeOf is the Content-Type a client sends a body to path with:
// a transform is a WebAssembly module, everything else JSON.
func bodyTypeOf(path string) string {
	if strings.HasPrefix(path, "/v1/transforms/") {
		return "application/wasm"
	}
	return "application/json"
}

func (r *running) must(method, path, body string, want int) []byte {
	r.t.Helper()
	code, b := r.do(method, path, body)
	if code != want {
		r.t.Fatalf("%s %s: status %d, want %d: %s", method, path, code, want, b)
	}
	return b
}

func (r *running) apiErr(method, path, body string, want int, code string) api.Error {
	r.t.Helper()
	b := r.must(method, path, body, want)
	var e api.Error
	if err := json.Unmarshal(b, &e); err != nil || e.Code != code || e.Message == "" || e.ErrorCode != want {
		r.t.Fatalf("%s %s: error body %s, want code %q", method, path, b, code)
	}
	return e
}

func decodeAs[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

func TestStatusWorkersShards(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if !st.Engine.Running || st.Engine.Transport != "io_uring" || st.Daemon.Engine != "fake" || st.Daemon.Version != Version {
		t.Fatalf("status: %+v", st)
	}
	ws := decodeAs[[]api.WorkerDoc](t, r.must("GET", "/v1/workers", "", 200))
	if len(ws) != 1 || ws[0].Core != 1 || ws[0].Stats == nil {
		t.Fatalf("workers: %+v", ws)
	}
	ss := decodeAs[[]api.ShardDoc](t, r.must("GET", "/v1/shards", "", 200))
	if len(ss) != 2 || ss[0].Name != "hbm2-inference" || !ss[0].Local || ss[1].Local || ss[1].MaxConcurrency != 12 {
		t.Fatalf("shards: %+v", ss)
	}
	// Wrong method on a known path.
	if code, _ := r.do("DELETE", "/v1/status", ""); code != http.StatusMethodNotAllowed {
		t.Fatalf("DELETE /v1/status: %d", code)
	}
}

func TestRoutes(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	doc := decodeAs[api.RoutesDoc](t, r.must("GET", "/v1/routes", "", 200))
	if doc.Source != "file" || len(doc.Routes) != 4 || doc.Routes[0].Name != "mlp" {
		t.Fatalf("routes: %+v", doc)
	}
	// Refused sets: the whole set, with the reason; nothing changes.
	e := r.apiErr("PUT", "/v1/routes", `[{"name":"a","shard":"hbm2-inference"},{"name":"b","shard":"nowhere"}]`, 422, "invalid_config")
	if !strings.Contains(e.Message, `routes[1].shard: unknown shard "nowhere"`) {
		t.Fatalf("reason: %s", e.Message)
	}
	r.apiErr("PUT", "/v1/routes", `[{"name":"a","shard":"hbm2-inference"},{"name":"a","shard":"hbm2-inference"}]`, 422, "invalid_config")
	r.apiErr("PUT", "/v1/routes", `[{"name":"a","shard":"hbm2-inference","version":">>1"}]`, 422, "invalid_config")
	r.apiErr("PUT", "/v1/routes", `[{"name":"a","shard":"hbm2-inference","colour":"red"}]`, 400, "invalid_argument")
	r.apiErr("PUT", "/v1/routes", `[{"name":"a"`, 400, "invalid_argument")
	if got := r.fake.Config().Routes; len(got) != 4 {
		t.Fatalf("refused sets reached the engine: %+v", got)
	}
	// A good set, as a bare array, then the GET form round-trips.
	r.must("PUT", "/v1/routes", `[{"name":"all","shard":"gddr6-training"}]`, 200)
	doc = decodeAs[api.RoutesDoc](t, r.must("GET", "/v1/routes", "", 200))
	if doc.Source != "api" || len(doc.Routes) != 1 || doc.Routes[0].Shard != "gddr6-training" {
		t.Fatalf("after PUT: %+v", doc)
	}
	if got := r.fake.Config().Routes; len(got) != 1 || got[0].Name != "all" {
		t.Fatalf("engine routes: %+v", got)
	}
	body, _ := json.Marshal(doc)
	r.must("PUT", "/v1/routes", string(body), 200)
	// DELETE goes back to the file's routes.
	r.must("DELETE", "/v1/routes", "", 204)
	doc = decodeAs[api.RoutesDoc](t, r.must("GET", "/v1/routes", "", 200))
	if doc.Source != "file" || len(doc.Routes) != 4 || len(r.fake.Config().Routes) != 4 {
		t.Fatalf("after DELETE: %+v", doc)
	}
}

func TestBodyLimit(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	big := `[{"name":"` + strings.Repeat("x", BodySizeMax) + `","shard":"s"}]`
	r.apiErr("PUT", "/v1/routes", big, 413, "too_large")
}

func TestTenantsNeverShowKeys(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	b := r.must("GET", "/v1/tenants", "", 200)
	if bytes.Contains(b, []byte("key")) || bytes.Contains(b, []byte("73756963")) {
		t.Fatalf("key leaked: %s", b)
	}
	ts := decodeAs[[]api.TenantView](t, b)
	if len(ts) != 1 || ts[0].Name != "demo" || ts[0].ID != 1 {
		t.Fatalf("tenants: %+v", ts)
	}
	// Omitted key keeps the running one; a new tenant needs a key.
	r.must("PUT", "/v1/tenants", `[{"name":"demo","id":1,"models":["mlp"],"adapters":[]}]`, 204)
	if got := r.fake.Config().Tenants; len(got) != 1 || got[0].Key == "" || got[0].Models[0] != "mlp" {
		t.Fatalf("engine tenants: %+v", got)
	}
	e := r.apiErr("PUT", "/v1/tenants", `[{"name":"new","id":2,"models":["*"],"adapters":[]}]`, 422, "invalid_config")
	if !strings.Contains(e.Message, "key") {
		t.Fatalf("reason: %s", e.Message)
	}
	e = r.apiErr("PUT", "/v1/tenants", `[{"name":"new","id":2,"key":"hex:0011","models":["*"],"adapters":[]}]`, 422, "invalid_config")
	if strings.Contains(e.Message, "0011") {
		t.Fatalf("key echoed in error: %s", e.Message)
	}
	r.must("PUT", "/v1/tenants", `[{"name":"new","id":2,"key":"hex:000102030405060708090a0b0c0d0e0f","models":["*"],"adapters":["*"]}]`, 204)
	if b := r.must("GET", "/v1/tenants", "", 200); bytes.Contains(b, []byte("0001020304")) {
		t.Fatalf("key leaked: %s", b)
	}
}

func TestModelsAndAliases(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	ms := decodeAs[[]engine.ModelInfo](t, r.must("GET", "/v1/models", "", 200))
	if len(ms) != 3 {
		t.Fatalf("models: %+v", ms)
	}
	r.must("POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 201)
	r.apiErr("POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 409, "already_exists")
	r.apiErr("POST", "/v1/models", `{"name":"mlp","version":"3","kind":"onnx"}`, 422, "invalid_config")
	r.must("PUT", "/v1/models/mlp/aliases/1", `{"version":"2.0.0"}`, 200)
	r.apiErr("PUT", "/v1/models/mlp/aliases/1", `{"version":"7"}`, 404, "not_found")
	r.apiErr("PUT", "/v1/models/mlp/aliases/1", `{}`, 400, "invalid_argument")
	ms = decodeAs[[]engine.ModelInfo](t, r.must("GET", "/v1/models", "", 200))
	for _, m := range ms {
		if m.Name == "mlp" && (m.Version == "2.0.0") != (len(m.Aliases) == 1 && m.Aliases[0] == "1") {
			t.Fatalf("alias not moved: %+v", ms)
		}
	}
}

func TestPeers(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.must("POST", "/v1/peers", `{"name":"east","address":"127.0.0.1:7170","labels":{"hardware.gpu.memory":"gddr6"}}`, 201)
	r.apiErr("POST", "/v1/peers", `{"name":"east","address":"127.0.0.1:7171"}`, 409, "already_exists")
	r.apiErr("POST", "/v1/peers", `{"name":"west","address":"nowhere"}`, 422, "invalid_config")
	ps := decodeAs[[]engine.PeerStatus](t, r.must("GET", "/v1/peers", "", 200))
	if len(ps) != 1 || ps[0].Name != "east" || ps[0].Labels["hardware.gpu.memory"] != "gddr6" {
		t.Fatalf("peers: %+v", ps)
	}
	r.must("DELETE", "/v1/peers/east", "", 204)
	r.apiErr("DELETE", "/v1/peers/east", "", 404, "not_found")
}

func TestConnections(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	if b := r.must("GET", "/v1/connections", "", 200); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("no connections: %s", b)
	}
	id, err := r.fake.Connect(engine.Connection{Transport: "rdma", Listen: "10.99.0.1:7471", Worker: 0, Peer: "10.99.0.2:40000", Device: "rxe0"})
	if err != nil {
		t.Fatal(err)
	}
	r.fake.CountConnection(id, 3, 300, 3, 330, 0)
	cs := decodeAs[[]engine.Connection](t, r.must("GET", "/v1/connections", "", 200))
	if len(cs) != 1 || cs[0].ID != id || cs[0].State != "up" || cs[0].Peer != "10.99.0.2:40000" || cs[0].RxFrames != 3 || cs[0].TxBytes != 330 {
		t.Fatalf("connections: %+v", cs)
	}
	for _, bad := range []string{"abc", "-1", "1.5", "18446744073709551616"} {
		e := r.apiErr("DELETE", "/v1/connections/"+bad, "", 400, "invalid_argument")
		if !strings.Contains(e.Message, strconv.Quote(bad)) {
			t.Fatalf("error for %q does not name it: %s", bad, e.Message)
		}
	}
	e := r.apiErr("DELETE", "/v1/connections/"+strconv.FormatUint(id+100, 10), "", 404, "not_found")
	if !strings.Contains(e.Message, "no connection") {
		t.Fatalf("not found: %s", e.Message)
	}
	r.must("DELETE", "/v1/connections/"+strconv.FormatUint(id, 10), "", 204)
	if cs := decodeAs[[]engine.Connection](t, r.must("GET", "/v1/connections", "", 200)); len(cs) != 0 {
		t.Fatalf("after close: %+v", cs)
	}
	r.apiErr("DELETE", "/v1/connections/"+strconv.FormatUint(id, 10), "", 404, "not_found")
}

func TestStatsEndpoint(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.fake.Record(0, "hbm2-inference", "", 1000, 5000)
	r.fake.Record(0, "hbm2-inference", "no_route", 1000, 7000)
	st := decodeAs[engine.Stats](t, r.must("GET", "/v1/stats", "", 200))
	if len(st.Workers) != 1 || st.Workers[0].Requests() != 2 || st.Workers[0].Errors["no_route"] != 1 || st.Shards[0].Errors != 1 || st.Shards[0].Service.MaxNs != 7000 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestTokenRequired(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir, `admin_token = ""`, `admin_token = "s3cret"`))
	for _, path := range []string{"/v1/status", "/v1/routes", "/metrics", "/v1/nothing"} {
		for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong"}, {"Authorization", "s3cret"}} {
			code, b := r.do("GET", path, "", hdr...)
			var e api.Error
			if code != 401 || json.Unmarshal(b, &e) != nil || e.Code != "unauthorized" || e.ErrorCode != 401 {
				t.Fatalf("GET %s %v: %d %q, want 401 with the JSON error", path, hdr, code, b)
			}
		}
		code, _ := r.do("GET", path, "", "Authorization", "Bearer s3cret")
		if code == 401 {
			t.Fatalf("GET %s with the token: 401", path)
		}
	}
	if code, _ := r.do("PUT", "/v1/routes", `[]`); code != 401 {
		t.Fatalf("PUT without token: %d", code)
	}
	if len(r.fake.Config().Routes) != 4 {
		t.Fatal("unauthenticated PUT changed routes")
	}
}

func TestUnixSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	r := start(t, dir, testConfig(t, dir, `admin_listen = "127.0.0.1:0"`, `admin_listen = "unix:admin.sock"`))
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if !st.Engine.Running {
		t.Fatalf("status over unix socket: %+v", st)
	}
	r.shutdown()
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
}

func TestPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	r.must("POST", "/v1/peers", `{"name":"east","address":"127.0.0.1:7170"}`, 201)
	r.must("POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 201)
	r.must("PUT", "/v1/models/mlp/aliases/1", `{"version":"2.0.0"}`, 200)
	r.must("PUT", "/v1/routes", `[{"name":"all","shard":"gddr6-training"}]`, 200)
	r.shutdown()

	r2 := start(t, dir, src)
	c := r2.fake.Config()
	if len(c.Peers) != 1 || c.Peers[0].Name != "east" {
		t.Fatalf("peers after restart: %+v", c.Peers)
	}
	if len(c.Routes) != 1 || c.Routes[0].Name != "all" {
		t.Fatalf("routes after restart: %+v", c.Routes)
	}
	found := false
	for _, m := range c.Models {
		if m.Name == "mlp" && m.Version == "2.0.0" {
			found = len(m.Aliases) == 1 && m.Aliases[0] == "1"
		}
		if m.Name == "mlp" && m.Version == "1.0.0" && len(m.Aliases) != 0 {
			t.Fatalf("old version kept the alias: %+v", m)
		}
	}
	if !found {
		t.Fatalf("loaded model or alias lost: %+v", c.Models)
	}
	// A file-defined peer removed through the API stays removed.
	r2.must("DELETE", "/v1/peers/east", "", 204)
	r2.shutdown()
	r3 := start(t, dir, src)
	if ps := r3.fake.Config().Peers; len(ps) != 0 {
		t.Fatalf("removed peer came back: %+v", ps)
	}
}

const newShardRoute = `
[[shards]]
name = "cpu"
max_concurrency = 2
queue_depth = 16

[[routes]]
name = "to-cpu"
intent = "batch"
shard = "cpu"
`

func TestReloadAPI(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	if err := os.WriteFile(r.path, []byte(src+newShardRoute), 0o600); err != nil {
		t.Fatal(err)
	}
	applies := r.fake.Applies()
	res := decodeAs[api.ReloadResult](t, r.must("POST", "/v1/reload", "", 200))
	if strings.Join(res.Applied, ",") != "shards,routes" || len(res.RestartRequired) != 0 {
		t.Fatalf("reload: %+v", res)
	}
	if r.fake.Applies() != applies+1 {
		t.Fatal("changes must be applied in one call")
	}
	c := r.fake.Config()
	if len(c.Shards) != 3 || c.Routes[len(c.Routes)-1].Name != "to-cpu" {
		t.Fatalf("engine config: %+v %+v", c.Shards, c.Routes)
	}
	// Nothing changed: nothing applied.
	res = decodeAs[api.ReloadResult](t, r.must("POST", "/v1/reload", "", 200))
	if len(res.Applied) != 0 || r.fake.Applies() != applies+1 {
		t.Fatalf("no-op reload applied %+v", res)
	}
	// A bad file is refused with file:line; the running config stays.
	bad := src + newShardRoute + "\n[[routes]]\nname = \"x\"\nshard = \"cpu\"\nprority = 3\n"
	if err := os.WriteFile(r.path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	line := strings.Count(bad[:strings.Index(bad, "prority")], "\n") + 1
	e := r.apiErr("POST", "/v1/reload", "", 422, "invalid_config")
	if want := r.path + ":" + itoa(line) + ": routes.prority: unknown key"; !strings.Contains(e.Message, want) {
		t.Fatalf("reason %q lacks %q", e.Message, want)
	}
	if c := r.fake.Config(); len(c.Routes) != 5 {
		t.Fatalf("refused file changed routes: %+v", c.Routes)
	}
	// A static section is not applied live.
	if err := os.WriteFile(r.path, []byte(strings.Replace(src, "rx_burst_max = 32", "rx_burst_max = 64", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	res = decodeAs[api.ReloadResult](t, r.must("POST", "/v1/reload", "", 200))
	if strings.Join(res.RestartRequired, ",") != "engine" || strings.Join(res.Applied, ",") != "shards,routes" {
		t.Fatalf("reload: %+v", res)
	}
	if c := r.fake.Config(); c.Engine.RxBurstMax != 32 {
		t.Fatal("engine section changed live")
	}
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if st.Daemon.ReloadsOK != 3 || st.Daemon.ReloadsFailed != 1 {
		t.Fatalf("reload counts: %+v", st.Daemon)
	}
}

func TestReloadRefusedWhenOverrideConflicts(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	r.must("PUT", "/v1/routes", `[{"name":"all","shard":"gddr6-training"}]`, 200)
	// The new file drops the shard the API's routes use.
	noGddr := strings.Replace(src, "[[shards]]\nname = \"gddr6-training\"", "[[shards]]\nname = \"gddr7-training\"", 1)
	noGddr = strings.Replace(noGddr, "shard = \"gddr6-training\"", "shard = \"gddr7-training\"", 1)
	if noGddr == src {
		t.Fatal("edit did not apply")
	}
	if err := os.WriteFile(r.path, []byte(noGddr), 0o600); err != nil {
		t.Fatal(err)
	}
	e := r.apiErr("POST", "/v1/reload", "", 422, "invalid_config")
	if !strings.Contains(e.Message, `unknown shard "gddr6-training"`) || !strings.Contains(e.Message, "overrides made through the API") {
		t.Fatalf("reason: %s", e.Message)
	}
	if c := r.fake.Config(); c.Shards[1].Name != "gddr6-training" || c.Routes[0].Name != "all" {
		t.Fatalf("running config changed: %+v %+v", c.Shards, c.Routes)
	}
	// Dropping the override lets the file through.
	r.must("DELETE", "/v1/routes", "", 204)
	r.must("POST", "/v1/reload", "", 200)
	if c := r.fake.Config(); c.Shards[1].Name != "gddr7-training" {
		t.Fatalf("after reset and reload: %+v", c.Shards)
	}
}

func TestReloadSIGHUP(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	if err := os.WriteFile(r.path, []byte(src+newShardRoute), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.fake.Config().Shards) != 3 {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP did not reload in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	doc := decodeAs[api.RoutesDoc](t, r.must("GET", "/v1/routes", "", 200))
	if len(doc.Routes) != 5 {
		t.Fatalf("routes after SIGHUP: %+v", doc.Routes)
	}
}

func TestGracefulShutdownOnSIGTERM(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir))
	addr := strings.TrimPrefix(r.base, "http://")
	if err := r.fake.Begin(); err != nil { // one request in flight
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The engine drains: new requests are refused, Run waits for the old one.
	deadline := time.Now().Add(10 * time.Second)
	for r.fake.Begin() == nil {
		r.fake.End()
		if time.Now().After(deadline) {
			t.Fatal("engine not draining 10 s after SIGTERM")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v with a request in flight", err)
	default:
	}
	r.fake.End()
	r.shutdown() // Run has returned on its own; cancelling is a no-op
	if r.err != nil {
		t.Fatalf("Run: %v", r.err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatal("admin listener still open after shutdown")
	}
}

func TestSystemdNotify(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "notify.sock")
	pc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	r := start(t, dir, testConfig(t, dir))
	read := func() string {
		pc.SetReadDeadline(time.Now().Add(10 * time.Second))
		buf := make([]byte, 256)
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}
	if got := read(); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("first notification %q", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if got := read(); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("on SIGHUP: %q", got)
	}
	if got := read(); !strings.HasPrefix(got, "READY=1") {
		t.Fatalf("after reload: %q", got)
	}
	r.shutdown()
	if got := read(); !strings.HasPrefix(got, "STOPPING=1") {
		t.Fatalf("on stop: %q", got)
	}
}

func TestShutdownTimeout(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir), func(o *Options) { o.ShutdownTimeout = 50 * time.Millisecond })
	if err := r.fake.Begin(); err != nil {
		t.Fatal(err)
	}
	r.shutdown()
	if !errors.Is(r.err, errs.ErrTimeout) {
		t.Fatalf("Run: %v, want a timeout", r.err)
	}
}

func TestStartupErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	src := testConfig(t, dir, "rx_burst_max = 32", "rx_burst_max = 0")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := New(Options{ConfigPath: path, Engine: "fake"})
	line := strings.Count(src[:strings.Index(src, "rx_burst_max = 0")], "\n") + 1
	if err == nil || !strings.Contains(err.Error(), path+":"+itoa(line)+": engine.rx_burst_max") {
		t.Fatalf("bad file: %v", err)
	}
	src = testConfig(t, dir)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Options{ConfigPath: path, Engine: "nope"}); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("unknown engine: %v", err)
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestRegistryMountedAndSchemasReachEngine(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir))
	schema := `{"type":"record","name":"req","fields":[{"name":"a","type":"int"}]}`
	body, _ := json.Marshal(map[string]string{"schema": schema})
	b := r.must("POST", "/registry/subjects/infer-value/versions", string(body), 200)
	var reg struct{ ID int }
	if err := json.Unmarshal(b, &reg); err != nil || reg.ID == 0 {
		t.Fatalf("register: %s", b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ss := r.fake.Schemas()
		if len(ss) == 1 && ss[0].Subject == "infer-value" && ss[0].Version == 1 && ss[0].ID == reg.ID && ss[0].SchemaType == "AVRO" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("schema did not reach the engine: %+v", ss)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A soft delete retires the version on the data plane too; a hard
	// delete removes it.
	r.must("DELETE", "/registry/subjects/infer-value/versions/1", "", 200)
	for ss := r.fake.Schemas(); len(ss) != 1 || !ss[0].Retired; ss = r.fake.Schemas() {
		if time.Now().After(deadline) {
			t.Fatalf("schema not retired in the engine: %+v", ss)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.must("DELETE", "/registry/subjects/infer-value/versions/1?permanent=true", "", 200)
	for len(r.fake.Schemas()) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("retired schema still in the engine: %+v", r.fake.Schemas())
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.must("GET", "/registry/subjects", "", 200)
}

// A worker the engine restarted after a panic does not stop the daemon.
func TestRestartedWorkerKeepsTheDaemon(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir), func(o *Options) { o.WorkerCheckEvery = 20 * time.Millisecond })
	r.fake.RestartWorker(0, "injected fault", true)
	select {
	case err := <-r.done:
		t.Fatalf("the daemon stopped for a restarted worker: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	if w := st.Engine.Workers[0]; !w.Alive || w.Failed() || w.Restarts != 1 {
		t.Fatalf("status of the restarted worker: %+v", w)
	}
}

// A failed data-plane worker stops the daemon with an error (sluiced then
// exits non-zero and the service manager restarts it); status shows it.
func TestFailedWorkerStopsTheDaemon(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir), func(o *Options) { o.WorkerCheckEvery = 20 * time.Millisecond })
	st := decodeAs[api.StatusDoc](t, r.must("GET", "/v1/status", "", 200))
	for _, w := range st.Engine.Workers {
		if !w.Alive || w.Failed() {
			t.Fatalf("worker %d before the fault: %+v", w.Index, w)
		}
	}
	r.fake.FailWorker(0, "injected fault")
	select {
	case err := <-r.done:
		if !errors.Is(err, errs.ErrInternal) || !strings.Contains(err.Error(), "worker 0") || !strings.Contains(err.Error(), "injected fault") {
			t.Fatalf("Run returned %v, want the failed worker wrapped in ErrInternal", err)
		}
		r.once.Do(func() {}) // already stopped
	case <-time.After(5 * time.Second):
		t.Fatal("the daemon kept running with a failed worker")
	}
}
