package wire

// DType is a tensor element type: ONNX's TensorProto.DataType code.
type DType uint8

// Element types of the dtype table (docs/wire.md).
const (
	F32  DType = 1
	U8   DType = 2
	I8   DType = 3
	U16  DType = 4
	I16  DType = 5
	I32  DType = 6
	I64  DType = 7
	Bool DType = 9
	F16  DType = 10
	F64  DType = 11
	U32  DType = 12
	U64  DType = 13
	BF16 DType = 16
)

// DTypes lists every dtype, in code order.
var DTypes = []DType{F32, U8, I8, U16, I16, I32, I64, Bool, F16, F64, U32, U64, BF16}

type dtypeInfo struct {
	name string
	size int
}

var dtypeTable = [17]dtypeInfo{
	F32: {"f32", 4}, U8: {"u8", 1}, I8: {"i8", 1}, U16: {"u16", 2}, I16: {"i16", 2},
	I32: {"i32", 4}, I64: {"i64", 8}, Bool: {"bool", 1}, F16: {"f16", 2}, F64: {"f64", 8},
	U32: {"u32", 4}, U64: {"u64", 8}, BF16: {"bf16", 2},
}

// Valid reports whether d is in the dtype table.
func (d DType) Valid() bool { return int(d) < len(dtypeTable) && dtypeTable[d].size != 0 }

// Size is the number of bytes per element; 0 for an invalid dtype.
func (d DType) Size() int {
	if !d.Valid() {
		return 0
	}
	return dtypeTable[d].size
}

// String is the Sluice name ("f32", "bf16", ...).
func (d DType) String() string {
	if !d.Valid() {
		return "invalid"
	}
	return dtypeTable[d].name
}

// ParseDType is the inverse of [DType.String].
func ParseDType(s string) (DType, bool) {
	for _, d := range DTypes {
		if dtypeTable[d].name == s {
			return d, true
		}
	}
	return 0, false
}

// dimMax is the largest dimension: ONNX shapes are int64.
const dimMax = 1<<63 - 1

// ByteLen is the data length of a tensor of this dtype and shape. ok is
// false when a dimension exceeds 2^63-1, the product overflows, or the
// length exceeds FrameLenMax. A shape with a zero dimension has length 0.
func (d DType) ByteLen(dims []uint64) (n int, ok bool) {
	if !d.Valid() {
		return 0, false
	}
	zero := false
	for _, x := range dims {
		if x > dimMax {
			return 0, false
		}
		if x == 0 {
			zero = true
		}
	}
	if zero {
		return 0, true
	}
	total := uint64(d.Size())
	for _, x := range dims {
		// total and x are both nonzero; the product stays below the limit.
		if x > FrameLenMax/total {
			return 0, false
		}
		total *= x
	}
	if total > FrameLenMax {
		return 0, false
	}
	return int(total), true
}
