// Command seedllm is the seed's LLM job, as the seed writes it: nats.go's
// JetStream context, js.AddStream, and one publish to "inference.llm" of
// {"prompt":"Explain quantum entanglement","model":"qwen3-72b"} with two
// headers, X-AI-Intent and X-AI-Timeout, and nothing else (no
// X-Model-Version: the OpenAI front door takes the model's
// [openai].default_versions entry). With cfg/backends.toml sluiced maps
// the subject's llm to qwen3-72b, a kind = "backend" model, and sends the
// job to its OpenAI front door, which dispatches it to a backend
// (docs/jobs.md, "LLM jobs served by backends").
//
// Then, which the seed leaves to its reader, it waits (-wait) for the
// job's outcome on inference.results.qwen3-72b (or its dead letter on
// inference.dlq.qwen3-72b) and prints one JSON line: the request id, the
// outcome's headers and the result body (the completion JSON) as stored.
// It exits 1 on a dead letter or when nothing came in time.
//
//	go run ./internal/jobs/e2e/seedllm -server nats://127.0.0.1:4222
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/nats-io/nats.go"
)

// Line is what seedllm prints.
type Line struct {
	RequestID string          `json:"request_id"` // ai-inference:SEQUENCE
	Kind      string          `json:"kind"`       // result or dead-letter
	Status    string          `json:"status"`     // ok, or the dead letter's code
	Error     string          `json:"error,omitempty"`
	Model     string          `json:"model,omitempty"`
	Version   string          `json:"version,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"` // the completion, as stored
}

func main() {
	server := flag.String("server", nats.DefaultURL, "NATS server URL")
	wait := flag.Duration("wait", 30*time.Second, "how long to wait for the result")
	flag.Parse()
	if err := run(*server, *wait, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(server string, wait time.Duration, out io.Writer) error {
	nc, err := nats.Connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := nc.JetStream()
	if err != nil {
		return err
	}
	// The seed's stream. sluiced makes the same one when it starts first;
	// adding it again with the same config is a no-op.
	if _, err := js.AddStream(&nats.StreamConfig{
		Name:     "ai-inference",
		Subjects: []string{"inference.>"},
		Storage:  nats.FileStorage,
	}); err != nil {
		return err
	}
	// The outcome's subjects first, so it is not missed.
	results, err := js.SubscribeSync("inference.results.qwen3-72b", nats.DeliverNew())
	if err != nil {
		return err
	}
	defer results.Unsubscribe()
	dead, err := js.SubscribeSync("inference.dlq.qwen3-72b", nats.DeliverNew())
	if err != nil {
		return err
	}
	defer dead.Unsubscribe()

	// The seed's job: its body and its two headers.
	headers := nats.Header{}
	headers.Set("X-AI-Intent", "reasoning")
	headers.Set("X-AI-Timeout", "8s")
	body := []byte(`{"prompt":"Explain quantum entanglement","model":"qwen3-72b"}`)
	// The seed's js.Publish("inference.llm", body, headers): nats.go
	// takes headers through PublishMsg.
	ack, err := js.PublishMsg(&nats.Msg{Subject: "inference.llm", Data: body, Header: headers})
	if err != nil {
		return err
	}
	id := fmt.Sprintf("%s:%d", ack.Stream, ack.Sequence)

	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for _, sub := range []*nats.Subscription{results, dead} {
			m, err := sub.NextMsg(50 * time.Millisecond)
			if errors.Is(err, nats.ErrTimeout) {
				continue
			}
			if err != nil {
				return err
			}
			_ = m.Ack()
			if m.Header.Get("Sluice-Request-Id") != id {
				continue // another job's
			}
			l := Line{RequestID: id, Kind: m.Header.Get("Sluice-Result"), Status: m.Header.Get("Sluice-Status"),
				Error: m.Header.Get("Sluice-Error"), Model: m.Header.Get("Sluice-Model"), Version: m.Header.Get("Sluice-Model-Version")}
			if l.Kind == "result" {
				l.Result = json.RawMessage(m.Data)
			}
			if err := json.NewEncoder(out).Encode(l); err != nil {
				return err
			}
			if l.Kind != "result" {
				return fmt.Errorf("%s was dead-lettered: %s: %s", id, l.Status, l.Error)
			}
			return nil
		}
	}
	return fmt.Errorf("no outcome of %s within %v (is sluiced running with cfg/backends.toml?)", id, wait)
}
