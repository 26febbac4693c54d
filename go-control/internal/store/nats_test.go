package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// natsPair opens two stores, as two appliances would, on one real
// nats-server with JetStream.
func natsPair(t *testing.T) (*NATS, *NATS) {
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
	open := func() *NATS {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, _ := jetstream.New(nc)
		s, err := OpenNATS(context.Background(), js, NATSOptions{BucketPrefix: "t"})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return open(), open()
}

func TestNATSCompareAndSet(t *testing.T) {
	a, b := natsPair(t)
	if _, err := a.Get("routes"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("missing key: %v", err)
	}
	if err := a.Put("routes", []byte(`[1]`)); err != nil {
		t.Fatal(err)
	}
	// b has not seen the key: its create must not overwrite a's value.
	if err := b.Put("routes", []byte(`[2]`)); !errors.Is(err, errs.ErrBusy) {
		t.Fatalf("blind create over another's write: %v", err)
	}
	if v, _ := b.Get("routes"); string(v) != `[1]` {
		t.Fatalf("b reads %s", v)
	}
	// Both now at the same revision; the first writer wins, the second
	// gets a conflict until it has read again.
	if err := b.Put("routes", []byte(`[2]`)); err != nil {
		t.Fatal(err)
	}
	if err := a.Put("routes", []byte(`[3]`)); !errors.Is(err, errs.ErrBusy) {
		t.Fatalf("stale update: %v", err)
	}
	if err := a.Delete("routes"); !errors.Is(err, errs.ErrBusy) {
		t.Fatalf("stale delete: %v", err)
	}
	if v, _ := a.Get("routes"); string(v) != `[2]` {
		t.Fatalf("a reads %s", v)
	}
	if err := a.Delete("routes"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get("routes"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	// Deleting what is missing everywhere is fine; re-creating works.
	if err := b.Delete("routes"); err != nil {
		t.Fatal(err)
	}
	if err := b.Put("routes", []byte(`[4]`)); err != nil {
		t.Fatal(err)
	}
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
	// Listing counts as reading: b may now update what it listed.
	if err := b.Put("model.m2", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if err := a.Put("model.m2", []byte("v3")); !errors.Is(err, errs.ErrBusy) {
		t.Fatalf("a's view is stale: %v", err)
	}
	if err := a.Put("bad key", nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad key: %v", err)
	}
	if err := a.Put("big", make([]byte, ValueSizeMax+1)); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("big value: %v", err)
	}
}

func TestNATSWatchHearsOtherWriters(t *testing.T) {
	a, b := natsPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	heard := make(chan struct{}, 16)
	if err := a.Watch(ctx, func() { heard <- struct{}{} }); err != nil {
		t.Fatal(err)
	}
	if err := b.Put("alias.x", []byte("1")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-heard:
	case <-time.After(10 * time.Second):
		t.Fatal("a did not hear b's write")
	}
	// Reads come from a's mirror now: b's write is there, with its
	// revision, so a may update it.
	if v, err := a.Get("alias.x"); err != nil || string(v) != "1" {
		t.Fatalf("mirror read: %q %v", v, err)
	}
	if err := a.Put("alias.x", []byte("2")); err != nil {
		t.Fatal(err)
	}
	// a's own write is in its mirror at once; b, which did not re-read,
	// conflicts.
	if v, _ := a.Get("alias.x"); string(v) != "2" {
		t.Fatalf("own write not mirrored: %q", v)
	}
	if err := b.Put("alias.x", []byte("3")); !errors.Is(err, errs.ErrBusy) {
		t.Fatalf("stale writer: %v", err)
	}
	if err := a.Delete("alias.x"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get("alias.x"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("deleted key still mirrored: %v", err)
	}
	if es, _ := a.List("alias."); len(es) != 0 {
		t.Fatalf("list after delete: %+v", es)
	}
	// Once the watch ends, reads go to the server again.
	cancel()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		off := a.mirror == nil
		a.mu.Unlock()
		if off {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("mirror outlived its watch")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.Put("alias.y", []byte("9")); err != nil {
		t.Fatal(err)
	}
	if v, err := a.Get("alias.y"); err != nil || string(v) != "9" {
		t.Fatalf("server read after the watch: %q %v", v, err)
	}
}
