package sluice

import (
	"fmt"
	"math"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Tensor is a request input (or any tensor to send): name, dtype, shape and
// the little-endian, row-major element bytes.
type Tensor struct {
	Name  string
	DType wire.DType
	Dims  []uint64
	Data  []byte
}

// NewTensor makes a tensor of v's element type. On a little-endian host
// Data is a view of v's memory, not a copy: the one copy happens when the
// request is written into its frame, so v must not change until Infer
// returns. uint16 gives a u16 tensor; use [Float16Tensor] or
// [BFloat16Tensor] for the 16-bit floats.
func NewTensor[T Element](name string, dims []uint64, v []T) Tensor {
	return Tensor{Name: name, DType: DTypeOf[T](), Dims: dims, Data: asBytes(v)}
}

// Float16Tensor makes an f16 tensor from IEEE half-precision bit patterns
// (see [Float32ToFloat16]).
func Float16Tensor(name string, dims []uint64, bits []uint16) Tensor {
	return Tensor{Name: name, DType: wire.F16, Dims: dims, Data: asBytes(bits)}
}

// BFloat16Tensor makes a bf16 tensor from bfloat16 bit patterns (see
// [Float32ToBFloat16]).
func BFloat16Tensor(name string, dims []uint64, bits []uint16) Tensor {
	return Tensor{Name: name, DType: wire.BF16, Dims: dims, Data: asBytes(bits)}
}

// Scalar makes a rank-0 tensor holding one value.
func Scalar[T Element](name string, v T) Tensor {
	return NewTensor(name, []uint64{}, []T{v})
}

// Len is the number of elements the shape holds.
func (t Tensor) Len() int {
	n := 1
	for _, d := range t.Dims {
		n *= int(d)
	}
	return n
}

func (t Tensor) String() string {
	return fmt.Sprintf("%s %s%v (%d bytes)", t.Name, t.DType, t.Dims, len(t.Data))
}

// Float32ToFloat16 converts to IEEE half precision, rounding to nearest
// even; out-of-range values become ±Inf, NaN stays NaN.
func Float32ToFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // Inf or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127+15 >= 0x1f: // overflow
		return sign | 0x7c00
	case exp-127+15 <= 0: // subnormal or zero in half precision
		if exp-127+15 < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint(14 - (exp - 127 + 15))
		half := uint32(1) << (shift - 1)
		r := mant >> shift
		rest := mant & (1<<shift - 1)
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	e := uint16(exp - 127 + 15)
	r := uint16(mant >> 13)
	rest := mant & 0x1fff
	v := sign | e<<10 | r
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		v++ // may carry into the exponent, which is the right result
	}
	return v
}

// Float16ToFloat32 converts IEEE half-precision bits to float32 (exact).
func Float16ToFloat32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal: mant × 2^-24.
		f := float32(mant) / (1 << 24)
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Float32ToBFloat16 converts to bfloat16, rounding to nearest even.
func Float32ToBFloat16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a NaN
		return uint16(b>>16) | 0x40
	}
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BFloat16ToFloat32 converts bfloat16 bits to float32 (exact).
func BFloat16ToFloat32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }
