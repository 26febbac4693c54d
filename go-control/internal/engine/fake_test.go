package engine

import (
	"context"
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
