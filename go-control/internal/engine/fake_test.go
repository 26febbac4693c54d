package engine

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

func newFake(t *testing.T) *Fake {
	t.Helper()
	cfg, err := config.Load("../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	e, err := Open("fake", js)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	return e.(*Fake)
}

func TestOpenUnknown(t *testing.T) {
	if _, err := Open("warp-drive", []byte("{}")); !errors.Is(err, errs.ErrUnsupported) {
		t.Fatalf("got %v", err)
	}
}

func TestApplyIsAllOrNothing(t *testing.T) {
	f := newFake(t)
	// A new shard and a route to it together are fine.
	err := f.Apply(
		Change{SectionShards, []byte(`[{"name":"a","max_concurrency":1,"queue_depth":4}]`)},
		Change{SectionRoutes, []byte(`[{"name":"r","model":"m","shard":"a"}]`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	// A good shard set with a bad route set: nothing changes.
	err = f.Apply(
		Change{SectionShards, []byte(`[{"name":"b","max_concurrency":1,"queue_depth":4}]`)},
		Change{SectionRoutes, []byte(`[{"name":"r","shard":"zzz"}]`)},
	)
	if !errors.Is(err, errs.ErrInvalidConfig) || !strings.Contains(err.Error(), `routes[0].shard: unknown shard "zzz"`) {
		t.Fatalf("got %v", err)
	}
	if c := f.Config(); c.Shards[0].Name != "a" || c.Routes[0].Shard != "a" {
		t.Fatalf("refused set leaked: %+v %+v", c.Shards, c.Routes)
	}
	if err := f.Apply(Change{SectionRoutes, []byte(`[{"name":"r","shard":"a","colour":1}]`)}); !errors.Is(err, errs.ErrInvalidConfig) {
		t.Fatalf("unknown field: %v", err)
	}
}

func TestAliasAndModels(t *testing.T) {
	f := newFake(t)
	if err := f.LoadModel(config.Model{Name: "mlp", Version: "2.0.0", Kind: "null"}); err != nil {
		t.Fatal(err)
	}
	if err := f.LoadModel(config.Model{Name: "mlp", Version: "2.0.0", Kind: "null"}); !errors.Is(err, errs.ErrAlreadyExists) {
		t.Fatalf("dup load: %v", err)
	}
	if err := f.SetAlias("mlp", "1", "2.0.0"); err != nil {
		t.Fatal(err)
	}
	if err := f.SetAlias("mlp", "1", "9.9"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing version: %v", err)
	}
	ms, _ := f.Models()
	for _, m := range ms {
		has := strings.Contains(strings.Join(m.Aliases, ","), "1")
		if m.Name == "mlp" && has != (m.Version == "2.0.0") {
			t.Fatalf("alias not moved: %+v", ms)
		}
	}
}

func TestStopDrains(t *testing.T) {
	f := newFake(t)
	if err := f.Begin(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- f.Stop(context.Background()) }()
	// Once draining, new requests are refused.
	for f.Begin() == nil {
		f.End()
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("Stop returned %v with a request in flight", err)
	default:
	}
	f.End()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := f.Stop(context.Background()); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("second stop: %v", err)
	}
}

func TestStopTimeout(t *testing.T) {
	f := newFake(t)
	_ = f.Begin()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := f.Stop(ctx); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeEngineJSON(t *testing.T) {
	// The shape the Rust engine serialises (StatsSnapshot), trimmed.
	js := `{"workers":[{"index":0,"core":1,"epoch":3,"ok":10,"errors":[["no_route",2],["busy",1]],"pings":0,
	"negotiations":0,"not_sluice":0,"tx_no_buffers":0,"payload_bytes_copied":0,"rx_frames":13,"tx_frames":13,
	"rx_no_buffers":0,"tx_errors":0,"rx_in_use":1,"tx_in_use":0,"buffer_reuses":12,"sleeps":4,
	"latency":{"count":13,"p50_ns":5000,"p90_ns":7000,"p99_ns":9000,"p999_ns":9000,"max_ns":9100},"shards":[]}],
	"shards":[{"name":"s","local":true,"requests":12,"errors":2,"queue":{"count":12,"p50_ns":1,"p90_ns":2,"p99_ns":3,"p999_ns":3,"max_ns":3},
	"service":{"count":12,"p50_ns":4,"p90_ns":5,"p99_ns":6,"p999_ns":6,"max_ns":6}}],
	"latency":{"count":13,"p50_ns":5000,"p90_ns":7000,"p99_ns":9000,"p999_ns":9000,"max_ns":9100}}`
	var st Stats
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&st); err != nil {
		t.Fatal(err)
	}
	w := st.Workers[0]
	if w.Errors["no_route"] != 2 || w.Requests() != 13 || w.Latency.P99Ns != 9000 || st.Shards[0].Errors != 2 {
		t.Fatalf("decoded %+v", st)
	}
	var e ErrorCounts
	if err := json.Unmarshal([]byte(`{"busy":3}`), &e); err != nil || e["busy"] != 3 {
		t.Fatalf("object form: %v %v", err, e)
	}
	if err := json.Unmarshal([]byte(`[["busy"]]`), &e); err == nil {
		t.Fatal("bad pairs accepted")
	}
}

func TestFakeConnections(t *testing.T) {
	f := newFake(t)
	if cs, err := f.Connections(); err != nil || len(cs) != 0 {
		t.Fatalf("fresh engine lists %v, %v", cs, err)
	}
	a, err := f.Connect(Connection{Transport: "rdma", Worker: 0, Peer: "10.0.0.2:50000", Device: "rxe0"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Connect(Connection{Transport: "rdma", Worker: 1, Peer: "10.0.0.3:50001", Device: "rxe0"})
	if a == b || !f.CountConnection(a, 3, 300, 3, 600, 1) || f.CountConnection(99, 1, 1, 1, 1, 0) {
		t.Fatalf("ids %d %d or counting misbehaved", a, b)
	}
	cs, _ := f.Connections()
	if len(cs) != 2 || cs[0].ID != a || cs[0].State != "up" || cs[0].RxFrames != 3 || cs[0].TxBytes != 600 || cs[0].Errors != 1 || cs[1].RxFrames != 0 {
		t.Fatalf("connections: %+v", cs)
	}
	if err := f.CloseConnection(99); !errors.Is(err, errs.ErrNotFound) || !strings.Contains(err.Error(), "no connection 99") {
		t.Fatalf("unknown id: %v", err)
	}
	if err := f.CloseConnection(a); err != nil {
		t.Fatal(err)
	}
	if err := f.CloseConnection(a); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("second close: %v", err)
	}
	if cs, _ := f.Connections(); len(cs) != 1 || cs[0].ID != b {
		t.Fatalf("after close: %+v", cs)
	}
	// The closed connection's counts stay in worker 0's totals.
	tot, _ := f.ConnectionTotals()
	if len(tot) != 2 || tot[0].Worker != 0 || tot[0].Open != 0 || tot[0].Accepted != 1 || tot[0].Closed != 1 ||
		tot[0].RxFrames != 3 || tot[0].TxBytes != 600 || tot[0].Errors != 1 || tot[1].Worker != 1 || tot[1].Open != 1 {
		t.Fatalf("totals: %+v", tot)
	}
	// Stopping tears the transport down; a stopped engine accepts nothing.
	if err := f.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if cs, _ := f.Connections(); len(cs) != 0 {
		t.Fatalf("after stop: %+v", cs)
	}
	if tot, _ := f.ConnectionTotals(); len(tot) != 0 {
		t.Fatalf("totals after stop: %+v", tot)
	}
	if _, err := f.Connect(Connection{Transport: "rdma"}); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("connect after stop: %v", err)
	}
}

func TestDecodeEngineConnections(t *testing.T) {
	// The shape sluice_engine_query(6) returns (the engine's ConnStatus).
	js := `[{"id":7,"transport":"rdma","listen":"10.99.0.1:7471","worker":0,"peer":"10.99.0.1:43210","device":"rxe0",
	"state":"up","rx_frames":5,"rx_bytes":5120,"rx_large":1,"tx_frames":5,"tx_bytes":5200,"tx_large":1,"errors":0},
	{"id":8,"transport":"rdma","listen":"10.99.0.1:7471","worker":1,"peer":null,"device":"rxe0","state":"accepting",
	"rx_frames":0,"rx_bytes":0,"rx_large":0,"tx_frames":0,"tx_bytes":0,"tx_large":0,"errors":0}]`
	var cs []Connection
	d := json.NewDecoder(strings.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].ID != 7 || cs[0].RxLarge != 1 || cs[0].Peer != "10.99.0.1:43210" || cs[1].Peer != "" || cs[1].State != "accepting" {
		t.Fatalf("decoded %+v", cs)
	}
}
