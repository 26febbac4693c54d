package store

import (
	"errors"
	"strings"
	"testing"

	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

func TestBoltPersists(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"peer.a": "1", "peer.b": "2", "alias.x": "3"} {
		if err := s.Put(k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete("peer.a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	es, err := s.List("peer.")
	if err != nil || len(es) != 1 || es[0].Key != "peer.b" || string(es[0].Value) != "2" {
		t.Fatalf("list after reopen: %v %+v", err, es)
	}
	if _, err := s.Get("peer.a"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	if v, err := s.Get("alias.x"); err != nil || string(v) != "3" {
		t.Fatalf("get: %v %q", err, v)
	}
}

func TestBoltRefuses(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Put("bad key/with space", nil); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("bad key: %v", err)
	}
	if err := s.Put("big", make([]byte, ValueSizeMax+1)); !errors.Is(err, errs.ErrInvalidArgument) {
		t.Fatalf("big value: %v", err)
	}
	// A second opener of the same file waits OpenTimeout, then gives up.
	if _, err := OpenBolt(dir); !errors.Is(err, errs.ErrBusy) || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("second open: %v", err)
	}
}
