package config

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// backendsExample is the milestone's example: every key of [[backends]],
// [openai] and a kind = "backend" model.
const backendsExample = `
[frontdoor]
http_listen = "127.0.0.1:8000"

[[backends]]
name = "llama"
protocol = "openai"
endpoints = ["http://127.0.0.1:8101", "http://127.0.0.1:8102"]
labels = { "hardware.gpu.memory" = "hbm2" }
models = ["gemma-3-270m"]
max_concurrency = 8
queue_depth = 64
connect_timeout_ms = 1000
request_timeout_ms = 120000
health_interval_ms = 1000
eject_errors = 3
eject_ms = 1000
eject_max_ms = 30000
retries = 1
retry_budget_pct = 20

[openai]
default_versions = { "qwen3-72b" = "1" }

[[models]]
name = "qwen3-72b"
version = "1"
kind = "backend"
upstream = "gemma-3-270m"
aliases = ["latest"]
`

func TestBackendsExampleLoads(t *testing.T) {
	cfg, err := Parse("t.toml", []byte(backendsExample))
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Backends[0]
	if b.Name != "llama" || b.Protocol != "openai" || len(b.Endpoints) != 2 || b.Labels["hardware.gpu.memory"] != "hbm2" ||
		len(b.Models) != 1 || b.MaxConcurrency != 8 || b.QueueDepth != 64 || b.ConnectTimeoutMs != 1000 ||
		b.RequestTimeoutMs != 120000 || b.HealthIntervalMs != 1000 || b.EjectErrors != 3 || b.EjectMs != 1000 ||
		b.EjectMaxMs != 30000 || b.Retries != 1 || b.RetryBudgetPct != 20 {
		t.Fatalf("backend: %+v", b)
	}
	if m := cfg.Models[0]; m.Kind != ModelKindBackend || m.Upstream != "gemma-3-270m" || m.Path != "" {
		t.Fatalf("model: %+v", m)
	}
	if cfg.OpenAI.DefaultVersions["qwen3-72b"] != "1" {
		t.Fatalf("openai: %+v", cfg.OpenAI)
	}
}

// The engine gets every key of the example under its TOML path, and the
// JSON decodes back to the same config.
func TestBackendsReachTheEngine(t *testing.T) {
	var doc map[string]any
	if err := toml.Unmarshal([]byte(backendsExample), &doc); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	keyPaths("", doc, want)
	cfg, err := Parse("t.toml", []byte(backendsExample))
	if err != nil {
		t.Fatal(err)
	}
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	keyPaths("", back, got)
	var missing []string
	for k := range want {
		if !got[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("keys missing from the engine JSON: %v\n%s", missing, js)
	}
	var again Config
	if err := json.Unmarshal(js, &again); err != nil {
		t.Fatal(err)
	}
	if js2, _ := again.JSON(); string(js2) != string(js) {
		t.Fatalf("JSON round trip differs:\n%s\n%s", js, js2)
	}
	if c := cfg.Clone(); len(c.Backends) != 1 || c.Backends[0].EjectMaxMs != 30000 || c.OpenAI.DefaultVersions["qwen3-72b"] != "1" {
		t.Fatalf("clone: %+v", c)
	}
}

// A config without backends sends the engine the same JSON as before they
// existed: no backends, openai or upstream keys.
func TestNoBackendsNoNewKeys(t *testing.T) {
	cfg, err := Load(contract)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := cfg.JSON()
	for _, k := range []string{`"backends"`, `"openai"`, `"upstream"`} {
		if strings.Contains(string(js), k) {
			t.Fatalf("engine JSON holds %s: %s", k, js)
		}
	}
}

func TestBackendDefaults(t *testing.T) {
	src := "[[backends]]\nname = \"b\"\nprotocol = \"kserve-http\"\nendpoints = [\"https://gpu-1.lan:9000\"]\n" +
		"[[backends]]\nname = \"z\"\nprotocol = \"openai\"\nendpoints = [\"http://[::1]:8101\"]\nqueue_depth = 0\nretries = 0\nretry_budget_pct = 0\n"
	cfg, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := Backend{Name: "b", Protocol: "kserve-http", Endpoints: []string{"https://gpu-1.lan:9000"},
		MaxConcurrency: 8, QueueDepth: 64, ConnectTimeoutMs: 1000, RequestTimeoutMs: 120000, HealthIntervalMs: 1000,
		EjectErrors: 3, EjectMs: 1000, EjectMaxMs: 30000, Retries: 1, RetryBudgetPct: 20}
	if got, _ := json.Marshal(cfg.Backends[0]); string(got) != string(must(json.Marshal(want))) {
		t.Fatalf("defaults\n got %s\nwant %s", got, must(json.Marshal(want)))
	}
	// Written as 0 where 0 is allowed: stays 0.
	if z := cfg.Backends[1]; z.QueueDepth != 0 || z.Retries != 0 || z.RetryBudgetPct != 0 || z.MaxConcurrency != 8 {
		t.Fatalf("explicit zeros: %+v", z)
	}
	// The JSON form takes the same defaults and refuses unknown fields.
	var b Backend
	if err := json.Unmarshal([]byte(`{"name":"j","protocol":"openai","endpoints":["http://h:1"],"retries":0}`), &b); err != nil {
		t.Fatal(err)
	}
	if b.Retries != 0 || b.QueueDepth != 64 || b.EjectMaxMs != 30000 || b.RetryBudgetPct != 20 {
		t.Fatalf("JSON defaults: %+v", b)
	}
	if err := json.Unmarshal([]byte(`{"name":"j","protocol":"openai","endpoints":["http://h:1"],"colour":1}`), &b); err == nil {
		t.Fatal("unknown JSON field accepted")
	}
	var m Model
	if err := json.Unmarshal([]byte(`{"name":"m","version":"1","kind":"backend","upstream":"u"}`), &m); err != nil || m.Upstream != "u" {
		t.Fatalf("JSON model upstream: %+v %v", m, err)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

func TestBackendErrorsNameFileLineAndKey(t *testing.T) {
	const pool = "[[backends]]\nname = \"p\"\nprotocol = \"openai\"\n"              // lines 1-3
	const model = "[[models]]\nname = \"q\"\nversion = \"1\"\nkind = \"backend\"\n" // 4 lines
	cases := []struct {
		name, src, want string
	}{
		{"unknown key", pool + "endpoints = [\"http://h:1\"]\ncolour = 1\n", "t.toml:5: backends.colour: unknown key"},
		{"name required", "[[backends]]\nprotocol = \"openai\"\nendpoints = [\"http://h:1\"]\n", "t.toml:1: backends[0].name: \"\" must be 1 to 64 characters of [A-Za-z0-9._-]"},
		{"name characters", "[[backends]]\nname = \"a b\"\nprotocol = \"openai\"\nendpoints = [\"http://h:1\"]\n", "t.toml:2: backends[0].name: \"a b\" must be"},
		{"name too long", "[[backends]]\nname = \"" + strings.Repeat("n", 65) + "\"\nprotocol = \"openai\"\nendpoints = [\"http://h:1\"]\n", "t.toml:2: backends[0].name:"},
		{"name twice", pool + "endpoints = [\"http://h:1\"]\n" + pool + "endpoints = [\"http://h:2\"]\n", "t.toml:6: backends[1].name: backend \"p\" defined twice"},
		{"protocol required", "[[backends]]\nname = \"p\"\nendpoints = [\"http://h:1\"]\n", "t.toml:1: backends[0].protocol: \"\" is not one of \"openai\", \"kserve-http\""},
		{"protocol", "[[backends]]\nname = \"p\"\nprotocol = \"grpc\"\nendpoints = [\"http://h:1\"]\n", "t.toml:3: backends[0].protocol: \"grpc\" is not one of"},
		{"no endpoints", pool, "t.toml:1: backends[0].endpoints: at least one endpoint is required"},
		{"empty endpoints", pool + "endpoints = []\n", "t.toml:4: backends[0].endpoints: at least one endpoint is required"},
		{"too many endpoints", pool + "endpoints = [" + manyEndpoints(65) + "]\n", "t.toml:4: backends[0].endpoints: 65 entries; at most 64"},
		{"endpoint scheme", pool + "endpoints = [\"http://h:1\",\n  \"grpc://h:2\"]\n", "t.toml:5: backends[0].endpoints[1]: \"grpc://h:2\" must start with http:// or https://"},
		{"endpoint port", pool + "endpoints = [\"http://h\"]\n", "t.toml:4: backends[0].endpoints[0]: \"http://h\" needs a port"},
		{"endpoint port zero", pool + "endpoints = [\"http://h:0\"]\n", "backends[0].endpoints[0]: \"http://h:0\" needs a port"},
		{"endpoint host", pool + "endpoints = [\"http://:80\"]\n", "backends[0].endpoints[0]: \"http://:80\" names no host"},
		{"endpoint path", pool + "endpoints = [\"http://h:1/v1\"]\n", "backends[0].endpoints[0]: \"http://h:1/v1\" must be scheme://host:port with no path"},
		{"endpoint slash", pool + "endpoints = [\"http://h:1/\"]\n", "backends[0].endpoints[0]: \"http://h:1/\" must be scheme://host:port with no path"},
		{"endpoint query", pool + "endpoints = [\"http://h:1?a=b\"]\n", "backends[0].endpoints[0]: \"http://h:1?a=b\" must be scheme://host:port with no path"},
		{"endpoint user", pool + "endpoints = [\"http://u:p@h:1\"]\n", "backends[0].endpoints[0]: \"http://u:p@h:1\" must not hold a user"},
		{"endpoint bare", pool + "endpoints = [\"127.0.0.1:8101\"]\n", "backends[0].endpoints[0]: \"127.0.0.1:8101\""},
		{"endpoint twice", pool + "endpoints = [\"http://h:1\", \"HTTP://H:1\"]\n", "t.toml:4: backends[0].endpoints[1]: \"HTTP://H:1\" is listed twice in the pool"},
		{"model twice", pool + "endpoints = [\"http://h:1\"]\nmodels = [\"a\", \"a\"]\n", "t.toml:5: backends[0].models[1]: model \"a\" listed twice"},
		{"model empty", pool + "endpoints = [\"http://h:1\"]\nmodels = [\"\"]\n", "t.toml:5: backends[0].models[0]: \"\" must be 1 to 256 printable ASCII"},
		{"max_concurrency zero", pool + "endpoints = [\"http://h:1\"]\nmax_concurrency = 0\n", "t.toml:5: backends[0].max_concurrency: 0 is out of range 1..=4096"},
		{"max_concurrency", pool + "endpoints = [\"http://h:1\"]\nmax_concurrency = 4097\n", "t.toml:5: backends[0].max_concurrency: 4097 is out of range 1..=4096"},
		{"queue_depth", pool + "endpoints = [\"http://h:1\"]\nqueue_depth = 65537\n", "t.toml:5: backends[0].queue_depth: 65537 is out of range 0..=65536"},
		{"queue_depth negative", pool + "endpoints = [\"http://h:1\"]\nqueue_depth = -1\n", "t.toml:5: backends[0].queue_depth: -1 is out of range 0..=65536"},
		{"connect_timeout_ms", pool + "endpoints = [\"http://h:1\"]\nconnect_timeout_ms = 60001\n", "t.toml:5: backends[0].connect_timeout_ms: 60001 is out of range 1..=60000"},
		{"request_timeout_ms", pool + "endpoints = [\"http://h:1\"]\nrequest_timeout_ms = 0\n", "t.toml:5: backends[0].request_timeout_ms: 0 is out of range 1..=3600000"},
		{"health_interval_ms", pool + "endpoints = [\"http://h:1\"]\nhealth_interval_ms = 99\n", "t.toml:5: backends[0].health_interval_ms: 99 is out of range 100..=600000"},
		{"eject_errors", pool + "endpoints = [\"http://h:1\"]\neject_errors = 1001\n", "t.toml:5: backends[0].eject_errors: 1001 is out of range 1..=1000"},
		{"eject_ms", pool + "endpoints = [\"http://h:1\"]\neject_ms = 600001\n", "t.toml:5: backends[0].eject_ms: 600001 is out of range 1..=600000"},
		{"eject_max_ms below eject_ms", pool + "endpoints = [\"http://h:1\"]\neject_ms = 5000\neject_max_ms = 4000\n", "t.toml:6: backends[0].eject_max_ms: 4000 is out of range 5000..=3600000"},
		{"eject_max_ms below its default eject_ms", pool + "endpoints = [\"http://h:1\"]\neject_max_ms = 999\n", "t.toml:5: backends[0].eject_max_ms: 999 is out of range 1000..=3600000"},
		{"retries", pool + "endpoints = [\"http://h:1\"]\nretries = 9\n", "t.toml:5: backends[0].retries: 9 is out of range 0..=8"},
		{"retry_budget_pct", pool + "endpoints = [\"http://h:1\"]\nretry_budget_pct = 101\n", "t.toml:5: backends[0].retry_budget_pct: 101 is out of range 0..=100"},
		{"labels are strings", pool + "endpoints = [\"http://h:1\"]\nlabels = { a = 1 }\n", "t.toml:5: backends.labels: cannot decode TOML integer"},
		{"kind", "[[models]]\nname = \"q\"\nversion = \"1\"\nkind = \"remote\"\n", "t.toml:4: models[0].kind: \"remote\" is not one of \"onnx\", \"null\", \"echo\", \"backend\""},
		{"backend model with a path", model + "path = \"q.onnx\"\n", "t.toml:5: models[0].path: a kind = \"backend\" model is served by [[backends]]: it has no path"},
		{"upstream on onnx", "[[models]]\nname = \"q\"\nversion = \"1\"\npath = \"q.onnx\"\nupstream = \"u\"\n", "t.toml:5: models[0].upstream: only kind = \"backend\" models have an upstream (this one is \"onnx\")"},
		{"upstream on null", "[[models]]\nname = \"q\"\nversion = \"1\"\nkind = \"null\"\n\nupstream = \"u\"\n", "t.toml:6: models[0].upstream: only kind = \"backend\" models have an upstream (this one is \"null\")"},
		{"upstream with a space", model + "upstream = \"a b\"\n", "t.toml:5: models[0].upstream: \"a b\" must be 1 to 256 printable ASCII"},
		{"backend model batches", model + "batch_max = 4\n", "t.toml:5: models[0].batch_max: only onnx models batch"},
		{"default version of an unknown model", "[openai]\ndefault_versions = { \"nope\" = \"1\" }\n", "t.toml:2: openai.default_versions.nope: model \"nope\" is not configured ([[models]])"},
		{"default version unknown", model + "aliases = [\"latest\"]\n[openai]\ndefault_versions = { \"q\" = \"2\" }\n", "t.toml:7: openai.default_versions.q: \"2\" is neither a version nor an alias of model q (it has \"1\", \"latest\")"},
		{"default versions as a table", model + "[openai.default_versions]\n\"q\" = \"1\"\nr = \"1\"\n", "t.toml:7: openai.default_versions.r: model \"r\" is not configured"},
		{"unknown openai key", "[openai]\ndefault_version = {}\n", "t.toml:2: openai.default_version: unknown key"},
		{"backend job without a front door", model + jobsOn("models = { llm = \"q\" }\n"),
			"t.toml:15: jobs.streams[0].models.llm: model \"q\" is served by [[backends]], and jobs reach it through the OpenAI front door: set frontdoor.http_listen"},
		{"backend job by its filter subject without a front door", model + jobsOn("filter_subjects = [\"inference.mlp\", \"inference.q\"]\n"),
			"t.toml:15: jobs.streams[0].filter_subjects[1]: model \"q\" is served by [[backends]]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := parseErr(t, tc.src)
			if !strings.Contains(got, tc.want) {
				t.Fatalf("error\n  %s\nwant it to contain\n  %s", got, tc.want)
			}
		})
	}
}

// jobsOn is a jobs stream (from line 5 on, after a 4-line model) ending
// with extra, on line 15; filter_subjects are inference.* unless extra
// names them.
func jobsOn(extra string) string {
	filter := "filter_subjects = [\"inference.*\"]\n"
	if strings.HasPrefix(extra, "filter_subjects") {
		filter = ""
	}
	return "[[tenants]]\nname = \"demo\"\nid = 1\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n" + // 5-8
		"[fleet]\nservers = [\"nats://127.0.0.1:4222\"]\n" + // 9-10
		"[[jobs.streams]]\nstream = \"ai-inference\"\nsubjects = [\"inference.>\"]\ntenant = \"demo\"\n" + // 11-14
		extra + filter // 15
}

func manyEndpoints(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("\"http://h:" + string(rune('0'+i/10)) + string(rune('0'+i%10)) + "01\"")
	}
	return b.String()
}

// Jobs may ask for backend models when the front door listens, and a
// stream may map to other models without one.
func TestBackendJobsNeedTheFrontDoorOnly(t *testing.T) {
	model := "[[models]]\nname = \"q\"\nversion = \"1\"\nkind = \"backend\"\n"
	if _, err := Parse("t.toml", []byte(model+"[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\n"+jobsOn("models = { llm = \"q\" }\n"))); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("t.toml", []byte(model+jobsOn("models = { llm = \"mlp\" }\n"))); err != nil {
		t.Fatal(err)
	}
}

func TestModelKind(t *testing.T) {
	src := "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\n" +
		"[[models]]\nname = \"q\"\nversion = \"1\"\nkind = \"backend\"\naliases = [\"latest\"]\n" +
		"[[models]]\nname = \"q\"\nversion = \"2\"\nkind = \"null\"\n" +
		"[[models]]\nname = \"r\"\nversion = \"1\"\nkind = \"backend\"\n" +
		"[[models]]\nname = \"e\"\nversion = \"1\"\nkind = \"echo\"\n" +
		"[openai]\ndefault_versions = { q = \"2\" }\n"
	cfg, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, version, want string }{
		{"q", "1", "backend"}, {"q", "latest", "backend"}, {"q", "2", "null"},
		{"q", "", "null"},     // the default version, 2
		{"q", "9", "backend"}, // no such version: its front door answers
		{"r", "", "backend"},  // no default: a backend model all the same
		{"e", "", "echo"},     // first version's kind
		{"nope", "1", ""},
	} {
		if got := cfg.ModelKind(tc.name, tc.version); got != tc.want {
			t.Errorf("ModelKind(%q, %q) = %q, want %q", tc.name, tc.version, got, tc.want)
		}
	}
}
