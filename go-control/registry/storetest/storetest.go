// Package storetest checks that a registry.Store honours the contract the
// registry relies on: compare-and-set writes on revisions that only grow,
// as in NATS JetStream KV. Every Store implementation runs Contract.
package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/sluice-ai/sluice/go-control/registry"
)

// Contract exercises s, which must be empty, and closes it.
func Contract(t *testing.T, s registry.Store) {
	t.Helper()
	ctx := context.Background()
	defer s.Close()
	if _, err := s.Get(ctx, "a/1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if list, err := s.List(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("list empty store: %v %v", list, err)
	}
	r1, err := s.Put(ctx, "a/1", []byte("one"), 0)
	if err != nil || r1 == 0 {
		t.Fatalf("create: %d %v", r1, err)
	}
	if _, err := s.Put(ctx, "a/1", []byte("again"), 0); !errors.Is(err, registry.ErrRevisionMismatch) {
		t.Fatalf("create over existing: %v", err)
	}
	r2, err := s.Put(ctx, "a/1", []byte("two"), r1)
	if err != nil || r2 <= r1 {
		t.Fatalf("update: %d %v", r2, err)
	}
	if _, err := s.Put(ctx, "a/1", []byte("stale"), r1); !errors.Is(err, registry.ErrRevisionMismatch) {
		t.Fatalf("stale update: %v", err)
	}
	if _, err := s.Put(ctx, "a/2", []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "b/1", []byte("y"), 0); err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, "a/1")
	if err != nil || string(e.Value) != "two" || e.Revision != r2 || e.Key != "a/1" {
		t.Fatalf("get: %+v %v", e, err)
	}
	list, err := s.List(ctx, "a/")
	if err != nil || len(list) != 2 || list[0].Key != "a/1" || list[1].Key != "a/2" || string(list[0].Value) != "two" || list[0].Revision != r2 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.Delete(ctx, "a/1", r1); !errors.Is(err, registry.ErrRevisionMismatch) {
		t.Fatalf("stale delete: %v", err)
	}
	if err := s.Delete(ctx, "a/1", r2); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/1", r2); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("delete missing: %v", err)
	}
	if _, err := s.Get(ctx, "a/1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if list, err := s.List(ctx, "a/"); err != nil || len(list) != 1 || list[0].Key != "a/2" {
		t.Fatalf("list after delete: %+v %v", list, err)
	}
	// A deleted key can be created again, and only created.
	if _, err := s.Put(ctx, "a/1", []byte("three"), r2); !errors.Is(err, registry.ErrRevisionMismatch) {
		t.Fatalf("update of a deleted key: %v", err)
	}
	r3, err := s.Put(ctx, "a/1", []byte("three"), 0)
	if err != nil || r3 <= r2 {
		t.Fatalf("re-create: %d %v", r3, err)
	}
	// Values are copied: the caller may reuse its buffer.
	buf := []byte("mine")
	r4, err := s.Put(ctx, "c", buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X'
	if e, err := s.Get(ctx, "c"); err != nil || string(e.Value) != "mine" || e.Revision != r4 {
		t.Fatalf("stored value aliased the caller's buffer: %+v %v", e, err)
	}
	// PutAll: one stale base refuses every write; otherwise all land.
	e, _ = s.Get(ctx, "a/1")
	if _, err := s.PutAll(ctx, []registry.Write{{Key: "d/1", Value: []byte("d")}, {Key: "a/1", Value: []byte("x"), Expect: e.Revision - 1}}); !errors.Is(err, registry.ErrRevisionMismatch) {
		t.Fatalf("stale batch: %v", err)
	}
	if _, err := s.Get(ctx, "d/1"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("a refused batch wrote d/1: %v", err)
	}
	revs, err := s.PutAll(ctx, []registry.Write{{Key: "d/1", Value: []byte("d")}, {Key: "a/1", Value: []byte("four"), Expect: e.Revision}})
	if err != nil || len(revs) != 2 || revs[0] <= e.Revision || revs[1] <= revs[0] {
		t.Fatalf("batch: %v %v", revs, err)
	}
	for i, k := range []string{"d/1", "a/1"} {
		if got, err := s.Get(ctx, k); err != nil || got.Revision != revs[i] {
			t.Fatalf("after batch %s: %+v %v (want revision %d)", k, got, err, revs[i])
		}
	}
}
