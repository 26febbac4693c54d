package enginetest

import (
	"encoding/json"

	"github.com/sluice-ai/sluice/go-control/internal/engine"
)

// BackendsJSON is a fixed frontdoor.backends as the engine writes it
// (dataplane/backends/src/stats.rs, Backends::to_json): pool "llama"
// (openai, three endpoints: one serving, one ejected, one draining) with
// load, pool "triton" (kserve-http, one endpoint failing its health check)
// with none yet, and the models' timings. Tests of the metrics, `sluicectl
// status` and the heatmap page read it.
const BackendsJSON = `{
  "pools": [
    {
      "name": "llama", "protocol": "openai", "labels": {"hardware.gpu.memory": "hbm2"},
      "max_concurrency": 4, "queue_depth": 64, "waiting": 2,
      "requests": 120, "ok": 110, "retries": 3,
      "errors": {"connect": 2, "timeout": 1, "status_5xx": 4, "status_4xx": 3, "garbage": 0,
                 "stream_cut": 0, "unavailable": 0, "queue_full": 0, "cancelled": 0},
      "latency": {"count": 110, "mean_us": 150000, "p50_us": 120000, "p90_us": 300000, "p99_us": 900000},
      "ttft": {"count": 80, "mean_us": 40000, "p50_us": 35000, "p90_us": 70000, "p99_us": 120000},
      "itl": {"count": 4000, "mean_us": 10000, "p50_us": 9000, "p90_us": 15000, "p99_us": 30000},
      "endpoints": [
        {"url": "http://127.0.0.1:8101", "healthy": true, "ejected": false, "draining": false,
         "in_flight": 3, "requests": 70, "failures": 1, "ejections": 0, "models": ["gemma-3-270m"]},
        {"url": "http://127.0.0.1:8102", "healthy": true, "ejected": true, "draining": false,
         "in_flight": 0, "requests": 53, "failures": 6, "ejections": 1, "models": ["gemma-3-270m"]},
        {"url": "http://127.0.0.1:8103", "healthy": true, "ejected": false, "draining": true,
         "in_flight": 1, "requests": 0, "failures": 0, "ejections": 0, "models": []}
      ]
    },
    {
      "name": "triton", "protocol": "kserve-http", "labels": {},
      "max_concurrency": 16, "queue_depth": 0, "waiting": 0,
      "requests": 0, "ok": 0, "retries": 0,
      "errors": {"connect": 0, "timeout": 0, "status_5xx": 0, "status_4xx": 0, "garbage": 0,
                 "stream_cut": 0, "unavailable": 0, "queue_full": 0, "cancelled": 0},
      "latency": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
      "ttft": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
      "itl": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
      "endpoints": [
        {"url": "http://10.0.0.7:8000", "healthy": false, "ejected": false, "draining": false,
         "in_flight": 0, "requests": 0, "failures": 0, "ejections": 0, "models": []}
      ]
    }
  ],
  "models": {
    "gemma-3-270m": {"requests": 110,
      "latency": {"count": 110, "mean_us": 150000, "p50_us": 120000, "p90_us": 300000, "p99_us": 900000},
      "ttft": {"count": 80, "mean_us": 40000, "p50_us": 35000, "p90_us": 70000, "p99_us": 120000},
      "itl": {"count": 4000, "mean_us": 10000, "p50_us": 9000, "p90_us": 15000, "p99_us": 30000}},
    "resnet50": {"requests": 0,
      "latency": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
      "ttft": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0},
      "itl": {"count": 0, "mean_us": 0, "p50_us": 0, "p90_us": 0, "p99_us": 0}}
  }
}`

// Backends decodes BackendsJSON (a fresh copy each call).
func Backends() *engine.BackendsStatus {
	var b engine.BackendsStatus
	if err := json.Unmarshal([]byte(BackendsJSON), &b); err != nil {
		panic(err)
	}
	return &b
}
