package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/errs"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

func newFake(t *testing.T) *Fake {
	t.Helper()
	cfg, err := config.Load("../../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := cfg.JSON()
	if err != nil {
		t.Fatal(err)
	}
	e, err := engine.Open("fake", js)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	return e.(*Fake)
}

func TestApplyIsAllOrNothing(t *testing.T) {
	f := newFake(t)
	// A new shard and a route to it together are fine.
	err := f.Apply(
		engine.Change{Section: engine.SectionShards, Doc: []byte(`[{"name":"a","max_concurrency":1,"queue_depth":4}]`)},
		engine.Change{Section: engine.SectionRoutes, Doc: []byte(`[{"name":"r","model":"m","shard":"a"}]`)},
	)
	if err != nil {
		t.Fatal(err)
	}
	// A good shard set with a bad route set: nothing changes.
	err = f.Apply(
		engine.Change{Section: engine.SectionShards, Doc: []byte(`[{"name":"b","max_concurrency":1,"queue_depth":4}]`)},
		engine.Change{Section: engine.SectionRoutes, Doc: []byte(`[{"name":"r","shard":"zzz"}]`)},
	)
	if !errors.Is(err, errs.ErrInvalidConfig) || !strings.Contains(err.Error(), `routes[0].shard: unknown shard "zzz"`) {
		t.Fatalf("got %v", err)
	}
	if c := f.Config(); c.Shards[0].Name != "a" || c.Routes[0].Shard != "a" {
		t.Fatalf("refused set leaked: %+v %+v", c.Shards, c.Routes)
	}
	if err := f.Apply(engine.Change{Section: engine.SectionRoutes, Doc: []byte(`[{"name":"r","shard":"a","colour":1}]`)}); !errors.Is(err, errs.ErrInvalidConfig) {
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
	go func() { done <- f.Stop(context.Background(), 0) }()
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
	if err := f.Stop(context.Background(), 0); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("second stop: %v", err)
	}
}

func TestStopTimeout(t *testing.T) {
	f := newFake(t)
	_ = f.Begin()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := f.Stop(ctx, 0); !errors.Is(err, errs.ErrTimeout) {
		t.Fatalf("got %v", err)
	}
}

func TestFakeConnections(t *testing.T) {
	f := newFake(t)
	if cs, err := f.Connections(); err != nil || len(cs) != 0 {
		t.Fatalf("fresh engine lists %v, %v", cs, err)
	}
	a, err := f.Connect(engine.Connection{Transport: "rdma", Worker: 0, Peer: "10.0.0.2:50000", Device: "rxe0"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.Connect(engine.Connection{Transport: "rdma", Worker: 1, Peer: "10.0.0.3:50001", Device: "rxe0"})
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
	if err := f.Stop(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	if cs, _ := f.Connections(); len(cs) != 0 {
		t.Fatalf("after stop: %+v", cs)
	}
	if tot, _ := f.ConnectionTotals(); len(tot) != 0 {
		t.Fatalf("totals after stop: %+v", tot)
	}
	if _, err := f.Connect(engine.Connection{Transport: "rdma"}); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("connect after stop: %v", err)
	}
}

// The Fake keeps each pool's endpoints from [[backends]] and changes them
// with the engine's errors; the status shows them.
func TestBackendEndpoint(t *testing.T) {
	src, err := os.ReadFile("../../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	src = append(src, "\n[[backends]]\nname = \"llama\"\nprotocol = \"openai\"\nendpoints = [\"http://127.0.0.1:8101\"]\n"...)
	cfg, err := config.Parse("sluice.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	js, _ := cfg.JSON()
	f, err := NewFake(js)
	if err != nil {
		t.Fatal(err)
	}
	op := func(pool, url string, a engine.EndpointAction) error {
		return f.BackendEndpoint(engine.EndpointOp{Pool: pool, URL: url, Action: a})
	}
	if err := op("llama", "http://127.0.0.1:8102", engine.EndpointAdd); !errors.Is(err, errs.ErrNotRunning) {
		t.Fatalf("before start: %v", err)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pool, url string
		action    engine.EndpointAction
		want      error
	}{
		{"llama", "http://127.0.0.1:8102", engine.EndpointAdd, nil},
		{"llama", "http://127.0.0.1:8102", engine.EndpointAdd, errs.ErrAlreadyExists},
		{"nope", "http://127.0.0.1:8102", engine.EndpointAdd, errs.ErrNotFound},
		{"llama", "http://127.0.0.1:8103/v1", engine.EndpointAdd, errs.ErrInvalidArgument},
		{"llama", "127.0.0.1:8103", engine.EndpointAdd, errs.ErrInvalidArgument},
		{"llama", "http://127.0.0.1:8101", engine.EndpointDrain, nil},
		{"llama", "http://127.0.0.1:8109", engine.EndpointDrain, errs.ErrNotFound},
		{"llama", "http://127.0.0.1:8109", engine.EndpointRemove, errs.ErrNotFound},
		{"llama", "http://127.0.0.1:8101", "explode", errs.ErrInvalidArgument},
	} {
		if err := op(c.pool, c.url, c.action); c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Fatalf("%s %s %s: %v, want %v", c.action, c.pool, c.url, err, c.want)
		}
	}
	st, _ := f.Status()
	eps := st.Frontdoor.Backends.Pools[0].Endpoints
	if len(eps) != 2 || !eps[0].Draining || eps[1].Draining || eps[1].URL != "http://127.0.0.1:8102" {
		t.Fatalf("endpoints: %+v", eps)
	}
	if err := op("llama", "http://127.0.0.1:8101", engine.EndpointUndrain); err != nil || f.Endpoints("llama")[0].Draining {
		t.Fatalf("undrain: %v %+v", err, f.Endpoints("llama"))
	}
	if err := op("llama", "http://127.0.0.1:8101", engine.EndpointRemove); err != nil || len(f.Endpoints("llama")) != 1 {
		t.Fatalf("remove: %v %+v", err, f.Endpoints("llama"))
	}
	// A full pool.
	for i := len(f.Endpoints("llama")); i < config.BackendEndpointsMax; i++ {
		if err := op("llama", fmt.Sprintf("http://10.0.0.%d:80", i), engine.EndpointAdd); err != nil {
			t.Fatal(err)
		}
	}
	if err := op("llama", "http://10.0.1.1:80", engine.EndpointAdd); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("full pool: %v", err)
	}
	// Without [[backends]] the status has no front door part.
	if st, _ := newFake(t).Status(); st.Frontdoor != nil {
		t.Fatalf("frontdoor: %+v", st.Frontdoor)
	}
}
