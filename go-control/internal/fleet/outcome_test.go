package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluice-ai/sluice/go-control/internal/natskv"
	"github.com/sluice-ai/sluice/go-control/internal/natstest"
)

// threeOnThree starts a 3-node cluster and three appliances with history
// kept, so that the test can count a change's messages in the store.
func threeOnThree(t *testing.T) (*natstest.Cluster, []*appliance) {
	t.Helper()
	c := natstest.Start(t, 3)
	var apps []*appliance
	for _, n := range []string{"a", "b", "c"} {
		path := fleetConfig(t, t.TempDir(), n, c.URLs())
		edit(t, path, "history = 1", "history = 64")
		edit(t, path, "op_timeout_ms = 5000", "op_timeout_ms = 2000")
		apps = append(apps, startAppliance(t, n, path))
	}
	return c, apps
}

// changeMessages counts the messages of change id in bucket's history.
func changeMessages(t *testing.T, c *natstest.Cluster, bucket, id string) int {
	t.Helper()
	nc, js := c.Connect()
	defer nc.Close()
	ctx := context.Background()
	b, err := natskv.Open(ctx, js, natskv.Options{Bucket: bucket, Replicas: 3, History: 64})
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, natskv.StreamName(bucket))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
		if e, err := b.LeaderSeq(ctx, seq); err == nil && e.ChangeID == id {
			n++
		}
	}
	return n
}

// With the routes leader alive but its quorum gone, a route change cannot
// be decided: the API says so (504 naming the change, or 503 if nothing
// was sent), no engine serves it meanwhile, the writer's included, and
// reads answer from memory at once. When the nodes return the change lands
// everywhere or nowhere, and repeating it with its Idempotency-Key never
// applies it twice.
func TestSaveBeforeServeUnderQuorumLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster with restarts")
	}
	c, apps := threeOnThree(t)
	a := apps[0]
	a.must(t, "PUT", "/v1/routes", routesWith(a, "hbm2-inference"))
	eventually(t, "start", apps, func(x *appliance) bool { return routeShard(x, "mlp") == "hbm2-inference" })

	leader := c.StreamLeader(natskv.StreamName("sluice_routes"))
	for i := range 3 {
		if i != leader {
			c.StopNode(i)
		}
	}
	// Sample every engine while the write is in flight.
	var early atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, x := range apps {
				if routeShard(x, "mlp") == "gddr6-training" {
					early.Store(x.name)
				}
			}
			time.Sleep(time.Millisecond)
		}
	})
	code, out, h := a.doKey(t, "PUT", "/v1/routes", routesWith(a, "gddr6-training"), "ghost-1")
	t.Logf("without quorum: %d %s (Retry-After %q)", code, out, h.Get("Retry-After"))
	if code != http.StatusGatewayTimeout && code != http.StatusServiceUnavailable {
		t.Fatalf("without quorum: %d %s", code, out)
	}
	if code == http.StatusGatewayTimeout {
		var doc struct {
			Code   string `json:"code"`
			Change struct {
				ID     string `json:"id"`
				Bucket string `json:"bucket"`
			} `json:"change"`
		}
		if err := json.Unmarshal(out, &doc); err != nil || doc.Code != "outcome_unknown" || doc.Change.ID != "ghost-1" || doc.Change.Bucket != "sluice_routes" {
			t.Fatalf("unknown outcome: %s", out)
		}
	}
	t0 := time.Now()
	if code, _ := a.do(t, "GET", "/v1/routes", nil); code != 200 {
		t.Fatalf("GET /v1/routes during the outage: %d", code)
	}
	if took := time.Since(t0); took > time.Second {
		t.Fatalf("GET /v1/routes waited on the store: %v", took)
	}
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if who := early.Load(); who != nil {
		t.Fatalf("%s served a change the store had not acknowledged", who)
	}
	for i := range 3 {
		if i != leader {
			c.StartNode(i)
		}
	}
	// Decide it: the same change again, by its key.
	deadline := time.Now().Add(convergeWait)
	var dup string
	for {
		code, out, h = a.doKey(t, "PUT", "/v1/routes", routesWith(a, "gddr6-training"), "ghost-1")
		if code == 200 {
			dup = h.Get("Sluice-Duplicate")
			break
		}
		if time.Now().After(deadline) || code != 503 && code != 504 && code != 409 {
			t.Fatalf("repeat: %d %s", code, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("repeat with the same key: 200, duplicate=%q", dup)
	eventually(t, "decided everywhere", apps, func(x *appliance) bool { return routeShard(x, "mlp") == "gddr6-training" })
	if n := changeMessages(t, c, "sluice_routes", "ghost-1"); n != 1 {
		t.Fatalf("change ghost-1 stored %d times", n)
	}
}

// One node killed at a time (each in turn, the routes stream leader among
// them): a change accepted on one appliance is served by every appliance.
// Prints the time from the answer to served everywhere; the fault suite
// (cmd/sluice-faults) holds it to a bound.
func TestServedEverywhereWithANodeDown(t *testing.T) {
	if testing.Short() {
		t.Skip("3-node cluster with restarts")
	}
	c, apps := threeOnThree(t)
	shards := []string{"gddr6-training", "hbm2-inference"}
	var lines []string
	for round := range 4 {
		victim := round % 3
		what := fmt.Sprintf("node %d", victim)
		if round == 3 {
			victim = c.StreamLeader(natskv.StreamName("sluice_routes"))
			what = fmt.Sprintf("routes leader (node %d)", victim)
		}
		c.StopNode(victim)
		w := apps[round%3]
		target := shards[round%2]
		w.must(t, "PUT", "/v1/routes", routesWith(w, target))
		took := eventually(t, "served with "+what+" down", apps, func(x *appliance) bool { return routeShard(x, "mlp") == target })
		lines = append(lines, fmt.Sprintf("%s down: written on %s, served a=%.1f b=%.1f c=%.1f ms after the answer",
			what, w.name, ms(took[0]), ms(took[1]), ms(took[2])))
		c.StartNode(victim)
	}
	for _, l := range lines {
		fmt.Println("FLEET " + l)
	}
	eventually(t, "in sync", apps, func(x *appliance) bool { return x.fl.Status().InSync })
}

func edit(t *testing.T, path, old, new string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(b), old) != 1 {
		t.Fatalf("%s: no single %q", path, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, new, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
}
