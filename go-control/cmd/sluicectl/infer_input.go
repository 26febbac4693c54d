package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/npy"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// InputFileSizeMax bounds a JSON input file (a .npy file is bounded by the
// frame limit).
const InputFileSizeMax = 64 << 20

// parseInput turns one --input value into a tensor:
//
//	NAME[:DTYPE]=FILE.npy    a NumPy file (DTYPE converts, e.g. f64 to f32)
//	NAME[:DTYPE]=FILE.json   a JSON file
//	NAME[:DTYPE]=@JSON       inline JSON
//
// JSON is a number, a bool, a nested array (its nesting is the shape), or
// {"dtype": "i64", "shape": [2, 2], "data": [1, 2, 3, 4]} (data flat or
// nested). Without a dtype, JSON numbers are f32 and bools are bool.
func parseInput(spec string) (sluice.Tensor, error) {
	lhs, src, ok := strings.Cut(spec, "=")
	if !ok || lhs == "" || src == "" {
		return sluice.Tensor{}, usageError(fmt.Sprintf("--input %q: want NAME=FILE.npy, NAME=FILE.json or NAME=@JSON", spec))
	}
	name, dtName, hasType := strings.Cut(lhs, ":")
	var want wire.DType
	if hasType {
		d, ok := wire.ParseDType(dtName)
		if !ok {
			return sluice.Tensor{}, usageError(fmt.Sprintf("--input %q: unknown dtype %q (f32 f64 f16 bf16 i8 i16 i32 i64 u8 u16 u32 u64 bool)", spec, dtName))
		}
		want = d
	}
	var t sluice.Tensor
	var err error
	switch {
	case strings.HasPrefix(src, "@"):
		t, err = jsonTensor([]byte(src[1:]), want)
	case strings.HasSuffix(src, ".npy"):
		t, err = npyTensor(src, want)
	default:
		var b []byte
		b, err = readBounded(src, InputFileSizeMax)
		if err == nil {
			t, err = jsonTensor(b, want)
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", src, err)
		}
	}
	if err != nil {
		return sluice.Tensor{}, fmt.Errorf("--input %s: %w", name, err)
	}
	t.Name = name
	return t, nil
}

func readBounded(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > max {
		return nil, fmt.Errorf("file of %d bytes exceeds %d", st.Size(), max)
	}
	var buf bytes.Buffer
	_, err = buf.ReadFrom(f)
	return buf.Bytes(), err
}

func npyTensor(path string, want wire.DType) (sluice.Tensor, error) {
	a, err := npy.ReadFile(path)
	if err != nil {
		return sluice.Tensor{}, err
	}
	t := sluice.Tensor{DType: a.DType, Dims: a.Shape, Data: a.Data}
	if want != 0 && want != a.DType {
		if t.Data, err = convert(a.Data, a.DType, want); err != nil {
			return sluice.Tensor{}, fmt.Errorf("%s: %w", path, err)
		}
		t.DType = want
	}
	return t, nil
}

// jsonTensor parses a JSON input.
func jsonTensor(b []byte, want wire.DType) (sluice.Tensor, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return sluice.Tensor{}, fmt.Errorf("bad JSON: %w", err)
	}
	if dec.More() {
		return sluice.Tensor{}, fmt.Errorf("bad JSON: more than one value")
	}
	var shape []uint64
	if obj, ok := v.(map[string]any); ok {
		for k := range obj {
			if k != "dtype" && k != "shape" && k != "data" {
				return sluice.Tensor{}, fmt.Errorf("unknown key %q (dtype, shape, data)", k)
			}
		}
		if s, ok := obj["dtype"]; ok {
			name, _ := s.(string)
			d, ok := wire.ParseDType(name)
			if !ok {
				return sluice.Tensor{}, fmt.Errorf("unknown dtype %v", s)
			}
			if want != 0 && want != d {
				return sluice.Tensor{}, fmt.Errorf("dtype %s in the JSON, %s on the command line", d, want)
			}
			want = d
		}
		if s, ok := obj["shape"]; ok {
			dims, ok := s.([]any)
			if !ok {
				return sluice.Tensor{}, fmt.Errorf("shape is not an array")
			}
			shape = []uint64{}
			for _, d := range dims {
				n, ok := d.(json.Number)
				u, err := strconv.ParseUint(string(n), 10, 63)
				if !ok || err != nil {
					return sluice.Tensor{}, fmt.Errorf("shape %v: dimensions are non-negative integers", s)
				}
				shape = append(shape, u)
			}
		}
		if v, ok = obj["data"]; !ok {
			return sluice.Tensor{}, fmt.Errorf(`no "data"`)
		}
	}
	nested, flat, err := flatten(v)
	if err != nil {
		return sluice.Tensor{}, err
	}
	if shape == nil {
		shape = nested
	} else {
		n := 1
		for _, d := range shape {
			n *= int(d)
		}
		if n != len(flat) {
			return sluice.Tensor{}, fmt.Errorf("shape %v holds %d elements, data has %d", shape, n, len(flat))
		}
	}
	if want == 0 {
		want = wire.F32
		if len(flat) > 0 {
			if _, isBool := flat[0].(bool); isBool {
				want = wire.Bool
			}
		}
	}
	data := make([]byte, len(flat)*want.Size())
	for i, e := range flat {
		if err := encode(data[i*want.Size():], want, e); err != nil {
			return sluice.Tensor{}, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return sluice.Tensor{DType: want, Dims: shape, Data: data}, nil
}

// flatten walks nested arrays: their shape (every sub-array alike) and the
// elements in row-major order.
func flatten(v any) ([]uint64, []any, error) {
	arr, ok := v.([]any)
	if !ok {
		switch v.(type) {
		case json.Number, bool:
			return []uint64{}, []any{v}, nil
		}
		return nil, nil, fmt.Errorf("element %v is not a number, bool or array", v)
	}
	if len(arr) == 0 {
		return []uint64{0}, nil, nil
	}
	var inner []uint64
	var flat []any
	for i, x := range arr {
		s, f, err := flatten(x)
		if err != nil {
			return nil, nil, err
		}
		if i == 0 {
			inner = s
		} else if fmt.Sprint(s) != fmt.Sprint(inner) {
			return nil, nil, fmt.Errorf("ragged array: shapes %v and %v", inner, s)
		}
		flat = append(flat, f...)
	}
	if len(inner)+1 > wire.RankMax {
		return nil, nil, fmt.Errorf("rank above %d", wire.RankMax)
	}
	return append([]uint64{uint64(len(arr))}, inner...), flat, nil
}

// encode writes one JSON element as dtype d, refusing values d cannot hold.
func encode(b []byte, d wire.DType, e any) error {
	if bv, ok := e.(bool); ok {
		if d != wire.Bool {
			return fmt.Errorf("bool in a %s tensor", d)
		}
		b[0] = 0
		if bv {
			b[0] = 1
		}
		return nil
	}
	s := string(e.(json.Number))
	switch d {
	case wire.F32, wire.F64, wire.F16, wire.BF16:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		putFloat(b, d, f)
		return nil
	case wire.Bool:
		if s != "0" && s != "1" {
			return fmt.Errorf("%s is not a bool", s)
		}
		b[0] = s[0] - '0'
		return nil
	}
	bits := d.Size() * 8
	if d == wire.U8 || d == wire.U16 || d == wire.U32 || d == wire.U64 {
		u, err := strconv.ParseUint(s, 10, bits)
		if err != nil {
			return fmt.Errorf("%s does not fit %s", s, d)
		}
		putUint(b, d.Size(), u)
		return nil
	}
	i, err := strconv.ParseInt(s, 10, bits)
	if err != nil {
		return fmt.Errorf("%s does not fit %s", s, d)
	}
	putUint(b, d.Size(), uint64(i))
	return nil
}

func putFloat(b []byte, d wire.DType, f float64) {
	switch d {
	case wire.F32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(f)))
	case wire.F64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(f))
	case wire.F16:
		binary.LittleEndian.PutUint16(b, sluice.Float32ToFloat16(float32(f)))
	case wire.BF16:
		binary.LittleEndian.PutUint16(b, sluice.Float32ToBFloat16(float32(f)))
	}
}

func putUint(b []byte, size int, u uint64) {
	for i := 0; i < size; i++ {
		b[i] = byte(u >> (8 * i))
	}
}

func isFloat(d wire.DType) bool {
	return d == wire.F32 || d == wire.F64 || d == wire.F16 || d == wire.BF16
}

func isSigned(d wire.DType) bool {
	return d == wire.I8 || d == wire.I16 || d == wire.I32 || d == wire.I64
}

// element reads element i of data (dtype d) as a float, or exactly as an
// integer (signed or not).
func element(data []byte, d wire.DType, i int) (f float64, n int64, u uint64, kind byte) {
	b := data[i*d.Size():]
	switch d {
	case wire.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 0, 0, 'f'
	case wire.F64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), 0, 0, 'f'
	case wire.F16:
		return float64(sluice.Float16ToFloat32(binary.LittleEndian.Uint16(b))), 0, 0, 'f'
	case wire.BF16:
		return float64(sluice.BFloat16ToFloat32(binary.LittleEndian.Uint16(b))), 0, 0, 'f'
	case wire.Bool:
		return 0, 0, uint64(b[0]), 'b'
	}
	var raw uint64
	for k := 0; k < d.Size(); k++ {
		raw |= uint64(b[k]) << (8 * k)
	}
	if isSigned(d) {
		shift := 64 - 8*d.Size()
		return 0, int64(raw<<shift) >> shift, 0, 'i'
	}
	return 0, 0, raw, 'u'
}

// convert casts every element from one dtype to another (an f64 .npy file
// for an f32 model, say). Integers convert exactly or fail; floats become
// integers only when integral and in range.
func convert(data []byte, from, to wire.DType) ([]byte, error) {
	n := len(data) / from.Size()
	out := make([]byte, n*to.Size())
	for i := 0; i < n; i++ {
		f, si, u, kind := element(data, from, i)
		var num string
		switch kind {
		case 'f':
			if isFloat(to) {
				putFloat(out[i*to.Size():], to, f)
				continue
			}
			if f != math.Trunc(f) || math.IsInf(f, 0) {
				return nil, fmt.Errorf("element %d (%v) is not an integer: cannot convert %s to %s", i, f, from, to)
			}
			num = strconv.FormatFloat(f, 'f', -1, 64)
		case 'i':
			num = strconv.FormatInt(si, 10)
		default:
			num = strconv.FormatUint(u, 10)
		}
		if err := encode(out[i*to.Size():], to, json.Number(num)); err != nil {
			return nil, fmt.Errorf("element %d: cannot convert %s to %s: %w", i, from, to, err)
		}
	}
	return out, nil
}
