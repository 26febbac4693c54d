package wire

import "unicode/utf8"

// Repr describes a frame to be written by [Repr.Emit].
type Repr struct {
	Kind          Kind
	Flags         uint16
	RequestID     uint64
	TenantID      uint32
	DeadlineUs    uint64 // µs since the Unix epoch; 0: none
	SchemaID      uint32
	SchemaVersion uint32
	TokenCount    uint32
	Trace         TraceContext
	Model         string
	ModelVersion  string
	Adapter       string
	Intent        string
	Extensions    []Extension
	Tensors       []TensorRepr // requests and responses only
	Body          Body         // error and negotiation kinds only
}

// Extension is one extension header.
type Extension struct {
	Key   string // a token of 1 to 32 bytes
	Value []byte // at most 255 bytes
}

// TensorRepr is a tensor to be written.
type TensorRepr struct {
	Name  string
	DType DType
	Dims  []uint64
	// Data is copied into the frame; it must be exactly the tensor's byte
	// length. nil leaves the region as it is, for the caller to fill.
	Data []byte
}

// Layout is where the parts of an emitted frame land.
type Layout struct {
	HeaderLen     int
	FrameLen      int
	TensorOffsets [TensorCountMax]int
}

// Layout checks every limit and computes where each part goes: the
// variable header right after the fixed one, each tensor at the next
// multiple of 64 after the previous part, nothing after the last one.
func (r *Repr) Layout() (Layout, error) {
	var l Layout
	h := FixedHeaderLen
	for _, s := range [4]struct {
		s   string
		max int
	}{{r.Model, ModelNameLenMax}, {r.ModelVersion, ModelVersionLenMax}, {r.Adapter, AdapterLenMax}, {r.Intent, IntentLenMax}} {
		if len(s.s) > s.max {
			return l, ErrFieldTooLong
		}
		if !isToken(s.s) {
			return l, ErrBadString
		}
		h += len(s.s)
	}
	if r.Flags&^FlagsAll != 0 {
		return l, ErrReserved
	}
	if !r.Kind.Valid() {
		return l, ErrUnknownKind
	}
	if len(r.Extensions) > ExtCountMax {
		return l, ErrTooManyExtensions
	}
	streams := 0
	for _, e := range r.Extensions {
		if e.Key == StreamExtKey {
			streams++
			if streams > 1 {
				return l, ErrBadStream
			}
			if _, err := ParseStreamHeader(e.Value, r.Kind); err != nil {
				return l, err
			}
		}
		if len(e.Key) == 0 || len(e.Key) > ExtKeyLenMax || len(e.Value) > ExtValueLenMax {
			return l, ErrFieldTooLong
		}
		if !isToken(e.Key) {
			return l, ErrBadString
		}
		h += 2 + len(e.Key) + len(e.Value)
	}
	if len(r.Tensors) > TensorCountMax || (len(r.Tensors) > 0 && !r.Kind.HasTensors()) {
		return l, ErrTooManyTensors
	}
	for _, t := range r.Tensors {
		if len(t.Name) == 0 || len(t.Name) > TensorNameLenMax {
			return l, ErrFieldTooLong
		}
		if !isToken(t.Name) {
			return l, ErrBadString
		}
		if len(t.Dims) > RankMax {
			return l, ErrBadRank
		}
		if !t.DType.Valid() {
			return l, ErrBadDType
		}
		h += tensorEntryFixedLen + 8*len(t.Dims) + len(t.Name)
	}
	if h > HeaderLenMax {
		return l, ErrBadHeaderLen
	}
	end := h
	for i, t := range r.Tensors {
		n, ok := t.DType.ByteLen(t.Dims)
		if !ok {
			return l, ErrSizeOverflow
		}
		if t.Data != nil && len(t.Data) != n {
			return l, ErrBadTensorLen
		}
		off := alignUp(end)
		l.TensorOffsets[i] = off
		end = off + n
		if end > FrameLenMax {
			return l, ErrTooLarge
		}
	}
	if r.Body != nil {
		switch b := r.Body.(type) {
		case *ErrorBody:
			if !utf8.ValidString(b.Message) {
				return l, ErrBadString
			}
		case *NegotiateRequest:
			if len(b.Subject) == 0 || len(b.Subject) > SubjectLenMax {
				return l, ErrFieldTooLong
			}
			if !isToken(b.Subject) {
				return l, ErrBadString
			}
		case *NegotiateResponse:
			if len(b.Schema) > SchemaLenMax {
				return l, ErrTooLarge
			}
		}
		end += r.Body.len()
	}
	if end > FrameLenMax {
		return l, ErrTooLarge
	}
	wantBody := r.Kind == KindError || r.Kind == KindNegotiateRequest || r.Kind == KindNegotiateResponse
	if (r.Body == nil) == wantBody || (r.Body != nil && r.Body.kind() != r.Kind) {
		return l, ErrBadBody
	}
	l.HeaderLen, l.FrameLen = h, end
	return l, nil
}

// Emit writes the frame at the start of buf and returns its layout. It
// writes nothing when it fails. Tensor regions whose Data is nil keep
// what buf held; padding is zeroed.
func (r *Repr) Emit(buf []byte) (Layout, error) {
	l, err := r.Layout()
	if err != nil {
		return l, err
	}
	if len(buf) < l.FrameLen {
		return l, ErrBufferTooSmall
	}
	b := buf[:l.FrameLen]
	clear(b[:FixedHeaderLen])
	copy(b, Magic)
	b[offVersion] = Version
	b[offKind] = byte(r.Kind)
	le.PutUint16(b[offFlags:], r.Flags)
	le.PutUint16(b[offHeaderLen:], uint16(l.HeaderLen))
	le.PutUint32(b[offTenantID:], r.TenantID)
	le.PutUint64(b[offRequestID:], r.RequestID)
	le.PutUint64(b[offDeadlineUs:], r.DeadlineUs)
	le.PutUint32(b[offPayloadLen:], uint32(l.FrameLen-l.HeaderLen))
	le.PutUint32(b[offSchemaID:], r.SchemaID)
	le.PutUint32(b[offSchemaVersion:], r.SchemaVersion)
	le.PutUint32(b[offTokenCount:], r.TokenCount)
	copy(b[offTraceID:], r.Trace.TraceID[:])
	copy(b[offSpanID:], r.Trace.SpanID[:])
	b[offTraceFlags] = r.Trace.Flags
	b[offModelLen] = byte(len(r.Model))
	b[offModelLen+1] = byte(len(r.ModelVersion))
	b[offModelLen+2] = byte(len(r.Adapter))
	b[offModelLen+3] = byte(len(r.Intent))
	b[offExtCount] = byte(len(r.Extensions))
	b[offTensorCount] = byte(len(r.Tensors))

	off := FixedHeaderLen
	for _, s := range [4]string{r.Model, r.ModelVersion, r.Adapter, r.Intent} {
		off += copy(b[off:], s)
	}
	for _, e := range r.Extensions {
		b[off], b[off+1] = byte(len(e.Key)), byte(len(e.Value))
		off += 2
		off += copy(b[off:], e.Key)
		off += copy(b[off:], e.Value)
	}
	for i, t := range r.Tensors {
		n, _ := t.DType.ByteLen(t.Dims) // checked by Layout
		b[off], b[off+1], b[off+2], b[off+3] = byte(t.DType), byte(len(t.Dims)), byte(len(t.Name)), 0
		le.PutUint32(b[off+4:], uint32(l.TensorOffsets[i]))
		le.PutUint32(b[off+8:], uint32(n))
		off += tensorEntryFixedLen
		for _, d := range t.Dims {
			le.PutUint64(b[off:], d)
			off += 8
		}
		off += copy(b[off:], t.Name)
	}

	end := l.HeaderLen
	for i, t := range r.Tensors {
		start := l.TensorOffsets[i]
		clear(b[end:start])
		n, _ := t.DType.ByteLen(t.Dims)
		if t.Data != nil {
			copy(b[start:start+n], t.Data)
		}
		end = start + n
	}
	body := b[end:]
	switch v := r.Body.(type) {
	case *ErrorBody:
		m := clipMessage(v.Message)
		le.PutUint16(body, uint16(v.Code))
		le.PutUint16(body[2:], uint16(len(m)))
		copy(body[errorFixedLen:], m)
	case *NegotiateRequest:
		le.PutUint32(body, v.VersionHint)
		body[4], body[5], body[6], body[7] = byte(len(v.Subject)), 0, 0, 0
		copy(body[negotiateReqFixed:], v.Subject)
	case *NegotiateResponse:
		le.PutUint32(body, v.SchemaID)
		le.PutUint32(body[4:], v.Version)
		le.PutUint32(body[8:], v.TTLms)
		body[12], body[13], body[14], body[15] = byte(v.SchemaType), 0, 0, 0
		le.PutUint32(body[16:], uint32(len(v.Schema)))
		copy(body[negotiateRespFixed:], v.Schema)
	}
	return l, nil
}

// Append emits the frame onto the end of dst, growing it as needed.
func (r *Repr) Append(dst []byte) ([]byte, Layout, error) {
	l, err := r.Layout()
	if err != nil {
		return dst, l, err
	}
	n := len(dst)
	dst = append(dst, make([]byte, l.FrameLen)...)
	_, err = r.Emit(dst[n:])
	return dst, l, err
}

// ErrorFor is an error answer to request, echoing its request id, tenant
// and trace context, as FrameRepr::error_for does.
func ErrorFor(request *Frame, code Code, message string) Repr {
	return Repr{
		Kind:      KindError,
		RequestID: request.RequestID(),
		TenantID:  request.TenantID(),
		Trace:     request.Trace(),
		Body:      &ErrorBody{Code: code, Message: message},
	}
}
