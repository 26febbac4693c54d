package jobmsg

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	sluice "github.com/sluice-ai/sluice/clients/go"
	"github.com/sluice-ai/sluice/clients/go/wire"
)

// The KServe v2 (Open Inference Protocol) JSON shapes, as a body:
//
//	request:  {"id": "...", "inputs": [{"name", "shape", "datatype", "data"}], "outputs": [{"name"}]}
//	response: {"id", "model_name", "model_version", "outputs": [{"name", "shape", "datatype", "data"}], "parameters"}
//
// data is the row-major elements, flat or nested. Floats may also be the
// strings "NaN", "Infinity" and "-Infinity" (JSON has no such numbers);
// outputs write them that way. BYTES tensors are not supported.

type kserveTensor struct {
	Name     string          `json:"name"`
	Shape    []int64         `json:"shape"`
	Datatype string          `json:"datatype"`
	Data     json.RawMessage `json:"data"`
	// Parameters are accepted and ignored.
	Parameters json.RawMessage `json:"parameters,omitempty"`
}

type kserveRequest struct {
	ID         string          `json:"id"`
	Parameters json.RawMessage `json:"parameters,omitempty"`
	Inputs     []kserveTensor  `json:"inputs"`
	Outputs    []struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters,omitempty"`
	} `json:"outputs"`
}

type kserveIn struct {
	id      string
	inputs  []sluice.Tensor
	outputs []string
}

// KServe datatype names and the wire dtypes.
var kserveTypes = map[string]wire.DType{
	"BOOL": wire.Bool, "UINT8": wire.U8, "UINT16": wire.U16, "UINT32": wire.U32, "UINT64": wire.U64,
	"INT8": wire.I8, "INT16": wire.I16, "INT32": wire.I32, "INT64": wire.I64,
	"FP16": wire.F16, "FP32": wire.F32, "FP64": wire.F64, "BF16": wire.BF16,
}

func kserveName(d wire.DType) string {
	for n, t := range kserveTypes {
		if t == d {
			return n
		}
	}
	return d.String()
}

// parseKServe reads a KServe v2 inference request body.
func parseKServe(body []byte) (*kserveIn, *Failure) {
	var r kserveRequest
	d := json.NewDecoder(bytes.NewReader(body))
	d.DisallowUnknownFields()
	if err := d.Decode(&r); err != nil {
		return nil, DeadLetter(CodeBadMessage, "the body is not a KServe v2 inference request: %v", err)
	}
	if d.More() {
		return nil, DeadLetter(CodeBadMessage, "the body holds more than one JSON value")
	}
	if len(r.Inputs) == 0 {
		return nil, DeadLetter(wire.CodeBadTensor.String(), "the request has no inputs")
	}
	if len(r.Inputs) > wire.TensorCountMax {
		return nil, DeadLetter(wire.CodeBadTensor.String(), "%d inputs; at most %d", len(r.Inputs), wire.TensorCountMax)
	}
	in := &kserveIn{id: r.ID}
	for _, o := range r.Outputs {
		in.outputs = append(in.outputs, o.Name)
	}
	for i := range r.Inputs {
		t, f := r.Inputs[i].tensor()
		if f != nil {
			return nil, f
		}
		in.inputs = append(in.inputs, t)
	}
	return in, nil
}

func (k *kserveTensor) tensor() (sluice.Tensor, *Failure) {
	bad := func(format string, args ...any) (sluice.Tensor, *Failure) {
		return sluice.Tensor{}, DeadLetter(wire.CodeBadTensor.String(), "input %q: "+format, append([]any{k.Name}, args...)...)
	}
	if k.Name == "" || len(k.Name) > wire.TensorNameLenMax || !isToken(k.Name) {
		return bad("the name must be 1 to %d printable ASCII characters without spaces", wire.TensorNameLenMax)
	}
	dt, ok := kserveTypes[k.Datatype]
	if !ok {
		return bad("datatype %q is not supported (BOOL, UINT8..64, INT8..64, FP16, FP32, FP64, BF16)", k.Datatype)
	}
	if len(k.Shape) > wire.RankMax {
		return bad("rank %d; at most %d", len(k.Shape), wire.RankMax)
	}
	dims := make([]uint64, len(k.Shape))
	n := uint64(1)
	for i, s := range k.Shape {
		if s < 0 {
			return bad("shape %v has a negative dimension", k.Shape)
		}
		dims[i] = uint64(s)
		if s != 0 && n > uint64(wire.FrameLenMax)/uint64(s) {
			return bad("shape %v is larger than a frame", k.Shape)
		}
		n *= uint64(s)
	}
	if n*uint64(dt.Size()) > uint64(BodyLenMax)*8 {
		return bad("shape %v is larger than any body could describe", k.Shape)
	}
	buf := make([]byte, int(n)*dt.Size())
	i := uint64(0)
	err := scalars(k.Data, func(tok []byte) error {
		if i >= n {
			return fmt.Errorf("more elements than shape %v holds (%d)", k.Shape, n)
		}
		if err := putElement(buf[i*uint64(dt.Size()):], dt, tok); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
		i++
		return nil
	})
	if err != nil {
		return bad("data%v", err)
	}
	if i != n {
		return bad("data holds %d elements; shape %v needs %d", i, k.Shape, n)
	}
	return sluice.Tensor{Name: k.Name, DType: dt, Dims: dims, Data: buf}, nil
}

// scalars calls fn with each scalar of a JSON array, flat or nested, in
// order. raw is valid JSON (the decoder checked it), so only its shape is
// checked here: an array, nested at most wire.RankMax deep, of scalars.
func scalars(raw []byte, fn func(tok []byte) error) error {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '[' {
		return fmt.Errorf(": want an array")
	}
	depth := 0
	for p := 0; p < len(t); {
		switch c := t[p]; {
		case c == '[':
			if depth++; depth > wire.RankMax {
				return fmt.Errorf(": nested deeper than %d", wire.RankMax)
			}
			p++
		case c == ']':
			depth--
			p++
		case c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p++
		case c == '{':
			return fmt.Errorf(": an object is not a tensor element")
		case c == '"':
			q := p + 1
			for q < len(t) && t[q] != '"' {
				if t[q] == '\\' {
					q++
				}
				q++
			}
			if err := fn(t[p:min(q+1, len(t))]); err != nil {
				return err
			}
			p = q + 1
		default:
			q := p
			for q < len(t) && !isDelim(t[q]) {
				q++
			}
			if err := fn(t[p:q]); err != nil {
				return err
			}
			p = q
		}
	}
	return nil
}

func isDelim(c byte) bool {
	return c == ',' || c == ']' || c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

func putElement(b []byte, dt wire.DType, v []byte) error {
	le := binary.LittleEndian
	s := string(v)
	switch dt {
	case wire.Bool:
		switch s {
		case "true":
			b[0] = 1
		case "false":
			b[0] = 0
		default:
			return fmt.Errorf("%s is not true or false", s)
		}
		return nil
	case wire.F32, wire.F64, wire.F16, wire.BF16:
		f, err := parseFloat(s)
		if err != nil {
			return err
		}
		switch dt {
		case wire.F64:
			le.PutUint64(b, math.Float64bits(f))
		case wire.F32:
			if !math.IsInf(f, 0) && math.Abs(f) > math.MaxFloat32 {
				return fmt.Errorf("%s is out of FP32's range", s)
			}
			le.PutUint32(b, math.Float32bits(float32(f)))
		case wire.F16:
			le.PutUint16(b, sluice.Float32ToFloat16(float32(f)))
		case wire.BF16:
			le.PutUint16(b, sluice.Float32ToBFloat16(float32(f)))
		}
		return nil
	}
	size := dt.Size() * 8
	switch dt {
	case wire.U8, wire.U16, wire.U32, wire.U64:
		u, err := strconv.ParseUint(s, 10, size)
		if err != nil {
			return fmt.Errorf("%s is not a %d-bit unsigned integer", s, size)
		}
		putUint(b, dt.Size(), u)
	default:
		i, err := strconv.ParseInt(s, 10, size)
		if err != nil {
			return fmt.Errorf("%s is not a %d-bit integer", s, size)
		}
		putUint(b, dt.Size(), uint64(i))
	}
	return nil
}

func putUint(b []byte, size int, u uint64) {
	le := binary.LittleEndian
	switch size {
	case 1:
		b[0] = byte(u)
	case 2:
		le.PutUint16(b, uint16(u))
	case 4:
		le.PutUint32(b, uint32(u))
	default:
		le.PutUint64(b, u)
	}
}

func parseFloat(s string) (float64, error) {
	switch s {
	case `"NaN"`:
		return math.NaN(), nil
	case `"Infinity"`:
		return math.Inf(1), nil
	case `"-Infinity"`:
		return math.Inf(-1), nil
	}
	if len(s) == 0 || s[0] == '"' {
		return 0, fmt.Errorf("%s is not a number", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s is not a number", s)
	}
	return f, nil
}

// KServeResponse writes the response body: outputs (those the request
// asked for, or all) as KServe v2 JSON tensors.
func KServeResponse(requestID, kserveID string, resp *sluice.Response, want []string) ([]byte, error) {
	var b bytes.Buffer
	id := kserveID
	if id == "" {
		id = requestID
	}
	b.WriteString(`{"id":`)
	writeJSONString(&b, id)
	b.WriteString(`,"model_name":`)
	writeJSONString(&b, resp.Model)
	b.WriteString(`,"model_version":`)
	writeJSONString(&b, resp.ModelVersion)
	b.WriteString(`,"parameters":{"sluice_request_id":`)
	writeJSONString(&b, requestID)
	b.WriteString(`,"sluice_status":"ok"},"outputs":[`)
	first := true
	for _, o := range resp.Outputs {
		if len(want) > 0 && !contains(want, o.Name) {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		if err := writeKServeTensor(&b, o); err != nil {
			return nil, err
		}
	}
	b.WriteString("]}")
	return b.Bytes(), nil
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

func writeJSONString(b *bytes.Buffer, s string) {
	plain := true
	for i := 0; plain && i < len(s); i++ {
		plain = s[i] >= ' ' && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
	}
	if plain { // names, ids and versions are tokens: nothing to escape
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s) // a string always marshals
	b.Write(q)
}

func writeKServeTensor(b *bytes.Buffer, o sluice.Output) error {
	size := o.DType.Size()
	if size == 0 || len(o.Data)%size != 0 {
		return fmt.Errorf("output %q: %d bytes are not whole %s elements", o.Name, len(o.Data), o.DType)
	}
	b.WriteString(`{"name":`)
	writeJSONString(b, o.Name)
	b.WriteString(`,"datatype":`)
	writeJSONString(b, kserveName(o.DType))
	b.WriteString(`,"shape":[`)
	for i, d := range o.Dims {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(d, 10))
	}
	b.WriteString(`],"data":[`)
	le := binary.LittleEndian
	var num []byte
	for i := 0; i < len(o.Data); i += size {
		if i > 0 {
			b.WriteByte(',')
		}
		e := o.Data[i : i+size]
		num = num[:0]
		switch o.DType {
		case wire.Bool:
			num = strconv.AppendBool(num, e[0] != 0)
		case wire.F32:
			num = appendFloat(num, float64(math.Float32frombits(le.Uint32(e))), 32)
		case wire.F64:
			num = appendFloat(num, math.Float64frombits(le.Uint64(e)), 64)
		case wire.F16:
			num = appendFloat(num, float64(sluice.Float16ToFloat32(le.Uint16(e))), 32)
		case wire.BF16:
			num = appendFloat(num, float64(sluice.BFloat16ToFloat32(le.Uint16(e))), 32)
		case wire.U8, wire.U16, wire.U32, wire.U64:
			num = strconv.AppendUint(num, readUint(e), 10)
		default:
			num = strconv.AppendInt(num, signExtend(readUint(e), size), 10)
		}
		b.Write(num)
	}
	b.WriteString("]}")
	return nil
}

func appendFloat(dst []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(dst, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(dst, `"-Infinity"`...)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, bits)
}

func readUint(e []byte) uint64 {
	var u uint64
	for i := len(e) - 1; i >= 0; i-- {
		u = u<<8 | uint64(e[i])
	}
	return u
}

func signExtend(u uint64, size int) int64 {
	shift := uint(64 - 8*size)
	return int64(u<<shift) >> shift
}
