package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
	"github.com/sluice-ai/sluice/go-control/internal/natstest"
)

// natsPair opens two stores, as two appliances would, on one real
// nats-server with JetStream, and starts their mirrors.
func natsPair(t *testing.T) (*NATS, *NATS) {
	t.Helper()
	c := natstest.Start(t, 1)
	open := func() *NATS {
		nc, js := c.Connect()
		t.Cleanup(nc.Close)
		s, err := OpenNATS(context.Background(), js, NATSOptions{BucketPrefix: "t", CheckInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := s.Start(ctx, func() {}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	return open(), open()
}

// caughtUp waits until s's mirror has key at value (or absent, value nil).
func caughtUp(t *testing.T, s *NATS, key string, value []byte) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v, err := s.Get(key)
		if value == nil && errors.Is(err, errs.ErrNotFound) || value != nil && err == nil && string(v) == string(value) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: mirror has %q %v, want %q", key, v, err, value)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestNATSCompareAndSet(t *testing.T) {
	a, b := natsPair(t)
	if _, err := a.Get("routes"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	stale, _ := b.View() // b's view before a writes
	if err := a.Put("routes", []byte(`[1]`)); err != nil {
		t.Fatal(err)
	}
	// A change composed from a view without a's write must not overwrite it.
	if _, err := b.Commit(context.Background(), stale, "c-blind", Op{Key: "routes", Value: []byte(`[2]`)}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("blind create over another's write: %v", err)
	}
	caughtUp(t, b, "routes", []byte(`[1]`))
	// b's view now has it: b may update.
	fresh, _ := b.View()
	c, err := b.Commit(context.Background(), fresh, "c-2", Op{Key: "routes", Value: []byte(`[2]`)})
	if err != nil || c.Revision <= fresh.KeyRevision("routes") || c.Bucket != "t_routes" {
		t.Fatalf("update: %+v %v", c, err)
	}
	// The same change repeated (same id) is not applied twice.
	if again, err := b.Commit(context.Background(), fresh, "c-2", Op{Key: "routes", Value: []byte(`[2]`)}); err != nil || !again.Duplicate || again.Revision != c.Revision {
		t.Fatalf("repeat: %+v %v", again, err)
	}
	if _, err := a.Commit(context.Background(), fresh, "c-3", Op{Key: "routes", Delete: true}); !errors.Is(err, errs.ErrConflict) {
		t.Fatalf("stale delete: %v", err)
	}
	caughtUp(t, a, "routes", []byte(`[2]`))
	if err := a.Delete("routes"); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, b, "routes", nil)
	// Deleting what is missing is fine; re-creating works.
	if err := b.Delete("routes"); err != nil {
		t.Fatal(err)
	}
	if err := b.Put("routes", []byte(`[4]`)); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, a, "routes", []byte(`[4]`))
}

func TestNATSListByKind(t *testing.T) {
	a, b := natsPair(t)
	for _, k := range []string{"model.m1", "model.m2", "alias.x", "peer.p", "peergone.q", "tenants"} {
		if err := a.Put(k, []byte(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Delete("model.m1"); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, b, "model.m1", nil)
	caughtUp(t, b, "tenants", []byte("tenants"))
	es, err := b.List("model.")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 || es[0].Key != "model.m2" || string(es[0].Value) != "model.m2" {
		t.Fatalf("models: %+v", es)
	}
	// "peer." and "peergone." share a bucket but not a prefix.
	if es, _ := b.List("peer."); len(es) != 1 || es[0].Key != "peer.p" {
		t.Fatalf("peers: %+v", es)
	}
	// Keys of one bucket change together or not at all.
	v, _ := b.View()
	if _, err := b.Commit(context.Background(), v, "pair", Op{Key: "peer.p", Delete: true}, Op{Key: "peergone.p", Value: []byte("p")}); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, a, "peergone.p", []byte("p"))
	caughtUp(t, a, "peer.p", nil)
	if _, err := b.Commit(context.Background(), v, "spans", Op{Key: "peer.z", Value: nil}, Op{Key: "routes", Value: nil}); !errors.Is(err, errs.ErrInternal) {
		t.Fatalf("a change across buckets: %v", err)
	}
	if err := a.Put("bad key", nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad key: %v", err)
	}
	if err := a.Put("big", make([]byte, ValueSizeMax+1)); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("big value: %v", err)
	}
	for _, h := range a.Health() {
		if !h.InSync && h.StoreCheckedMsAgo >= 0 && h.MirrorRevision < h.StoreRevision {
			t.Fatalf("health: %+v", h)
		}
	}
}

func TestNATSWatchHearsOtherWriters(t *testing.T) {
	c := natstest.Start(t, 1)
	nc, js := c.Connect()
	defer nc.Close()
	heard := make(chan struct{}, 64)
	a, err := OpenNATS(context.Background(), js, NATSOptions{BucketPrefix: "w"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.Start(ctx, func() { heard <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	for len(heard) > 0 {
		<-heard // the initial snapshots
	}
	nc2, js2 := c.Connect()
	defer nc2.Close()
	w, err := OpenNATS(context.Background(), js2, NATSOptions{BucketPrefix: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx, func() {}); err != nil {
		t.Fatal(err)
	}
	if err := w.Put("alias.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not hear w's write")
	}
	v, _ := a.View()
	if got, err := v.Get("alias.x"); err != nil || string(got) != "1" {
		t.Fatalf("mirror read: %q %v", got, err)
	}
	if v.KeyRevision("alias.x") == 0 || v.Revisions()["w_aliases"] < v.KeyRevision("alias.x") {
		t.Fatalf("view revisions: %v / %d", v.Revisions(), v.KeyRevision("alias.x"))
	}
	if err := v.Put("alias.x", nil); !errors.Is(err, errs.ErrInternal) {
		t.Fatalf("a view is read-only: %v", err)
	}
}
