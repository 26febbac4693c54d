package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	ort "github.com/yalue/onnxruntime_go"
)

// The baseline: what a user would write instead of the Sluice ingress. A
// plain Go JetStream worker on the same stream with its own durable pull
// consumer; each message's KServe JSON body is decoded, the MLP runs
// in-process in ONNX Runtime (onnxruntime_go over the same
// libonnxruntime), the result is published as KServe JSON to
// inference.results.mlp with a Nats-Msg-Id, and the message is acked once
// the publish acks are in. A fetch of up to -fetch messages is worked in
// order; its results are published asynchronously and awaited together.

type tensorJSON struct {
	Name     string    `json:"name"`
	Shape    []int64   `json:"shape"`
	Datatype string    `json:"datatype"`
	Data     []float32 `json:"data"`
}

type requestJSON struct {
	ID     string       `json:"id"`
	Inputs []tensorJSON `json:"inputs"`
}

type responseJSON struct {
	ID           string       `json:"id"`
	ModelName    string       `json:"model_name"`
	ModelVersion string       `json:"model_version"`
	Outputs      []tensorJSON `json:"outputs"`
}

func runWorker(server, model, lib string, fetch int) error {
	ort.SetSharedLibraryPath(lib)
	if err := ort.InitializeEnvironment(); err != nil {
		return fmt.Errorf("onnxruntime_go cannot load %s: %w", lib, err)
	}
	defer ort.DestroyEnvironment()
	x, err := ort.NewEmptyTensor[float32](ort.NewShape(1, 4))
	if err != nil {
		return err
	}
	y, err := ort.NewEmptyTensor[float32](ort.NewShape(1, 3))
	if err != nil {
		return err
	}
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return err
	}
	// One thread per run, as the engine's sessions.
	if err := opts.SetIntraOpNumThreads(1); err != nil {
		return err
	}
	if err := opts.SetInterOpNumThreads(1); err != nil {
		return err
	}
	sess, err := ort.NewAdvancedSession(model, []string{"x"}, []string{"y"}, []ort.Value{x}, []ort.Value{y}, opts)
	if err != nil {
		return err
	}
	defer sess.Destroy()
	log.Printf("worker: onnxruntime %s, fetch %d", ort.GetVersion(), fetch)

	nc, err := nats.Connect(server)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, "ai-inference", jetstream.ConsumerConfig{
		Durable: "baseline", FilterSubject: "inference.*", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 256, AckWait: 30 * time.Second, MaxRequestBatch: 256,
	})
	if err != nil {
		return err
	}
	type pending struct {
		msg jetstream.Msg
		ack jetstream.PubAckFuture
	}
	var batch []pending
	for {
		b, err := cons.Fetch(fetch, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			log.Printf("fetch: %v", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		batch = batch[:0]
		for m := range b.Messages() {
			var req requestJSON
			if err := json.Unmarshal(m.Data(), &req); err != nil || len(req.Inputs) != 1 || len(req.Inputs[0].Data) != 4 {
				_ = m.Term()
				continue
			}
			copy(x.GetData(), req.Inputs[0].Data)
			if err := sess.Run(); err != nil {
				_ = m.Nak()
				continue
			}
			body, _ := json.Marshal(responseJSON{ID: req.ID, ModelName: "mlp", ModelVersion: "1.0.0",
				Outputs: []tensorJSON{{Name: "y", Shape: []int64{1, 3}, Datatype: "FP32", Data: y.GetData()}}})
			meta, _ := m.Metadata()
			out := &nats.Msg{Subject: "inference.results.mlp", Data: body, Header: nats.Header{}}
			out.Header.Set("Sluice-Input-Msg-Id", m.Headers().Get("Nats-Msg-Id"))
			out.Header.Set("Sluice-Status", "ok")
			f, err := js.PublishMsgAsync(out, jetstream.WithMsgID(fmt.Sprintf("baseline:%d", meta.Sequence.Stream)))
			if err != nil {
				_ = m.Nak()
				continue
			}
			batch = append(batch, pending{m, f})
		}
		for _, p := range batch {
			select {
			case <-p.ack.Ok():
				_ = p.msg.Ack()
			case <-p.ack.Err():
				_ = p.msg.Nak()
			}
		}
	}
}
