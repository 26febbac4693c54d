package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/fdsign"
	"github.com/sluice-ai/sluice/go-control/internal/jobs"
)

// The seed's program against the jobs ingress as sluiced runs it with a
// config like cfg/backends.toml: a nats-server in process, the ingress, and
// a stand-in for the appliance's OpenAI front door that checks what it
// gets (the body as published, the two headers, the signature) and
// answers with a completion. The real front door and backends are the
// engine's, tested on the Rust side.

const key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

const cfgTOML = `
[engine]
workers = [0]
[frontdoor]
http_listen = "%s"
[[tenants]]
name = "demo"
id = 1
key = "hex:` + key + `"
[[backends]]
name = "llama"
protocol = "openai"
endpoints = ["http://127.0.0.1:8101"]
[[models]]
name = "qwen3-72b"
version = "1"
kind = "backend"
upstream = "gemma-3-270m"
[openai]
default_versions = { "qwen3-72b" = "1" }
[fleet]
servers = ["%s"]
[[jobs.streams]]
stream = "ai-inference"
subjects = ["inference.>"]
filter_subjects = ["inference.*"]
tenant = "demo"
models = { llm = "qwen3-72b" }
`

const completion = `{"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"gemma-3-270m",` +
	`"choices":[{"text":" Two particles share one quantum state.","index":0,"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":4,"completion_tokens":8,"total_tokens":12}}`

// host is the daemon as the ingress sees it.
type host struct {
	cfg *config.Config
	fd  string
}

func (h *host) EngineListen() (string, error)  { return "127.0.0.1:9", nil } // never used: no job goes there
func (h *host) FrontdoorHTTP() (string, error) { return h.fd, nil }
func (h *host) ModelKind(n, v string) string   { return h.cfg.ModelKind(n, v) }
func (h *host) Tenant(name string, id int64) (config.Tenant, bool) {
	for _, t := range h.cfg.Tenants {
		if (name != "" && t.Name == name) || (name == "" && t.ID == id) {
			return t, true
		}
	}
	return config.Tenant{}, false
}

func TestSeedProgramGetsItsCompletion(t *testing.T) {
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)

	keyBytes := make([]byte, 32)
	for i := range keyBytes {
		keyBytes[i] = byte(i)
	}
	var mu sync.Mutex
	var got []string
	fd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ok := fdsign.Verify(keyBytes, r.Header.Get("Authorization"), fdsign.Signed{Method: r.Method, Path: r.URL.Path,
			ModelVersion: r.Header.Get("X-Model-Version"), Intent: r.Header.Get("X-AI-Intent")}, body)
		mu.Lock()
		got = append(got, fmt.Sprintf("%s %s %s intent=%s version=%q signed=%v", r.Method, r.URL.Path, body,
			r.Header.Get("X-AI-Intent"), r.Header.Get("X-Model-Version"), ok))
		mu.Unlock()
		if !ok {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set(jobs.HeaderResultVersion, "1")
		_, _ = io.WriteString(w, completion)
	}))
	t.Cleanup(fd.Close)
	addr := strings.TrimPrefix(fd.URL, "http://")

	cfg, err := config.Parse("backends.toml", []byte(fmt.Sprintf(cfgTOML, addr, srv.ClientURL())))
	if err != nil {
		t.Fatal(err)
	}
	in, err := jobs.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := in.Start(&host{cfg: cfg, fd: addr}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Drain(ctx)
	})

	var out bytes.Buffer
	if err := run(srv.ClientURL(), 15*time.Second, &out); err != nil {
		t.Fatalf("%v\n%s\nstatus %+v", err, out.Bytes(), in.Status())
	}
	var l Line
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatalf("%v: %s", err, out.Bytes())
	}
	if l.RequestID != "ai-inference:1" || l.Kind != "result" || l.Status != "ok" || l.Model != "qwen3-72b" || l.Version != "1" || string(l.Result) != completion {
		t.Fatalf("printed %s", out.Bytes())
	}
	mu.Lock()
	defer mu.Unlock()
	want := `POST /v1/completions {"prompt":"Explain quantum entanglement","model":"qwen3-72b"} intent=reasoning version="" signed=true`
	if len(got) != 1 || got[0] != want {
		t.Fatalf("the front door got %q, want %q", got, want)
	}
}
