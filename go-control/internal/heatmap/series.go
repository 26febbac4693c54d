package heatmap

import (
	"sort"
	"strconv"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// Series is one row of the heatmap: a shard, model or tenant, one value
// per column.
type Series struct {
	Key           string    `json:"key"`
	Tokens        []uint64  `json:"tokens"`
	TokensPerS    []float64 `json:"tokens_per_s"`
	Requests      []uint64  `json:"requests"`
	Errors        []uint64  `json:"errors"`
	QueueDepthMax []uint32  `json:"queue_depth_max"`
}

// Doc is the body of GET /v1/load.
type Doc struct {
	Appliance string   `json:"appliance"`
	By        string   `json:"by"`
	From      uint64   `json:"from"`
	To        uint64   `json:"to"`
	Step      uint64   `json:"step"`
	Times     []uint64 `json:"times"` // first second of each column
	Series    []Series `json:"series"`
	// Limits of a query, for clients to stay inside.
	SecondsMax int `json:"seconds_max"`
	StepMax    int `json:"step_max"`
}

// Build lays rows out as series for q. fixed names the keys that always
// get a row (by shard: every shard, in table order); other keys with
// counts get rows after them, sorted.
func Build(rows []engine.LoadRow, q Query, fixed []string, appliance string) Doc {
	cols := q.Columns()
	d := Doc{Appliance: appliance, By: q.ByName, From: q.From, To: q.To, Step: q.Step,
		Times: make([]uint64, cols), Series: []Series{}, SecondsMax: SecondsMax, StepMax: StepMax}
	for c := range cols {
		d.Times[c] = q.From + uint64(c)*q.Step
	}
	idx := map[string]int{}
	add := func(key string) *Series {
		if i, ok := idx[key]; ok {
			return &d.Series[i]
		}
		idx[key] = len(d.Series)
		d.Series = append(d.Series, Series{Key: key, Tokens: make([]uint64, cols), TokensPerS: make([]float64, cols),
			Requests: make([]uint64, cols), Errors: make([]uint64, cols), QueueDepthMax: make([]uint32, cols)})
		return &d.Series[len(d.Series)-1]
	}
	for _, k := range fixed {
		add(k)
	}
	nFixed := len(d.Series)
	for _, r := range rows {
		if r.Second < q.From || r.Second > q.To {
			continue
		}
		key := KeyName(q.By, r, fixed)
		s := add(key)
		c := int((r.Second - q.From) / q.Step)
		s.Tokens[c] += r.Tokens
		s.Requests[c] += r.Requests
		s.Errors[c] += r.Errors
		s.QueueDepthMax[c] = max(s.QueueDepthMax[c], r.QueueDepthMax)
	}
	for i := range d.Series {
		s := &d.Series[i]
		for c := range s.Tokens {
			s.TokensPerS[c] = float64(s.Tokens[c]) / float64(q.Step)
		}
	}
	extra := d.Series[nFixed:]
	sort.SliceStable(extra, func(i, j int) bool { return extra[i].Key < extra[j].Key })
	return d
}

// KeyName names a row's key: the shard's name (fixed, by index), the
// model's "name@version", or the tenant id.
func KeyName(by engine.LoadDim, r engine.LoadRow, shards []string) string {
	switch by {
	case engine.LoadByShard:
		if r.Key < uint64(len(shards)) {
			return shards[r.Key]
		}
		return "shard-" + strconv.FormatUint(r.Key, 10)
	case engine.LoadByModel:
		if r.Key == engine.LoadModelNone {
			return "(no local model)"
		}
		if r.Key == engine.LoadModelOther {
			return "(other models)"
		}
		if r.Name != "" {
			return r.Name
		}
		return "slot-" + strconv.FormatUint(r.Key, 10)
	default:
		if r.Key == engine.LoadTenantOther {
			return "(other tenants)"
		}
		return "tenant-" + strconv.FormatUint(r.Key, 10)
	}
}
