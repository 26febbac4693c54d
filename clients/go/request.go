package sluice

import (
	"time"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Request is one inference request.
type Request struct {
	Model   string // model name; required by the engine's routes
	Version string // model version or alias; the engine requires one
	Adapter string // LoRA adapter id, optional
	Intent  string // optional routing hint ("chat", "training", ...)

	Inputs []Tensor

	// Section is a structured section (JSON, Avro or Protobuf bytes)
	// checked against the schema SchemaID/SchemaVersion name before routing
	// (docs/wire.md, "Structured section"). It travels as the u8 tensor
	// "$section".
	Section       []byte
	SchemaID      uint32 // 0: none
	SchemaVersion uint32 // 0: the newest live version of SchemaID

	TokenCount uint32 // prompt tokens, for load accounting
	Trace      wire.TraceContext
	Extensions []wire.Extension

	// Deadline, when set, is written into the frame: the engine answers
	// deadline_exceeded instead of running a request whose deadline has
	// passed. The context's deadline is written too; the earlier wins.
	Deadline time.Time
}

// NewRequest is a request for model at version with inputs.
func NewRequest(model, version string, inputs ...Tensor) *Request {
	return &Request{Model: model, Version: version, Inputs: inputs}
}

// deadlineUs is the frame deadline: the earlier of r.Deadline and the
// context's, in µs since the Unix epoch; 0 for none.
func deadlineUs(a, b time.Time) uint64 {
	d := a
	if d.IsZero() || (!b.IsZero() && b.Before(d)) {
		d = b
	}
	if d.IsZero() {
		return 0
	}
	us := d.UnixMicro()
	if us <= 0 {
		return 1 // long past, but not "no deadline"
	}
	return uint64(us)
}

// repr describes the request frame. tensors is scratch space for the
// tensor table (so that building a frame need not allocate).
func (r *Request) repr(id uint64, tenant uint32, deadline uint64, tensors []wire.TensorRepr) wire.Repr {
	for _, t := range r.Inputs {
		tensors = append(tensors, wire.TensorRepr{Name: t.Name, DType: t.DType, Dims: t.Dims, Data: t.Data})
	}
	if r.Section != nil {
		tensors = append(tensors, wire.TensorRepr{
			Name: wire.SectionTensorName, DType: wire.U8, Dims: []uint64{uint64(len(r.Section))}, Data: r.Section,
		})
	}
	return wire.Repr{
		Kind:          wire.KindRequest,
		RequestID:     id,
		TenantID:      tenant,
		DeadlineUs:    deadline,
		SchemaID:      r.SchemaID,
		SchemaVersion: r.SchemaVersion,
		TokenCount:    r.TokenCount,
		Trace:         r.Trace,
		Model:         r.Model,
		ModelVersion:  r.Version,
		Adapter:       r.Adapter,
		Intent:        r.Intent,
		Extensions:    r.Extensions,
		Tensors:       tensors,
	}
}
