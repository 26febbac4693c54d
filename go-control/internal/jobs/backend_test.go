package jobs

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/fdsign"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// Jobs for models served by backends, against a stand-in OpenAI front
// door (an httptest server) that checks the Sluice-HMAC-v2 signature with
// tenant demo's key as the real one does, records what it got and answers
// by the request's prompt:
//
//	ok:        200, a text_completion naming the model, X-Sluice-Model-Version: 1
//	missing:   404, OpenAI's error body (code model_not_found)
//	limited:   429 on the first call, then as ok
//	garbage:   200 with a body that is not JSON
//	slow:      as ok after slowFor
type fakeFrontdoor struct {
	t   *testing.T
	srv *httptest.Server

	mu      sync.Mutex
	seen    []seenRequest
	calls   map[string]int // by prompt
	slowFor time.Duration
}

type seenRequest struct {
	path   string
	header http.Header
	body   []byte
	signed bool // the signature verified
}

// The front door's completion, byte for byte as the result must hold it.
func completionFor(model string) string {
	return `{"id":"cmpl-7","object":"text_completion","created":1700000000,"model":"` + model +
		`","choices":[{"text":" Two particles share one state.","index":0,"logprobs":null,"finish_reason":"length"}],` +
		`"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}}`
}

func startFrontdoor(t *testing.T) *fakeFrontdoor {
	t.Helper()
	fd := &fakeFrontdoor{t: t, calls: map[string]int{}, slowFor: time.Second}
	fd.srv = httptest.NewServer(http.HandlerFunc(fd.serve))
	t.Cleanup(fd.srv.Close)
	return fd
}

func (fd *fakeFrontdoor) addr() string { return strings.TrimPrefix(fd.srv.URL, "http://") }

func (fd *fakeFrontdoor) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	signed := fdsign.Verify(testKey, r.Header.Get("Authorization"), fdsign.Signed{
		Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery,
		ModelVersion: r.Header.Get("X-Model-Version"), Adapter: r.Header.Get("X-Lora-Adapter-ID"), Intent: r.Header.Get("X-AI-Intent"),
	}, body)
	if p, ok := fdsign.Parse(r.Header.Get("Authorization")); !ok || p.Tenant != 1 ||
		time.Since(time.UnixMilli(int64(p.TsMs))).Abs() > 30*time.Second {
		signed = false
	}
	var req struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
	}
	_ = json.Unmarshal(body, &req)
	fd.mu.Lock()
	fd.seen = append(fd.seen, seenRequest{path: r.URL.Path, header: r.Header.Clone(), body: body, signed: signed})
	fd.calls[req.Prompt]++
	n := fd.calls[req.Prompt]
	slow := fd.slowFor
	fd.mu.Unlock()
	if !signed {
		http.Error(w, `{"error":{"message":"bad signature","type":"authentication_error","param":null,"code":"unauthenticated"}}`, http.StatusUnauthorized)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	switch {
	case req.Prompt == "missing":
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"error":{"message":"The model `+req.Model+` does not exist","type":"invalid_request_error","param":"model","code":"model_not_found"}}`)
		return
	case req.Prompt == "limited" && n == 1:
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"backend queue full","type":"server_error","param":null,"code":"busy"}}`)
		return
	case req.Prompt == "garbage":
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, "<html>upstream hiccup</html>")
		return
	case req.Prompt == "slow":
		time.Sleep(slow)
	}
	w.Header().Set(HeaderResultVersion, "1")
	_, _ = io.WriteString(w, completionFor(req.Model))
}

func (fd *fakeFrontdoor) requests() []seenRequest {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return append([]seenRequest(nil), fd.seen...)
}

func (fd *fakeFrontdoor) count(prompt string) int {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	return fd.calls[prompt]
}

// backendRig is a rig whose subject token llm maps to qwen3-72b, a model
// served by backends (default version "1"), with the front door at addr.
func backendRig(t *testing.T, url string, eng *fakeEngine, addr string, edit func(*config.Config)) *rig {
	r := newRig(t, url, eng, func(c *config.Config) {
		c.Models = append(c.Models, config.Model{Name: "qwen3-72b", Version: "1", Kind: config.ModelKindBackend,
			Upstream: "gemma-3-270m", Aliases: []string{"latest"}})
		c.OpenAI.DefaultVersions = map[string]string{"qwen3-72b": "1"}
		c.Frontdoor.HTTPListen = addr
		c.Jobs.Streams[0].Models = map[string]string{"llm": "qwen3-72b"}
		if edit != nil {
			edit(c)
		}
	})
	if errs := config.Validate(r.cfg); len(errs) > 0 && edit == nil {
		t.Fatalf("the rig's config: %v", errs)
	}
	r.frontdoor = addr
	return r
}

func llmBody(prompt string) []byte {
	return []byte(`{"prompt":"` + prompt + `","model":"qwen3-72b"}`)
}

func TestBackendJobs(t *testing.T) {
	srv := startNATS(t)
	eng := startFakeEngine(t)
	url := srv.ClientURL()
	fd := startFrontdoor(t)

	t.Run("the seed's message (two headers) goes to /v1/completions as published, signed; the completion is the result", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		before := len(fd.requests())
		body := []byte(`{"prompt":"Explain quantum entanglement","model":"qwen3-72b"}`)
		r.publish("llm", map[string]string{"X-AI-Intent": "reasoning", "X-AI-Timeout": "8s"}, body)
		m := r.take("results.qwen3-72b", 1)[0]
		if string(m.Data()) != completionFor("qwen3-72b") {
			t.Fatalf("result body %s", m.Data())
		}
		h := m.Headers()
		if h.Get(HeaderStatus) != "ok" || h.Get(HeaderKind) != KindResult || h.Get(HeaderRequestID) != r.prefix+":1" ||
			h.Get(HeaderNatsMsgID) != "sluice:"+r.prefix+":1" || h.Get(HeaderModel) != "qwen3-72b" || h.Get(HeaderVersion) != "1" ||
			h.Get(jobmsg.HeaderContentType) != jobmsg.ContentJSON || h.Get(HeaderSubject) != r.prefix+".llm" || h.Get(HeaderDeliveries) != "1" {
			t.Fatalf("result headers %v", h)
		}
		reqs := fd.requests()[before:]
		if len(reqs) != 1 {
			t.Fatalf("%d requests at the front door", len(reqs))
		}
		q := reqs[0]
		if q.path != jobmsg.PathCompletions || string(q.body) != string(body) || !q.signed {
			t.Fatalf("front door got %s %q signed=%v", q.path, q.body, q.signed)
		}
		if q.header.Get("X-AI-Intent") != "reasoning" || q.header.Get("Content-Type") != "application/json" ||
			!strings.HasPrefix(q.header.Get("Authorization"), "Sluice-HMAC-v2 tenant=1, ts=") {
			t.Fatalf("front door headers %v", q.header)
		}
		for _, absent := range []string{"X-Model-Version", "X-Lora-Adapter-ID", "traceparent", "X-Tenant", "Accept-Encoding"} {
			if v, ok := q.header[http.CanonicalHeaderKey(absent)]; ok {
				t.Fatalf("%s sent: %q", absent, v)
			}
		}
		if ms := timeoutMs(t, q.header.Get("X-AI-Timeout")); ms <= 0 || ms > 8000 {
			t.Fatalf("X-AI-Timeout %q: the time left of 8s", q.header.Get("X-AI-Timeout"))
		}
		r.settled()
		if c := r.counters(); c["results"] != 1 || c["acked"] != 1 || c["naked"] != 0 || c["dead"] != 0 {
			t.Fatalf("counters %v", c)
		}
		if eng.count("qwen3-72b") != 0 {
			t.Fatal("the job reached the data plane")
		}
	})

	t.Run("a chat body goes to /v1/chat/completions with the version, adapter and trace it names", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		before := len(fd.requests())
		tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		body := []byte(`{"model":"qwen3-72b","messages":[{"role":"user","content":"hi"}],"max_tokens":8}`)
		r.publish("qwen3-72b", map[string]string{"X-Model-Version": "latest", "X-Lora-Adapter-ID": "formal", "traceparent": tp,
			"Content-Type": "application/json"}, body)
		m := r.take("results.qwen3-72b", 1)[0]
		if m.Headers().Get("traceparent") != tp {
			t.Fatalf("result headers %v", m.Headers())
		}
		q := fd.requests()[before]
		if q.path != jobmsg.PathChatCompletions || string(q.body) != string(body) || !q.signed ||
			q.header.Get("X-Model-Version") != "latest" || q.header.Get("X-Lora-Adapter-ID") != "formal" || q.header.Get("traceparent") != tp {
			t.Fatalf("front door got %s %v %q signed=%v", q.path, q.header, q.body, q.signed)
		}
		// No X-AI-Timeout on the message: the ingress's own bound, jobs.request_timeout_ms.
		if ms := timeoutMs(t, q.header.Get("X-AI-Timeout")); ms <= 0 || ms > int64(r.cfg.Jobs.RequestTimeoutMs) {
			t.Fatalf("X-AI-Timeout %q", q.header.Get("X-AI-Timeout"))
		}
	})

	t.Run("a 404 is dead-lettered unknown_model with the front door's message, not retried", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		body := llmBody("missing")
		r.publish("llm", map[string]string{"X-AI-Intent": "reasoning"}, body)
		m := r.take("dlq.qwen3-72b", 1)[0]
		h := m.Headers()
		if h.Get(HeaderStatus) != "unknown_model" || h.Get(HeaderKind) != KindDeadLetter || string(m.Data()) != string(body) ||
			!strings.Contains(h.Get(HeaderError), "404 Not Found: The model qwen3-72b does not exist") || h.Get("X-AI-Intent") != "reasoning" {
			t.Fatalf("dead letter %v %s", h, m.Data())
		}
		r.settled()
		if c := r.counters(); c["naked"] != 0 || c["dead"] != 1 || fd.count("missing") != 1 {
			t.Fatalf("counters %v, %d calls", c, fd.count("missing"))
		}
	})

	t.Run("a 429 is nak'ed; the redelivery's 200 is the result", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		r.publish("llm", map[string]string{"X-AI-Timeout": "8s"}, llmBody("limited"))
		m := r.take("results.qwen3-72b", 1)[0]
		if string(m.Data()) != completionFor("qwen3-72b") || m.Headers().Get(HeaderDeliveries) != "2" {
			t.Fatalf("result %v %s", m.Headers(), m.Data())
		}
		r.settled()
		if c := r.counters(); c["naked"] != 1 || c["redelivered"] != 1 || c["results"] != 1 || c["dead"] != 0 || fd.count("limited") != 2 {
			t.Fatalf("counters %v, %d calls", c, fd.count("limited"))
		}
	})

	t.Run("a 200 that is not JSON is the backend's failure: retried, then gave_up on the last delivery", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), func(c *config.Config) { c.Jobs.Streams[0].MaxDeliver = 2 })
		r.start()
		r.publish("llm", nil, llmBody("garbage"))
		m := r.take("dlq.qwen3-72b", 1)[0]
		h := m.Headers()
		if h.Get(HeaderStatus) != jobmsg.CodeGaveUp || h.Get(HeaderDeliveries) != "2" ||
			!strings.Contains(h.Get(HeaderError), "bad_gateway") || !strings.Contains(h.Get(HeaderError), "not a JSON object") {
			t.Fatalf("dead letter %v", h)
		}
		r.settled()
		if c := r.counters(); c["naked"] != 1 || c["results"] != 0 || fd.count("garbage") != 2 {
			t.Fatalf("counters %v, %d calls", c, fd.count("garbage"))
		}
	})

	t.Run("a front door that refuses connections is retried, then gave_up", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := l.Addr().String()
		l.Close()
		r := backendRig(t, url, eng, closed, func(c *config.Config) { c.Jobs.Streams[0].MaxDeliver = 2 })
		r.start()
		r.publish("llm", nil, llmBody("ok"))
		m := r.take("dlq.qwen3-72b", 1)[0]
		if h := m.Headers(); h.Get(HeaderStatus) != jobmsg.CodeGaveUp || !strings.Contains(h.Get(HeaderError), "connection_lost") {
			t.Fatalf("dead letter %v", h)
		}
		if c := r.counters(); c["naked"] != 1 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("past its X-AI-Timeout while the backend works: dead letter expired", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		r.publish("llm", map[string]string{"X-AI-Timeout": "300ms"}, llmBody("slow"))
		m := r.take("dlq.qwen3-72b", 1)[0]
		if m.Headers().Get(HeaderStatus) != jobmsg.CodeExpired {
			t.Fatalf("dead letter %v", m.Headers())
		}
		r.settled()
	})

	t.Run("a completion longer than ack_wait_ms is kept in progress: run once, not redelivered", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), func(c *config.Config) {
			// Outside what config allows on purpose: the ack wait ends
			// three times over while the front door works.
			c.Jobs.Streams[0].AckWaitMs = 300
		})
		r.start()
		before := fd.count("slow")
		r.publish("llm", map[string]string{"X-AI-Timeout": "8s"}, llmBody("slow"))
		r.take("results.qwen3-72b", 1)
		r.settled()
		if c := r.counters(); c["redelivered"] != 0 || c["dup"] != 0 || c["results"] != 1 || fd.count("slow")-before != 1 {
			t.Fatalf("counters %v, %d calls", c, fd.count("slow")-before)
		}
	})

	t.Run("with the front door off a backend job is dead-lettered no_front_door", func(t *testing.T) {
		r := backendRig(t, url, eng, "", func(c *config.Config) {})
		r.start()
		r.publish("llm", nil, llmBody("ok"))
		if m := r.take("dlq.qwen3-72b", 1)[0]; m.Headers().Get(HeaderStatus) != jobmsg.CodeNoFrontDoor {
			t.Fatalf("dead letter %v", m.Headers())
		}
	})

	t.Run("a body the front door cannot take is dead-lettered bad_message before it is sent", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		before := len(fd.requests())
		r.publish("llm", nil, []byte(`{"prompt":"x","model":"gemma-3-270m"}`))
		r.publish("llm", nil, []byte(`{"prompt":"x","model":"qwen3-72b","stream":true}`))
		for _, m := range r.take("dlq.qwen3-72b", 2) {
			if m.Headers().Get(HeaderStatus) != jobmsg.CodeBadMessage {
				t.Fatalf("dead letter %v", m.Headers())
			}
		}
		if n := len(fd.requests()) - before; n != 0 {
			t.Fatalf("%d sent", n)
		}
	})

	t.Run("other models still go to the data plane", func(t *testing.T) {
		r := backendRig(t, url, eng, fd.addr(), nil)
		r.start()
		before := len(fd.requests())
		r.publish("double", map[string]string{"X-Model-Version": "1"}, kserveBody("k", []float32{1}))
		r.take("results.double", 1)
		if len(fd.requests()) != before {
			t.Fatal("a KServe job went to the front door")
		}
	})
}

func timeoutMs(t *testing.T, v string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(strings.TrimSuffix(v, "ms"), 10, 64)
	if err != nil || !strings.HasSuffix(v, "ms") {
		t.Fatalf("X-AI-Timeout %q is not whole milliseconds", v)
	}
	return n
}

func TestTimeoutHeader(t *testing.T) {
	for d, want := range map[time.Duration]string{
		7*time.Second + 523*time.Millisecond + 999*time.Microsecond: "7523ms",
		0:                       "1ms",
		-time.Second:            "1ms",
		3 * time.Hour:           "3600000ms",
		time.Hour:               "3600000ms",
		1500 * time.Microsecond: "1ms",
	} {
		if got := timeoutHeader(d); got != want {
			t.Errorf("timeoutHeader(%v) = %s, want %s", d, got, want)
		}
	}
}
