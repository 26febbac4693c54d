package sluice_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log"
	"time"

	sluice "github.com/sluice-ai/sluice/clients/go"
)

// The README's example: the bundled MLP on the demo appliance
// (scripts/demo.sh), through the "formal" LoRA adapter, with a deadline.
// Compiled by `go test`, not run (it needs the appliance).
func ExampleClient_Infer() {
	// The demo tenant (cfg/sluice.toml): id 1 and its key.
	key, _ := hex.DecodeString("73756963652d64656d6f2d6b65792d30303030303030303030303030303030")
	c, err := sluice.Dial(context.Background(), "127.0.0.1:7070", sluice.Options{TenantID: 1, Key: key})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// The context's deadline bounds the wait and travels in the frame.
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	x := sluice.NewTensor("x", []uint64{1, 4}, []float32{0.5, -0.25, 1, 0})
	resp, err := c.Infer(ctx, &sluice.Request{Model: "mlp", Version: "1", Adapter: "formal", Inputs: []sluice.Tensor{x}})
	switch {
	case sluice.IsRetryable(err): // busy, peer_down, ...: try again later
		log.Fatal("retry later: ", err)
	case errors.Is(err, sluice.ErrUnknownAdapter):
		log.Fatal("no such adapter: ", err)
	case err != nil:
		log.Fatal(err)
	}
	defer resp.Release() // outputs are views over the received datagram
	y, _ := sluice.Values[float32](resp.Outputs[0])
	fmt.Println(resp.Outputs[0].Name, resp.Outputs[0].Dims, y)
}
