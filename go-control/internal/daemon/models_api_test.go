package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// modelMetaDoc is the part of GET /v1/models/{name} these tests read.
type modelMetaDoc struct {
	Name     string `json:"name"`
	Versions []struct {
		Version  string   `json:"version"`
		Aliases  []string `json:"aliases"`
		Kind     string   `json:"kind"`
		Platform string   `json:"platform"`
		Inputs   []any    `json:"inputs"`
		Outputs  []any    `json:"outputs"`
	} `json:"versions"`
}

func TestModelMeta(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))

	code, b := r.do("GET", "/v1/models/mlp", "")
	if code != http.StatusOK {
		t.Fatalf("GET /v1/models/mlp: status %d: %s", code, b)
	}
	doc := decodeAs[modelMetaDoc](t, b)
	if doc.Name != "mlp" || len(doc.Versions) != 1 {
		t.Fatalf("doc: %s", b)
	}
	v := doc.Versions[0]
	if v.Version != "1.0.0" || v.Kind != "onnx" || len(v.Aliases) != 1 || v.Aliases[0] != "1" {
		t.Fatalf("version: %+v", v)
	}
	// Inputs and outputs are lists (empty on the fake), never null: clients
	// iterate them without a nil check.
	if v.Inputs == nil || v.Outputs == nil {
		t.Fatalf("inputs/outputs must be JSON arrays: %s", b)
	}

	// A version loaded through the API and an alias moved to it show up.
	r.must("POST", "/v1/models", `{"name":"mlp","version":"2.0.0","kind":"null"}`, 201)
	r.must("PUT", "/v1/models/mlp/aliases/1", `{"version":"2.0.0"}`, 200)
	doc = decodeAs[modelMetaDoc](t, r.must("GET", "/v1/models/mlp", "", 200))
	if len(doc.Versions) != 2 {
		t.Fatalf("versions after load: %+v", doc)
	}
	for _, v := range doc.Versions {
		hasAlias := len(v.Aliases) == 1 && v.Aliases[0] == "1"
		if (v.Version == "2.0.0") != hasAlias {
			t.Fatalf("alias not moved to 2.0.0: %+v", doc)
		}
	}

	// Other models are not mixed in.
	doc = decodeAs[modelMetaDoc](t, r.must("GET", "/v1/models/echo", "", 200))
	if doc.Name != "echo" || len(doc.Versions) != 1 || doc.Versions[0].Kind != "echo" {
		t.Fatalf("echo: %+v", doc)
	}

	e := r.apiErr("GET", "/v1/models/nope", "", 404, "not_found")
	if !strings.Contains(e.Message, "nope") {
		t.Fatalf("404 message does not name the model: %q", e.Message)
	}
}

func TestModelMetaContentType(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	resp, err := r.http.Get(r.base + "/v1/models/mlp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q", ct)
	}
	var v map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("body is not JSON: %v", err)
	}
}

// plainEngine is an engine that cannot describe models: it has only the
// Engine methods (none of which the handler calls).
type plainEngine struct{ engine.Engine }

func TestModelMetaUnsupportedEngine(t *testing.T) {
	d := &Daemon{eng: plainEngine{}}
	req := httptest.NewRequest("GET", "/v1/models/mlp", nil)
	req.SetPathValue("name", "mlp")
	w := httptest.NewRecorder()
	d.modelMeta(w, req)
	if w.Code != http.StatusNotImplemented {
		t.Fatalf("status %d, want 501: %s", w.Code, w.Body)
	}
	var e api.Error
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || e.Code != "unsupported" || e.Message == "" || e.ErrorCode != 501 {
		t.Fatalf("error body %s", w.Body)
	}
}
