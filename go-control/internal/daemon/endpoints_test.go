package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// backendsConfig is the test config with one pool of two endpoints.
func backendsConfig(t *testing.T, dir string) string {
	return testConfig(t, dir, `http_listen = ""`, `http_listen = "127.0.0.1:8000"`) +
		"\n[[backends]]\nname = \"llama\"\nprotocol = \"openai\"\nendpoints = [\"http://127.0.0.1:8101\", \"http://127.0.0.1:8102\"]\n"
}

// endpoints renders the fake's endpoints of pool as "url" or "url (draining)".
func endpoints(f *enginetest.Fake, pool string) string {
	var out []string
	for _, e := range f.Endpoints(pool) {
		s := strings.TrimPrefix(e.URL, "http://127.0.0.1:")
		if e.Draining {
			s += " (draining)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

const (
	ep1 = "http://127.0.0.1:8101"
	ep2 = "http://127.0.0.1:8102"
	ep3 = "http://127.0.0.1:8103"
)

func body(u string) string { return fmt.Sprintf(`{"url":%q}`, u) }

func TestEndpointsAPI(t *testing.T) {
	dir := t.TempDir()
	r := start(t, dir, backendsConfig(t, dir))
	doc := decodeAs[engine.BackendsStatus](t, r.must("GET", "/v1/backends", "", 200))
	if len(doc.Pools) != 1 || doc.Pools[0].Name != "llama" || len(doc.Pools[0].Endpoints) != 2 {
		t.Fatalf("GET /v1/backends: %+v", doc)
	}

	// Add, and the refusals.
	op := decodeAs[engine.EndpointOp](t, r.must("POST", "/v1/backends/llama/endpoints", body(ep3), 201))
	if op != (engine.EndpointOp{Pool: "llama", URL: ep3, Action: engine.EndpointAdd}) || endpoints(r.fake, "llama") != "8101, 8102, 8103" {
		t.Fatalf("add: %+v; %s", op, endpoints(r.fake, "llama"))
	}
	r.apiErr("POST", "/v1/backends/llama/endpoints", body(ep3), 409, "already_exists")
	r.apiErr("POST", "/v1/backends/llama/endpoints", body(ep1), 409, "already_exists")
	r.apiErr("POST", "/v1/backends/nope/endpoints", body(ep3), 404, "not_found")
	for _, bad := range []string{"http://127.0.0.1:8104/v1", "127.0.0.1:8104", "HTTP://127.0.0.1:8104", "http://127.0.0.1", "http://h:1" + strings.Repeat("0", 300)} {
		r.apiErr("POST", "/v1/backends/llama/endpoints", body(bad), 400, "invalid_argument")
	}
	r.apiErr("POST", "/v1/backends/llama/endpoints", `{}`, 400, "invalid_argument")
	r.apiErr("POST", "/v1/backends/llama/endpoints", `{"url":"http://127.0.0.1:8104","weight":2}`, 400, "invalid_argument")

	// Drain and undrain.
	r.must("POST", "/v1/backends/llama/endpoints/drain", body(ep1), 200)
	if got := endpoints(r.fake, "llama"); got != "8101 (draining), 8102, 8103" {
		t.Fatalf("drain: %s", got)
	}
	if doc := decodeAs[engine.BackendsStatus](t, r.must("GET", "/v1/backends", "", 200)); !doc.Pools[0].Endpoints[0].Draining {
		t.Fatalf("GET /v1/backends after drain: %+v", doc.Pools[0].Endpoints)
	}
	r.apiErr("POST", "/v1/backends/llama/endpoints/drain", body("http://127.0.0.1:8109"), 404, "not_found")
	r.apiErr("POST", "/v1/backends/nope/endpoints/undrain", body(ep1), 404, "not_found")
	r.must("POST", "/v1/backends/llama/endpoints/undrain", body(ep1), 200)
	if got := endpoints(r.fake, "llama"); got != "8101, 8102, 8103" {
		t.Fatalf("undrain: %s", got)
	}

	// Remove.
	r.must("DELETE", "/v1/backends/llama/endpoints?url="+url.QueryEscape(ep2), "", 204)
	r.apiErr("DELETE", "/v1/backends/llama/endpoints?url="+url.QueryEscape(ep2), "", 404, "not_found")
	r.apiErr("DELETE", "/v1/backends/llama/endpoints", "", 400, "invalid_argument")
	r.apiErr("DELETE", "/v1/backends/nope/endpoints?url="+url.QueryEscape(ep1), "", 404, "not_found")
	if got := endpoints(r.fake, "llama"); got != "8101, 8103" {
		t.Fatalf("remove: %s", got)
	}

	// Kept across a reload and a restart: 8101 (the file's) draining, 8102
	// (the file's) removed, 8103 (added) draining.
	r.must("POST", "/v1/backends/llama/endpoints/drain", body(ep1), 200)
	r.must("POST", "/v1/backends/llama/endpoints/drain", body(ep3), 200)
	if res := decodeAs[map[string][]string](t, r.must("POST", "/v1/reload", "", 200)); len(res["applied"]) != 0 {
		t.Fatalf("reload changed the engine: %v", res)
	}
	r.shutdown()
	r2 := start(t, dir, backendsConfig(t, dir))
	if got := endpoints(r2.fake, "llama"); got != "8101 (draining), 8103 (draining)" {
		t.Fatalf("after restart: %s", got)
	}
	// Back to the file's: no record is left.
	r2.must("POST", "/v1/backends/llama/endpoints", body(ep2), 201)
	r2.must("POST", "/v1/backends/llama/endpoints/undrain", body(ep1), 200)
	r2.must("DELETE", "/v1/backends/llama/endpoints?url="+url.QueryEscape(ep3), "", 204)
	if es, err := r2.d.state.st.List(prefixEndpoint); err != nil || len(es) != 0 {
		t.Fatalf("records left: %v %v", es, err)
	}
	if got := endpoints(r2.fake, "llama"); got != "8101, 8102" {
		t.Fatalf("back to the file: %s", got)
	}
	// Without [[backends]]: no pools, and every change is not_found.
	r3 := start(t, t.TempDir(), testConfig(t, ""))
	if b := string(r3.must("GET", "/v1/backends", "", 200)); strings.TrimSpace(b) != `{"pools":[],"models":{}}` {
		t.Fatalf("no backends: %s", b)
	}
	r3.apiErr("POST", "/v1/backends/llama/endpoints", body(ep3), 404, "not_found")
}

// A change the store does not take is undone in the engine.
func TestEndpointStoreFailureSetsTheEngineBack(t *testing.T) {
	dir := t.TempDir()
	cfg, err := config.Parse("sluice.toml", []byte(backendsConfig(t, dir)))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := cfg.JSON()
	fake, err := enginetest.NewFake(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	bolt, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	s := &state{log: slog.New(slog.NewTextHandler(io.Discard, nil)), eng: fake, st: brokenStore{bolt},
		file: cfg, eff: cfg.Clone(), started: time.Now()}
	ctx := context.Background()
	for _, op := range []engine.EndpointOp{
		{Pool: "llama", URL: ep3, Action: engine.EndpointAdd},
		{Pool: "llama", URL: ep1, Action: engine.EndpointDrain},
		{Pool: "llama", URL: ep2, Action: engine.EndpointRemove},
	} {
		if err := s.endpointOp(ctx, op); !errors.Is(err, errs.ErrIO) {
			t.Fatalf("%s: %v", op.Action, err)
		}
		if got := endpoints(fake, "llama"); got != "8101, 8102" {
			t.Fatalf("%s not undone: %s", op.Action, got)
		}
	}
}

func eop(pool, url string, a engine.EndpointAction) engine.EndpointOp {
	return engine.EndpointOp{Pool: pool, URL: url, Action: a}
}

// The overlay: what each change stores, and what the engine then serves.
func TestEndpointOverlay(t *testing.T) {
	base := []config.Backend{{Name: "llama", Endpoints: []string{ep1, ep2}}, {Name: "kserve", Endpoints: []string{"http://h:1"}}}
	var recs []endpointRec
	apply := func(op engine.EndpointOp) error {
		w, err := endpointEdit(base, recs, op)
		if err != nil {
			return err
		}
		recs = slices.DeleteFunc(recs, func(r endpointRec) bool { return endpointKey(r.Pool, r.URL) == w.Key })
		if !w.Delete {
			var r endpointRec
			if err := json.Unmarshal(w.Value, &r); err != nil {
				t.Fatal(err)
			}
			recs = append(recs, r)
		}
		return nil
	}
	served := func() string {
		order, draining := effectiveEndpoints(base, recs)
		var out []string
		for _, k := range order {
			s := k.pool + " " + k.url
			if draining[k] {
				s += " (draining)"
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	for _, c := range []struct {
		op      engine.EndpointOp
		err     error
		served  string
		records int
	}{
		{eop("llama", ep3, engine.EndpointAdd), nil, "llama " + ep1 + ", llama " + ep2 + ", llama " + ep3 + ", kserve http://h:1", 1},
		{eop("llama", ep3, engine.EndpointAdd), errs.ErrAlreadyExists, "", 1},
		{eop("nope", ep3, engine.EndpointAdd), errs.ErrNotFound, "", 1},
		{eop("kserve", ep3, engine.EndpointDrain), errs.ErrNotFound, "", 1},
		{eop("llama", ep3, engine.EndpointDrain), nil, "llama " + ep1 + ", llama " + ep2 + ", llama " + ep3 + " (draining), kserve http://h:1", 1},
		{eop("llama", ep1, engine.EndpointDrain), nil, "llama " + ep1 + " (draining), llama " + ep2 + ", llama " + ep3 + " (draining), kserve http://h:1", 2},
		{eop("llama", ep1, engine.EndpointRemove), nil, "llama " + ep2 + ", llama " + ep3 + " (draining), kserve http://h:1", 2},
		{eop("llama", ep1, engine.EndpointUndrain), errs.ErrNotFound, "", 2},
		{eop("llama", ep1, engine.EndpointAdd), nil, "llama " + ep1 + ", llama " + ep2 + ", llama " + ep3 + " (draining), kserve http://h:1", 1},
		{eop("llama", ep3, engine.EndpointUndrain), nil, "llama " + ep1 + ", llama " + ep2 + ", llama " + ep3 + ", kserve http://h:1", 1},
		{eop("llama", ep3, engine.EndpointRemove), nil, "llama " + ep1 + ", llama " + ep2 + ", kserve http://h:1", 0},
		{eop("llama", ep3, "explode"), errs.ErrNotFound, "", 0},
		{eop("llama", ep1, "explode"), errs.ErrInvalidArgument, "", 0},
	} {
		err := apply(c.op)
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Fatalf("%+v: %v, want %v", c.op, err, c.err)
			}
			continue
		}
		if err != nil || served() != c.served || len(recs) != c.records {
			t.Fatalf("%+v: %v\nserved %s\nwant   %s\n%d records %+v", c.op, err, served(), c.served, len(recs), recs)
		}
	}
	// A pool of 64 takes no more.
	for i := 2; i < config.BackendEndpointsMax; i++ {
		if err := apply(eop("llama", fmt.Sprintf("http://10.0.0.%d:80", i), engine.EndpointAdd)); err != nil {
			t.Fatal(err)
		}
	}
	if err := apply(eop("llama", ep3, engine.EndpointAdd)); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("full pool: %v", err)
	}
	// Records of a pool this appliance lacks are left out.
	recs = append(recs, endpointRec{"gone", ep1, endpointAdded})
	if order, _ := effectiveEndpoints(base, recs); slices.Contains(order, epKey{"gone", ep1}) {
		t.Fatal("a record of an unknown pool is served")
	}
	if k := endpointKey(strings.Repeat("p", 64), "http://"+strings.Repeat("h", 240)+":1"); store.CheckKey(k) != nil {
		t.Fatalf("key %q", k)
	}
}
