package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// syncBuffer is a log sink several goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// audits returns the audit records logged so far.
func (s *syncBuffer) audits(t *testing.T) []map[string]any {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(s.b.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "audit" {
			out = append(out, rec)
		}
	}
	return out
}

func withJSONLog(buf *syncBuffer) func(*Options) {
	return func(o *Options) { o.Logger = slog.New(slog.NewJSONHandler(buf, nil)) }
}

func TestAuditTrail(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	r := start(t, dir, testConfig(t, dir, `admin_token = ""`, `admin_token = "s3cret"`), withJSONLog(&logs))
	tok := []string{"Authorization", "Bearer s3cret"}
	steps := []struct {
		method, path, body string
		want               int
		kind, outcome      string
	}{
		{"PUT", "/v1/routes", `[{"name":"all","shard":"hbm2-inference"}]`, 200, "routes", "ok"},
		{"PUT", "/v1/routes", `[{"name":"all","shard":"nowhere"}]`, 422, "routes", "refused"},
		{"DELETE", "/v1/routes", "", 204, "routes", "ok"},
		{"POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 201, "models", "ok"},
		{"PUT", "/v1/models/mlp/aliases/1", `{"version":"2.0.0"}`, 200, "aliases", "ok"},
		{"DELETE", "/v1/models/mlp/versions/2.0.0", "", 204, "models", "ok"},
		{"PUT", "/v1/tenants", `[{"name":"demo","id":1,"models":["*"],"adapters":["*"]}]`, 204, "tenants", "ok"},
		{"POST", "/v1/peers", `{"name":"east","address":"127.0.0.1:7170"}`, 201, "peers", "ok"},
		{"DELETE", "/v1/peers/east", "", 204, "peers", "ok"},
		{"POST", "/v1/reload", "", 200, "reload", "ok"},
		{"POST", "/registry/subjects/s/versions", `{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`, 200, "schemas", "ok"},
		{"POST", "/registry/subjects/s", `{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`, 200, "", ""}, // a lookup: no change
		{"DELETE", "/registry/subjects/nope", "", 404, "schemas", "refused"},
	}
	for _, s := range steps {
		code, b := r.do(s.method, s.path, s.body, append(tok, "Content-Type", "application/json")...)
		if code != s.want {
			t.Fatalf("%s %s: %d %s", s.method, s.path, code, b)
		}
	}
	recs := logs.audits(t)
	var want []string
	for _, s := range steps {
		if s.kind != "" {
			want = append(want, s.kind+"/"+s.outcome)
		}
	}
	var got []string
	for _, rec := range recs {
		got = append(got, rec["kind"].(string)+"/"+rec["outcome"].(string))
		who, _ := rec["who"].(string)
		if !strings.HasPrefix(who, "token:") || strings.Contains(who, "s3cret") {
			t.Fatalf("who %q: want the token's fingerprint, never the token", who)
		}
		if _, ok := rec["epoch"].(float64); !ok {
			t.Fatalf("no epoch in %v", rec)
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("audit lines\n got %v\nwant %v", got, want)
	}
	// The last registry change waited for the engine: its epoch is the
	// engine's after the push.
	if recs[len(recs)-2]["what"] != "/subjects/s/versions" {
		t.Fatalf("schema audit line: %v", recs[len(recs)-2])
	}

	// Counted in /metrics by kind and outcome.
	code, b := r.do("GET", "/metrics", "", tok...)
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	for _, line := range []string{
		`sluice_control_changes_total{kind="routes",outcome="ok"} 2`,
		`sluice_control_changes_total{kind="routes",outcome="refused"} 1`,
		`sluice_control_changes_total{kind="models",outcome="ok"} 2`,
		`sluice_control_changes_total{kind="schemas",outcome="ok"} 1`,
		`sluice_control_changes_total{kind="schemas",outcome="refused"} 1`,
	} {
		if !bytes.Contains(b, []byte(line)) {
			t.Fatalf("metrics lack %q", line)
		}
	}
}

func TestAuditNamesTheUnixPeer(t *testing.T) {
	dir := t.TempDir()
	var logs syncBuffer
	sock := dir + "/admin.sock"
	r := start(t, dir, testConfig(t, dir, `admin_listen = "127.0.0.1:0"`, `admin_listen = "unix:`+sock+`"`), withJSONLog(&logs))
	r.must("POST", "/v1/reload", "", 200)
	recs := logs.audits(t)
	if len(recs) != 1 || !strings.HasPrefix(recs[0]["who"].(string), "unix:uid=") {
		t.Fatalf("audit: %v", recs)
	}
}

func TestModelUnload(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	r.must("POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 201)
	r.must("DELETE", "/v1/models/mlp/versions/2.0.0", "", 204)
	r.apiErr("DELETE", "/v1/models/mlp/versions/2.0.0", "", 404, "not_found")
	// A version from the file can be unloaded too.
	r.must("DELETE", "/v1/models/echo/versions/1", "", 204)
	has := func(c []engine.ModelInfo, name, version string) bool {
		for _, m := range c {
			if m.Name == name && m.Version == version {
				return true
			}
		}
		return false
	}
	ms := decodeAs[[]engine.ModelInfo](t, r.must("GET", "/v1/models", "", 200))
	if has(ms, "mlp", "2.0.0") || has(ms, "echo", "1") || !has(ms, "mlp", "1.0.0") {
		t.Fatalf("models after unload: %+v", ms)
	}
	// Neither comes back on a reload nor on a restart.
	r.must("POST", "/v1/reload", "", 200)
	ms = decodeAs[[]engine.ModelInfo](t, r.must("GET", "/v1/models", "", 200))
	if has(ms, "mlp", "2.0.0") || has(ms, "echo", "1") {
		t.Fatalf("unloaded model merged back on reload: %+v", ms)
	}
	r.shutdown()
	r2 := start(t, dir, src)
	ms = decodeAs[[]engine.ModelInfo](t, r2.must("GET", "/v1/models", "", 200))
	if has(ms, "mlp", "2.0.0") || has(ms, "echo", "1") {
		t.Fatalf("unloaded model back after a restart: %+v", ms)
	}
	// Loading it again brings it back for good.
	r2.must("POST", "/v1/models", `{"name":"echo","version":"1","kind":"echo"}`, 201)
	r2.must("POST", "/v1/reload", "", 200)
	ms = decodeAs[[]engine.ModelInfo](t, r2.must("GET", "/v1/models", "", 200))
	if !has(ms, "echo", "1") {
		t.Fatalf("reloaded model lost: %+v", ms)
	}
}

// Every error of both APIs has one body, and one status per cause.
func TestOneErrorShape(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.apiErr("GET", "/v1/nothing", "", 404, api.CodeNotFound)
	r.apiErr("GET", "/nothing", "", 404, api.CodeNotFound)
	code, b := r.do("DELETE", "/v1/status", "")
	var e api.Error
	if code != 405 || json.Unmarshal(b, &e) != nil || e.Code != api.CodeMethodNotAllowed || e.ErrorCode != 405 {
		t.Fatalf("405: %d %s", code, b)
	}
	big := `{"schema":"` + strings.Repeat("x", 5<<20) + `"}`
	code, b = r.do("POST", "/registry/subjects/s/versions", big)
	if code != 413 || json.Unmarshal(b, &e) != nil || e.Code != api.CodeTooLarge || e.ErrorCode != 413 {
		t.Fatalf("registry 413: %d %.200s", code, b)
	}
	code, b = r.do("PUT", "/registry/config", `{"compatibility":"`+strings.Repeat("x", 70<<10)+`"}`)
	if code != 413 || json.Unmarshal(b, &e) != nil || e.Code != api.CodeTooLarge {
		t.Fatalf("registry config 413: %d %.200s", code, b)
	}
	r.apiErr("PUT", "/v1/routes", "["+strings.Repeat(" ", BodySizeMax)+"]", 413, api.CodeTooLarge)
	// Confluent's codes stay in error_code on the registry.
	code, b = r.do("GET", "/registry/subjects/nope/versions", "")
	if code != 404 || json.Unmarshal(b, &e) != nil || e.ErrorCode != 40401 || e.Code != "subject_not_found" || e.Message == "" {
		t.Fatalf("registry 404: %d %s", code, b)
	}
	code, b = r.do("GET", "/registry/nothing", "")
	if code != 404 || json.Unmarshal(b, &e) != nil || e.Code != api.CodeNotFound {
		t.Fatalf("registry unknown path: %d %s", code, b)
	}
}

func TestOpenAPIServed(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	code, b := r.do("GET", "/openapi.json", "")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(b, &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.") || doc.Paths["/v1/status"] == nil {
		t.Fatalf("openapi: %d %.200s", code, b)
	}
}

func TestDrainFromConfig(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, testConfig(t, dir, "drain_ms = 200", "drain_ms = 750"))
	r.shutdown()
	if r.err != nil || r.fake.LastDrain().Milliseconds() != 750 {
		t.Fatalf("drain %v, err %v", r.fake.LastDrain(), r.err)
	}
}

// Bodies that would wipe a section by accident are refused; an explicit
// empty list is how to clear one.
func TestRefusesAccidentalWipes(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	r.apiErr("PUT", "/v1/tenants", "null", 400, "invalid_argument")
	r.apiErr("PUT", "/v1/routes", `{"source":""}`, 400, "invalid_argument")
	r.apiErr("PUT", "/v1/routes", "null", 400, "invalid_argument")
	if len(r.fake.Config().Routes) != 4 || len(r.fake.Config().Tenants) != 1 {
		t.Fatalf("a refused body changed the config: %+v", r.fake.Config())
	}
	r.must("PUT", "/v1/routes", `{"routes":[]}`, 200)
	if len(r.fake.Config().Routes) != 0 {
		t.Fatal(`{"routes":[]} must clear the routes`)
	}
}
