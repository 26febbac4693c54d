//go:build jobs_e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// The engine's own answers reach the stream: every message below runs
// through the real engine's path (authentication, schema validation
// against the registry, model resolution, tensor checks) and ends as the
// result or the dead letter that path gives.
func TestEngineOutcomes(t *testing.T) {
	dir := t.TempDir()
	nodes := startNATS(t, dir, 1)
	// A second tenant the stream accepts, whose own allow-list has echo only.
	limited := "[[tenants]]\nname = \"limited\"\nid = 2\nkey = \"hex:6a6f62732d6c696d697465642d74656e616e742d6b6579\"\nmodels = [\"echo\"]\n\n[control]"
	a := newAppliance(t, dir, "sluiced", jobsConfig(t, dir, "sluiced", []string{nodes[0].url()}, 1,
		"tenants = []", `tenants = ["limited"]`, "[control]", limited))
	a.start()
	a.waitConsuming(t)

	// A JSON schema in the registry, pushed to the engine's validator.
	schema := `{"type":"object","properties":{"intent":{"type":"string"}},"required":["intent"]}`
	body, _ := json.Marshal(map[string]any{"schemaType": "JSON", "schema": schema})
	resp, err := http.Post("http://"+a.admin+"/registry/subjects/jobs-section/versions", "application/vnd.schemaregistry.v1+json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ID int `json:"id"`
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(b, &reg); err != nil || reg.ID == 0 {
		t.Fatalf("register: %v %s", err, b)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var st struct {
			Engine struct {
				Schemas int `json:"schemas"`
			} `json:"engine"`
		}
		r, err := http.Get("http://" + a.admin + "/v1/status")
		if err == nil {
			_ = json.NewDecoder(r.Body).Decode(&st)
			r.Body.Close()
		}
		if st.Engine.Schemas > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the schema never reached the engine")
		}
		time.Sleep(50 * time.Millisecond)
	}

	demoKey, _ := hex.DecodeString("73756963652d64656d6f2d6b65792d30303030303030303030303030303030")
	x := sluice.NewTensor("x", []uint64{1, 4}, []float32{0.5, -0.25, 1, 0})
	frame := wire.Repr{Kind: wire.KindRequest, Flags: wire.FlagAuthenticated, RequestID: 77, TenantID: 1, Model: "mlp", ModelVersion: "1",
		Adapter: "formal", Tensors: []wire.TensorRepr{{Name: x.Name, DType: x.DType, Dims: x.Dims, Data: x.Data}}}
	fb, _, err := frame.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := wire.Parse(fb)
	wire.NewTenantKey(demoKey).Sign(&f)
	kserve := func(shape []int, data []float32) []byte {
		b, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "x", "shape": shape, "datatype": "FP32", "data": data}}})
		return b
	}
	v1 := map[string]string{"X-Model-Version": "1"}
	section := func(id int) map[string]string {
		return map[string]string{"X-Model-Version": "1", "Content-Type": "application/x-sluice-section", "X-Schema-Id": fmt.Sprint(id)}
	}
	cases := []struct {
		name, subject string
		h             map[string]string
		body          []byte
		want          string // status
	}{
		{"mlp", "inference.mlp", v1, kserve([]int{1, 4}, []float32{0.5, -0.25, 1, 0}), "ok"},
		{"alias 1.0.0", "inference.mlp", map[string]string{"X-Model-Version": "1.0.0", "X-Lora-Adapter-ID": "formal"}, kserve([]int{1, 4}, []float32{0.5, -0.25, 1, 0}), "ok"},
		{"frame", "inference.anything", nil, fb, "ok"},
		{"no version", "inference.mlp", nil, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "model_version_required"},
		{"unknown version", "inference.mlp", map[string]string{"X-Model-Version": "2"}, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "unknown_model"},
		{"unknown model", "inference.nosuch", v1, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "unknown_model"},
		{"unknown adapter", "inference.mlp", map[string]string{"X-Model-Version": "1", "X-Lora-Adapter-ID": "casual"}, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "unknown_adapter"},
		{"bad tensor", "inference.mlp", v1, kserve([]int{1, 3}, []float32{1, 2, 3}), "bad_tensor"},
		{"schema mismatch", "inference.echo", section(reg.ID), []byte(`{"intent": 5}`), "schema_mismatch"},
		{"unknown schema", "inference.echo", section(reg.ID + 100), []byte(`{"intent": "x"}`), "unknown_schema"},
		// Outside the tenant's list the engine answers as for a model that does not exist.
		{"tenant's allow-list (the engine's)", "inference.mlp", map[string]string{"X-Model-Version": "1", "X-Tenant": "limited"}, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "unknown_model"},
		{"tenant not on the stream", "inference.mlp", map[string]string{"X-Model-Version": "1", "X-Tenant": "nobody"}, kserve([]int{1, 4}, []float32{1, 2, 3, 4}), "forbidden"},
	}
	nc, err := nats.Connect(nodes[0].url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	for i, c := range cases {
		m := &nats.Msg{Subject: c.subject, Header: nats.Header{}, Data: c.body}
		for k, v := range c.h {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprint("in-", i))); err != nil {
			t.Fatal(err)
		}
	}
	deadline = time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if n, err := storedOutcomes(js); err == nil && n >= len(cases) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	outs := readOutcomes(t, js)
	if len(outs) != len(cases) {
		t.Fatalf("%d outcomes for %d requests", len(outs), len(cases))
	}
	for _, o := range outs {
		c := cases[o.input]
		if o.status != c.want {
			t.Errorf("%s: %s, want %s", c.name, o.status, c.want)
		}
	}
	// The frame's answer is a response frame with the frame's own id.
	cons, _ := js.OrderedConsumer(ctx, "ai-inference", jetstream.OrderedConsumerConfig{FilterSubjects: []string{"inference.results.mlp"}})
	for range 3 {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if m.Headers().Get("Content-Type") != "application/x-sluice-frame" {
			continue
		}
		rf, err := wire.Parse(m.Data())
		if err != nil || rf.RequestID() != 77 || rf.Kind() != wire.KindResponse {
			t.Fatalf("result frame: %v %v", err, rf.RequestID())
		}
		d, _ := rf.TensorByName("y")
		y, _ := sluice.Values[float32](sluice.Output{Name: "y", DType: d.DType, Dims: d.Dims(), Data: rf.TensorData(d)})
		if want := mlpReference([]float32{0.5, -0.25, 1, 0}, true); fmt.Sprint(y) != fmt.Sprint(want) {
			t.Fatalf("frame result y = %v, want %v", y, want)
		}
		return
	}
	t.Fatal("no result frame")
}
