package sluice

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

func TestNewTensorIsAViewAndLittleEndian(t *testing.T) {
	x := []float32{1, -2}
	tn := NewTensor("x", []uint64{2}, x)
	if tn.DType != wire.F32 || len(tn.Data) != 8 || tn.Data[3] != 0x3f || tn.Data[7] != 0xc0 {
		t.Fatalf("%v % x", tn, tn.Data)
	}
	if littleEndian && unsafe.Pointer(&tn.Data[0]) != unsafe.Pointer(&x[0]) {
		t.Fatal("input copied")
	}
	if s := Scalar("s", int64(-3)); len(s.Dims) != 0 || s.DType != wire.I64 || s.Len() != 1 || len(s.Data) != 8 {
		t.Fatalf("%v", s)
	}
	for _, c := range []struct {
		d wire.DType
		t Tensor
	}{
		{wire.F64, NewTensor("a", nil, []float64{math.Float64frombits(1)})}, {wire.I8, NewTensor("a", nil, []int8{1})},
		{wire.U8, NewTensor("a", nil, []uint8{1})}, {wire.I16, NewTensor("a", nil, []int16{1})},
		{wire.U16, NewTensor("a", nil, []uint16{1})}, {wire.I32, NewTensor("a", nil, []int32{1})},
		{wire.U32, NewTensor("a", nil, []uint32{1})}, {wire.U64, NewTensor("a", nil, []uint64{1})},
		{wire.Bool, NewTensor("a", nil, []bool{true})}, {wire.F16, Float16Tensor("a", nil, []uint16{1})},
		{wire.BF16, BFloat16Tensor("a", nil, []uint16{1})},
	} {
		if c.t.DType != c.d || len(c.t.Data) != c.d.Size() || c.t.Data[0] != 1 {
			t.Fatalf("%s: %v % x", c.d, c.t, c.t.Data)
		}
	}
}

func TestValuesViewCopyAndMismatch(t *testing.T) {
	buf := alignedBuffer(64 + 8)
	if uintptr(unsafe.Pointer(&buf[0]))%64 != 0 {
		t.Fatal("buffer not aligned")
	}
	copy(buf[64:], []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0})
	o := Output{Name: "y", DType: wire.F32, Dims: []uint64{2}, Data: buf[64:72]}
	v, err := Values[float32](o)
	if err != nil || v[0] != 1 || v[1] != -2 {
		t.Fatal(v, err)
	}
	if littleEndian && unsafe.Pointer(&v[0]) != unsafe.Pointer(&buf[64]) {
		t.Fatal("aligned output copied")
	}
	// Misaligned data is decoded into a copy.
	copy(buf[1:], buf[64:72])
	o.Data = buf[1:9]
	if v, err := Values[float32](o); err != nil || v[0] != 1 || v[1] != -2 {
		t.Fatal(v, err)
	}
	if _, err := Values[int32](o); !errors.Is(err, ErrDType) {
		t.Fatal(err)
	}
	// Bools other than 0 and 1 are not read in place as Go bools.
	ob := Output{Name: "b", DType: wire.Bool, Data: []byte{0, 1, 2}}
	if b, err := Values[bool](ob); err != nil || b[0] || !b[1] || !b[2] {
		t.Fatal(b, err)
	}
	// f16/bf16: raw bits, or converted.
	h := Output{Name: "h", DType: wire.F16, Data: []byte{0x00, 0x3c, 0x00, 0xc0}}
	if bits, err := Values[uint16](h); err != nil || bits[0] != 0x3c00 {
		t.Fatal(bits, err)
	}
	if f, err := h.Float32(); err != nil || f[0] != 1 || f[1] != -2 {
		t.Fatal(f, err)
	}
	bf := Output{Name: "h", DType: wire.BF16, Data: []byte{0x80, 0x3f, 0x00, 0x3f}}
	if f, err := bf.Float32(); err != nil || f[0] != 1 || f[1] != 0.5 {
		t.Fatal(f, err)
	}
}

// Every half-precision value survives float32 and back; rounding is to
// nearest even; the known patterns of the conformance vectors.
func TestFloat16Conversions(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := Float16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			if Float32ToFloat16(f)&0x7c00 != 0x7c00 || Float32ToFloat16(f)&0x3ff == 0 {
				t.Fatalf("NaN %#x", h)
			}
			continue
		}
		if back := Float32ToFloat16(f); back != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, back)
		}
	}
	for f, want := range map[float32]uint16{1: 0x3c00, -2: 0xc000, 0.5: 0x3800, 65504: 0x7bff, 1e6: 0x7c00,
		5.960464477539063e-08: 0x0001, 2.980232238769531e-08: 0x0000, 1.0009765625: 0x3c01, 1.00048828125: 0x3c00} {
		if got := Float32ToFloat16(f); got != want {
			t.Errorf("%v: %#04x, want %#04x", f, got, want)
		}
	}
	for h := 0; h < 1<<16; h++ {
		f := BFloat16ToFloat32(uint16(h))
		if !math.IsNaN(float64(f)) && Float32ToBFloat16(f) != uint16(h) {
			t.Fatalf("bf16 %#04x", h)
		}
	}
	if Float32ToBFloat16(1) != 0x3f80 || Float32ToBFloat16(-2) != 0xc000 || Float32ToBFloat16(0.5) != 0x3f00 {
		t.Fatal("bf16 patterns")
	}
	if !math.IsNaN(float64(BFloat16ToFloat32(Float32ToBFloat16(float32(math.NaN()))))) {
		t.Fatal("bf16 NaN")
	}
}
