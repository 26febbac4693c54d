package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/jobs/jobmsg"
)

// The ingress against a real nats-server (in process) and the stand-in
// data plane of fake_test.go: every outcome of a message, end to end
// through JetStream.

type rig struct {
	t      *testing.T
	prefix string
	nc     *nats.Conn
	js     jetstream.JetStream
	eng    *fakeEngine
	in     *Ingress
	cfg    *config.Config
	// frontdoor is the OpenAI front door's address the host reports
	// (backend_test.go); "" for none.
	frontdoor string
}

const rigConfig = `
[engine]
workers = [0]
[fleet]
servers = ["%s"]
[jobs]
request_timeout_ms = 2000
publish_timeout_ms = 2000
nak_delay_ms = 50
fetch_wait_ms = 100
busy_retries = 2
[[jobs.streams]]
stream = "%[2]s"
subjects = ["%[2]s.>"]
filter_subjects = ["%[2]s.*"]
results = "%[2]s.results.{model}"
dead_letters = "%[2]s.dlq.{model}"
tenant = "demo"
tenants = ["other"]
ack_wait_ms = 10000
models = { llm = "double" }
`

var prefixSeq struct {
	sync.Mutex
	n int
}

// newRig starts an ingress on its own stream (prefix P, subjects P.>)
// after edit has had its say on the config.
func newRig(t *testing.T, srvURL string, eng *fakeEngine, edit func(*config.Config)) *rig {
	t.Helper()
	prefixSeq.Lock()
	prefixSeq.n++
	p := fmt.Sprintf("t%d", prefixSeq.n)
	prefixSeq.Unlock()
	cfg, err := config.Parse("rig.toml", []byte(fmt.Sprintf(rigConfig, srvURL, p)))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	nc, err := nats.Connect(srvURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	r := &rig{t: t, prefix: p, nc: nc, js: js, eng: eng, cfg: cfg}
	return r
}

func (r *rig) start() {
	r.t.Helper()
	in, err := New(r.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := in.Start(&fakeHost{addr: r.eng.addr(), tenants: testTenants(), cfg: r.cfg, frontdoor: r.frontdoor}); err != nil {
		r.t.Fatal(err)
	}
	r.in = in
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Drain(ctx)
	})
	r.waitConsuming()
}

func (r *rig) waitConsuming() {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if st := r.in.Status().Streams[0]; st.State == stateConsuming {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("stream never consuming: %+v", r.in.Status())
}

// publish stores a request on P.<tok> (the stream is created by the
// ingress, or here when it is not running yet).
func (r *rig) publish(tok string, h map[string]string, body []byte) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := r.js.Stream(ctx, r.prefix); err != nil {
		if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.prefix, Subjects: []string{r.prefix + ".>"}}); err != nil {
			r.t.Fatal(err)
		}
	}
	m := &nats.Msg{Subject: r.prefix + "." + tok, Header: nats.Header{}, Data: body}
	for k, v := range h {
		m.Header.Set(k, v)
	}
	if _, err := r.js.PublishMsg(ctx, m); err != nil {
		r.t.Fatal(err)
	}
}

// take reads n stored messages under subject filter (after P.), then
// checks that no more arrive for a moment.
func (r *rig) take(filter string, n int) []jetstream.Msg {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	oc, err := r.js.OrderedConsumer(ctx, r.prefix, jetstream.OrderedConsumerConfig{FilterSubjects: []string{r.prefix + "." + filter}})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []jetstream.Msg
	for len(out) < n {
		m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil {
			r.t.Fatalf("%s: %d of %d messages: %v (status %+v)", filter, len(out), n, err, r.in.Status())
		}
		out = append(out, m)
	}
	if m, err := oc.Next(jetstream.FetchMaxWait(300 * time.Millisecond)); err == nil {
		r.t.Fatalf("%s: more than %d messages: %s %s", filter, n, m.Headers(), m.Data())
	}
	return out
}

// settled waits until the consumer holds nothing: every message acked.
func (r *rig) settled() {
	r.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := r.js.Consumer(ctx, r.prefix, "sluice")
		if err == nil {
			if info, err := c.Info(ctx); err == nil && info.NumAckPending == 0 && info.NumPending == 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("messages left unacked: %+v", r.in.Status())
}

func (r *rig) counters() map[string]uint64 {
	c := r.in.Status().Streams[0].Counters
	return map[string]uint64{"received": c.Received, "acked": c.Acked, "naked": c.Naked, "results": c.Results,
		"dead": c.DeadLettered, "dup": c.Duplicates, "expired": c.Expired, "skipped": c.Skipped, "redelivered": c.Redelivered}
}

func kserveBody(id string, x []float32) []byte {
	b, _ := json.Marshal(map[string]any{"id": id, "inputs": []map[string]any{{"name": "x", "shape": []int{1, len(x)}, "datatype": "FP32", "data": x}}})
	return b
}

type kserveOut struct {
	ID           string `json:"id"`
	ModelName    string `json:"model_name"`
	ModelVersion string `json:"model_version"`
	Parameters   struct {
		RequestID string `json:"sluice_request_id"`
		Status    string `json:"sluice_status"`
	} `json:"parameters"`
	Outputs []struct {
		Name     string    `json:"name"`
		Datatype string    `json:"datatype"`
		Shape    []int     `json:"shape"`
		Data     []float32 `json:"data"`
	} `json:"outputs"`
}

func TestIngress(t *testing.T) {
	srv := startNATS(t)
	eng := startFakeEngine(t)
	url := srv.ClientURL()

	t.Run("a KServe JSON request gets its result, then is acked", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		tp := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		r.publish("llm", map[string]string{"X-Model-Version": "1", "X-AI-Intent": "reasoning", "X-AI-Timeout": "8s", "traceparent": tp,
			"Content-Type": "application/json", "Nats-Msg-Id": "client-7"}, kserveBody("job-1", []float32{0.5, -1, 2, 0}))
		m := r.take("results.double", 1)[0]
		h := m.Headers()
		meta, _ := m.Metadata()
		_ = meta
		if h.Get(HeaderStatus) != "ok" || h.Get(HeaderKind) != KindResult || h.Get(HeaderRequestID) != r.prefix+":1" ||
			h.Get("traceparent") != tp || h.Get(HeaderInputMsgID) != "client-7" || h.Get(HeaderNatsMsgID) != "sluice:"+r.prefix+":1" ||
			h.Get(jobmsg.HeaderContentType) != jobmsg.ContentJSON || h.Get(HeaderVersion) != "1.0.0" {
			t.Fatalf("headers %v", h)
		}
		var out kserveOut
		if err := json.Unmarshal(m.Data(), &out); err != nil {
			t.Fatalf("%v: %s", err, m.Data())
		}
		if out.ID != "job-1" || out.ModelName != "double" || out.Parameters.RequestID != r.prefix+":1" || out.Parameters.Status != "ok" ||
			len(out.Outputs) != 1 || out.Outputs[0].Datatype != "FP32" || fmt.Sprint(out.Outputs[0].Shape) != "[1 4]" ||
			fmt.Sprint(out.Outputs[0].Data) != "[1 -2 4 0]" {
			t.Fatalf("result %s", m.Data())
		}
		r.settled()
		if c := r.counters(); c["results"] != 1 || c["acked"] != 1 || c["dead"] != 0 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("a signed Sluice frame is the whole request; the result is a frame with its id", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		x := sluice.NewTensor("x", []uint64{2, 2}, []float32{1, 2, 3, 4})
		frame := signedFrame(t, wire.Repr{Kind: wire.KindRequest, RequestID: 4242, TenantID: 1, Model: "double", ModelVersion: "1",
			Tensors: []wire.TensorRepr{{Name: x.Name, DType: x.DType, Dims: x.Dims, Data: x.Data}}}, testKey)
		r.publish("anything", nil, frame) // told by its magic
		m := r.take("results.double", 1)[0]
		f, err := wire.Parse(m.Data())
		if err != nil || f.Kind() != wire.KindResponse || f.RequestID() != 4242 || m.Headers().Get(jobmsg.HeaderContentType) != jobmsg.ContentFrame {
			t.Fatalf("result frame: %v %v", err, m.Headers())
		}
		d, _ := f.TensorByName("y")
		y, _ := sluice.Values[float32](sluice.Output{Name: "y", DType: d.DType, Dims: d.Dims(), Data: f.TensorData(d)})
		if fmt.Sprint(y) != "[2 4 6 8]" {
			t.Fatalf("y = %v", y)
		}
		r.settled()
	})

	t.Run("errors retrying cannot fix are dead-lettered with code and message, then acked", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		before := eng.count("double")
		x := sluice.NewTensor("x", []uint64{1}, []float32{1})
		unsigned, _, _ := (&wire.Repr{Kind: wire.KindRequest, RequestID: 1, TenantID: 1, Model: "double", ModelVersion: "1",
			Tensors: []wire.TensorRepr{{Name: x.Name, DType: x.DType, Dims: x.Dims, Data: x.Data}}}).Append(nil)
		cases := []struct {
			tok, code string
			h         map[string]string
			body      []byte
		}{
			{"double", "model_version_required", nil, kserveBody("", []float32{1})},
			{"nosuch", "unknown_model", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1})},
			{"double", "bad_message", map[string]string{"X-Model-Version": "1", "Content-Type": "application/json"}, []byte(`{"inputs": [`)},
			{"double", "bad_tensor", map[string]string{"X-Model-Version": "1"}, []byte(`{"inputs":[{"name":"x","shape":[2,2],"datatype":"FP32","data":[1,2,3]}]}`)},
			{"double", "bad_tensor", map[string]string{"X-Model-Version": "1"}, []byte(`{"inputs":[{"name":"x","shape":[1],"datatype":"BYTES","data":["a"]}]}`)},
			{"double", "bad_message", map[string]string{"X-Model-Version": "1", "X-AI-Timeout": "8"}, kserveBody("", []float32{1})},
			{"double", "bad_message", map[string]string{"X-Model-Version": "1", "Content-Type": "text/plain"}, []byte("hello")},
			{"double", "forbidden", map[string]string{"X-Model-Version": "1", "X-Tenant": "stranger"}, kserveBody("", []float32{1})},
			{"double", "unauthenticated", nil, unsigned},
			{"double", "malformed_frame", nil, append([]byte("SLCE"), make([]byte, 40)...)},
		}
		for _, c := range cases {
			r.publish(c.tok, c.h, c.body)
		}
		got := map[string]int{}
		for _, m := range r.take("dlq.>", len(cases)) {
			h := m.Headers()
			if h.Get(HeaderKind) != KindDeadLetter || h.Get(HeaderError) == "" || h.Get(HeaderRequestID) == "" {
				t.Fatalf("dead letter headers %v", h)
			}
			got[h.Get(HeaderStatus)]++
		}
		want := map[string]int{}
		for _, c := range cases {
			want[c.code]++
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("codes %v, want %v", got, want)
		}
		r.settled()
		if n := eng.count("double") - before; n != 0 {
			t.Fatalf("%d of them reached the data plane", n)
		}
		c := r.in.Status().Streams[0].Counters
		if c.DeadLettered != uint64(len(cases)) || c.DeadLetterCodes["bad_message"] != 3 || c.Acked != uint64(len(cases)) {
			t.Fatalf("counters %+v", c)
		}
	})

	t.Run("the dead letter keeps the request's body and headers for a replay", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		body := kserveBody("keep", []float32{3})
		r.publish("nosuch", map[string]string{"X-Model-Version": "7", "X-AI-Intent": "chat"}, body)
		m := r.take("dlq.nosuch", 1)[0]
		if string(m.Data()) != string(body) || m.Headers().Get("X-Model-Version") != "7" || m.Headers().Get("X-AI-Intent") != "chat" ||
			m.Headers().Get(HeaderSubject) != r.prefix+".nosuch" {
			t.Fatalf("dead letter %v %s", m.Headers(), m.Data())
		}
	})

	t.Run("a message past its X-AI-Timeout is dead-lettered as expired, not run", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		before := eng.count("double")
		r.publish("double", map[string]string{"X-Model-Version": "1", "X-AI-Timeout": "20ms"}, kserveBody("", []float32{1}))
		time.Sleep(50 * time.Millisecond) // stored, then the ingress starts late
		r.start()
		m := r.take("dlq.double", 1)[0]
		if m.Headers().Get(HeaderStatus) != jobmsg.CodeExpired {
			t.Fatalf("dead letter %v", m.Headers())
		}
		r.settled()
		if eng.count("double") != before {
			t.Fatal("an expired message was run")
		}
		if c := r.counters(); c["expired"] != 1 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("busy is resent at once a few times, then nak'ed and redelivered", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		eng.busyLeft.Store(2) // within busy_retries = 2: answered on the third try
		r.publish("busy", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		r.take("results.busy", 1)
		r.settled()
		if c := r.counters(); c["naked"] != 0 || c["results"] != 1 {
			t.Fatalf("counters %v", c)
		}
		eng.busyLeft.Store(7) // three tries per delivery: nak'ed twice, then answered
		r.publish("busy", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{2}))
		r.take("results.busy", 2)
		r.settled()
		if c := r.counters(); c["naked"] != 2 || c["redelivered"] != 2 || c["results"] != 2 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("max_deliver: a retryable failure on the last delivery is dead-lettered gave_up", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) { c.Jobs.Streams[0].MaxDeliver = 2; c.Jobs.BusyRetries = 0 })
		r.start()
		eng.busyLeft.Store(1 << 30)
		defer eng.busyLeft.Store(0)
		r.publish("busy", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		m := r.take("dlq.busy", 1)[0]
		if m.Headers().Get(HeaderStatus) != jobmsg.CodeGaveUp || m.Headers().Get(HeaderDeliveries) != "2" {
			t.Fatalf("dead letter %v", m.Headers())
		}
		r.settled()
	})

	t.Run("max_deliver is finite by default: a reply subject no stream stores ends gave_up", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) {
			c.Jobs.Streams[0].ReplyPrefixes = map[string][]string{"demo": {"nowhere"}}
		})
		if got := r.cfg.Jobs.Streams[0].MaxDeliver; got != config.JobMaxDeliverDefault || got < 1 {
			t.Fatalf("default max_deliver %d", got)
		}
		r.start()
		before := eng.count("double")
		r.publish("double", map[string]string{"X-Model-Version": "1", "X-Reply-To": "nowhere.c1"}, kserveBody("", []float32{1}))
		m := r.take("dlq.double", 1)[0]
		want := fmt.Sprint(config.JobMaxDeliverDefault)
		if m.Headers().Get(HeaderStatus) != jobmsg.CodeGaveUp || m.Headers().Get(HeaderDeliveries) != want ||
			!strings.Contains(m.Headers().Get(HeaderError), "no stream stores nowhere.c1") {
			t.Fatalf("dead letter %v", m.Headers())
		}
		r.settled()
		if n := eng.count("double") - before; n != config.JobMaxDeliverDefault {
			t.Fatalf("run %d times, want once per delivery (%d)", n, config.JobMaxDeliverDefault)
		}
		if c := r.counters(); c["naked"] != uint64(config.JobMaxDeliverDefault-1) || c["dead"] != 1 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("a delivery past max_deliver (the last one's appliance died holding it) is dead-lettered gave_up without running", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) { c.Jobs.Streams[0].MaxDeliver = 1 })
		before := eng.count("double")
		r.publish("double", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		// Delivery 1 goes to an "appliance" that dies holding it: fetched,
		// never acked, its ack wait runs out.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := r.js.CreateOrUpdateConsumer(ctx, r.prefix, jetstream.ConsumerConfig{Durable: "sluice",
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: 200 * time.Millisecond, FilterSubject: r.prefix + ".*"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for range b.Messages() {
			got++
		}
		if got != 1 {
			t.Fatalf("fetched %d messages, want 1", got)
		}
		time.Sleep(400 * time.Millisecond)
		r.start()
		m := r.take("dlq.double", 1)[0]
		if m.Headers().Get(HeaderStatus) != jobmsg.CodeGaveUp || m.Headers().Get(HeaderDeliveries) != "2" {
			t.Fatalf("dead letter %v", m.Headers())
		}
		r.settled()
		if n := eng.count("double") - before; n != 0 {
			t.Fatalf("run %d times past max_deliver, want 0", n)
		}
	})

	t.Run("an X-Reply-To outside the tenant's reply_prefixes is dead-lettered reply_to_refused, not run", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) {
			c.Jobs.Streams[0].ReplyPrefixes = map[string][]string{"demo": {r0Replies(c)}}
		})
		r.start()
		before := eng.count("double")
		bad := []string{"$KV.sluice_fleet.models.mlp", "$JS.API.STREAM.DELETE." + r.prefix, "$SYS.REQ.SERVER.PING",
			r.prefix + ".elsewhere", r.prefix + "-repliesx.c1"}
		for _, to := range bad {
			r.publish("double", map[string]string{"X-Model-Version": "1", "X-Reply-To": to}, kserveBody("", []float32{1}))
		}
		for _, m := range r.take("dlq.double", len(bad)) {
			if m.Headers().Get(HeaderStatus) != jobmsg.CodeReplyToRefused || !strings.Contains(m.Headers().Get(HeaderError), "X-Reply-To") {
				t.Fatalf("dead letter %v", m.Headers())
			}
		}
		r.settled()
		if n := eng.count("double") - before; n != 0 {
			t.Fatalf("%d refused requests ran", n)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(r.in)
		want := fmt.Sprintf("sluice_jobs_dead_lettered_total{code=\"reply_to_refused\",consumer=\"sluice\",stream=%q} %d\n", r.prefix, len(bad))
		if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP sluice_jobs_dead_lettered_total Dead letters stored, by code.\n# TYPE sluice_jobs_dead_lettered_total counter\n"+want), "sluice_jobs_dead_lettered_total"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("X-Reply-To takes the result; X-Tenant picks a listed tenant", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) {
			c.Jobs.Streams[0].ReplyPrefixes = map[string][]string{"demo": {r0Replies(c)}}
		})
		r.start()
		ctx := context.Background()
		if _, err := r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.prefix + "-replies", Subjects: []string{r.prefix + "-replies.>"}}); err != nil {
			t.Fatal(err)
		}
		r.publish("double", map[string]string{"X-Model-Version": "1", "X-Reply-To": r.prefix + "-replies.client9"}, kserveBody("r", []float32{4}))
		oc, _ := r.js.OrderedConsumer(ctx, r.prefix+"-replies", jetstream.OrderedConsumerConfig{})
		m, err := oc.Next(jetstream.FetchMaxWait(10 * time.Second))
		if err != nil || m.Subject() != r.prefix+"-replies.client9" || !strings.Contains(string(m.Data()), `"data":[8]`) {
			t.Fatalf("reply: %v %v", err, m)
		}
		// Tenant "other" signs with another key, which the stand-in engine
		// refuses: the ingress takes it for a stale key and retries.
		r.publish("double", map[string]string{"X-Model-Version": "1", "X-Tenant": "other"}, kserveBody("", []float32{1}))
		deadline := time.Now().Add(5 * time.Second)
		for r.counters()["naked"] == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if r.counters()["naked"] == 0 {
			t.Fatal("a refused key was not nak'ed")
		}
	})

	t.Run("a structured section body travels as $section with its schema id", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		r.publish("echo", map[string]string{"X-Model-Version": "1", "Content-Type": jobmsg.ContentSection, "X-Schema-Id": "3"}, []byte(`{"intent":"reasoning"}`))
		m := r.take("results.echo", 1)[0]
		if !strings.Contains(string(m.Data()), `"name":"$section","datatype":"UINT8","shape":[22]`) {
			t.Fatalf("result %s", m.Data())
		}
		r.publish("echo", map[string]string{"X-Model-Version": "1", "Content-Type": jobmsg.ContentSection}, []byte(`{}`))
		if d := r.take("dlq.echo", 1)[0]; d.Headers().Get(HeaderStatus) != jobmsg.CodeBadMessage {
			t.Fatalf("no schema id: %v", d.Headers())
		}
	})

	t.Run("a redelivery while the first delivery still runs adds no second result (Nats-Msg-Id)", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) {
			// Outside what config allows on purpose: the ack wait ends
			// while the request runs, so JetStream redelivers it at once.
			c.Jobs.Streams[0].AckWaitMs = 200
		})
		eng.slowDelay.Store(int64(600 * time.Millisecond))
		defer eng.slowDelay.Store(int64(300 * time.Millisecond))
		r.start()
		r.publish("slow", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		r.take("results.slow", 1) // fails if a second one is stored
		deadline := time.Now().Add(5 * time.Second)
		for r.counters()["dup"] == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if c := r.counters(); c["dup"] == 0 || c["redelivered"] == 0 || c["results"] != 1 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("results and dead letters met under the filter are skipped", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		r.publish("double", map[string]string{HeaderKind: KindResult}, []byte("{}"))
		r.settled()
		if c := r.counters(); c["skipped"] != 1 || c["results"] != 0 {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("drain stops fetching, finishes what it holds and acks it", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		const n = 20
		for i := range n {
			r.publish("slow", map[string]string{"X-Model-Version": "1"}, kserveBody(fmt.Sprint(i), []float32{1}))
		}
		deadline := time.Now().Add(5 * time.Second)
		for r.in.Status().Streams[0].InFlight < n && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := r.in.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		st := r.in.Status()
		if !st.Draining || st.Streams[0].State != stateStopped || st.Streams[0].InFlight != 0 {
			t.Fatalf("after drain: %+v", st)
		}
		r.take("results.slow", n)
		r.settled()
		if c := r.counters(); c["acked"] != n || c["results"] != n {
			t.Fatalf("counters %v", c)
		}
	})

	t.Run("max_ack_pending bounds what is handed out; the rest waits in the stream", func(t *testing.T) {
		r := newRig(t, url, eng, func(c *config.Config) { c.Jobs.Streams[0].MaxAckPending, c.Jobs.Streams[0].InflightMax = 4, 4 })
		r.start()
		const n = 12
		for i := range n {
			r.publish("slow", map[string]string{"X-Model-Version": "1"}, kserveBody(fmt.Sprint(i), []float32{1}))
		}
		ctx := context.Background()
		c, err := r.js.Consumer(ctx, r.prefix, "sluice")
		if err != nil {
			t.Fatal(err)
		}
		sawLag := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			info, err := c.Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if info.NumAckPending > 4 || r.in.Status().Streams[0].InFlight > 4 {
				t.Fatalf("more than max_ack_pending handed out: %+v", info)
			}
			sawLag = sawLag || info.NumPending > 0
			if info.NumPending == 0 && info.NumAckPending == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if !sawLag {
			t.Fatal("the backlog never waited in the stream")
		}
		r.take("results.slow", n)
	})

	t.Run("metrics carry the counters per stream", func(t *testing.T) {
		r := newRig(t, url, eng, nil)
		r.start()
		r.publish("double", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		r.publish("nosuch", map[string]string{"X-Model-Version": "1"}, kserveBody("", []float32{1}))
		r.take("results.double", 1)
		r.take("dlq.nosuch", 1)
		r.settled()
		reg := prometheus.NewRegistry()
		reg.MustRegister(r.in)
		want := fmt.Sprintf("sluice_jobs_dead_lettered_total{code=\"unknown_model\",consumer=\"sluice\",stream=%q} 1\n", r.prefix)
		if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP sluice_jobs_dead_lettered_total Dead letters stored, by code.\n# TYPE sluice_jobs_dead_lettered_total counter\n"+want), "sluice_jobs_dead_lettered_total"); err != nil {
			t.Fatal(err)
		}
		n, err := testutil.GatherAndCount(reg, "sluice_jobs_acked_total", "sluice_jobs_in_flight", "sluice_jobs_consumer_lag", "sluice_jobs_redelivered_total", "sluice_jobs_naked_total")
		if err != nil || n != 5 {
			t.Fatalf("%d series: %v", n, err)
		}
	})
}

// r0Replies is the reply prefix of a rig's stream: P-replies.
func r0Replies(c *config.Config) string { return c.Jobs.Streams[0].Stream + "-replies" }

func signedFrame(t *testing.T, r wire.Repr, key []byte) []byte {
	t.Helper()
	r.Flags |= wire.FlagAuthenticated
	b, _, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := wire.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	wire.NewTenantKey(key).Sign(&f)
	return b
}
