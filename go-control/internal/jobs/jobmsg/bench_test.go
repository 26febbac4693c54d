package jobmsg

import (
	"testing"

	sluice "github.com/sluice-ai/sluice/clients/go"
)

// Costs of the JSON codec for the bundled MLP's shapes (x [1,4], y [1,3]).
func BenchmarkKServeParse(b *testing.B) {
	body := kserveBody("7", []float32{0.5, -0.25, 1, 0})
	b.ReportAllocs()
	for b.Loop() {
		if _, f := parseKServe(body); f != nil {
			b.Fatal(f)
		}
	}
}

func BenchmarkKServeResponse(b *testing.B) {
	y := sluice.NewTensor("y", []uint64{1, 3}, []float32{0.5, -0.25, 1})
	resp := &sluice.Response{Model: "mlp", ModelVersion: "1.0.0", Outputs: []sluice.Output{{Name: "y", DType: y.DType, Dims: y.Dims, Data: y.Data}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := KServeResponse("ai-inference:7", "7", resp, nil); err != nil {
			b.Fatal(err)
		}
	}
}
