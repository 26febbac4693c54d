// Package sluice is the Go client of the Sluice inference appliance, pure
// Go with no cgo. It speaks the wire format of docs/wire.md (package wire)
// over UDP, or over TCP where an endpoint offers it.
//
//	c, err := sluice.Dial(ctx, "127.0.0.1:7070", sluice.Options{TenantID: 1, Key: key})
//	x := sluice.NewTensor("x", []uint64{1, 4}, []float32{1, 2, 3, 4})
//	resp, err := c.Infer(ctx, sluice.NewRequest("mlp", "1", x))
//	y, err := sluice.Values[float32](resp.Outputs[0])
//	resp.Release()
//
// One Client serves any number of goroutines over one socket: answers are
// matched to requests by request id. Context deadlines become frame
// deadlines. Server errors wrap one sentinel per code (ErrBusy,
// ErrUnknownModel, ...); IsRetryable says which may succeed if sent again.
//
// Copies: an input is copied once, into the frame being sent (a datagram
// must be one buffer). Outputs are views over the received datagram, valid
// until Response.Release.
package sluice
