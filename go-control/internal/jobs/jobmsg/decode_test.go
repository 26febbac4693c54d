package jobmsg

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
)

func testStream() *config.JobStream {
	return &config.JobStream{Stream: "s", Tenant: "demo", Tenants: []string{"other"},
		Models: map[string]string{"llm": "mlp"}, Results: config.JobResultsDefault, DeadLetters: config.JobDeadLettersDefault}
}

var testKey = []byte("jobs-test-tenant-key-0123456789")

func testTenants() []config.Tenant {
	return []config.Tenant{
		{Name: "demo", ID: 1, Key: "hex:" + hex.EncodeToString(testKey)},
		{Name: "other", ID: 2, Key: "hex:" + hex.EncodeToString([]byte("another-tenant-key-abcdefghijk"))},
	}
}

func tenantsOf(ts []config.Tenant) TenantFunc {
	return func(name string, id int64) (config.Tenant, bool) {
		for _, t := range ts {
			if (name != "" && t.Name == name) || (name == "" && t.ID == id) {
				return t, true
			}
		}
		return config.Tenant{}, false
	}
}

func kserveBody(id string, x []float32) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "inputs": []map[string]any{{"name": "x", "shape": []int{1, len(x)}, "datatype": "FP32", "data": x}}})
	return b
}

func TestHeadersMapToTheRequest(t *testing.T) {
	s := testStream()
	h := nats.Header{}
	h.Set("x-model-version", "1") // any case
	h.Set("X-Lora-Adapter-ID", "formal")
	h.Set("X-AI-Intent", "reasoning")
	h.Set("X-AI-Timeout", "8s")
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	h.Set("X-Tenant", "other")
	j, f := Decode(s, "inference.llm", h, kserveBody("a", []float32{1, 2}), tenantsOf(testTenants()), nil)
	if f != nil {
		t.Fatal(f)
	}
	r := j.Req
	if r.Model != "mlp" || r.Version != "1" || r.Adapter != "formal" || r.Intent != "reasoning" || j.Timeout.Seconds() != 8 ||
		j.Tenant.Name != "other" || j.Family != FamilyJSON || j.KServeID != "a" || !r.Trace.Sampled() ||
		FormatTraceparent(r.Trace) != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" {
		t.Fatalf("job %+v", j)
	}
	if len(r.Inputs) != 1 || r.Inputs[0].DType != wire.F32 || fmt.Sprint(r.Inputs[0].Dims) != "[1 2]" {
		t.Fatalf("inputs %+v", r.Inputs)
	}
	// An unmapped token names the model itself; the stream's tenant is the default.
	j, f = Decode(s, "inference.echo", nats.Header{"X-Model-Version": {"1"}}, []byte(`{"inputs":[{"name":"a","shape":[],"datatype":"INT64","data":[-3]}]}`), tenantsOf(testTenants()), nil)
	if f != nil || j.Req.Model != "echo" || j.Tenant.Name != "demo" || j.Req.Inputs[0].Len() != 1 {
		t.Fatalf("%+v %v", j, f)
	}
}

func TestReplyToOnlyUnderTheTenantsPrefixes(t *testing.T) {
	s := testStream()
	s.ReplyPrefixes = map[string][]string{"demo": {"replies.demo", "audit"}}
	decode := func(tenant, replyTo string) (*Job, *Failure) {
		h := nats.Header{"X-Model-Version": {"1"}, "X-Reply-To": {replyTo}}
		if tenant != "" {
			h.Set("X-Tenant", tenant)
		}
		return Decode(s, "inference.llm", h, kserveBody("", []float32{1}), tenantsOf(testTenants()), nil)
	}
	for _, ok := range []string{"replies.demo", "replies.demo.c7", "audit.x.y"} {
		if j, f := decode("", ok); f != nil || j.ReplyTo != ok {
			t.Errorf("%s: %v", ok, f)
		}
	}
	for _, c := range []struct{ tenant, replyTo, why string }{
		{"", "$KV.sluice_config.models", "$-subjects"},
		{"", "$JS.API.STREAM.DELETE.ai-inference", "$-subjects"},
		{"", "$SYS.REQ.SERVER.PING", "$-subjects"},
		{"", "replies.*", "wildcards"},
		{"", "replies.demo.>", "wildcards"},
		{"", "replies.demonic", "under none of tenant \"demo\"'s reply_prefixes"},
		{"", "inference.results.mlp", "under none"},
		{"other", "replies.demo.c7", "tenant \"other\" may not redirect results"},
	} {
		_, f := decode(c.tenant, c.replyTo)
		if f == nil || f.Code != CodeReplyToRefused || f.Retry || !strings.Contains(f.Msg, c.why) {
			t.Errorf("%s as %q: %v, want %s (%s)", c.replyTo, c.tenant, f, CodeReplyToRefused, c.why)
		}
	}
	// A frame body is held to its signing tenant's prefixes too.
	x := sluice.NewTensor("x", []uint64{1}, []float32{1})
	r := wire.Repr{Kind: wire.KindRequest, RequestID: 9, TenantID: 1, Flags: wire.FlagAuthenticated, Model: "double", ModelVersion: "1",
		Tensors: []wire.TensorRepr{{Name: x.Name, DType: x.DType, Dims: x.Dims, Data: x.Data}}}
	frame, _, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	fr, err := wire.Parse(frame)
	if err != nil {
		t.Fatal(err)
	}
	wire.NewTenantKey(testKey).Sign(&fr)
	for replyTo, code := range map[string]string{"replies.demo.f": "", "elsewhere": CodeReplyToRefused, "$KV.x": CodeReplyToRefused} {
		_, f := Decode(s, "inference.any", nats.Header{"X-Reply-To": {replyTo}}, frame, tenantsOf(testTenants()), nil)
		if (code == "" && f != nil) || (code != "" && (f == nil || f.Code != code)) {
			t.Errorf("frame to %s: %v, want %q", replyTo, f, code)
		}
	}
}

func TestTraceparent(t *testing.T) {
	good := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
	if tc, ok := ParseTraceparent(good); !ok || FormatTraceparent(tc) != good {
		t.Fatalf("%v %v", tc, ok)
	}
	for _, bad := range []string{"", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
		"00-00000000000000000000000000000000-b7ad6b7169203331-00", "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-00",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-00", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-0g",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00-extra"} {
		if _, ok := ParseTraceparent(bad); ok {
			t.Errorf("%q accepted", bad)
		}
	}
	// A later version may carry more fields; its first four are read.
	if _, ok := ParseTraceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-what"); !ok {
		t.Error("future version refused")
	}
}

func TestBodyFamily(t *testing.T) {
	for _, c := range []struct {
		ct   string
		body string
		want Family
		code string
	}{
		{"", "SLCE....", FamilyFrame, ""},
		{"", "  {\"inputs\":[]}", FamilyJSON, ""},
		{"application/json; charset=utf-8", "x", FamilyJSON, ""},
		{"application/x-sluice-section", "{}", FamilySection, ""},
		{"application/x-sluice-frame", "{}", FamilyFrame, ""},
		{"", "\x00\x01", 0, CodeBadMessage},
		{"text/csv", "1,2", 0, CodeBadMessage},
		{"bad type/", "", 0, CodeBadMessage},
	} {
		h := nats.Header{}
		if c.ct != "" {
			h.Set("Content-Type", c.ct)
		}
		got, f := bodyFamily(h, []byte(c.body))
		if got != c.want || (f == nil) != (c.code == "") || (f != nil && f.Code != c.code) {
			t.Errorf("%q %q: %v %v", c.ct, c.body, got, f)
		}
	}
}

func TestKServeRoundTrip(t *testing.T) {
	body := `{"id":"q","inputs":[
		{"name":"f","shape":[2,2],"datatype":"FP32","data":[[1.5,-2],[3,"NaN"]]},
		{"name":"h","shape":[2],"datatype":"FP16","data":[0.5,"-Infinity"]},
		{"name":"b","shape":[3],"datatype":"BOOL","data":[true,false,true]},
		{"name":"i","shape":[2],"datatype":"INT8","data":[-128,127]},
		{"name":"u","shape":[1],"datatype":"UINT64","data":[18446744073709551615]},
		{"name":"d","shape":[1],"datatype":"FP64","data":[1e300]}],
		"outputs":[{"name":"f"},{"name":"h"},{"name":"b"},{"name":"i"},{"name":"u"},{"name":"d"}]}`
	in, f := parseKServe([]byte(body))
	if f != nil {
		t.Fatal(f)
	}
	// Answer with the inputs as outputs and read them back.
	resp := &sluice.Response{Model: "m", ModelVersion: "1"}
	for _, x := range in.inputs {
		resp.Outputs = append(resp.Outputs, sluice.Output(x))
	}
	resp.Outputs = append(resp.Outputs, sluice.Output{Name: "not-asked", DType: wire.U8, Dims: []uint64{1}, Data: []byte{1}})
	out, err := KServeResponse("s:1", in.id, resp, in.outputs)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"q","model_name":"m","model_version":"1","parameters":{"sluice_request_id":"s:1","sluice_status":"ok"},"outputs":[` +
		`{"name":"f","datatype":"FP32","shape":[2,2],"data":[1.5,-2,3,"NaN"]},` +
		`{"name":"h","datatype":"FP16","shape":[2],"data":[0.5,"-Infinity"]},` +
		`{"name":"b","datatype":"BOOL","shape":[3],"data":[true,false,true]},` +
		`{"name":"i","datatype":"INT8","shape":[2],"data":[-128,127]},` +
		`{"name":"u","datatype":"UINT64","shape":[1],"data":[18446744073709551615]},` +
		`{"name":"d","datatype":"FP64","shape":[1],"data":[1e+300]}]}`
	if string(out) != want {
		t.Fatalf("got\n%s\nwant\n%s", out, want)
	}
	if !json.Valid(out) {
		t.Fatal("not JSON")
	}
	// f32 values print in their shortest form that reads back exactly.
	one := sluice.NewTensor("y", []uint64{1}, []float32{0.1})
	out, _ = KServeResponse("s:2", "", &sluice.Response{Outputs: []sluice.Output{{Name: "y", DType: one.DType, Dims: one.Dims, Data: one.Data}}}, nil)
	if !bytes.Contains(out, []byte(`"data":[0.1]`)) || !bytes.Contains(out, []byte(`"id":"s:2"`)) {
		t.Fatalf("%s", out)
	}
}

func TestKServeRefusals(t *testing.T) {
	for body, code := range map[string]string{
		`{"inputs":[]}`: "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}],"extra":1}`:          "bad_message",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1]}]} {}`:                 "bad_message",
		`{"inputs":[{"name":"x","shape":[-1],"datatype":"FP32","data":[1]}]}`:                   "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":["1"]}]}`:                  "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1e39]}]}`:                 "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"INT8","data":[128]}]}`:                  "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"UINT8","data":[-1]}]}`:                  "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"BOOL","data":[1]}]}`:                    "bad_tensor",
		`{"inputs":[{"name":"x y","shape":[1],"datatype":"FP32","data":[1]}]}`:                  "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1,1,1,1,1,1,1,1,1],"datatype":"FP32","data":[1]}]}`:    "bad_tensor",
		`{"inputs":[{"name":"x","shape":[4294967296,4294967296],"datatype":"FP32","data":[]}]}`: "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":1}]}`:                      "bad_tensor",
		`{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[[[[[[[[[[1]]]]]]]]]]}]}`:  "bad_tensor",
	} {
		_, f := parseKServe([]byte(body))
		if f == nil || f.Code != code || f.Retry {
			t.Errorf("%s: %v, want %s", body, f, code)
		}
	}
}

func TestClassify(t *testing.T) {
	se := func(c wire.Code) error { return &sluice.ServerError{Code: c, Message: "m"} }
	for _, c := range []struct {
		err     error
		expired bool
		code    string
		retry   bool
	}{
		{se(wire.CodeBusy), false, "busy", true},
		{se(wire.CodeShuttingDown), false, "shutting_down", true},
		{se(wire.CodePeerDown), false, "peer_down", true},
		{se(wire.CodeUnauthenticated), false, "unauthenticated", true},
		{se(wire.CodeUnknownModel), false, "unknown_model", false},
		{se(wire.CodeSchemaMismatch), false, "schema_mismatch", false},
		{se(wire.CodeBadTensor), false, "bad_tensor", false},
		{se(wire.CodeDeadlineExceeded), true, CodeExpired, false},
		{se(wire.CodeDeadlineExceeded), false, "timeout", true},
		{fmt.Errorf("%w after 1s", sluice.ErrTimeout), false, "timeout", true},
		{fmt.Errorf("%w after 1s", sluice.ErrTimeout), true, CodeExpired, false},
		{fmt.Errorf("%w: %w", sluice.ErrInvalidRequest, wire.ErrTooLarge), false, "frame_too_large", false},
		{fmt.Errorf("%w: %w", sluice.ErrInvalidRequest, wire.ErrTooManyTensors), false, "malformed_frame", false},
		{sluice.ErrClosed, false, "internal", true},
	} {
		f := Classify(c.err, c.expired)
		if f.Code != c.code || f.Retry != c.retry || errors.Is(f, ErrRetry) != c.retry || errors.Is(f, ErrDeadLetter) == c.retry {
			t.Errorf("%v: %+v", c.err, f)
		}
	}
}

func TestFloatLimits(t *testing.T) {
	b := make([]byte, 4)
	if err := putElement(b, wire.F32, json.RawMessage(`3.4028234663852886e38`)); err != nil {
		t.Fatal(err)
	}
	if math.Float32frombits(uint32(b[0])|uint32(b[1])<<8|uint32(b[2])<<16|uint32(b[3])<<24) != math.MaxFloat32 {
		t.Fatal("max f32")
	}
}

// FuzzDecode: any headers and body give a job or a Failure with a code,
// never a panic; a job's frame can be built or is refused cleanly.
func FuzzDecode(f *testing.F) {
	f.Add("inference.llm", "1", "", "application/json", kserveBody("a", []float32{1}))
	f.Add("inference.x", "1", "8s", "", []byte(`{"inputs":[{"name":"x","shape":[2],"datatype":"FP16","data":[1,"NaN"]}]}`))
	f.Add("a.b", "", "", "application/x-sluice-section", []byte(`{}`))
	f.Add("a.b", "1", "1ms", "", []byte("SLCE\x01\x01"))
	f.Add("inference.qwen3-72b", "", "8s", "", []byte(seedLLMBody))
	f.Add("inference.qwen3-72b", "1", "", "application/json", []byte(`{"model":"qwen3-72b","messages":[]}`))
	s := testStream()
	tenants := tenantsOf(testTenants())
	f.Fuzz(func(t *testing.T, subject, version, timeout, ct string, body []byte) {
		if subject == "" {
			subject = "x"
		}
		h := nats.Header{}
		for k, v := range map[string]string{HeaderModelVersion: version, HeaderTimeout: timeout, HeaderContentType: ct, HeaderSchemaID: "1"} {
			if v != "" {
				h.Set(k, v)
			}
		}
		j, fl := Decode(s, subject, h, body, tenants, backendQ)
		if (j == nil) == (fl == nil) {
			t.Fatalf("job %v and Failure %v", j, fl)
		}
		if fl == nil && j.Family == FamilyOpenAI {
			if !bytes.Equal(j.Body, body) || (j.Path != PathCompletions && j.Path != PathChatCompletions) {
				t.Fatalf("OpenAI job %+v", j)
			}
			return
		}
		if fl != nil {
			if fl.Code == "" || fl.Msg == "" {
				t.Fatalf("Failure without code or message: %+v", fl)
			}
			return
		}
		var scratch [wire.TensorCountMax + 1]wire.TensorRepr
		r := wire.Repr{Kind: wire.KindRequest, Model: j.Req.Model, ModelVersion: j.Req.Version, Tensors: scratch[:0]}
		for _, in := range j.Req.Inputs {
			r.Tensors = append(r.Tensors, wire.TensorRepr{Name: in.Name, DType: in.DType, Dims: in.Dims, Data: in.Data})
		}
		_, _, _ = r.Append(nil) // refusals are errors, not panics
	})
}
