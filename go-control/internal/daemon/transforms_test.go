package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// component is the smallest byte string the fake takes for a component
// (magic, version 0x0d, layer 1); the real checks are the Rust engine's.
const component = "\x00asm\x0d\x00\x01\x00"

// registerChat registers two versions of subject chat and waits until the
// engine has them.
func registerChat(t *testing.T, r *running) {
	t.Helper()
	r.must("PUT", "/registry/config/chat", `{"compatibility":"NONE"}`, 200)
	r.must("POST", "/registry/subjects/chat/versions", `{"schemaType":"JSON","schema":"{\"type\":\"object\"}"}`, 200)
	r.must("POST", "/registry/subjects/chat/versions", `{"schemaType":"JSON","schema":"{\"type\":\"object\",\"required\":[\"a\"]}"}`, 200)
	waitFor(t, func() bool { return len(r.fake.Schemas()) == 2 })
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTransforms(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	if b := r.must("GET", "/v1/transforms", "", 200); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("no transforms: %s", b)
	}
	registerChat(t, r)
	put := decodeAs[api.TransformPut](t, r.must("PUT", "/v1/transforms/chat/1/2", component, 200))
	if put.Subject != "chat" || put.From != 1 || put.To != 2 || put.Bytes != len(component) || put.Epoch == 0 {
		t.Fatalf("put: %+v", put)
	}
	ts := decodeAs[[]engine.TransformStatus](t, r.must("GET", "/v1/transforms", "", 200))
	if len(ts) != 1 || ts[0].Subject != "chat" || ts[0].From != 1 || ts[0].To != 2 || ts[0].Digest == "" {
		t.Fatalf("transforms: %+v", ts)
	}
	// Refusals name what is wrong.
	if m := string(r.must("GET", "/metrics", "", 200)); !strings.Contains(m, `sluice_transform_calls_total{from="1",outcome="ok",subject="chat",to="2"} 0`) {
		t.Fatalf("metrics lack the transform:\n%s", m)
	}
	e := r.apiErr("PUT", "/v1/transforms/chat/2/1", "\x00asm\x01\x00\x00\x00", 400, "invalid_argument")
	if !strings.Contains(e.Message, "component") {
		t.Fatalf("core module refusal: %s", e.Message)
	}
	r.apiErr("PUT", "/v1/transforms/chat/1/9", component, 404, "not_found")
	r.apiErr("PUT", "/v1/transforms/chat/x/2", component, 400, "invalid_argument")
	r.apiErr("PUT", "/v1/transforms/chat/0/2", component, 400, "invalid_argument")
	big := strings.Repeat("\x00", TransformBytesMax+1)
	r.apiErr("PUT", "/v1/transforms/chat/1/2", big, 413, api.CodeTooLarge)

	r.must("DELETE", "/v1/transforms/chat/1/2", "", 204)
	r.apiErr("DELETE", "/v1/transforms/chat/1/2", "", 404, "not_found")
	if ts, _ := r.fake.Transforms(); len(ts) != 0 {
		t.Fatalf("after delete: %+v", ts)
	}
}

// An engine built without the `wasm` feature refuses a PUT as unsupported
// (501) with its reason, and nothing is stored or listed.
func TestTransformsWithoutTheFeature(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	registerChat(t, r)
	r.fake.WithoutTransforms("schema transforms are not in this build: the engine was built without its `wasm` feature")
	e := r.apiErr("PUT", "/v1/transforms/chat/1/2", component, 501, "unsupported")
	if !strings.Contains(e.Message, "`wasm` feature") {
		t.Fatalf("refusal does not name the feature: %s", e.Message)
	}
	if b := r.must("GET", "/v1/transforms", "", 200); strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("listed after a refused PUT: %s", b)
	}
}

func TestTransformsPersistAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	src := testConfig(t, dir)
	r := start(t, dir, src)
	registerChat(t, r)
	r.must("PUT", "/v1/transforms/chat/1/2", component, 200)
	r.must("PUT", "/v1/transforms/chat/2/1", component, 200)
	r.must("DELETE", "/v1/transforms/chat/2/1", "", 204)
	r.shutdown()

	r2 := start(t, dir, src)
	waitFor(t, func() bool { ts, _ := r2.fake.Transforms(); return len(ts) == 1 })
	ts, _ := r2.fake.Transforms()
	if ts[0].From != 1 || ts[0].To != 2 || ts[0].Bytes != len(component) {
		t.Fatalf("after restart: %+v", ts)
	}
}
