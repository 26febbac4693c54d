package wire

import (
	"encoding/binary"
	"unicode/utf8"
)

var le = binary.LittleEndian

// Frame is a checked view of one frame over a byte buffer. Getters read the
// buffer in place; tensor data, extension values and bodies are sub-slices
// of it. Strings (routing strings, names, messages) are copied into Go
// strings, which are at most 256 bytes each. The buffer must not change
// while the Frame is in use.
//
// The zero Frame is not valid; make one with [Parse].
type Frame struct {
	b []byte
	// Offsets of each extension header and tensor-table entry, found once
	// by the check so that lookups need not walk the header again.
	ext     [ExtCountMax]uint16
	tensors [TensorCountMax]uint16
}

// Parse checks that b holds exactly one valid frame and returns a view of
// it. The checks and their order are those of docs/wire.md ("Parse
// errors"); the first failing one is returned as an [Error]. Parse never
// reads tensor data, so its cost does not depend on the payload size, and
// it allocates nothing.
func Parse(b []byte) (Frame, error) {
	var f Frame
	err := f.check(b)
	if err != nil {
		return Frame{}, err
	}
	f.b = b
	return f, nil
}

func (f *Frame) check(b []byte) error {
	if len(b) < FixedHeaderLen {
		return ErrTruncated
	}
	if string(b[:4]) != Magic {
		return ErrBadMagic
	}
	if b[offVersion] != Version {
		return ErrUnsupportedVersion
	}
	kind := Kind(b[offKind])
	if !kind.Valid() {
		return ErrUnknownKind
	}
	if le.Uint16(b[offFlags:])&^FlagsAll != 0 || le.Uint16(b[offReserved0:]) != 0 || b[offReserved1] != 0 {
		return ErrReserved
	}
	headerLen := int(le.Uint16(b[offHeaderLen:]))
	if headerLen < FixedHeaderLen || headerLen > HeaderLenMax {
		return ErrBadHeaderLen
	}
	frameLen := uint64(headerLen) + uint64(le.Uint32(b[offPayloadLen:]))
	if frameLen > FrameLenMax {
		return ErrTooLarge
	}
	if uint64(len(b)) < frameLen {
		return ErrTruncated
	}
	if uint64(len(b)) > frameLen {
		return ErrTrailingBytes
	}
	h := b[:headerLen]

	off := FixedHeaderLen
	for i, max := range [4]int{ModelNameLenMax, ModelVersionLenMax, AdapterLenMax, IntentLenMax} {
		n := int(b[offModelLen+i])
		if n > max {
			return ErrFieldTooLong
		}
		if off+n > len(h) {
			return ErrBadHeaderLen
		}
		if !isToken(h[off : off+n]) {
			return ErrBadString
		}
		off += n
	}

	extCount := int(b[offExtCount])
	if extCount > ExtCountMax {
		return ErrTooManyExtensions
	}
	streams := 0
	for i := 0; i < extCount; i++ {
		if off+2 > len(h) {
			return ErrBadHeaderLen
		}
		keyLen, valueLen := int(h[off]), int(h[off+1])
		if keyLen == 0 || keyLen > ExtKeyLenMax {
			return ErrFieldTooLong
		}
		if off+2+keyLen > len(h) {
			return ErrBadHeaderLen
		}
		if !isToken(h[off+2 : off+2+keyLen]) {
			return ErrBadString
		}
		f.ext[i] = uint16(off)
		valueAt := off + 2 + keyLen
		off = valueAt + valueLen
		if off > len(h) {
			return ErrBadHeaderLen
		}
		if string(h[valueAt-keyLen:valueAt]) == StreamExtKey {
			streams++
			if streams > 1 {
				return ErrBadStream
			}
			if _, err := ParseStreamHeader(h[valueAt:off], kind); err != nil {
				return err
			}
		}
	}

	tensorCount := int(b[offTensorCount])
	if tensorCount > TensorCountMax || (tensorCount > 0 && !kind.HasTensors()) {
		return ErrTooManyTensors
	}
	prevEnd := uint64(headerLen)
	for i := 0; i < tensorCount; i++ {
		d, next, err := parseTensorEntry(h, off)
		if err != nil {
			return err
		}
		if d.DataOffset%TensorAlign != 0 {
			return ErrMisaligned
		}
		start, end := uint64(d.DataOffset), uint64(d.DataOffset)+uint64(d.DataLen)
		if start < uint64(headerLen) || end > frameLen {
			return ErrOutOfBounds
		}
		if start < prevEnd {
			return ErrOverlap
		}
		prevEnd = end
		f.tensors[i] = uint16(off)
		off = next
	}
	if off != headerLen {
		return ErrBadHeaderLen
	}
	return checkBody(kind, b[headerLen:])
}

// parseTensorEntry decodes the entry at off and returns the offset after it.
func parseTensorEntry(h []byte, off int) (TensorDesc, int, error) {
	var d TensorDesc
	if off+tensorEntryFixedLen > len(h) {
		return d, 0, ErrBadHeaderLen
	}
	e := h[off:]
	d.DType = DType(e[0])
	if !d.DType.Valid() {
		return d, 0, ErrBadDType
	}
	rank, nameLen := int(e[1]), int(e[2])
	if e[3] != 0 {
		return d, 0, ErrReserved
	}
	if rank > RankMax {
		return d, 0, ErrBadRank
	}
	if nameLen == 0 || nameLen > TensorNameLenMax {
		return d, 0, ErrFieldTooLong
	}
	dataOffset, dataLen := le.Uint32(e[4:]), le.Uint32(e[8:])
	dimsStart := off + tensorEntryFixedLen
	nameStart := dimsStart + 8*rank
	next := nameStart + nameLen
	if next > len(h) {
		return d, 0, ErrBadHeaderLen
	}
	d.rank = uint8(rank)
	for i := 0; i < rank; i++ {
		d.dims[i] = le.Uint64(h[dimsStart+8*i:])
	}
	d.name = h[nameStart:next]
	if !isToken(d.name) {
		return d, 0, ErrBadString
	}
	want, ok := d.DType.ByteLen(d.dims[:rank])
	if !ok {
		return d, 0, ErrSizeOverflow
	}
	if uint64(want) != uint64(dataLen) {
		return d, 0, ErrBadTensorLen
	}
	d.DataOffset, d.DataLen = int(dataOffset), int(dataLen)
	return d, next, nil
}

func checkBody(kind Kind, body []byte) error {
	switch kind {
	case KindPing, KindPong:
		if len(body) != 0 {
			return ErrBadBody
		}
	case KindError:
		if len(body) < errorFixedLen {
			return ErrBadBody
		}
		n := int(le.Uint16(body[2:]))
		if n > ErrorMessageLenMax || len(body) != errorFixedLen+n {
			return ErrBadBody
		}
		if !utf8.Valid(body[errorFixedLen:]) {
			return ErrBadString
		}
	case KindNegotiateRequest:
		if len(body) < negotiateReqFixed {
			return ErrBadBody
		}
		n := int(body[4])
		if body[5] != 0 || body[6] != 0 || body[7] != 0 {
			return ErrReserved
		}
		if n == 0 || len(body) != negotiateReqFixed+n {
			return ErrBadBody
		}
		if !isToken(body[negotiateReqFixed:]) {
			return ErrBadString
		}
	case KindNegotiateResponse:
		if len(body) < negotiateRespFixed {
			return ErrBadBody
		}
		if !SchemaType(body[12]).Valid() {
			return ErrBadBody
		}
		if body[13] != 0 || body[14] != 0 || body[15] != 0 {
			return ErrReserved
		}
		n := uint64(le.Uint32(body[16:]))
		if n > SchemaLenMax || uint64(len(body)) != negotiateRespFixed+n {
			return ErrBadBody
		}
	}
	return nil
}

// Bytes is the whole frame.
func (f *Frame) Bytes() []byte { return f.b }

// Version is the wire version byte.
func (f *Frame) Version() uint8 { return f.b[offVersion] }

// Kind is the frame kind.
func (f *Frame) Kind() Kind { return Kind(f.b[offKind]) }

// Flags are the flag bits.
func (f *Frame) Flags() uint16 { return le.Uint16(f.b[offFlags:]) }

// HeaderLen is the length of the fixed and variable header.
func (f *Frame) HeaderLen() int { return int(le.Uint16(f.b[offHeaderLen:])) }

// PayloadLen is the length of the body.
func (f *Frame) PayloadLen() int { return int(le.Uint32(f.b[offPayloadLen:])) }

// TenantID is the tenant.
func (f *Frame) TenantID() uint32 { return le.Uint32(f.b[offTenantID:]) }

// RequestID is the client's request id, echoed in answers.
func (f *Frame) RequestID() uint64 { return le.Uint64(f.b[offRequestID:]) }

// DeadlineUs is the absolute deadline in µs since the Unix epoch; 0: none.
func (f *Frame) DeadlineUs() uint64 { return le.Uint64(f.b[offDeadlineUs:]) }

// SchemaID is the schema registry id of the payload's schema; 0: none.
func (f *Frame) SchemaID() uint32 { return le.Uint32(f.b[offSchemaID:]) }

// SchemaVersion is that schema's version (0: the newest live one).
func (f *Frame) SchemaVersion() uint32 { return le.Uint32(f.b[offSchemaVersion:]) }

// TokenCount is the token count the client declared.
func (f *Frame) TokenCount() uint32 { return le.Uint32(f.b[offTokenCount:]) }

// Trace is the W3C trace context.
func (f *Frame) Trace() TraceContext {
	var t TraceContext
	copy(t.TraceID[:], f.b[offTraceID:])
	copy(t.SpanID[:], f.b[offSpanID:])
	t.Flags = f.b[offTraceFlags]
	return t
}

// AuthTag is the 16-byte authentication tag (a view).
func (f *Frame) AuthTag() []byte { return f.b[offAuthTag : offAuthTag+AuthTagLen] }

func (f *Frame) routing(i int) []byte {
	off := FixedHeaderLen
	for j := 0; j < i; j++ {
		off += int(f.b[offModelLen+j])
	}
	return f.b[off : off+int(f.b[offModelLen+i])]
}

// Model is the model name; "" when absent.
func (f *Frame) Model() string { return string(f.routing(0)) }

// ModelVersion is the model version; "" when absent.
func (f *Frame) ModelVersion() string { return string(f.routing(1)) }

// Adapter is the LoRA adapter id; "" when absent.
func (f *Frame) Adapter() string { return string(f.routing(2)) }

// Intent is the intent; "" when absent.
func (f *Frame) Intent() string { return string(f.routing(3)) }

// NumExtensions is the number of extension headers.
func (f *Frame) NumExtensions() int { return int(f.b[offExtCount]) }

// Extension returns the i-th extension header in wire order; its value is a
// view. It panics when i is out of range, like a slice index.
func (f *Frame) Extension(i int) (key string, value []byte) {
	k, v := f.extension(i)
	return string(k), v
}

func (f *Frame) extension(i int) (key, value []byte) {
	if i < 0 || i >= f.NumExtensions() {
		panic("wire: extension index out of range")
	}
	off := int(f.ext[i])
	kl, vl := int(f.b[off]), int(f.b[off+1])
	return f.b[off+2 : off+2+kl], f.b[off+2+kl : off+2+kl+vl]
}

// ExtensionValue is the value of the first extension header with key.
func (f *Frame) ExtensionValue(key string) ([]byte, bool) {
	for i := 0; i < f.NumExtensions(); i++ {
		if k, v := f.extension(i); string(k) == key {
			return v, true
		}
	}
	return nil, false
}

// NumTensors is the number of tensor-table entries.
func (f *Frame) NumTensors() int { return int(f.b[offTensorCount]) }

// Tensor returns the i-th tensor-table entry. It panics when i is out of
// range, like a slice index.
func (f *Frame) Tensor(i int) TensorDesc {
	if i < 0 || i >= f.NumTensors() {
		panic("wire: tensor index out of range")
	}
	// The check proved the entry valid.
	d, _, _ := parseTensorEntry(f.b[:f.HeaderLen()], int(f.tensors[i]))
	return d
}

// TensorByName returns the first tensor named name.
func (f *Frame) TensorByName(name string) (TensorDesc, bool) {
	for i := 0; i < f.NumTensors(); i++ {
		if d := f.Tensor(i); string(d.name) == name {
			return d, true
		}
	}
	return TensorDesc{}, false
}

// TensorData is the data of a tensor of this frame: a view.
func (f *Frame) TensorData(d TensorDesc) []byte {
	return f.b[d.DataOffset : d.DataOffset+d.DataLen : d.DataOffset+d.DataLen]
}

// Payload is the body: a view.
func (f *Frame) Payload() []byte { return f.b[f.HeaderLen():] }

// TensorDesc is one decoded tensor-table entry. It holds no data; get that
// with [Frame.TensorData].
type TensorDesc struct {
	DType      DType
	DataOffset int // from the frame start, a multiple of 64
	DataLen    int // bytes
	rank       uint8
	dims       [RankMax]uint64
	name       []byte
}

// Name is the tensor name.
func (d TensorDesc) Name() string { return string(d.name) }

// Dims is the shape, outermost first (a copy; at most 8 values).
func (d TensorDesc) Dims() []uint64 { return append([]uint64(nil), d.dims[:d.rank]...) }

// Rank is the number of dimensions.
func (d TensorDesc) Rank() int { return int(d.rank) }

// Dim is dimension i.
func (d TensorDesc) Dim(i int) uint64 { return d.dims[:d.rank][i] }

// Len is the number of elements.
func (d TensorDesc) Len() int { return d.DataLen / d.DType.Size() }
