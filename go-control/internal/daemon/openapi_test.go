package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
)

// The OpenAPI document and the daemon agree: every admin route is
// documented, and every documented operation (admin and registry) is served.
func TestOpenAPIMatchesTheRoutes(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for path, ops := range doc.Paths {
		for m := range ops {
			documented[strings.ToUpper(m)+" "+path] = true
		}
	}
	for _, rt := range r.d.routeTable() {
		if !documented[rt.pattern] {
			t.Errorf("%s is served but not in openapi.json", rt.pattern)
		}
	}
	// Each documented operation reaches a handler: not the JSON miss of the
	// admin mux nor the registry's own 404/405 for unknown routes.
	h := r.d.Handler()
	param := regexp.MustCompile(`\{[^}]+\}`)
	var ops []string
	for op := range documented {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	for _, op := range ops {
		method, path, _ := strings.Cut(op, " ")
		if method == "DELETE" && !strings.HasPrefix(path, "/registry") {
			// Served by table (checked above); sending it would change state.
			continue
		}
		req := httptest.NewRequest(method, param.ReplaceAllString(path, "1"), strings.NewReader("{}"))
		req.Host = "127.0.0.1" // not httptest's example.com: the guard refuses it on loopback
		req.Header.Set("Content-Type", bodyTypeOf(path))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var e api.Error
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		// A 404 for an unknown resource (GET /v1/models/1) is served: the
		// admin mux's miss says "no such path".
		miss := rec.Code == http.StatusNotFound && e.Code == api.CodeNotFound && strings.HasPrefix(e.Message, "no such path")
		if rec.Code == http.StatusMethodNotAllowed || miss {
			t.Errorf("%s is documented but not served: %d %s", op, rec.Code, rec.Body.Bytes())
		}
	}
}
