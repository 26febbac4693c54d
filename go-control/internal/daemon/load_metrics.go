package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
	"github.com/sluice-ai/sluice/go-control/internal/heatmap"
)

// LoadMetricsWindowS is the window of the load gauges: the last this many
// whole seconds of the engine's rings, averaged (queue depth: the highest).
const LoadMetricsWindowS = 10

// loadDescs are the heatmap's series as Prometheus gauges, labelled by
// dimension (shard, model, tenant) and key: bounded cardinality (shards,
// model slots and tenant slots are all bounded by the engine).
type loadDescs struct {
	tokens, requests, errors, depth *prometheus.Desc
}

func newLoadDescs() loadDescs {
	l := []string{"by", "key"}
	return loadDescs{
		tokens:   desc("load_tokens_per_second", "Tokens per second (declared token_count of requests, plus generated tokens), averaged over the last 10 whole seconds, per shard, model or tenant (label by). The same series as GET /v1/load and /ui/heatmap.", l...),
		requests: desc("load_requests_per_second", "Requests per second over the last 10 whole seconds, per shard, model or tenant.", l...),
		errors:   desc("load_errors_per_second", "Error frames per second over the last 10 whole seconds, per shard, model or tenant.", l...),
		depth:    desc("load_queue_depth_max", "Highest shard queue depth seen at admission in the last 10 whole seconds, per shard, model or tenant.", l...),
	}
}

func (l loadDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{l.tokens, l.requests, l.errors, l.depth}
}

// collectLoad reads the window once per dimension (three batched calls);
// shard names come from the scrape's stats call.
func (c *collector) collectLoad(ch chan<- prometheus.Metric, st engine.Stats) {
	if _, ok := c.d.eng.(engine.LoadSource); !ok {
		return
	}
	shards := make([]string, 0, len(st.Shards))
	for _, s := range st.Shards {
		shards = append(shards, s.Name)
	}
	now := uint64(time.Now().Unix())
	for _, by := range []string{"shard", "model", "tenant"} {
		q := heatmap.Query{From: now - LoadMetricsWindowS, To: now - 1, Step: LoadMetricsWindowS, ByName: by}
		q.By = map[string]engine.LoadDim{"shard": engine.LoadByShard, "model": engine.LoadByModel, "tenant": engine.LoadByTenant}[by]
		doc, err := c.d.loadOf(q, shards)
		if err != nil {
			return
		}
		for _, s := range doc.Series {
			gauge(ch, c.load.tokens, float64(s.Tokens[0])/LoadMetricsWindowS, by, s.Key)
			gauge(ch, c.load.requests, float64(s.Requests[0])/LoadMetricsWindowS, by, s.Key)
			gauge(ch, c.load.errors, float64(s.Errors[0])/LoadMetricsWindowS, by, s.Key)
			gauge(ch, c.load.depth, float64(s.QueueDepthMax[0]), by, s.Key)
		}
	}
}
