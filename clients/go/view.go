package sluice

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// This file is the only place that reinterprets memory. Tensor data on the
// wire is little-endian, row-major, and 64-byte aligned relative to the
// frame start; receive buffers start 64-byte aligned, so on a little-endian
// host an output's bytes can be read as []float32 (or any element type)
// in place. Where either condition fails, the accessors copy and decode.

// Element is a Go type with a wire dtype. uint16 stands for u16, and also
// carries the raw bits of f16 and bf16 tensors.
type Element interface {
	float32 | float64 | int8 | uint8 | int16 | uint16 | int32 | uint32 | int64 | uint64 | bool
}

var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// DTypeOf is the wire dtype of T (u16 for uint16).
func DTypeOf[T Element]() wire.DType {
	var z T
	switch any(z).(type) {
	case float32:
		return wire.F32
	case float64:
		return wire.F64
	case int8:
		return wire.I8
	case uint8:
		return wire.U8
	case int16:
		return wire.I16
	case uint16:
		return wire.U16
	case int32:
		return wire.I32
	case uint32:
		return wire.U32
	case int64:
		return wire.I64
	case uint64:
		return wire.U64
	default: // bool
		return wire.Bool
	}
}

// fits reports whether a tensor of dtype d may be read as []T: its own
// type, or uint16 for the 16-bit floats.
func fits[T Element](d wire.DType) bool {
	t := DTypeOf[T]()
	return t == d || (t == wire.U16 && (d == wire.F16 || d == wire.BF16))
}

// asBytes views v's memory as bytes (no copy) on a little-endian host, and
// encodes a little-endian copy on a big-endian one.
func asBytes[T Element](v []T) []byte {
	var z T
	size := int(unsafe.Sizeof(z))
	if len(v) == 0 {
		return []byte{}
	}
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), len(v)*size)
	}
	out := make([]byte, len(v)*size)
	for i, x := range v {
		putLE(out[i*size:], x)
	}
	return out
}

// viewAs reads b as []T: in place when the host is little-endian and b is
// aligned for T (copied reports false), else a decoded copy.
func viewAs[T Element](b []byte) (v []T, copied bool) {
	var z T
	size := int(unsafe.Sizeof(z))
	n := len(b) / size
	if n == 0 {
		return []T{}, false
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	if littleEndian && uintptr(p)%unsafe.Alignof(z) == 0 && (size != 1 || !isBool(z) || boolBytes(b)) {
		return unsafe.Slice((*T)(p), n), false
	}
	out := make([]T, n)
	for i := range out {
		out[i] = getLE[T](b[i*size:])
	}
	return out, true
}

func isBool[T Element](z T) bool {
	_, ok := any(z).(bool)
	return ok
}

// boolBytes reports whether every byte is 0 or 1: only then may the bytes
// be read as Go bools in place.
func boolBytes(b []byte) bool {
	for _, x := range b {
		if x > 1 {
			return false
		}
	}
	return true
}

func putLE[T Element](b []byte, x T) {
	switch v := any(x).(type) {
	case float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	case float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case int8:
		b[0] = byte(v)
	case uint8:
		b[0] = v
	case int16:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case uint16:
		binary.LittleEndian.PutUint16(b, v)
	case int32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case uint32:
		binary.LittleEndian.PutUint32(b, v)
	case int64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case uint64:
		binary.LittleEndian.PutUint64(b, v)
	case bool:
		b[0] = 0
		if v {
			b[0] = 1
		}
	}
}

func getLE[T Element](b []byte) T {
	var z T
	var r any
	switch any(z).(type) {
	case float32:
		r = math.Float32frombits(binary.LittleEndian.Uint32(b))
	case float64:
		r = math.Float64frombits(binary.LittleEndian.Uint64(b))
	case int8:
		r = int8(b[0])
	case uint8:
		r = b[0]
	case int16:
		r = int16(binary.LittleEndian.Uint16(b))
	case uint16:
		r = binary.LittleEndian.Uint16(b)
	case int32:
		r = int32(binary.LittleEndian.Uint32(b))
	case uint32:
		r = binary.LittleEndian.Uint32(b)
	case int64:
		r = int64(binary.LittleEndian.Uint64(b))
	case uint64:
		r = binary.LittleEndian.Uint64(b)
	case bool:
		r = b[0] != 0
	}
	return r.(T)
}

// alignedBuffer returns n bytes whose first byte is 64-byte aligned, so
// that tensors of a frame received into it are aligned in memory.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+wire.TensorAlign)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (wire.TensorAlign - 1))
	return b[off : off+n : off+n]
}
