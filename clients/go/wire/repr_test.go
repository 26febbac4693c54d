package wire

import (
	"bytes"
	"strings"
	"testing"
)

func req() Repr { return Repr{Kind: KindRequest, Model: "m", ModelVersion: "1"} }

func build(r Repr) error {
	l, err := r.Layout()
	if err != nil {
		return err
	}
	buf := make([]byte, l.FrameLen)
	if _, err := r.Emit(buf); err != nil {
		return err
	}
	// Whatever the builder accepts, the parser accepts.
	_, err = Parse(buf)
	return err
}

func TestBuilderErrors(t *testing.T) {
	long := strings.Repeat("x", 300)
	u8 := func(name string, dims ...uint64) TensorRepr { return TensorRepr{Name: name, DType: U8, Dims: dims} }
	cases := []struct {
		name string
		r    func(r *Repr)
		want error
	}{
		{"model 64", func(r *Repr) { r.Model = long[:64] }, nil},
		{"model 65", func(r *Repr) { r.Model = long[:65] }, ErrFieldTooLong},
		{"version 33", func(r *Repr) { r.ModelVersion = long[:33] }, ErrFieldTooLong},
		{"adapter 65", func(r *Repr) { r.Adapter = long[:65] }, ErrFieldTooLong},
		{"intent 33", func(r *Repr) { r.Intent = long[:33] }, ErrFieldTooLong},
		{"model space", func(r *Repr) { r.Model = "a b" }, ErrBadString},
		{"intent non-ascii", func(r *Repr) { r.Intent = "é" }, ErrBadString},
		{"flag 4", func(r *Repr) { r.Flags = 4 }, ErrReserved},
		{"flags 3", func(r *Repr) { r.Flags = 3 }, nil},
		{"kind 0", func(r *Repr) { r.Kind = 0 }, ErrUnknownKind},
		{"17 extensions", func(r *Repr) { r.Extensions = make([]Extension, 17) }, ErrTooManyExtensions},
		{"empty key", func(r *Repr) { r.Extensions = []Extension{{}} }, ErrFieldTooLong},
		{"key 33", func(r *Repr) { r.Extensions = []Extension{{Key: long[:33]}} }, ErrFieldTooLong},
		{"value 256", func(r *Repr) { r.Extensions = []Extension{{Key: "k", Value: make([]byte, 256)}} }, ErrFieldTooLong},
		{"key space", func(r *Repr) { r.Extensions = []Extension{{Key: "a b"}} }, ErrBadString},
		{"17 tensors", func(r *Repr) { r.Tensors = make([]TensorRepr, 17) }, ErrTooManyTensors},
		{"tensor in ping", func(r *Repr) { r.Kind = KindPing; r.Tensors = []TensorRepr{u8("t", 1)} }, ErrTooManyTensors},
		{"empty name", func(r *Repr) { r.Tensors = []TensorRepr{u8("", 1)} }, ErrFieldTooLong},
		{"name 65", func(r *Repr) { r.Tensors = []TensorRepr{u8(long[:65], 1)} }, ErrFieldTooLong},
		{"rank 9", func(r *Repr) { r.Tensors = []TensorRepr{u8("t", 1, 1, 1, 1, 1, 1, 1, 1, 1)} }, ErrBadRank},
		{"dtype 8", func(r *Repr) { r.Tensors = []TensorRepr{{Name: "t", DType: 8}} }, ErrBadDType},
		{"dim 2^63", func(r *Repr) { r.Tensors = []TensorRepr{u8("t", 0, 1<<63)} }, ErrSizeOverflow},
		{"512 MiB", func(r *Repr) { r.Tensors = []TensorRepr{{Name: "t", DType: F32, Dims: []uint64{1 << 27}}} }, ErrSizeOverflow},
		{"data too short", func(r *Repr) {
			r.Tensors = []TensorRepr{{Name: "t", DType: F32, Dims: []uint64{2}, Data: make([]byte, 7)}}
		}, ErrBadTensorLen},
		{"frame over 256 MiB", func(r *Repr) {
			r.Tensors = []TensorRepr{{Name: "a", DType: U8, Dims: []uint64{200 << 20}}, {Name: "b", DType: U8, Dims: []uint64{100 << 20}}}
		}, ErrTooLarge},
		{"header over 4096", func(r *Repr) {
			for i := 0; i < 15; i++ {
				r.Extensions = append(r.Extensions, Extension{Key: long[:32], Value: make([]byte, 255)})
			}
		}, ErrBadHeaderLen},
		{"body on a request", func(r *Repr) { r.Body = &ErrorBody{Code: CodeBusy} }, ErrBadBody},
		{"error without body", func(r *Repr) { r.Kind = KindError }, ErrBadBody},
		{"body of another kind", func(r *Repr) { r.Kind = KindError; r.Body = &NegotiateRequest{Subject: "s"} }, ErrBadBody},
		{"message not utf-8", func(r *Repr) { r.Kind = KindError; r.Body = &ErrorBody{Message: "\xff"} }, ErrBadString},
		{"long message is clipped", func(r *Repr) { r.Kind = KindError; r.Body = &ErrorBody{Message: long} }, nil},
		{"subject empty", func(r *Repr) { r.Kind = KindNegotiateRequest; r.Body = &NegotiateRequest{} }, ErrFieldTooLong},
		{"subject 256", func(r *Repr) { r.Kind = KindNegotiateRequest; r.Body = &NegotiateRequest{Subject: long[:256]} }, ErrFieldTooLong},
		{"subject space", func(r *Repr) { r.Kind = KindNegotiateRequest; r.Body = &NegotiateRequest{Subject: "a b"} }, ErrBadString},
		{"schema over 48 KiB", func(r *Repr) {
			r.Kind = KindNegotiateResponse
			r.Body = &NegotiateResponse{SchemaType: SchemaJSON, Schema: make([]byte, SchemaLenMax+1)}
		}, ErrTooLarge},
	}
	for _, c := range cases {
		r := req()
		c.r(&r)
		if err := build(r); err != c.want {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
}

func TestEmitBufferTooSmallWritesNothing(t *testing.T) {
	r := Repr{Kind: KindPing}
	buf := bytes.Repeat([]byte{7}, 95)
	if _, err := r.Emit(buf); err != ErrBufferTooSmall {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{7}, 95)) {
		t.Fatal("a failed emit wrote bytes")
	}
	if _, err := r.Emit(make([]byte, 96)); err != nil {
		t.Fatal(err)
	}
}

func TestMessageClippedAtCharBoundary(t *testing.T) {
	msg := strings.Repeat("c", 255) + "é"
	r := Repr{Kind: KindError, Body: &ErrorBody{Code: CodeBusy, Message: msg}}
	b, _, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	eb, _ := f.ErrorBody()
	if eb.Message != msg[:255] {
		t.Fatalf("message of %d bytes", len(eb.Message))
	}
}

// The tag covers every header byte but the tag itself and FORWARDED, and
// no byte of tensor data.
func TestTagCoverage(t *testing.T) {
	r := Repr{Kind: KindRequest, RequestID: 1, Model: "mlp", ModelVersion: "1", Intent: "chat",
		Extensions: []Extension{{Key: "k", Value: []byte("v")}},
		Tensors:    []TensorRepr{{Name: "x", DType: F32, Dims: []uint64{1, 4}, Data: make([]byte, 16)}}}
	b, l, err := r.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	key := NewTenantKey([]byte("k"))
	f, _ := Parse(b)
	key.Sign(&f)
	for i := 0; i < len(b); i++ {
		c := append([]byte(nil), b...)
		c[i] ^= 0x01
		g, err := Parse(c)
		if err != nil {
			continue // the flip broke the frame; nothing to verify
		}
		if i >= offAuthTag && i < offAuthTag+AuthTagLen {
			if key.Verify(&g) {
				t.Errorf("tag byte %d changed and the tag still verifies", i)
			}
			continue
		}
		covered := i < l.HeaderLen
		if key.Verify(&g) == covered {
			t.Errorf("byte %d: covered %v but verify %v", i, covered, covered)
		}
	}
	// FORWARDED is read as zero.
	c := append([]byte(nil), b...)
	c[offFlags] |= byte(FlagForwarded)
	g, _ := Parse(c)
	if !key.Verify(&g) {
		t.Error("FORWARDED changed the tag")
	}
}

func TestParseAndEmitAllocateNothing(t *testing.T) {
	v := loadVectors(t)
	frames := make([][]byte, len(v.Valid))
	for i, x := range v.Valid {
		frames[i] = unhex(t, x.Hex)
	}
	n := testing.AllocsPerRun(20, func() {
		for _, b := range frames {
			f, err := Parse(b)
			if err != nil {
				panic(err)
			}
			for i := 0; i < f.NumTensors(); i++ {
				_ = f.TensorData(f.Tensor(i))
			}
		}
	})
	if n != 0 {
		t.Fatalf("Parse allocates %v times per run", n)
	}
	x := make([]byte, 16)
	r := Repr{Kind: KindRequest, Model: "mlp", ModelVersion: "1",
		Tensors: []TensorRepr{{Name: "x", DType: F32, Dims: []uint64{1, 4}, Data: x}}}
	buf := make([]byte, 4096)
	if n := testing.AllocsPerRun(100, func() { _, _ = r.Emit(buf) }); n != 0 {
		t.Fatalf("Emit allocates %v times", n)
	}
}
