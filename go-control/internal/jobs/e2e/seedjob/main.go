// Command seedjob is the seed's own async-jobs example, as the seed writes
// it (nats.go's JetStream context, js.AddStream, a publish to
// "inference.llm" with the intent and timeout as headers), plus the one
// header Sluice needs, X-Model-Version. It publishes requests for the
// bundled MLP (x f32 [batch, 4], every other one through the LoRA adapter
// "formal"), then reads each result back from inference.results.mlp and
// prints one JSON line per request: its input, its output and the
// result's headers. docs/jobs.md's quick start runs it:
//
//	go run ./internal/jobs/e2e/seedjob -server nats://127.0.0.1:4222 -n 4
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

type kserveTensor struct {
	Name     string    `json:"name"`
	Shape    []int     `json:"shape"`
	Datatype string    `json:"datatype"`
	Data     []float32 `json:"data"`
}

// Line is what seedjob prints per request.
type Line struct {
	Seq       uint64    `json:"seq"` // the request's stream sequence
	Adapter   string    `json:"adapter"`
	X         []float32 `json:"x"`
	Batch     int       `json:"batch"`
	Status    string    `json:"status"`
	RequestID string    `json:"request_id"`
	Model     string    `json:"model"`
	Version   string    `json:"version"`
	Y         []float32 `json:"y"`
	Shape     []int     `json:"shape"`
}

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS server URL")
	n := flag.Int("n", 8, "requests to publish")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for the results")
	flag.Parse()

	nc, err := nats.Connect(*server)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		log.Fatal(err)
	}
	// The seed's stream. sluiced makes the same one when it starts first;
	// adding it again with the same config is a no-op.
	if _, err := js.AddStream(&nats.StreamConfig{
		Name:     "ai-inference",
		Subjects: []string{"inference.>"},
		Storage:  nats.FileStorage,
	}); err != nil {
		log.Fatal(err)
	}
	// Results first, so none is missed: a subscription from now on.
	results, err := js.SubscribeSync("inference.results.mlp", nats.DeliverNew())
	if err != nil {
		log.Fatal(err)
	}
	sent := map[uint64]*Line{}
	for i := range *n {
		batch := 1 + i%4
		x := make([]float32, 4*batch)
		for k := range x {
			x[k] = float32((k*7+i*3)%13-6) / 16 // multiples of 1/16: exact results
		}
		body, _ := json.Marshal(map[string]any{"id": fmt.Sprint("job-", i),
			"inputs": []kserveTensor{{Name: "x", Shape: []int{batch, 4}, Datatype: "FP32", Data: x}}})
		headers := nats.Header{}
		headers.Set("X-AI-Intent", "reasoning")
		headers.Set("X-AI-Timeout", "8s")
		headers.Set("X-Model-Version", "1")
		adapter := ""
		if i%2 == 1 {
			adapter = "formal"
			headers.Set("X-Lora-Adapter-ID", adapter)
		}
		// The seed's js.Publish("inference.llm", body, headers): nats.go
		// takes headers through PublishMsg.
		ack, err := js.PublishMsg(&nats.Msg{Subject: "inference.llm", Data: body, Header: headers})
		if err != nil {
			log.Fatal(err)
		}
		sent[ack.Sequence] = &Line{Seq: ack.Sequence, Adapter: adapter, X: x, Batch: batch}
	}
	deadline := time.Now().Add(*wait)
	enc := json.NewEncoder(os.Stdout)
	for left := len(sent); left > 0; {
		m, err := results.NextMsg(time.Until(deadline))
		if err != nil {
			log.Fatalf("%d results missing: %v", left, err)
		}
		_ = m.Ack()
		id := m.Header.Get("Sluice-Request-Id")
		seq, _ := strconv.ParseUint(id[strings.LastIndexByte(id, ':')+1:], 10, 64)
		l, ok := sent[seq]
		if !ok || l.Status != "" {
			continue // not one of ours, or a second result (there are none)
		}
		var out struct {
			Outputs []kserveTensor `json:"outputs"`
		}
		if err := json.Unmarshal(m.Data, &out); err != nil || len(out.Outputs) != 1 {
			log.Fatalf("result %s: %v %s", id, err, m.Data)
		}
		l.Status, l.RequestID = m.Header.Get("Sluice-Status"), id
		l.Model, l.Version = m.Header.Get("Sluice-Model"), m.Header.Get("Sluice-Model-Version")
		l.Y, l.Shape = out.Outputs[0].Data, out.Outputs[0].Shape
		if err := enc.Encode(l); err != nil {
			log.Fatal(err)
		}
		left--
	}
}
