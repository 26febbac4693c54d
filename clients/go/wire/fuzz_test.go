package wire

import (
	"bytes"
	"testing"
)

// FuzzParse: any bytes either fail with a known Error or give a frame whose
// every getter stays inside the buffer and which the builder reproduces
// when its layout is the canonical one. Seeds: every conformance vector.
//
//	go test ./wire -run '^$' -fuzz FuzzParse -fuzztime 30s
func FuzzParse(f *testing.F) {
	v := loadVectors(f)
	for _, x := range v.Valid {
		f.Add(unhex(f, x.Hex))
	}
	for _, x := range v.Invalid {
		f.Add(unhex(f, x.Hex))
	}
	key := NewTenantKey([]byte("fuzz"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := Parse(b)
		if err != nil {
			if e, ok := err.(Error); !ok || !e.valid() || e == ErrBufferTooSmall {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if fr.HeaderLen()+fr.PayloadLen() != len(b) {
			t.Fatal("frame length disagrees with the buffer")
		}
		r := Repr{Kind: fr.Kind(), Flags: fr.Flags(), RequestID: fr.RequestID(), TenantID: fr.TenantID(),
			DeadlineUs: fr.DeadlineUs(), SchemaID: fr.SchemaID(), SchemaVersion: fr.SchemaVersion(),
			TokenCount: fr.TokenCount(), Trace: fr.Trace(), Model: fr.Model(), ModelVersion: fr.ModelVersion(),
			Adapter: fr.Adapter(), Intent: fr.Intent()}
		for i := 0; i < fr.NumExtensions(); i++ {
			k, val := fr.Extension(i)
			r.Extensions = append(r.Extensions, Extension{Key: k, Value: val})
		}
		prevEnd := fr.HeaderLen()
		for i := 0; i < fr.NumTensors(); i++ {
			d := fr.Tensor(i)
			data := fr.TensorData(d)
			if d.DataOffset < prevEnd || d.DataOffset%TensorAlign != 0 || len(data) != d.Len()*d.DType.Size() {
				t.Fatalf("tensor %d breaks the rules: %+v", i, d)
			}
			prevEnd = d.DataOffset + d.DataLen
			r.Tensors = append(r.Tensors, TensorRepr{Name: d.Name(), DType: d.DType, Dims: d.Dims(), Data: data})
		}
		if eb, ok := fr.ErrorBody(); ok {
			r.Body = &eb
		}
		if nq, ok := fr.NegotiateRequest(); ok {
			r.Body = &nq
		}
		if ns, ok := fr.NegotiateResponse(); ok {
			r.Body = &ns
		}
		_ = key.Verify(&fr)
		out, _, err := r.Append(nil)
		if err != nil {
			t.Fatalf("a parsed frame does not build: %v", err)
		}
		// Same fields, canonical layout: the same bytes, except the tag
		// and padding, when the input was laid out canonically too.
		copy(out[offAuthTag:offAuthTag+AuthTagLen], fr.AuthTag())
		if len(out) == len(b) && !bytes.Equal(out, b) {
			g, err := Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < fr.NumTensors(); i++ {
				if g.Tensor(i).DataOffset != fr.Tensor(i).DataOffset {
					return // a different layout: padding differs legitimately
				}
			}
			if !bytes.Equal(out[:fr.HeaderLen()], b[:fr.HeaderLen()]) {
				t.Fatalf("header rebuilt differently:\n got %x\nwant %x", out[:fr.HeaderLen()], b[:fr.HeaderLen()])
			}
		}
	})
}
