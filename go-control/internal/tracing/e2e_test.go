package tracing_test

// Traces end to end with the real parts: two real engines (A forwards a
// shard it lacks to B) exporting through the OTel SDK to a real
// OpenTelemetry Collector (tests/otelcol, OTLP receiver and file
// exporter, built by scripts/build-otelcol.sh into .cache/bin), whose
// output file is read back and checked: the tree across both appliances,
// the attributes, and that unsampled requests made no span.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/otelcoltest"
	_ "github.com/sluice-ai/sluice/go-control/internal/rustengine"
	"github.com/sluice-ai/sluice/go-control/internal/tracing"
)

func open(t *testing.T, cfg string) engine.Engine {
	e, err := engine.Open("rust", []byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = e.Stop(ctx, 0)
		if c, ok := e.(interface{ Close() }); ok {
			c.Close()
		}
	})
	return e
}

const engineCfg = `{
  "engine": {"workers": [0], "poll": "adaptive", "rx_burst_max": 16},
  "io_uring": {"listen": "127.0.0.1:0", "rx_buffers": 64, "tx_buffers": 64, "buffer_size": 4096},
  "auth": {"mode": "none"},
  "host": {"labels": {"gpu": %q}},
  "shards": [{"name": "near", "labels": {"gpu": %q}}, {"name": "far", "labels": {"gpu": "hbm2"}}],
  "routes": [{"name": "far", "intent": "far", "shard": "far"}, {"name": "rest", "model": "null", "shard": "near"}],
  "models": [{"name": "null", "version": "1", "kind": "null"}],
  "tracing": {"sample_ratio": 0.5},
  "peers": [%s]
}`

// request builds a request frame: model null, version 1, the trace
// context given, intent as given, declared token count.
func request(id uint64, traceID [16]byte, parent [8]byte, flags byte, intent string, tokens uint32) []byte {
	model, version := "null", "1"
	hl := 96 + len(model) + len(version) + len(intent)
	f := make([]byte, hl)
	copy(f, "SLCE")
	f[4], f[5] = 1, 1
	binary.LittleEndian.PutUint16(f[8:], uint16(hl))
	binary.LittleEndian.PutUint64(f[16:], id)
	binary.LittleEndian.PutUint32(f[44:], tokens)
	copy(f[48:], traceID[:])
	copy(f[64:], parent[:])
	f[72] = flags
	f[73], f[74], f[76] = byte(len(model)), byte(len(version)), byte(len(intent))
	copy(f[96:], model+version+intent)
	return f
}

func roundtrip(t *testing.T, c net.Conn, f []byte) []byte {
	t.Helper()
	if _, err := c.Write(f); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return buf[:n]
}

func tid(b byte, low byte) [16]byte {
	var t [16]byte
	for i := range t {
		t[i] = b
	}
	t[15] = low
	t[8] = low // the ratio looks at bytes 8..16
	return t
}

func TestTracesThroughTwoAppliancesToARealCollector(t *testing.T) {
	endpoint, out := otelcoltest.Start(t)
	b := open(t, fmt.Sprintf(engineCfg, "hbm2", "hbm2", ""))
	bs, err := b.Status()
	if err != nil {
		t.Fatal(err)
	}
	a := open(t, fmt.Sprintf(engineCfg, "gddr6", "gddr6",
		fmt.Sprintf(`{"name": "b", "address": %q, "labels": {"gpu": "hbm2"}}`, bs.Listen)))
	as, _ := a.Status()
	names := func() ([]string, map[uint32]string) { return []string{"near", "far"}, nil }
	ctx := context.Background()
	xa, err := tracing.New(ctx, a.(engine.SpanSource), tracing.Options{Endpoint: endpoint, ServiceName: "sluice-a", Interval: 50 * time.Millisecond, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	xb, err := tracing.New(ctx, b.(engine.SpanSource), tracing.Options{Endpoint: endpoint, ServiceName: "sluice-b", Interval: 50 * time.Millisecond, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	xa.Start()
	xb.Start()

	c, err := net.Dial("udp", as.Listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	parent := [8]byte{1, 2, 3, 4, 5, 6, 7, 8}
	// Sampled by the caller: 4 served on A, 4 forwarded to B.
	sampledLocal, sampledFar := tid(0xa1, 0x01), tid(0xa2, 0x02)
	// Undecided (flags 0, no parent): the ratio 0.5 keeps a low trace id,
	// drops a high one, on both appliances alike.
	headKept, headDropped := tid(0xb1, 0x10), tid(0xb2, 0xf0)
	// Decided against by the caller (a parent, bit clear), and no trace.
	notSampled, noTrace := tid(0xc1, 0x01), [16]byte{}
	type send struct {
		trace  [16]byte
		parent [8]byte
		flags  byte
		intent string
	}
	sends := []send{
		{sampledLocal, parent, 1, ""}, {sampledFar, parent, 1, "far"},
		{headKept, [8]byte{}, 0, "far"}, {headDropped, [8]byte{}, 0, "far"},
		{notSampled, parent, 0, ""}, {notSampled, parent, 0, "far"},
		{noTrace, [8]byte{}, 0, ""}, {noTrace, [8]byte{}, 1, "far"},
	}
	const perKind = 4
	id := uint64(1)
	for _, s := range sends {
		for k := 0; k < perKind; k++ {
			ans := roundtrip(t, c, request(id, s.trace, s.parent, s.flags, s.intent, 100+uint32(k)))
			if ans[5] != 2 {
				t.Fatalf("request %d (%x intent %q): kind %d, want a response", id, s.trace[:2], s.intent, ans[5])
			}
			// The answer carries the trace context back.
			if string(ans[48:64]) != string(s.trace[:]) || ans[72] != s.flags {
				t.Fatalf("answer to %d lost the trace context", id)
			}
			id++
		}
	}

	// Everything drained and flushed: the rings, then the SDK's batch.
	var spans []otelcoltest.Span
	deadline := time.Now().Add(15 * time.Second)
	for {
		xa.DrainOnce()
		xb.DrainOnce()
		_ = xa.ForceFlush(ctx)
		_ = xb.ForceFlush(ctx)
		spans = otelcoltest.Read(t, out)
		n := 0
		for _, s := range spans {
			if strings.HasPrefix(s.Name, "sluice.") {
				n++
			}
		}
		// A: 4 local + 4 far + 4 head-kept forwards; B: 8 forwarded-in.
		if n >= 20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	byID := map[string]*otelcoltest.Span{}
	for i := range spans {
		byID[spans[i].SpanID] = &spans[i]
	}
	count := map[string]int{}
	for i := range spans {
		s := &spans[i]
		if !strings.HasPrefix(s.Name, "sluice.") {
			continue
		}
		count[s.Service+" "+s.Name+" "+s.TraceID[:4]]++
	}
	hx := func(b [16]byte) string { return hex.EncodeToString(b[:2]) }
	want := map[string]int{
		"sluice-a sluice.request " + hx(sampledLocal): perKind,
		"sluice-a sluice.forward " + hx(sampledFar):   perKind,
		"sluice-b sluice.request " + hx(sampledFar):   perKind,
		"sluice-a sluice.forward " + hx(headKept):     perKind,
		"sluice-b sluice.request " + hx(headKept):     perKind,
	}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d spans, want %d", k, count[k], n)
		}
	}
	if len(count) != len(want) {
		t.Errorf("spans of requests that were not to be traced: %v", count)
	}
	pHex := hex.EncodeToString(parent[:])
	stagesSeen := map[string]bool{}
	for i := range spans {
		s := &spans[i]
		switch {
		case s.Name == "sluice.request" && s.Service == "sluice-b":
			// B's span is a child of A's forwarding span, in the same trace.
			p := byID[s.ParentSpanID]
			if p == nil || p.Name != "sluice.forward" || p.Service != "sluice-a" || p.TraceID != s.TraceID {
				t.Fatalf("B's span %s has parent %s, want A's forward span", s.SpanID, s.ParentSpanID)
			}
			// B serves the shard A lacks (its "far" carries B's labels).
			if s.Attr("sluice.shard") != "far" || s.Attr("sluice.model") != "null" || s.Attr("sluice.model_version") != "1" || s.Attr("sluice.outcome_code") != "0" {
				t.Errorf("B's attributes: shard %q model %q version %q outcome %q", s.Attr("sluice.shard"), s.Attr("sluice.model"), s.Attr("sluice.model_version"), s.Attr("sluice.outcome_code"))
			}
		case s.Name == "sluice.forward":
			if s.TraceID == hex.EncodeToString(sampledFar[:]) && s.ParentSpanID != pHex {
				t.Errorf("A's forward span's parent is %s, want the caller's %s", s.ParentSpanID, pHex)
			}
			if s.TraceID == hex.EncodeToString(headKept[:]) && s.ParentSpanID != "" {
				t.Errorf("a head-sampled request starts the trace, parent %q", s.ParentSpanID)
			}
			if s.Attr("sluice.shard") != "far" {
				t.Errorf("forward span shard %q", s.Attr("sluice.shard"))
			}
		case s.Name == "sluice.request":
			if s.ParentSpanID != pHex || s.Attr("sluice.shard") != "near" {
				t.Errorf("A's local span: parent %s shard %q", s.ParentSpanID, s.Attr("sluice.shard"))
			}
			tok := s.Attr("sluice.token_count")
			if tok < "100" || tok > "103" {
				t.Errorf("token count %q", tok)
			}
		default:
			// A stage: a child of a request or forward span, inside it.
			p := byID[s.ParentSpanID]
			if p == nil || !strings.HasPrefix(p.Name, "sluice.") {
				t.Fatalf("stage %s has no request parent", s.Name)
			}
			if s.StartTimeUnixNano < p.StartTimeUnixNano || s.EndTimeUnixNano > p.EndTimeUnixNano {
				t.Errorf("stage %s [%s, %s] outside its request [%s, %s]", s.Name, s.StartTimeUnixNano, s.EndTimeUnixNano, p.StartTimeUnixNano, p.EndTimeUnixNano)
			}
			stagesSeen[p.Name+"/"+s.Name] = true
		}
	}
	for _, st := range []string{"sluice.request/parse_auth", "sluice.request/route", "sluice.request/queue", "sluice.request/inference", "sluice.request/send", "sluice.forward/route", "sluice.forward/send"} {
		if !stagesSeen[st] {
			t.Errorf("no %s stage span (saw %v)", st, stagesSeen)
		}
	}
	// The rings counted what they recorded; nothing dropped.
	for name, e := range map[string]engine.Engine{"A": a, "B": b} {
		st, err := e.Stats()
		if err != nil {
			t.Fatal(err)
		}
		var rec, drop uint64
		for _, w := range st.Workers {
			rec += w.SpansRecorded
			drop += w.SpansDropped
		}
		wantRec := map[string]uint64{"A": 3 * perKind, "B": 2 * perKind}[name]
		if rec != wantRec || drop != 0 {
			t.Errorf("%s: %d span records, %d dropped; want %d, 0", name, rec, drop, wantRec)
		}
	}
	if err := xa.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	if err := xb.Shutdown(ctx); err != nil {
		t.Error(err)
	}
}
