package jobmsg

import (
	"fmt"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// ResponseFrame writes the answer as a response frame carrying the
// request frame's own id (the engine answered under the ingress's).
func ResponseFrame(j *Job, resp *sluice.Response) ([]byte, error) {
	var scratch [wire.TensorCountMax]wire.TensorRepr
	ts := scratch[:0]
	for _, o := range resp.Outputs {
		ts = append(ts, wire.TensorRepr{Name: o.Name, DType: o.DType, Dims: o.Dims, Data: o.Data})
	}
	f := resp.Frame()
	r := wire.Repr{
		Kind: wire.KindResponse, RequestID: j.FrameRequestID, TenantID: uint32(j.Tenant.ID),
		Trace: f.Trace(), Model: resp.Model, ModelVersion: resp.ModelVersion, Tensors: ts,
	}
	out, _, err := r.Append(nil)
	if err != nil {
		return nil, fmt.Errorf("writing the response frame: %w", err)
	}
	return out, nil
}
