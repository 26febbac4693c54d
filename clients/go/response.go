package sluice

import (
	"fmt"
	"sync"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Response is the answer to a request. Its outputs are views over the
// received frame's buffer: nothing is copied on receive. Call Release when
// done to hand the buffer back to the client for the next answer; after
// Release the outputs must not be used. Without Release the buffer is
// simply garbage-collected.
type Response struct {
	RequestID    uint64
	Model        string
	ModelVersion string
	Outputs      []Output

	frame wire.Frame
	buf   *[]byte // pooled receive buffer, or nil
	pool  *sync.Pool
}

// Output is one output tensor of a response.
type Output struct {
	Name  string
	DType wire.DType
	Dims  []uint64
	Data  []byte // a view into the response's buffer
}

// Frame is the received frame (for headers the response does not copy
// out: trace context, extensions, schema fields).
func (r *Response) Frame() *wire.Frame { return &r.frame }

// Output returns the first output named name.
func (r *Response) Output(name string) (Output, bool) {
	for _, o := range r.Outputs {
		if o.Name == name {
			return o, true
		}
	}
	return Output{}, false
}

// Release returns the receive buffer to the client's pool. The response
// and its outputs must not be used afterwards. Safe to call twice.
func (r *Response) Release() {
	if r.buf != nil && r.pool != nil {
		r.pool.Put(r.buf)
	}
	r.buf, r.pool, r.Outputs = nil, nil, nil
	r.frame = wire.Frame{}
}

func newResponse(f wire.Frame, buf *[]byte, pool *sync.Pool) *Response {
	r := &Response{RequestID: f.RequestID(), Model: f.Model(), ModelVersion: f.ModelVersion(), frame: f, buf: buf, pool: pool}
	r.Outputs = make([]Output, f.NumTensors())
	for i := range r.Outputs {
		d := f.Tensor(i)
		r.Outputs[i] = Output{Name: d.Name(), DType: d.DType, Dims: d.Dims(), Data: f.TensorData(d)}
	}
	return r
}

// Len is the number of elements.
func (o Output) Len() int {
	if s := o.DType.Size(); s > 0 {
		return len(o.Data) / s
	}
	return 0
}

func (o Output) String() string { return fmt.Sprintf("%s %s%v", o.Name, o.DType, o.Dims) }

// Values reads an output as []T. On a little-endian host the result is a
// view over the response buffer (valid until Release); otherwise, or when
// the data is not aligned for T, a decoded copy. T must be the output's
// type (uint16 also reads f16 and bf16 as raw bits); otherwise ErrDType.
func Values[T Element](o Output) ([]T, error) {
	if !fits[T](o.DType) {
		return nil, fmt.Errorf("%w: %s is %s, read as %s", ErrDType, o.Name, o.DType, DTypeOf[T]())
	}
	v, _ := viewAs[T](o.Data)
	return v, nil
}

// Float32 reads an f32 output; f16 and bf16 outputs are converted (a copy).
func (o Output) Float32() ([]float32, error) {
	switch o.DType {
	case wire.F16, wire.BF16:
		bits, _ := viewAs[uint16](o.Data)
		out := make([]float32, len(bits))
		conv := Float16ToFloat32
		if o.DType == wire.BF16 {
			conv = BFloat16ToFloat32
		}
		for i, b := range bits {
			out[i] = conv(b)
		}
		return out, nil
	}
	return Values[float32](o)
}
