package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"
)

// demoKey is cfg/fleet.toml's tenant "demo" (the traffic signs with it):
// every tenant set written keeps it.
const demoKey = "hex:73756963652d64656d6f2d6b65792d30303030303030303030303030303030"

// modelLoadsMax keeps loaded model versions under the engine's limit (64,
// two of which the file has).
const modelLoadsMax = 48

// workload makes random writes through every appliance's admin API, one
// writer per appliance, and records each with its outcome. Writes are
// built from the seed; which one goes when depends on real timing.
type workload struct {
	h    *History
	apps []*appliance
	seed int64

	mu       sync.Mutex
	n        int
	models   []string // versions of model "wm" answered 2xx
	modelsN  int      // loads tried
	interval [2]time.Duration
}

func (w *workload) nextID() (string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	return fmt.Sprintf("f%d-%d", w.seed, w.n), w.n
}

// op is one write to make.
type op struct {
	kind, method, path string
	body               any
}

func (w *workload) pick(r *rand.Rand, n int) op {
	switch k := r.IntN(100); {
	case k < 30:
		// Routes: the data plane's models stay routed (null moves between
		// two local shards), plus a marker that makes the set unique.
		shard := []string{"hbm2-inference", "hbm2-batch"}[r.IntN(2)]
		return op{"routes", "PUT", "/v1/routes", []map[string]string{
			{"name": "null", "model": "null", "shard": shard},
			{"name": "echo", "model": "echo", "shard": "hbm2-inference"},
			{"name": "training", "intent": "training", "shard": "gddr6-training"},
			{"name": fmt.Sprintf("w%d", n), "model": fmt.Sprintf("marker-%d", n), "shard": "hbm2-inference"},
		}}
	case k < 50:
		key := fmt.Sprintf("hex:%064x", r.Uint64())
		return op{"tenants", "PUT", "/v1/tenants", []map[string]any{
			{"name": "demo", "id": 1, "key": demoKey, "models": []string{"*"}, "adapters": []string{"*"}},
			{"name": fmt.Sprintf("t%d", n), "id": 1000 + n, "key": key, "models": []string{"null"}, "adapters": []string{"*"}},
		}}
	case k < 65:
		w.mu.Lock()
		full := w.modelsN >= modelLoadsMax
		if !full {
			w.modelsN++
		}
		w.mu.Unlock()
		if !full {
			return op{"model", "POST", "/v1/models", map[string]string{"name": "wm", "version": fmt.Sprint(n), "kind": "null"}}
		}
		fallthrough
	case k < 80:
		w.mu.Lock()
		version := "0" // none loaded yet: refused (404), which is an outcome too
		if len(w.models) > 0 {
			version = w.models[r.IntN(len(w.models))]
		}
		w.mu.Unlock()
		return op{"alias", "PUT", fmt.Sprintf("/v1/models/wm/aliases/a%d", r.IntN(4)), map[string]string{"version": version}}
	default:
		sig := fmt.Sprintf(`{"inputs":[{"name":"x%d","dtype":"f32","shape":[-1,4]}]}`, n)
		return op{"schema", "POST", fmt.Sprintf("/registry/subjects/s%d/versions", n), map[string]string{"schemaType": "TENSOR", "schema": sig}}
	}
}

// run writes through a until ctx ends.
func (w *workload) run(ctx context.Context, a *appliance, r *rand.Rand) {
	for {
		d := w.interval[0] + time.Duration(r.Int64N(int64(w.interval[1]-w.interval[0])+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(d):
		}
		id, n := w.nextID()
		o := w.pick(r, n)
		// A write is never cut short by the end of the phase: its answer
		// must be recorded.
		start := time.Now()
		ans := a.call(context.Background(), o.method, o.path, id, o.body)
		wr := Write{ID: id, Kind: o.kind, Appliance: a.name, Start: start, End: time.Now(), Status: ans.status}
		wr.Outcome, wr.Code, wr.Detail = classify(ans)
		if o.kind == "model" && wr.Outcome == OutcomeOK {
			w.mu.Lock()
			w.models = append(w.models, fmt.Sprint(n))
			w.mu.Unlock()
		}
		w.h.addWrite(wr)
	}
}

// classify turns an answer into the outcome the client was told. The
// contract (docs/fleet.md): 2xx stored; 4xx (409 included) and 503 not
// applied; 504 unknown. No answer: refused if the connection was refused,
// else unknown. Anything else (500) is outside the contract and counts as
// unknown here; the checker reports it.
func classify(a answer) (outcome, code, detail string) {
	if a.status == 0 {
		if !a.sent {
			return OutcomeRefused, "no_connection", a.connErr
		}
		return OutcomeUnknown, "no_answer", a.connErr
	}
	var body struct {
		Code      string `json:"code"`
		ErrorCode int    `json:"error_code"`
		Message   string `json:"message"`
		Error     string `json:"error"`
	}
	_ = json.Unmarshal([]byte(a.body), &body)
	code = body.Code
	if code == "" && body.ErrorCode != 0 {
		code = fmt.Sprint(body.ErrorCode)
	}
	detail = body.Error + body.Message
	if len(detail) > 300 {
		detail = detail[:300]
	}
	switch {
	case a.status/100 == 2:
		return OutcomeOK, code, ""
	case a.status == http.StatusGatewayTimeout:
		return OutcomeUnknown, code, detail
	case a.status == http.StatusServiceUnavailable, a.status/100 == 4:
		return OutcomeRefused, code, detail
	}
	return OutcomeUnknown, code, strings.TrimSpace("outside the contract: " + detail)
}
