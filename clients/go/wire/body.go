package wire

// Body is the body of a frame kind without tensors: *ErrorBody,
// *NegotiateRequest or *NegotiateResponse. Requests, responses, pings and
// pongs have none (nil).
type Body interface {
	kind() Kind
	len() int
}

// ErrorBody is the body of an error frame.
type ErrorBody struct {
	Code    Code // may be a code this build does not know
	Message string
}

// NegotiateRequest asks for the schema of a registry subject.
type NegotiateRequest struct {
	Subject     string
	VersionHint uint32 // 0: the latest
}

// NegotiateResponse answers a [NegotiateRequest].
type NegotiateResponse struct {
	SchemaID   uint32 // the id requests then carry in schema_id
	Version    uint32
	TTLms      uint32 // how long the answer may be cached
	SchemaType SchemaType
	Schema     []byte // a view when parsed
}

func (*ErrorBody) kind() Kind         { return KindError }
func (*NegotiateRequest) kind() Kind  { return KindNegotiateRequest }
func (*NegotiateResponse) kind() Kind { return KindNegotiateResponse }

func (b *ErrorBody) len() int         { return errorFixedLen + len(clipMessage(b.Message)) }
func (b *NegotiateRequest) len() int  { return negotiateReqFixed + len(b.Subject) }
func (b *NegotiateResponse) len() int { return negotiateRespFixed + len(b.Schema) }

// clipMessage cuts s to the message limit at a UTF-8 character boundary,
// as the Rust builder does.
func clipMessage(s string) string {
	if len(s) <= ErrorMessageLenMax {
		return s
	}
	end := ErrorMessageLenMax
	for end > 0 && s[end]&0xc0 == 0x80 {
		end--
	}
	return s[:end]
}

// ErrorBody decodes the body of an error frame; ok is false for other kinds.
func (f *Frame) ErrorBody() (b ErrorBody, ok bool) {
	if f.Kind() != KindError {
		return b, false
	}
	p := f.Payload()
	return ErrorBody{Code: Code(le.Uint16(p)), Message: string(p[errorFixedLen:])}, true
}

// NegotiateRequest decodes a negotiation request body.
func (f *Frame) NegotiateRequest() (b NegotiateRequest, ok bool) {
	if f.Kind() != KindNegotiateRequest {
		return b, false
	}
	p := f.Payload()
	return NegotiateRequest{VersionHint: le.Uint32(p), Subject: string(p[negotiateReqFixed:])}, true
}

// NegotiateResponse decodes a negotiation response body; Schema is a view.
func (f *Frame) NegotiateResponse() (b NegotiateResponse, ok bool) {
	if f.Kind() != KindNegotiateResponse {
		return b, false
	}
	p := f.Payload()
	return NegotiateResponse{
		SchemaID:   le.Uint32(p),
		Version:    le.Uint32(p[4:]),
		TTLms:      le.Uint32(p[8:]),
		SchemaType: SchemaType(p[12]),
		Schema:     p[negotiateRespFixed:len(p):len(p)],
	}, true
}
