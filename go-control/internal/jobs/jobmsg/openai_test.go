package jobmsg

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// The seed's message for a model served by backends: the body as it came,
// its two headers, no X-Model-Version.
const seedLLMBody = `{"prompt":"Explain quantum entanglement","model":"qwen3-72b"}`

func backendQ(model, version string) bool { return model == "qwen3-72b" && version != "2" }

func llmStream() *config.JobStream {
	s := testStream()
	s.Models = map[string]string{"llm": "qwen3-72b"}
	return s
}

func TestSeedLLMMessageIsAnOpenAIJob(t *testing.T) {
	s := llmStream()
	h := nats.Header{}
	h.Set("X-AI-Intent", "reasoning")
	h.Set("X-AI-Timeout", "8s")
	body := []byte(seedLLMBody)
	j, f := Decode(s, "inference.llm", h, body, tenantsOf(testTenants()), backendQ)
	if f != nil {
		t.Fatal(f)
	}
	if j.Family != FamilyOpenAI || j.Path != PathCompletions || string(j.Body) != seedLLMBody || &j.Body[0] != &body[0] ||
		j.Model != "qwen3-72b" || j.Req.Version != "" || j.Req.Intent != "reasoning" || j.Timeout.Seconds() != 8 ||
		j.Tenant.Name != "demo" || j.Family.ContentType() != ContentJSON {
		t.Fatalf("job %+v", j)
	}
	// Without a backend model the same message is a KServe body that
	// needs a version, as before.
	if _, f := Decode(s, "inference.llm", h, body, tenantsOf(testTenants()), nil); f == nil || f.Code != "model_version_required" {
		t.Fatalf("without backends: %v", f)
	}
}

func TestOpenAIJobs(t *testing.T) {
	s := llmStream()
	tenants := tenantsOf(testTenants())
	for _, c := range []struct {
		name, subject string
		h             map[string]string
		body          string
		path, code    string // one of them
	}{
		{"chat", "inference.llm", nil, `{"model":"qwen3-72b","messages":[{"role":"user","content":"hi"}]}`, PathChatCompletions, ""},
		{"headers kept", "inference.qwen3-72b", map[string]string{"X-Model-Version": "1", "X-Lora-Adapter-ID": "formal", "Content-Type": "application/json; charset=utf-8"},
			` {"model":"qwen3-72b","prompt":"x","stream":false}`, PathCompletions, ""},
		{"version the backend does not serve goes the frame way", "inference.llm", map[string]string{"X-Model-Version": "2"}, seedLLMBody, "", CodeBadMessage},
		{"not JSON", "inference.llm", map[string]string{"Content-Type": "application/json"}, `{"model":`, "", CodeBadMessage},
		{"an array", "inference.llm", map[string]string{"Content-Type": "application/json"}, `[1]`, "", CodeBadMessage},
		{"no model", "inference.llm", nil, `{"prompt":"x"}`, "", CodeBadMessage},
		{"model not a string", "inference.llm", nil, `{"prompt":"x","model":7}`, "", CodeBadMessage},
		{"another model", "inference.llm", nil, `{"prompt":"x","model":"gemma"}`, "", CodeBadMessage},
		{"stream", "inference.llm", nil, `{"prompt":"x","model":"qwen3-72b","stream": true }`, "", CodeBadMessage},
		{"a section", "inference.llm", map[string]string{"Content-Type": ContentSection, "X-Schema-Id": "1"}, seedLLMBody, "", CodeBadMessage},
		{"bad intent", "inference.llm", map[string]string{"X-AI-Intent": "a b"}, seedLLMBody, "", CodeBadMessage},
		{"a tenant the stream does not take", "inference.llm", map[string]string{"X-Tenant": "stranger"}, seedLLMBody, "", "forbidden"},
		{"reply-to refused", "inference.llm", map[string]string{"X-Reply-To": "elsewhere"}, seedLLMBody, "", CodeReplyToRefused},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := nats.Header{}
			for k, v := range c.h {
				h.Set(k, v)
			}
			j, f := Decode(s, c.subject, h, []byte(c.body), tenants, backendQ)
			if c.code != "" {
				if f == nil || f.Code != c.code || f.Retry {
					t.Fatalf("got %+v %v, want dead letter %s", j, f, c.code)
				}
				return
			}
			if f != nil {
				t.Fatal(f)
			}
			if j.Family != FamilyOpenAI || j.Path != c.path || string(j.Body) != c.body {
				t.Fatalf("job %+v", j)
			}
			if v := c.h["X-Model-Version"]; j.Req.Version != v || j.Req.Adapter != c.h["X-Lora-Adapter-ID"] {
				t.Fatalf("job %+v", j.Req)
			}
		})
	}
	// A frame body is a frame whatever the subject says.
	if _, f := Decode(s, "inference.llm", nil, []byte("SLCE\x01"), tenants, backendQ); f == nil || f.Code == CodeBadMessage {
		t.Fatalf("a frame: %v", f)
	}
}

func TestClassifyHTTP(t *testing.T) {
	for _, c := range []struct {
		status  int
		body    string
		expired bool
		code    string
		retry   bool
		msg     string
	}{
		{404, `{"error":{"message":"model qwen3-72b version 9 is not configured","type":"invalid_request_error","param":"model","code":"model_not_found"}}`, false,
			"unknown_model", false, "404 Not Found: model qwen3-72b version 9 is not configured"},
		{404, `{"error":{"message":"adapter x","type":"invalid_request_error","param":null,"code":"unknown_adapter"}}`, false, "unknown_adapter", false, "adapter x"},
		{400, `{"error":{"message":"X-Model-Version required","type":"invalid_request_error","param":null,"code":"model_version_required"}}`, false,
			"model_version_required", false, "X-Model-Version required"},
		{400, `{"error":{"message":"prompt is required","type":"invalid_request_error","param":"prompt","code":null}}`, false, CodeBadRequest, false, "400 Bad Request: prompt is required"},
		{400, `{"error":"X-Model-Version required"}`, false, CodeBadRequest, false, "X-Model-Version required"},
		{403, `{"error":{"message":"no","code":403}}`, false, "forbidden", false, "no"},
		{413, ``, false, "frame_too_large", false, "413 Request Entity Too Large"},
		{418, `teapot`, false, "http_418", false, "teapot"},
		{401, `{"error":"signature"}`, false, "unauthenticated", true, "signature"},
		{408, ``, false, "http_408", true, "408"},
		{429, `{"error":{"message":"queue full","code":"busy"}}`, false, "busy", true, "queue full"},
		{500, `{"error":{"message":"upstream reset","code":"inference_failed"}}`, false, "inference_failed", true, "upstream reset"},
		{502, `<html>bad gateway</html>`, false, "http_502", true, "<html>bad gateway</html>"},
		{503, ``, false, "http_503", true, "503 Service Unavailable"},
		{504, `{"error":{"message":"deadline exceeded","code":"deadline_exceeded"}}`, false, "deadline_exceeded", true, "deadline exceeded"},
		{504, `{"error":{"message":"deadline exceeded","code":"deadline_exceeded"}}`, true, CodeExpired, false, "deadline exceeded"},
		{302, ``, false, "http_302", true, "302 Found"},
	} {
		f := ClassifyHTTP(c.status, []byte(c.body), c.expired)
		if f.Code != c.code || f.Retry != c.retry || !strings.Contains(f.Msg, c.msg) {
			t.Errorf("%d %s: %+v, want %s retry=%v with %q", c.status, c.body, f, c.code, c.retry, c.msg)
		}
	}
	long := strings.Repeat("x", 2000)
	if f := ClassifyHTTP(500, []byte(long), false); len(f.Msg) > 700 {
		t.Errorf("a long body is kept whole: %d bytes", len(f.Msg))
	}
}

func TestCheckCompletion(t *testing.T) {
	if f := CheckCompletion([]byte(` {"id":"cmpl-1","object":"text_completion","choices":[]}`)); f != nil {
		t.Fatal(f)
	}
	for _, bad := range []string{"", "garbage", "[1]", `{"id":`, "data: {}\n\n", "null"} {
		if f := CheckCompletion([]byte(bad)); f == nil || !f.Retry || f.Code != CodeBadGateway {
			t.Errorf("%q: %v", bad, f)
		}
	}
}
