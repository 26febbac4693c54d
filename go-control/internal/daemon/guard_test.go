package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/api"
	"github.com/sluice-ai/sluice/go-control/registry"
)

// guarded sends one request through a guard for listen and reports the
// status and, for a refusal, the error body's code.
func guarded(t *testing.T, listen string, n *refusals, method, target, body string, hdr ...string) (int, string) {
	t.Helper()
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	var req *http.Request
	if body == "" {
		req = httptest.NewRequest(method, target, nil)
	} else {
		req = httptest.NewRequest(method, target, strings.NewReader(body))
	}
	req.Host = "127.0.0.1:7071"
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	newGuard(listen, n, ok).ServeHTTP(rec, req)
	if rec.Code == http.StatusNoContent {
		return rec.Code, ""
	}
	var e api.Error
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.ErrorCode != rec.Code || e.Message == "" {
		t.Fatalf("%s %s: refusal body %s", method, target, rec.Body)
	}
	return rec.Code, e.Code
}

func TestGuardHost(t *testing.T) {
	n := &refusals{}
	for _, host := range []string{"localhost:7071", "LOCALHOST:9000", "127.0.0.1:7071", "127.0.0.1", "[::1]:7071", "[::1]",
		"127.0.0.2:7071", "app.localhost:7071", "localhost.:7071", ""} {
		if code, _ := guarded(t, "127.0.0.1:7071", n, "GET", "/v1/status", "", "Host", host); code != http.StatusNoContent {
			t.Errorf("Host %q refused: %d", host, code)
		}
	}
	// DNS rebinding: a page of evil.example whose name now resolves to
	// 127.0.0.1 reads or writes with its own name in Host.
	for _, host := range []string{"evil.example:7071", "evil.example", "localhost.evil.example:7071", "10.0.0.1:7071", "[::2]:7071"} {
		code, c := guarded(t, "127.0.0.1:7071", n, "GET", "/v1/status", "", "Host", host)
		if code != http.StatusMisdirectedRequest || c != api.CodeMisdirectedHost {
			t.Errorf("Host %q: %d %s, want 421 %s", host, code, c, api.CodeMisdirectedHost)
		}
	}
	if got := n.get(refusedHost); got != 5 {
		t.Errorf("host refusals counted %d, want 5", got)
	}
	// Listening on localhost or [::1] is loopback too.
	if code, _ := guarded(t, "localhost:7071", n, "GET", "/v1/status", "", "Host", "evil.example"); code != http.StatusMisdirectedRequest {
		t.Errorf("localhost listener: %d", code)
	}
	if code, _ := guarded(t, "[::1]:7071", n, "GET", "/v1/status", "", "Host", "[::1]:7071"); code != http.StatusNoContent {
		t.Errorf("[::1] listener: %d", code)
	}
	// Off loopback the token guards and any name may reach the host; a
	// unix socket is out of a browser's reach.
	for _, listen := range []string{"0.0.0.0:7071", "10.1.2.3:7071", "unix:/run/sluice/admin.sock"} {
		if code, _ := guarded(t, listen, n, "GET", "/v1/status", "", "Host", "sluice-7.example:7071"); code != http.StatusNoContent {
			t.Errorf("%s: Host checked: %d", listen, code)
		}
	}
}

func TestGuardOrigin(t *testing.T) {
	n := &refusals{}
	const routes = `[{"name":"all","shard":"s"}]`
	cases := []struct {
		name   string
		method string
		hdr    []string
		want   int
	}{
		{"no Origin (curl, sluicectl)", "PUT", nil, http.StatusNoContent},
		{"same origin (the heatmap page)", "PUT", []string{"Origin", "http://127.0.0.1:7071"}, http.StatusNoContent},
		{"same origin, fetch metadata", "PUT", []string{"Origin", "http://127.0.0.1:7071", "Sec-Fetch-Site", "same-origin"}, http.StatusNoContent},
		{"foreign Origin", "PUT", []string{"Origin", "https://evil.example"}, http.StatusForbidden},
		{"foreign Origin, another port of localhost", "PUT", []string{"Origin", "http://127.0.0.1:8080"}, http.StatusForbidden},
		{"opaque Origin", "PUT", []string{"Origin", "null"}, http.StatusForbidden},
		{"cross-site fetch metadata", "PUT", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"a foreign read is no write", "GET", []string{"Origin", "https://evil.example"}, http.StatusNoContent},
	}
	refused := uint64(0)
	for _, c := range cases {
		body := routes
		if c.method == "GET" {
			body = ""
		}
		hdr := append([]string{"Content-Type", "application/json"}, c.hdr...)
		code, e := guarded(t, "127.0.0.1:7071", n, c.method, "/v1/routes", body, hdr...)
		if code != c.want || (code == http.StatusForbidden && e != api.CodeCrossOrigin) {
			t.Errorf("%s: %d %s, want %d", c.name, code, e, c.want)
		}
		if code == http.StatusForbidden {
			refused++
		}
	}
	if n.get(refusedOrigin) != refused {
		t.Errorf("origin refusals counted %d, want %d", n.get(refusedOrigin), refused)
	}
	// A form post from another site, no body: refused by its Origin alone.
	if code, _ := guarded(t, "127.0.0.1:7071", n, "POST", "/v1/reload", "", "Origin", "https://evil.example"); code != http.StatusForbidden {
		t.Errorf("bodiless cross-site POST: %d", code)
	}
}

func TestGuardContentType(t *testing.T) {
	n := &refusals{}
	for _, c := range []struct {
		method, path, ct string
		want             int
	}{
		{"POST", "/v1/models", "application/json", http.StatusNoContent},
		{"POST", "/v1/models", "application/json; charset=utf-8", http.StatusNoContent},
		{"POST", "/registry/subjects/s/versions", "application/vnd.schemaregistry.v1+json", http.StatusNoContent},
		{"POST", "/registry/subjects/s/versions", "application/vnd.schemaregistry+json", http.StatusNoContent},
		{"PUT", "/v1/transforms/s/1/2", "application/wasm", http.StatusNoContent},
		{"PUT", "/v1/transforms/s/1/2", "application/octet-stream", http.StatusNoContent},
		{"POST", "/v1/models", "text/plain", http.StatusUnsupportedMediaType},
		{"POST", "/v1/models", "text/plain; charset=utf-8", http.StatusUnsupportedMediaType},
		{"POST", "/v1/models", "application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		{"POST", "/v1/models", "multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		{"PUT", "/v1/routes", "", http.StatusUnsupportedMediaType},
		{"PATCH", "/v1/routes", "bad/type/", http.StatusUnsupportedMediaType},
		{"POST", "/registry/subjects/s/versions", "text/plain", http.StatusUnsupportedMediaType},
		{"PUT", "/v1/transforms/s/1/2", "application/json", http.StatusUnsupportedMediaType},
		{"PUT", "/v1/transforms/s/1/2", "text/plain", http.StatusUnsupportedMediaType},
	} {
		code, e := guarded(t, "127.0.0.1:7071", n, c.method, c.path, `{"x":1}`, "Content-Type", c.ct)
		if code != c.want || (code == http.StatusUnsupportedMediaType && e != api.CodeUnsupportedMediaType) {
			t.Errorf("%s %s %q: %d %s, want %d", c.method, c.path, c.ct, code, e, c.want)
		}
	}
	if got := n.get(refusedContentType); got != 9 {
		t.Errorf("content-type refusals counted %d, want 9", got)
	}
	// Without a body there is nothing to type: POST /v1/reload, DELETE.
	for _, m := range []string{"POST", "DELETE"} {
		if code, _ := guarded(t, "127.0.0.1:7071", n, m, "/v1/reload", ""); code != http.StatusNoContent {
			t.Errorf("bodiless %s: %d", m, code)
		}
	}
}

// Through the served daemon: sluicectl's and the registry clients'
// headers pass, a browser's cross-site write and a rebound Host do not,
// and /metrics counts the refusals.
func TestGuardServed(t *testing.T) {
	r := start(t, t.TempDir(), testConfig(t, ""))
	schema := `{"schema":"{\"type\":\"string\"}"}`
	if code, b := r.do("POST", "/registry/subjects/g-value/versions", schema, "Content-Type", "application/vnd.schemaregistry.v1+json"); code != 200 {
		t.Fatalf("registry POST, Confluent's type: %d %s", code, b)
	}
	if code, b, h := r.doHeaders("POST", "/registry/subjects/g-value/versions", schema, "Content-Type", "text/plain"); code != 415 ||
		h.Get("Content-Type") != registry.ContentType || !strings.Contains(b, `"code":"unsupported_media_type"`) {
		t.Fatalf("registry POST, text/plain: %d %s %v", code, b, h)
	}
	if code, b := r.do("POST", "/v1/reload", ""); code != 200 {
		t.Fatalf("reload, no body, no Origin: %d %s", code, b)
	}
	if code, b := r.do("POST", "/v1/reload", "", "Origin", "https://evil.example"); code != 403 {
		t.Fatalf("reload from another site: %d %s", code, b)
	}
	req, _ := http.NewRequest("GET", r.base+"/v1/status", nil)
	req.Host = "rebound.evil.example:7071"
	resp, err := r.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("rebound Host: %d", resp.StatusCode)
	}
	m := string(r.must("GET", "/metrics", "", 200))
	for _, line := range []string{`sluice_admin_requests_refused_total{cause="content_type"} 1`, `sluice_admin_requests_refused_total{cause="origin"} 1`,
		`sluice_admin_requests_refused_total{cause="host"} 1`, `sluice_admin_requests_refused_total{cause="unauthorized"} 0`} {
		if !strings.Contains(m, line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
