package jobs

import (
	"encoding/binary"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluice-ai/sluice/clients/go/wire"
	"github.com/sluice-ai/sluice/go-control/internal/config"
)

// A stand-in data plane for the package's own tests: a UDP responder that
// speaks the wire format, checks the tenant's tag, and answers by model.
// The real engine is exercised by the end-to-end tests (e2e/).
//
//	double: y = 2x (f32), version "1.0.0"
//	echo:   the inputs back, section included
//	busy:   busy while busyLeft > 0 (each answer takes one), then as double
//	slow:   as double after slowDelay
//	other:  unknown_model
type fakeEngine struct {
	t    *testing.T
	conn *net.UDPConn
	key  *wire.TenantKey

	busyLeft  atomic.Int64
	slowDelay atomic.Int64 // ns

	mu    sync.Mutex
	calls map[string]int // requests seen, by model
}

var testKey = []byte("jobs-test-tenant-key-0123456789")

func startFakeEngine(t *testing.T) *fakeEngine {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	e := &fakeEngine{t: t, conn: c, key: wire.NewTenantKey(testKey), calls: map[string]int{}}
	e.slowDelay.Store(int64(300 * time.Millisecond))
	go e.serve()
	t.Cleanup(func() { c.Close() })
	return e
}

func (e *fakeEngine) addr() string { return e.conn.LocalAddr().String() }

func (e *fakeEngine) count(model string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[model]
}

func (e *fakeEngine) serve() {
	buf := make([]byte, 65536)
	for {
		n, from, err := e.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		req := append([]byte(nil), buf[:n]...)
		go e.answer(req, from)
	}
}

func (e *fakeEngine) answer(b []byte, to *net.UDPAddr) {
	f, err := wire.Parse(b)
	if err != nil {
		return
	}
	reply := func(r wire.Repr) {
		out, _, err := r.Append(nil)
		if err == nil {
			_, _ = e.conn.WriteToUDP(out, to)
		}
	}
	fail := func(c wire.Code, msg string) { reply(wire.ErrorFor(&f, c, msg)) }
	if f.Flags()&wire.FlagAuthenticated == 0 || f.TenantID() != 1 || !e.key.Verify(&f) {
		fail(wire.CodeUnauthenticated, "authentication failed")
		return
	}
	e.mu.Lock()
	e.calls[f.Model()]++
	e.mu.Unlock()
	if f.ModelVersion() == "" {
		fail(wire.CodeModelVersionRequired, "model version required")
		return
	}
	if d := f.DeadlineUs(); d != 0 && uint64(time.Now().UnixMicro()) > d {
		fail(wire.CodeDeadlineExceeded, "deadline passed before the request ran")
		return
	}
	var outs []wire.TensorRepr
	switch f.Model() {
	case "busy":
		if e.busyLeft.Add(-1) >= 0 {
			fail(wire.CodeBusy, "shard queue full")
			return
		}
		outs = doubled(&f)
	case "slow":
		time.Sleep(time.Duration(e.slowDelay.Load()))
		outs = doubled(&f)
	case "double":
		outs = doubled(&f)
	case "echo":
		for i := range f.NumTensors() {
			d := f.Tensor(i)
			outs = append(outs, wire.TensorRepr{Name: d.Name(), DType: d.DType, Dims: d.Dims(), Data: f.TensorData(d)})
		}
	default:
		fail(wire.CodeUnknownModel, "model "+f.Model()+" is not loaded")
		return
	}
	if outs == nil {
		fail(wire.CodeBadTensor, "want an f32 input x")
		return
	}
	reply(wire.Repr{Kind: wire.KindResponse, RequestID: f.RequestID(), TenantID: f.TenantID(), Trace: f.Trace(),
		Model: f.Model(), ModelVersion: "1.0.0", Tensors: outs})
}

// doubled is y = 2x for an f32 input named x.
func doubled(f *wire.Frame) []wire.TensorRepr {
	d, ok := f.TensorByName("x")
	if !ok || d.DType != wire.F32 {
		return nil
	}
	in := f.TensorData(d)
	out := make([]byte, len(in))
	for i := 0; i+4 <= len(in); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(in[i:]))
		binary.LittleEndian.PutUint32(out[i:], math.Float32bits(2*v))
	}
	dims := d.Dims()
	return []wire.TensorRepr{{Name: "y", DType: wire.F32, Dims: dims, Data: out}}
}

// fakeHost is the daemon as the ingress sees it.
type fakeHost struct {
	addr      string
	tenants   []config.Tenant
	cfg       *config.Config // models and [openai], for ModelKind
	frontdoor string         // FrontdoorHTTP
}

func (h *fakeHost) EngineListen() (string, error) { return h.addr, nil }

func (h *fakeHost) FrontdoorHTTP() (string, error) { return h.frontdoor, nil }

func (h *fakeHost) ModelKind(name, version string) string {
	if h.cfg == nil {
		return ""
	}
	return h.cfg.ModelKind(name, version)
}

func (h *fakeHost) Tenant(name string, id int64) (config.Tenant, bool) {
	for _, t := range h.tenants {
		if (name != "" && t.Name == name) || (name == "" && t.ID == id) {
			return t, true
		}
	}
	return config.Tenant{}, false
}

func testTenants() []config.Tenant {
	return []config.Tenant{
		{Name: "demo", ID: 1, Key: "hex:" + hexOf(testKey)},
		{Name: "other", ID: 2, Key: "hex:" + hexOf([]byte("another-tenant-key-abcdefghijk"))},
	}
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// startNATS runs one in-process nats-server with JetStream.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true,
		StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(srv.Shutdown)
	return srv
}
