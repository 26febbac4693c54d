package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const contract = "../../../cfg/sluice.toml"

func TestContractFileLoads(t *testing.T) {
	cfg, err := Load(contract)
	if err != nil {
		t.Fatalf("cfg/sluice.toml must load: %v", err)
	}
	if len(cfg.Shards) != 2 || cfg.Shards[0].Name != "hbm2-inference" || cfg.Shards[0].MaxConcurrency != 8 || cfg.Shards[1].MaxConcurrency != 12 {
		t.Fatalf("shards: %+v", cfg.Shards)
	}
	if len(cfg.Routes) != 4 || cfg.Routes[0].Version != "^1" || cfg.Routes[3].Intent != "training" {
		t.Fatalf("routes: %+v", cfg.Routes)
	}
	if cfg.Host.Labels["hardware.gpu.memory"] != "hbm2" {
		t.Fatalf("host labels: %+v", cfg.Host.Labels)
	}
	m := cfg.Models[0]
	if m.Kind != "onnx" || !filepath.IsAbs(m.Path) || len(m.Adapters) != 1 || m.Adapters[0].ID != "formal" {
		t.Fatalf("model: %+v", m)
	}
	if cfg.Tenants[0].ID != 1 || !strings.HasPrefix(cfg.Tenants[0].Key, "hex:") {
		t.Fatalf("tenant: %+v", cfg.Tenants[0])
	}
	abs, _ := filepath.Abs("../../../.cache/sluice-data")
	if got, _ := filepath.Abs(cfg.Control.DataDir); got != abs {
		t.Fatalf("data_dir %q, want %q", cfg.Control.DataDir, abs)
	}
	// The JSON for the engine uses the TOML key names and hides the token.
	cfg.Control.AdminToken = "secret-token"
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"rx_burst_max":32`, `"max_concurrency":8`, `"io_uring":{`, `"queue_depth":64`} {
		if !strings.Contains(string(js), want) {
			t.Fatalf("engine JSON lacks %s: %s", want, js)
		}
	}
	if strings.Contains(string(js), "secret-token") {
		t.Fatal("admin token leaked into the engine JSON")
	}
}

func TestDefaultsFillMissingTables(t *testing.T) {
	cfg, err := Parse("/etc/sluice/min.toml", []byte("[engine]\nworkers = [0]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Engine.RxBurstMax != 32 || cfg.IOUring.BufferSize != 65536 || cfg.Control.AdminListen != "127.0.0.1:7071" {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
	if cfg.Control.DataDir != "/etc/.cache/sluice-data" {
		t.Fatalf("data_dir not resolved against the file: %q", cfg.Control.DataDir)
	}
}

// parseErr parses src as file "t.toml" and returns the error text.
func parseErr(t *testing.T, src string) string {
	t.Helper()
	_, err := Parse("t.toml", []byte(src))
	if err == nil {
		t.Fatalf("expected an error for:\n%s", src)
	}
	return err.Error()
}

func TestErrorsNameFileLineAndKey(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown key in table", "[engine]\nworkers = [0]\nrx_bursts = 4\n", "t.toml:3: engine.rx_bursts: unknown key"},
		{"unknown table", "[engine]\nworkers = [0]\n\n[dpdkk]\nx = 1\n", "t.toml:4: dpdkk: unknown key"},
		{"unknown key in array table", "[[shards]]\nname = \"a\"\nmax_concurrency = 1\nqueue_depth = 1\ncolour = \"red\"\n", "t.toml:5: shards.colour: unknown key"},
		{"bad range", "[engine]\nworkers = [0]\n\n\nrx_burst_max = 0\n", "t.toml:5: engine.rx_burst_max: 0 is out of range 1..=256"},
		{"bad range in second shard", "[[shards]]\nname = \"a\"\nmax_concurrency = 8\nqueue_depth = 64\n\n[[shards]]\nname = \"b\"\nmax_concurrency = 9999\nqueue_depth = 64\n", "t.toml:8: shards[1].max_concurrency: 9999 is out of range 1..=4096"},
		{"explicit zero is not the default", "[[shards]]\nname = \"a\"\n[[shards]]\nname = \"b\"\nqueue_depth = 0\n", "t.toml:5: shards[1].queue_depth: 0 is out of range 1..=65536"},
		{"shard worker out of range", "[engine]\nworkers = [0]\n[[shards]]\nname = \"a\"\nworkers = [0, 1]\n", "t.toml:5: shards[0].workers[1]: worker 1 does not exist (1 configured)"},
		{"tx below burst", "[engine]\nworkers = [0]\nrx_burst_max = 64\n[io_uring]\ntx_buffers = 32\n", "t.toml:5: io_uring.tx_buffers: 32 is below engine.rx_burst_max (64)"},
		{"buffer alignment", "[io_uring]\nbuffer_size = 4000\n", "t.toml:2: io_uring.buffer_size: 4000 is not a multiple of 64"},
		{"env key unset", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"env:SLUICE_TEST_UNSET_KEY\"\n", "t.toml:4: tenants[0].key: environment variable SLUICE_TEST_UNSET_KEY is not set"},
		{"bad type", "[engine]\nworkers = [0]\nspin_us = \"fast\"\n", "t.toml:3: engine.spin_us:"},
		{"bad enum", "[engine]\nworkers = [0]\ntransport = \"tcp\"\n", "t.toml:3: engine.transport: \"tcp\" is not one of"},
		{"unknown shard in route", "[[routes]]\nname = \"r\"\nshard = \"nope\"\n", "t.toml:3: routes[0].shard: unknown shard \"nope\""},
		{"bad content condition", "[[shards]]\nname = \"s\"\nmax_concurrency = 1\nqueue_depth = 1\n[[routes]]\nname = \"r\"\nshard = \"s\"\ncontent = ['$.intent == \"a\"', '$.x ~ 1']\n", "t.toml:8: routes[0].content[1]: content \"$.x ~ 1\": want PATH"},
		{"bad version pattern", "[[shards]]\nname = \"s\"\nmax_concurrency = 1\nqueue_depth = 1\n[[routes]]\nname = \"r\"\nversion = \">>1\"\nshard = \"s\"\n", "t.toml:7: routes[0].version:"},
		{"bad key hex", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:zz\"\n", "t.toml:4: tenants[0].key: key is not an even number of hex digits"},
		{"short key", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:00ff\"\n", "t.toml:4: tenants[0].key: key is 2 bytes"},
		{"drain too long", "[control]\ndrain_ms = 20000\n", "t.toml:2: control.drain_ms: 20000 is out of range 0..=10000"},
		{"negotiation ttl too short", "[engine]\nworkers = [0]\nnegotiation_ttl_ms = 10\n", "t.toml:3: engine.negotiation_ttl_ms: 10 is out of range 1000..=3600000"},
		{"tenant id zero", "[[tenants]]\nname = \"t\"\nid = 0\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n", "t.toml:3: tenants[0].id: 0 is out of range"},
		{"token needed off loopback", "[control]\nadmin_listen = \"0.0.0.0:7071\"\n", "t.toml:1: control.admin_token: is required when admin_listen"},
		{"core does not exist", "[engine]\nworkers = [0, 4096]\n", "t.toml:2: engine.workers[1]: core 4096 does not exist or is offline"},
		{"inline table in an array", "[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\n\nadapters = [{ id = \"a b\", path = \"x\" }]\n", "t.toml:6: models[0].adapters[0].id: \"a b\" must be 1 to 64 printable ASCII"},
		{"syntax error", "[engine\nworkers = [0]\n", "t.toml:1:"},
		{"duplicate alias", "[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\naliases = [\"a\"]\n[[models]]\nname = \"m\"\nversion = \"2\"\nkind = \"null\"\naliases = [\"b\", \"a\"]\n", "t.toml:10: models[1].aliases[1]: alias \"a\" of model m already names version 1"},
		{"batch_max zero", "[[shards]]\nname = \"s\"\nbatch_max = 0\n", "t.toml:3: shards[0].batch_max: 0 is out of range 1..=256"},
		{"batch_max above queue_depth", "[[shards]]\nname = \"s\"\nqueue_depth = 8\nbatch_max = 16\n", "t.toml:4: shards[0].batch_max: 16 is above queue_depth (8)"},
		{"batch delay without batch", "[[shards]]\nname = \"s\"\nbatch_delay_us = 100\n", "t.toml:3: shards[0].batch_delay_us: needs batch_max above 1"},
		{"batch delay too long", "[[shards]]\nname = \"s\"\nbatch_max = 4\nbatch_delay_us = 1000001\n", "t.toml:4: shards[0].batch_delay_us: 1000001 is out of range 0..=1000000"},
		{"model batch on null", "[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\nbatch_max = 4\n", "t.toml:5: models[0].batch_max: only onnx models batch"},
		{"model batch delay alone", "[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\nbatch_delay_us = 50\n", "t.toml:5: models[0].batch_delay_us: needs batch_max on the model too"},
		{"model batch_max range", "[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\nbatch_max = 257\n", "t.toml:5: models[0].batch_max: 257 is out of range 1..=256"},
		{"onnx without path", "[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"onnx\"\n", "t.toml:1: models[0].path: is required"},
		{"front door listen", "[frontdoor]\nthreads = 1\nhttp_listen = \"localhost\"\n", "t.toml:3: frontdoor.http_listen: \"localhost\" is not an IP:port address"},
		{"front door body limit", "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\nbody_bytes_max = 10\n", "t.toml:3: frontdoor.body_bytes_max: 10 is out of range 4096..="},
		{"front door on a worker core", "[engine]\nworkers = [0]\n[frontdoor]\nthreads = 1\ncores = [0]\n", "t.toml:5: frontdoor.cores[0]: core 0 is a worker core"},
		{"front door tls cert without key", "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\ntls_cert = \"c.pem\"\n", "t.toml:3: frontdoor.tls_cert: tls_cert and tls_key go together"},
		{"front door tls reload", "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\ntls_reload_ms = 5\n", "t.toml:3: frontdoor.tls_reload_ms: 5 is out of range 100..="},
		{"front door same ports", "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\ngrpc_listen = \"127.0.0.1:8000\"\n", "t.toml:3: frontdoor.grpc_listen: must differ from http_listen"},
		{"bad token", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\ntokens = [\"sha256:00\"]\n", "t.toml:5: tenants[0].tokens[0]: a sha256: token is 64 hex digits"},
		{"plain token", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\ntokens = [\"secret\"]\n", "t.toml:5: tenants[0].tokens[0]: token must start with"},
		{"bad tcp listen", "[io_uring]\ntcp_listen = \"anywhere\"\n", "t.toml:2: io_uring.tcp_listen: \"anywhere\" is not an IP:port address"},
		{"tcp connections", "[io_uring]\ntcp_listen = \"127.0.0.1:7072\"\n\ntcp_connections_max = 0\n", "t.toml:4: io_uring.tcp_connections_max: 0 is out of range 1..=4096"},
		{"tcp slot size", "[io_uring]\ntcp_slots = [\n  { size = 65536, count = 8 },\n  { size = 100000, count = 2 },\n]\n", "t.toml:4: io_uring.tcp_slots[1].size: 100000 is not a multiple of 4096"},
		{"tcp slot order", "[io_uring]\ntcp_slots = [{ size = 2097152, count = 8 }, { size = 65536, count = 2 }]\n", "t.toml:2: io_uring.tcp_slots[1].size: slot classes must be listed smallest first"},
		{"tcp slot missing count", "[io_uring]\ntcp_slots = [{ size = 65536 }]\n", "t.toml:2: io_uring.tcp_slots[0].count: 0 is out of range 1..=4096"},
		{"tcp frame limit above the largest slot", "[io_uring]\ntcp_slots = [{ size = 65536, count = 8 }]\ntcp_frame_len_max = 70000\n", "t.toml:3: io_uring.tcp_frame_len_max: 70000 is out of range 96..=65536"},
		{"tcp pool too large", "[io_uring]\ntcp_slots = [{ size = 268435456, count = 64 }]\n", "t.toml:2: io_uring.tcp_slots: 34359738368 bytes of slots per worker"},
		{"tcp zc mode", "[io_uring]\ntcp_send_zc = \"maybe\"\n", "t.toml:2: io_uring.tcp_send_zc: \"maybe\" is not one of"},
		{"peer tcp address", "[[peers]]\nname = \"b\"\naddress = \"10.0.0.2:7070\"\ntcp_address = \"b:7072\"\n", "t.toml:4: peers[0].tcp_address: \"b:7072\" is not an IP:port address"},
		{"auth mode", "[auth]\nmode = \"open\"\n", "t.toml:2: auth.mode: \"open\" is not one of \"tenants\", \"none\""},
		{"freshness window", "[auth]\n\nfreshness_window_ms = 50\n", "t.toml:3: auth.freshness_window_ms: 50 is out of range 100..=300000"},
		{"replay entries", "[auth]\nreplay_entries = 1000\n", "t.toml:2: auth.replay_entries: 1000 is not a power of two"},
		{"published key on a NIC", "[engine]\ntransport = \"dpdk\"\n\n[[tenants]]\nname = \"demo\"\nid = 1\nkey = \"hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030\"\n", "t.toml:7: tenants[0].key: this key is published in the Sluice repository, and engine.transport = \"dpdk\" is reachable"},
		{"published token off loopback", "[frontdoor]\nhttp_listen = \"0.0.0.0:8000\"\n\n[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\ntokens = [\"sha256:93849de6614ec0bbd8d0aed516245f309ec8c5d8bce3c2d79f0a7b35226386f9\"]\n", "t.toml:8: tenants[0].tokens[0]: this bearer token is published in the Sluice repository, and frontdoor.http_listen = \"0.0.0.0:8000\""},
		{"replay senders", "[auth]\nreplay_senders = 3000\n", "t.toml:2: auth.replay_senders: 3000 is not a power of two"},
		{"replay senders range", "[auth]\nreplay_senders = 262144\n", "t.toml:2: auth.replay_senders"},
		{"replay window", "[auth]\nreplay_window_ids = 1000\n", "t.toml:2: auth.replay_window_ids: 1000 is not a power of two"},
		{"replay window range", "[auth]\nreplay_window_ids = 32\n", "t.toml:2: auth.replay_window_ids"},
		{"mode none with tenants", "[auth]\nmode = \"none\"\n\n[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n", "t.toml:4: tenants[0]: auth.mode is \"none\""},
		{"bad subject pattern", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\nsubjects = [\"a-*\", \"\"]\n", "t.toml:5: tenants[0].subjects[1]: \"\" must be 1 to 255 printable ASCII"},
		{"too many patterns", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\nroutes = [" + strings.Repeat("\"r\", ", 16385) + "]\n", "t.toml:5: tenants[0].routes: 16385 entries; at most 16384"},
		{"content trie too large", "[[shards]]\nname = \"s\"\nmax_concurrency = 1\nqueue_depth = 1\n" + manyContentRoutes(520), "routes[511].content[0]: the content paths of all routes need more than 512 trie nodes"},
		{"too many general globs", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\nmodels = [\"a*\", \"*b\", " + strings.Repeat("\"x*y\", ", 17) + "]\n", "tenants[0].models[18]: at most 16 globs other than"},
		{"duplicate tenant name", "[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n[[tenants]]\nname = \"t\"\nid = 4\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n", "tenants[1].id: tenant id 4 or name \"t\" used twice"},
		{"alias is a version", "[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\n[[models]]\nname = \"m\"\nversion = \"2\"\nkind = \"null\"\naliases = [\"1\"]\n", "models[1].aliases[0]: alias \"1\" of model m already names version 1"},
		{"duplicate version", "[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\n[[models]]\nname = \"m\"\nversion = \"1\"\nkind = \"null\"\n", "models[1].version: model m version 1 defined twice"},
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

func TestBatchingKeys(t *testing.T) {
	src := "[[shards]]\nname = \"s\"\nbatch_max = 32\nbatch_delay_us = 500\n[[shards]]\nname = \"p\"\n" +
		"[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\nbatch_max = 8\nbatch_delay_us = 200\n" +
		"[[models]]\nname = \"m\"\nversion = \"2\"\npath = \"m.onnx\"\n"
	cfg, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Shards[0]; s.BatchMax != 32 || s.BatchDelayUs != 500 {
		t.Fatalf("shard: %+v", s)
	}
	if s := cfg.Shards[1]; s.BatchMax != DefaultBatchMax || s.BatchDelayUs != 0 {
		t.Fatalf("default shard: %+v", s)
	}
	if m := cfg.Models[0]; m.BatchMax == nil || *m.BatchMax != 8 || m.BatchDelayUs == nil || *m.BatchDelayUs != 200 {
		t.Fatalf("model: %+v", m)
	}
	if m := cfg.Models[1]; m.BatchMax != nil || m.BatchDelayUs != nil {
		t.Fatalf("model without batching keys: %+v", m)
	}
	// The JSON the engine receives carries the keys only where set, and the
	// JSON form takes the same defaults.
	b, err := json.Marshal(cfg.Models[1])
	if err != nil || strings.Contains(string(b), "batch") {
		t.Fatalf("%s %v", b, err)
	}
	var sh Shard
	if err := json.Unmarshal([]byte(`{"name":"x"}`), &sh); err != nil || sh.BatchMax != DefaultBatchMax {
		t.Fatalf("%+v %v", sh, err)
	}
}

func TestAuthDefaultsAndExposure(t *testing.T) {
	cfg, err := Parse("t.toml", []byte("[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.Auth; a.Mode != "tenants" || a.FreshnessWindowMs != 10_000 || a.ReplayEntries != 1<<18 || a.ReplaySenders != 4096 || a.ReplayWindowIDs != 1024 {
		t.Fatalf("auth defaults: %+v", a)
	}
	if s := cfg.Tenants[0].Subjects; len(s) != 1 || s[0] != "*" {
		t.Fatalf("subjects default: %v", s)
	}
	js, _ := cfg.JSON()
	for _, want := range []string{`"auth":{"mode":"tenants","freshness_window_ms":10000,"replay_entries":262144,"replay_senders":4096,"replay_window_ids":1024,"lab":false}`, `"subjects":["*"]`} {
		if !strings.Contains(string(js), want) {
			t.Fatalf("engine JSON lacks %s: %s", want, js)
		}
	}
	var tn Tenant
	if err := json.Unmarshal([]byte(`{"name":"t","id":3,"key":"hex:00"}`), &tn); err != nil || len(tn.Subjects) != 1 {
		t.Fatalf("JSON tenant subjects default: %+v %v", tn, err)
	}
	for _, tc := range []struct {
		src  string
		want string // "" for no warning
	}{
		{"[auth]\nmode = \"none\"\n", ""},
		{"[auth]\nmode = \"none\"\n[io_uring]\nlisten = \"0.0.0.0:7070\"\n", `io_uring.listen = "0.0.0.0:7070", which is not loopback`},
		{"[auth]\nmode = \"none\"\n[io_uring]\nlisten = \"[::1]:7070\"\n", ""},
		{"[io_uring]\nlisten = \"0.0.0.0:7070\"\n", ""},
	} {
		c, err := Parse("t.toml", []byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		got := c.UnauthenticatedExposure()
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Fatalf("%q: exposure %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestErrorsAreTyped(t *testing.T) {
	_, err := Parse("t.toml", []byte("[engine]\nworkers = [0]\nrx_burst_max = 999\nspin_us = -1\n[io_uring]\ntx_buffers = 1024\n"))
	var es Errors
	if !errors.As(err, &es) || len(es) != 2 {
		t.Fatalf("want 2 errors, got %v", err)
	}
	if es[0].Line != 3 || es[0].Key != "engine.rx_burst_max" || es[1].Line != 4 || es[1].Key != "engine.spin_us" {
		t.Fatalf("got %+v %+v", es[0], es[1])
	}
}

func TestArrayTableDefaults(t *testing.T) {
	t.Setenv("SLUICE_TEST_KEY", "000102030405060708090a0b0c0d0e0f")
	cfg, err := Parse("t.toml", []byte("[[shards]]\nname = \"a\"\n[[models]]\nname = \"m\"\nversion = \"1\"\npath = \"m.onnx\"\n"+
		"[[tenants]]\nname = \"t\"\nid = 9\nkey = \"env:SLUICE_TEST_KEY\"\nmodels = [\"m\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := cfg.Shards[0]; s.MaxConcurrency != DefaultMaxConcurrency || s.QueueDepth != DefaultQueueDepth || s.Workers != nil {
		t.Fatalf("shard defaults: %+v", s)
	}
	if cfg.Models[0].Kind != "onnx" {
		t.Fatalf("model kind default: %+v", cfg.Models[0])
	}
	if tn := cfg.Tenants[0]; len(tn.Models) != 1 || tn.Models[0] != "m" || tn.Adapters[0] != "*" || tn.Routes[0] != "*" {
		t.Fatalf("tenant defaults: %+v", tn)
	}
	// The JSON form (API, engine) takes the same defaults and refuses unknown fields.
	var sh Shard
	if err := json.Unmarshal([]byte(`{"name":"b"}`), &sh); err != nil || sh.MaxConcurrency != DefaultMaxConcurrency || sh.QueueDepth != DefaultQueueDepth {
		t.Fatalf("JSON shard: %v %+v", err, sh)
	}
	if err := json.Unmarshal([]byte(`{"name":"b","colour":1}`), &sh); err == nil {
		t.Fatal("unknown JSON field accepted")
	}
	// Clone keeps explicit values.
	if c := cfg.Clone(); c.Tenants[0].Models[0] != "m" || c.Shards[0].QueueDepth != DefaultQueueDepth {
		t.Fatalf("clone: %+v", c)
	}
}

func TestKeyNeverInErrors(t *testing.T) {
	secret := "hex:" + strings.Repeat("ab", 8) + "zz"
	got := parseErr(t, "[[tenants]]\nname = \"t\"\nid = 3\nkey = \""+secret+"\"\n")
	if strings.Contains(got, "abab") {
		t.Fatalf("key material in error: %s", got)
	}
}

func TestLoadErrors(t *testing.T) {
	if _, err := Load(filepath.Join(t.TempDir(), "missing.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	big := filepath.Join(t.TempDir(), "big.toml")
	if err := os.WriteFile(big, make([]byte, FileSizeMax+10), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("big file: %v", err)
	}
}

func TestVersionPatterns(t *testing.T) {
	for _, ok := range []string{"1.0.0", "1", "1.*", "^1.2", ">=1, <2", "~1.4.0", "=2.0.0-rc1", "rc-*", "1.x, <2"} {
		if err := CheckVersionPattern(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{">>1", "^x.y", ">=1, !2", "^", "=v1", " "} {
		if err := CheckVersionPattern(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	set, ok := parseCPUList("0-2,5,7-8")
	if !ok || len(set) != 6 || !set[0] || !set[2] || set[3] || !set[5] || !set[8] {
		t.Fatalf("parsed %v %v", set, ok)
	}
	for _, bad := range []string{"", "a", "3-1", "1,,2", "-1"} {
		if _, ok := parseCPUList(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	if on, _ := OnlineCPUs(); !on[0] {
		t.Fatal("core 0 not online")
	}
}

func TestIsLocalListen(t *testing.T) {
	for l, want := range map[string]bool{
		"127.0.0.1:1": true, "[::1]:1": true, "localhost:1": true, "unix:/run/s.sock": true,
		"0.0.0.0:1": false, "10.0.0.1:1": false, ":7071": false,
	} {
		if IsLocalListen(l) != want {
			t.Errorf("IsLocalListen(%q) != %v", l, want)
		}
	}
}

func TestContentConditions(t *testing.T) {
	for _, ok := range []string{
		`$.intent == "reasoning"`, `$.meta.tier != 3`, `$.flags[0] == true`, `$.x == null`,
		`$["odd key"].y == -1.5e3`, `$ == "whole"`, ` $.a_b-c==false `,
	} {
		if err := CheckContent(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{
		``, `intent == "x"`, `$.intent = "x"`, `$.intent == reasoning`, `$.a == {"b":1}`,
		`$.a == [1]`, `$.a..b == 1`, `$.a.b.c.d.e.f.g.h.i == 1`, `$.a == "unterminated`,
	} {
		if err := CheckContent(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestPeerTransport(t *testing.T) {
	for _, tr := range []string{"", "udp", "rdma"} {
		if is := CheckPeer("peers[0]", Peer{Name: "b", Address: "10.0.0.2:7471", Transport: tr}); len(is) != 0 {
			t.Errorf("transport %q: %v", tr, is)
		}
	}
	is := CheckPeer("peers[0]", Peer{Name: "b", Address: "10.0.0.2:7471", Transport: "tcp"})
	if len(is) != 1 || is[0].Key != "peers[0].transport" {
		t.Fatalf("want one issue at peers[0].transport, got %v", is)
	}
}

// docs/wire.md's example key, as the config writes it, decodes to the
// ASCII bytes the spec signs its example with.
func TestWireExampleKeyInConfigForm(t *testing.T) {
	b, err := os.ReadFile("../../../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`key = "(hex:[0-9a-f]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/wire.md shows no key = \"hex:...\" line")
	}
	key, err := DecodeKey(string(m[1]), func(string) string { return "" })
	if err != nil || string(key) != "sluice-example-key-tenant-7" {
		t.Fatalf("example key decodes to %q, %v", key, err)
	}
}

func TestFrontdoorReachesTheEngine(t *testing.T) {
	src := "[frontdoor]\nhttp_listen = \"127.0.0.1:8000\"\ngrpc_listen = \"127.0.0.1:8001\"\nslots = 8\n" +
		"[[tenants]]\nname = \"t\"\nid = 3\nkey = \"hex:000102030405060708090a0b0c0d0e0f\"\n" +
		"tokens = [\"sha256:" + strings.Repeat("ab", 32) + "\"]\n"
	cfg, err := Parse("t.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	b, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Frontdoor map[string]any `json:"frontdoor"`
		Tenants   []struct {
			Tokens []string `json:"tokens"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Frontdoor["http_listen"] != "127.0.0.1:8000" || doc.Frontdoor["slots"] != float64(8) ||
		doc.Frontdoor["body_timeout_ms"] != float64(10_000) {
		t.Fatalf("frontdoor as the engine gets it: %v", doc.Frontdoor)
	}
	if len(doc.Tenants) != 1 || len(doc.Tenants[0].Tokens) != 1 {
		t.Fatalf("tokens: %+v", doc.Tenants)
	}
	if c := cfg.Clone(); c.Frontdoor.Slots != 8 || len(c.Tenants[0].Tokens) != 1 {
		t.Fatalf("clone: %+v", c.Frontdoor)
	}
}

// A model posted as JSON may write its batching integers as 8.0, as JSON
// Schema counts them; fractions are refused.
func TestModelJSONBatchIntegers(t *testing.T) {
	var m Model
	if err := json.Unmarshal([]byte(`{"name":"m","version":"1","path":"m.onnx","batch_max":8.0,"batch_delay_us":200}`), &m); err != nil {
		t.Fatal(err)
	}
	if m.BatchMax == nil || *m.BatchMax != 8 || m.BatchDelayUs == nil || *m.BatchDelayUs != 200 || m.Kind != DefaultModelKind {
		t.Fatalf("%+v", m)
	}
	if err := json.Unmarshal([]byte(`{"name":"m","version":"1","batch_max":8.5}`), &m); err == nil {
		t.Fatal("batch_max 8.5 accepted")
	}
	if err := json.Unmarshal([]byte(`{"name":"m","version":"1","colour":1}`), &m); err == nil {
		t.Fatal("unknown field accepted")
	}
}

// manyContentRoutes are n routes, each with a content condition on its own
// member (one trie node each).
func manyContentRoutes(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "[[routes]]\nname = \"r%d\"\nshard = \"s\"\ncontent = ['$.f%d == 1']\n", i, i)
	}
	return b.String()
}

// A published key is refused only where other hosts can reach the
// appliance, and a lab host may say so.
func TestPublishedKeysOnLoopbackOrLab(t *testing.T) {
	demo := "[[tenants]]\nname = \"demo\"\nid = 1\nkey = \"hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030\"\n"
	for name, src := range map[string]string{
		"loopback":     "[io_uring]\nlisten = \"127.0.0.1:7070\"\n" + demo,
		"lab on a NIC": "[engine]\ntransport = \"dpdk\"\n[auth]\nlab = true\n" + demo,
	} {
		if _, err := Parse("t.toml", []byte(src)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Parse("t.toml", []byte("[io_uring]\nlisten = \"0.0.0.0:7070\"\n"+demo)); err == nil ||
		!strings.Contains(err.Error(), "io_uring.listen = \"0.0.0.0:7070\" is reachable from other hosts") {
		t.Errorf("0.0.0.0 with the demo key: %v", err)
	}
}
