package heatmap

import (
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

var now = time.Unix(1_800_000_000, 0)

func TestParseQueryDefaultsAndRelative(t *testing.T) {
	q, err := ParseQuery(url.Values{}, now)
	if err != nil {
		t.Fatal(err)
	}
	if q.To != 1_799_999_999 || q.From != q.To-WindowDefault+1 || q.Step != 1 || q.By != engine.LoadByShard || q.Columns() != WindowDefault {
		t.Fatalf("defaults: %+v", q)
	}
	q, err = ParseQuery(url.Values{"from": {"-900"}, "to": {"-1"}, "step": {"15"}, "by": {"tenant"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if q.From != 1_800_000_000-900 || q.To != 1_799_999_999 || q.Columns() != 60 || q.By != engine.LoadByTenant {
		t.Fatalf("relative: %+v", q)
	}
}

func TestParseQueryRefusesSayingTheLimit(t *testing.T) {
	for _, c := range []struct {
		q, want  string
		sentinel error
	}{
		{"step=0", "1..60", errs.ErrInvalidArgument},
		{"step=61", "1..60", errs.ErrInvalidArgument},
		{"step=x", "1..60", errs.ErrInvalidArgument},
		{"from=abc", "integer", errs.ErrInvalidArgument},
		{"by=gpu", "shard, model or tenant", errs.ErrInvalidArgument},
		{"frm=1", "unknown parameter", errs.ErrInvalidArgument},
		{"from=", "once, with a value", errs.ErrInvalidArgument},
		{"by=shard&by=model", "once, with a value", errs.ErrInvalidArgument},
		{"from=1799999000&to=1799998000", "after", ErrOutOfRange},
		{"from=-901&to=-1", "at most 900 s", ErrOutOfRange},
		{"to=1800000100", "future", ErrOutOfRange},
		{"from=-1800000001", "after the Unix epoch", ErrOutOfRange},
	} {
		v, _ := url.ParseQuery(c.q)
		_, err := ParseQuery(v, now)
		if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v saying %q", c.q, err, c.sentinel, c.want)
		}
	}
}

func TestBuildPutsRowsInTheirColumns(t *testing.T) {
	q := Query{From: 100, To: 109, Step: 5, By: engine.LoadByShard, ByName: "shard"}
	rows := []engine.LoadRow{
		{Second: 100, Key: 1, Tokens: 50, Requests: 5, QueueDepthMax: 3},
		{Second: 104, Key: 1, Tokens: 50, Requests: 5, Errors: 1, QueueDepthMax: 7},
		{Second: 105, Key: 0, Tokens: 10, Requests: 1},
		{Second: 200, Key: 0, Tokens: 99}, // outside: ignored
		{Second: 106, Key: 9, Tokens: 1},  // a shard not in the table
	}
	d := Build(rows, q, []string{"a", "b"}, "host")
	if len(d.Times) != 2 || d.Times[1] != 105 || len(d.Series) != 3 {
		t.Fatalf("doc: %+v", d)
	}
	b := d.Series[1]
	if b.Key != "b" || b.Tokens[0] != 100 || b.TokensPerS[0] != 20 || b.Requests[0] != 10 || b.Errors[0] != 1 || b.QueueDepthMax[0] != 7 {
		t.Fatalf("shard b: %+v", b)
	}
	if a := d.Series[0]; a.Key != "a" || a.Tokens[0] != 0 || a.Tokens[1] != 10 {
		t.Fatalf("shard a: %+v", a)
	}
	if d.Series[2].Key != "shard-9" {
		t.Fatalf("unknown shard: %+v", d.Series[2])
	}
	m := Build([]engine.LoadRow{{Second: 100, Key: engine.LoadModelNone, Tokens: 1}, {Second: 100, Key: 2, Name: "mlp@1", Tokens: 1}},
		Query{From: 100, To: 100, Step: 1, By: engine.LoadByModel, ByName: "model"}, nil, "h")
	if len(m.Series) != 2 || m.Series[0].Key != "(no local model)" || m.Series[1].Key != "mlp@1" {
		t.Fatalf("models: %+v", m.Series)
	}
	e := Build(nil, Query{From: 1, To: 1, Step: 1, By: engine.LoadByTenant, ByName: "tenant"}, nil, "h")
	if e.Series == nil {
		t.Fatal("an empty load must be [] in JSON, not null")
	}
}
