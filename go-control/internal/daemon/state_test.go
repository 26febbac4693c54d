package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/config"
	"github.com/sluice-ai/sluice/go-control/internal/engine/enginetest"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/store"
)

// brokenStore is the real Bolt store whose writes fail, as a full disk would.
type brokenStore struct{ store.Store }

func (brokenStore) Put(string, []byte) error { return errs.FromStatus(errs.StatusIO, "disk full") }
func (brokenStore) Delete(string) error      { return errs.FromStatus(errs.StatusIO, "disk full") }

func TestStoreFailureSetsTheEngineBack(t *testing.T) {
	cfg, err := config.Load("../../../cfg/sluice.toml")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := cfg.JSON()
	fake, err := enginetest.NewFake(js)
	if err != nil {
		t.Fatal(err)
	}
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	bolt, err := store.OpenBolt(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer bolt.Close()
	s := &state{log: slog.New(slog.NewTextHandler(io.Discard, nil)), eng: fake, st: brokenStore{bolt},
		file: cfg, eff: cfg.Clone(), started: time.Now()}

	err = s.setRoutes(context.Background(), []config.Route{{Name: "all", Shard: "gddr6-training"}})
	if !errors.Is(err, errs.ErrIO) {
		t.Fatalf("setRoutes: %v", err)
	}
	if r := fake.Config().Routes; len(r) != 4 || len(s.eff.Routes) != 4 {
		t.Fatalf("routes not set back: engine %+v", r)
	}
	if err := s.addPeer(context.Background(), config.Peer{Name: "east", Address: "127.0.0.1:7170"}); !errors.Is(err, errs.ErrIO) {
		t.Fatalf("addPeer: %v", err)
	}
	if ps, _ := fake.Peers(); len(ps) != 0 || len(s.eff.Peers) != 0 {
		t.Fatalf("peer not removed again: %+v", ps)
	}
	if err := s.setAlias(context.Background(), "mlp", "stable", "1.0.0"); !errors.Is(err, errs.ErrIO) {
		t.Fatalf("setAlias: %v", err)
	}
	ms, _ := fake.Models()
	for _, m := range ms {
		for _, a := range m.Aliases {
			if a == "stable" {
				t.Fatalf("alias left in the engine: %+v", m)
			}
		}
	}
	// The engine has the model even though it could not be saved; the
	// daemon's view follows the engine.
	if err := s.loadModel(context.Background(), config.Model{Name: "mlp", Version: "2", Kind: "null"}); !errors.Is(err, errs.ErrIO) {
		t.Fatalf("loadModel: %v", err)
	}
	if len(s.eff.Models) != 4 {
		t.Fatalf("daemon view: %+v", s.eff.Models)
	}
}
