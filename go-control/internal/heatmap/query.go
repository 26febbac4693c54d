// Package heatmap turns the engine's token-load rings (one-second
// buckets per worker, merged by the engine in one call) into the series
// of GET /v1/load and the page at /ui/heatmap: one row per shard, model
// or tenant, one column per step, tokens/s as colour.
package heatmap

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/errs"
)

// Limits of a query.
const (
	// SecondsMax is the widest window: what the engine keeps.
	SecondsMax = engine.LoadSecondsMax
	// StepMax is the longest step, seconds.
	StepMax = 60
	// WindowDefault is the window when from is not given, seconds.
	WindowDefault = 300
	// FutureSkewMax is how far past now `to` may be, seconds (clocks of a
	// browser and the appliance differ).
	FutureSkewMax = 60
)

// Query is a validated load query: seconds From..To inclusive (Unix), in
// steps of Step seconds, keyed by By.
type Query struct {
	From, To uint64
	Step     uint64
	By       engine.LoadDim
	ByName   string
}

// Columns is how many step columns the query has.
func (q Query) Columns() int { return int((q.To-q.From)/q.Step) + 1 }

var dims = map[string]engine.LoadDim{"shard": engine.LoadByShard, "model": engine.LoadByModel, "tenant": engine.LoadByTenant}

// ErrOutOfRange marks parameters that are each well formed but together
// fall outside a limit (from after to, a window over SecondsMax, to in
// the future, before the epoch): 422, where a malformed one is 400.
var ErrOutOfRange = errors.New("out of range")

func bad(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errs.ErrInvalidArgument, fmt.Sprintf(format, a...))
}

func outOfRange(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrOutOfRange, fmt.Sprintf(format, a...))
}

// ParseQuery reads from, to (Unix seconds; to defaults to the last whole
// second, from to WindowDefault before it; 0 or a negative value is
// relative to now: from=-60&to=0), step (seconds, 1..StepMax, default 1) and by (shard,
// model or tenant; default shard). Every refusal wraps
// errs.ErrInvalidArgument (400: malformed) or ErrOutOfRange (422: well
// formed, outside a limit together) and says the limit.
func ParseQuery(v url.Values, now time.Time) (Query, error) {
	for k, vals := range v {
		switch k {
		case "from", "to", "step", "by":
		default:
			return Query{}, bad("unknown parameter %q (want from, to, step, by)", k)
		}
		if len(vals) != 1 || vals[0] == "" {
			return Query{}, bad("%s: give it once, with a value", k)
		}
	}
	nowS := now.Unix()
	num := func(name string, def int64) (int64, error) {
		s := v.Get(name)
		if s == "" {
			return def, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, bad("%s=%q: want an integer (Unix seconds, or 0 or negative: seconds before now)", name, s)
		}
		if n <= 0 {
			n += nowS
		}
		return n, nil
	}
	step, err := strconv.ParseInt(orDefault(v.Get("step"), "1"), 10, 64)
	if err != nil || step < 1 || step > StepMax {
		return Query{}, bad("step=%q: want 1..%d seconds", v.Get("step"), StepMax)
	}
	to, err := num("to", nowS-1)
	if err != nil {
		return Query{}, err
	}
	from, err := num("from", to-WindowDefault+1)
	if err != nil {
		return Query{}, err
	}
	switch {
	case from <= 0 || to <= 0:
		return Query{}, outOfRange("from=%d to=%d: want seconds after the Unix epoch", from, to)
	case from > to:
		return Query{}, outOfRange("from=%d is after to=%d", from, to)
	case to-from >= SecondsMax:
		return Query{}, outOfRange("from=%d to=%d spans %d s: at most %d s (the engine keeps %d one-second buckets)", from, to, to-from+1, SecondsMax, SecondsMax)
	case to > nowS+FutureSkewMax:
		return Query{}, outOfRange("to=%d is more than %d s in the future", to, FutureSkewMax)
	}
	byName := orDefault(v.Get("by"), "shard")
	by, ok := dims[byName]
	if !ok {
		return Query{}, bad("by=%q: want shard, model or tenant", byName)
	}
	return Query{From: uint64(from), To: uint64(to), Step: uint64(step), By: by, ByName: byName}, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
