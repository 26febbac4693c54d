//go:build jobs_e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Nothing lost, nothing stored twice: a 3-node nats-server cluster (R3
// stream and consumer), two sluiced sharing the durable consumer, 10,000
// requests published while crashes are injected at random points from a
// seeded generator (SLUICE_CHAOS_SEED; the log lists every action):
// kill -9 of a sluiced mid-batch, SIGTERM (drain) of a sluiced, kill -9 of
// a NATS node; each comes back after a random pause. Then every request
// must end with exactly one stored outcome: a result (checked against the
// exact reference) or a dead letter with the expected code.
func TestCrashes(t *testing.T) {
	seed := envInt(t, "SLUICE_CHAOS_SEED", 23)
	total := envInt(t, "SLUICE_CHAOS_MESSAGES", 10_000)
	// In bursts of 500 a second, so that the crashes land while requests
	// flow and an appliance holds a batch (unpaced, the two appliances
	// finish 10,000 in a few seconds).
	rate := envInt(t, "SLUICE_CHAOS_RATE", 500)
	actionsMax := envInt(t, "SLUICE_CHAOS_ACTIONS", 14)
	rng := rand.New(rand.NewSource(int64(seed)))
	t.Logf("chaos seed %d, %d messages at %d/s, up to %d crash actions", seed, total, rate, actionsMax)

	// Short, so that a lost ack is redelivered within the test.
	const ackWait = 4 * time.Second
	dir := t.TempDir()
	nodes := startNATS(t, dir, 3)
	var servers []string
	for _, n := range nodes {
		servers = append(servers, n.url())
	}
	edits := []string{
		"replicas = 1", "replicas = 3",
		"ack_wait_ms = 30000", fmt.Sprintf("ack_wait_ms = %d", ackWait.Milliseconds()),
		"request_timeout_ms = 10000", "request_timeout_ms = 1000",
		"publish_timeout_ms = 5000", "publish_timeout_ms = 1000",
		"nak_delay_ms = 500", "nak_delay_ms = 200",
		// Unbounded: a message the crashes delay past max_deliver
		// deliveries would end as a gave_up dead letter, a legitimate
		// outcome but not the exact one this test checks for each request.
		"max_deliver = 5", "max_deliver = -1",
	}
	apps := []*appliance{
		newAppliance(t, dir, "sluiced-a", jobsConfig(t, dir, "sluiced-a", servers, 0, edits...)),
		newAppliance(t, dir, "sluiced-b", jobsConfig(t, dir, "sluiced-b", servers, 1, edits...)),
	}
	for _, a := range apps {
		a.start()
	}
	for _, a := range apps {
		a.waitConsuming(t)
	}

	nc, err := nats.Connect(strings.Join(servers, ","), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	// Publish from 8 goroutines; a publish that fails (a node down, a
	// leader moving) is sent again with the same Nats-Msg-Id, so it is
	// stored once.
	start := time.Now()
	var published atomic.Int64
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < total; i += 8 {
					if ahead := time.Until(start.Add(time.Duration(i/rate) * time.Second)); ahead > 0 {
						time.Sleep(ahead)
					}
					m := request(i)
					for {
						ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
						_, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprint("in-", i)))
						cancel()
						if err == nil {
							break
						}
						time.Sleep(50 * time.Millisecond)
					}
					published.Add(1)
				}
			}()
		}
		wg.Wait()
	}()

	// Crashes, while requests are published and worked.
	stored := func() int {
		n, _ := storedOutcomes(js) // 0 while the cluster recovers: only a log line and a loop condition
		return n
	}
	var actions []string
	natsDown := -1
	for len(actions) < actionsMax {
		time.Sleep(time.Duration(200+rng.Intn(800)) * time.Millisecond)
		if published.Load() == int64(total) && stored() >= total {
			break // all done before the chaos ran out
		}
		at := time.Since(start).Round(time.Millisecond)
		switch r := rng.Intn(100); {
		case r < 40:
			a := apps[rng.Intn(len(apps))]
			pause := time.Duration(100+rng.Intn(900)) * time.Millisecond
			held := a.holding(time.Second)
			a.signal(syscall.SIGKILL, 10*time.Second)
			actions = append(actions, fmt.Sprintf("%v kill -9 %s holding %d messages, back after %v", at, a.name, held, pause))
			time.Sleep(pause)
			a.start()
		case r < 60:
			a := apps[rng.Intn(len(apps))]
			held := a.holding(time.Second)
			a.signal(syscall.SIGTERM, 20*time.Second)
			actions = append(actions, fmt.Sprintf("%v SIGTERM %s (drain) holding %d messages, back at once", at, a.name, held))
			a.start()
		default:
			natsDown = rng.Intn(len(nodes))
			n := nodes[natsDown]
			pause := time.Duration(500+rng.Intn(2000)) * time.Millisecond
			actions = append(actions, fmt.Sprintf("%v kill -9 nats node %d, back after %v", at, natsDown, pause))
			n.signal(syscall.SIGKILL, 10*time.Second)
			time.Sleep(pause)
			n.start(nil)
			waitHTTP(t, n, fmt.Sprintf("127.0.0.1:%d", n.port))
			natsDown = -1
		}
		t.Logf("chaos: %s (published %d, outcomes stored %d)", actions[len(actions)-1], published.Load(), stored())
	}
	_ = natsDown
	select {
	case <-pubDone:
	case <-time.After(120 * time.Second):
		t.Fatalf("publishing did not finish: %d of %d", published.Load(), total)
	}
	pubTime := time.Since(start)

	// Everything is up again. What the design promises (docs/jobs.md,
	// "Crashes"): every message settles. A message whose outcome was
	// stored but whose ack died with its appliance stays ack-pending until
	// JetStream redelivers it after ack_wait; the appliance then finds the
	// outcome already stored (the duplicate window) and acks it. So the
	// wait is bounded by the config, not by a guess: the outcomes, then
	// the consumer drained, each within a few ack waits of the last fault.
	settleWithin := 3*ackWait + 60*time.Second
	deadline := time.Now().Add(settleWithin)
	for time.Now().Before(deadline) {
		if n, err := storedOutcomes(js); err == nil && n >= total {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	pending, ackPending := drained(t, js, time.Now().Add(settleWithin))
	took := time.Since(start)

	outcomes := readOutcomes(t, js)
	byInput := map[int][]outcome{}
	for _, o := range outcomes {
		byInput[o.input] = append(byInput[o.input], o)
	}
	var results, dead, expired, lost, twice int
	for i := range total {
		got := byInput[i]
		switch {
		case len(got) == 0:
			lost++
			if lost <= 5 {
				t.Errorf("request %d: no result and no dead letter", i)
			}
			continue
		case len(got) > 1:
			twice++
			if twice <= 5 {
				t.Errorf("request %d: %d outcomes stored: %+v", i, len(got), got)
			}
			continue
		}
		o := got[0]
		switch kind := kindOf(i); {
		case o.status == "ok" && kind != "unknown":
			want := mlpReference(sixteenths(i), i%3 == 0)
			if fmt.Sprint(o.y) != fmt.Sprint(want) {
				t.Errorf("request %d: y = %v, want %v", i, o.y, want)
			}
			results++
		case o.status == "unknown_model" && kind == "unknown":
			dead++
		case o.status == "expired" && kind == "expires":
			dead++
			expired++
		default:
			t.Errorf("request %d (%s): outcome %+v", i, kind, o)
		}
	}
	if pending != 0 || ackPending != 0 {
		t.Errorf("consumer still holds work %v after the last fault (bound %v: 3 ack waits + 60 s): pending %d, ack pending %d",
			took.Round(time.Millisecond), settleWithin, pending, ackPending)
	}
	var redelivered, dups float64
	for _, a := range apps {
		if doc, err := a.jobs(); err == nil && len(doc.Streams) > 0 {
			redelivered += doc.Streams[0].Counters["redelivered"].(float64)
			dups += doc.Streams[0].Counters["duplicates"].(float64)
		}
	}
	t.Logf("crash actions (seed %d):\n  %s", seed, strings.Join(actions, "\n  "))
	t.Logf("%d requests: %d results, %d dead letters (%d expired), %d lost, %d stored twice; published in %v, all settled in %v; "+
		"since the last restarts: %v redelivered, %v result publishes found already stored",
		total, results, dead, expired, lost, twice, pubTime.Round(time.Millisecond), took.Round(time.Millisecond), redelivered, dups)
	if lost != 0 || twice != 0 || results+dead != total {
		t.Fatalf("%d lost, %d stored twice", lost, twice)
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

func sixteenths(i int) []float32 {
	x := make([]float32, 4)
	for k := range x {
		x[k] = float32((k*7+i*3)%13-6) / 16
	}
	return x
}

// kindOf: 1 in 50 asks for a model that is not loaded (dead letter
// unknown_model); 1 in 100 has a 1 ms X-AI-Timeout (expired, or a result
// if it ran within it); the rest are the MLP, a third through the adapter.
func kindOf(i int) string {
	switch {
	case i%50 == 7:
		return "unknown"
	case i%100 == 13:
		return "expires"
	}
	return "mlp"
}

func request(i int) *nats.Msg {
	subject := "inference.mlp"
	h := nats.Header{}
	h.Set("X-Model-Version", "1")
	switch kindOf(i) {
	case "unknown":
		subject = "inference.nosuch"
	case "expires":
		h.Set("X-AI-Timeout", "1ms")
	}
	if i%3 == 0 {
		h.Set("X-Lora-Adapter-ID", "formal")
	}
	body, _ := json.Marshal(map[string]any{"inputs": []map[string]any{{"name": "x", "shape": []int{1, 4}, "datatype": "FP32", "data": sixteenths(i)}}})
	return &nats.Msg{Subject: subject, Header: h, Data: body}
}

// storedOutcomes counts results and dead letters in the stream.
func storedOutcomes(js jetstream.JetStream) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, "ai-inference")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range []string{"inference.results.>", "inference.dlq.>"} {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(f))
		if err != nil {
			return 0, err
		}
		for _, c := range info.State.Subjects {
			n += int(c)
		}
	}
	return n, nil
}

// retryJS calls op until it succeeds or the deadline passes: JetStream's
// API answers errors (no responders, context deadline, leader moving)
// while a killed node rejoins and the stream and consumer elect leaders.
func retryJS(t *testing.T, what string, deadline time.Time, op func(context.Context) error) {
	t.Helper()
	var err error
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = op(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %d attempts: %v", what, attempt+1, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// drained waits until the durable consumer holds nothing (no message
// pending, none delivered and unacked) or the deadline passes, and says
// what it held last.
func drained(t *testing.T, js jetstream.JetStream, deadline time.Time) (pending, ackPending uint64) {
	t.Helper()
	for {
		retryJS(t, "consumer info", deadline, func(ctx context.Context) error {
			c, err := js.Consumer(ctx, "ai-inference", "sluice")
			if err != nil {
				return err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			pending, ackPending = info.NumPending, uint64(info.NumAckPending)
			return nil
		})
		if (pending == 0 && ackPending == 0) || time.Now().After(deadline) {
			return pending, ackPending
		}
		time.Sleep(250 * time.Millisecond)
	}
}

type outcome struct {
	input  int
	status string
	y      []float32
}

// readOutcomes reads every stored result and dead letter.
func readOutcomes(t *testing.T, js jetstream.JetStream) []outcome {
	t.Helper()
	var c jetstream.Consumer
	retryJS(t, "creating the outcome reader", time.Now().Add(60*time.Second), func(ctx context.Context) error {
		var err error
		c, err = js.CreateConsumer(ctx, "ai-inference", jetstream.ConsumerConfig{
			FilterSubjects: []string{"inference.results.>", "inference.dlq.>"}, AckPolicy: jetstream.AckNonePolicy,
			InactiveThreshold: time.Minute, MemoryStorage: true})
		return err
	})
	var want int
	retryJS(t, "counting the outcomes", time.Now().Add(60*time.Second), func(context.Context) error {
		var err error
		want, err = storedOutcomes(js)
		return err
	})
	var msgs []jetstream.Msg
	for fails := 0; len(msgs) < want; {
		b, err := c.Fetch(min(500, want-len(msgs)), jetstream.FetchMaxWait(5*time.Second))
		if err == nil {
			for m := range b.Messages() {
				msgs = append(msgs, m)
			}
			err = b.Error()
		}
		if err != nil {
			if fails++; fails > 5 {
				t.Fatalf("reading the outcomes: %d of %d: %v", len(msgs), want, err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	var out []outcome
	for _, m := range msgs {
		h := m.Headers()
		id := strings.TrimPrefix(h.Get("Sluice-Input-Msg-Id"), "in-")
		i, err := strconv.Atoi(id)
		if err != nil {
			t.Fatalf("outcome without the input's Nats-Msg-Id: %v", h)
		}
		o := outcome{input: i, status: h.Get("Sluice-Status")}
		if o.status == "ok" && h.Get("Content-Type") == "application/json" {
			var r struct {
				Outputs []struct {
					Data []float32 `json:"data"`
				} `json:"outputs"`
			}
			if err := json.Unmarshal(m.Data(), &r); err != nil || len(r.Outputs) != 1 {
				t.Fatalf("result %d: %v %s", i, err, m.Data())
			}
			o.y = r.Outputs[0].Data
		}
		out = append(out, o)
	}
	return out
}
