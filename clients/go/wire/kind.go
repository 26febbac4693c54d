package wire

// Kind is a frame kind.
type Kind uint8

// Frame kinds.
const (
	KindRequest           Kind = 1
	KindResponse          Kind = 2
	KindError             Kind = 3
	KindNegotiateRequest  Kind = 4
	KindNegotiateResponse Kind = 5
	KindPing              Kind = 6
	KindPong              Kind = 7
)

var kindNames = [...]string{"", "request", "response", "error", "negotiate_request", "negotiate_response", "ping", "pong"}

// Valid reports whether k is a kind of version 1.
func (k Kind) Valid() bool { return k >= KindRequest && k <= KindPong }

// HasTensors reports whether frames of this kind carry a tensor table.
func (k Kind) HasTensors() bool { return k == KindRequest || k == KindResponse }

// String is the snake_case name ("negotiate_request"), as in the vectors.
func (k Kind) String() string {
	if k.Valid() {
		return kindNames[k]
	}
	return "unknown"
}

// KindByName is the inverse of [Kind.String].
func KindByName(s string) (Kind, bool) {
	for k := KindRequest; k <= KindPong; k++ {
		if kindNames[k] == s {
			return k, true
		}
	}
	return 0, false
}

// SchemaType is the format of a negotiated schema.
type SchemaType uint8

// Schema formats known to the registry.
const (
	SchemaAvro     SchemaType = 1
	SchemaProtobuf SchemaType = 2
	SchemaJSON     SchemaType = 3
	SchemaTensor   SchemaType = 4
)

// Valid reports whether t is a known schema type.
func (t SchemaType) Valid() bool { return t >= SchemaAvro && t <= SchemaTensor }

func (t SchemaType) String() string {
	switch t {
	case SchemaAvro:
		return "AVRO"
	case SchemaProtobuf:
		return "PROTOBUF"
	case SchemaJSON:
		return "JSON"
	case SchemaTensor:
		return "TENSOR"
	}
	return "unknown"
}

// TraceContext is the W3C trace context carried in the fixed header.
type TraceContext struct {
	TraceID [16]byte // all zero: no trace
	SpanID  [8]byte  // the caller's span (W3C parent-id)
	Flags   uint8    // bit 0: sampled
}

// IsSet reports whether a trace is present.
func (t TraceContext) IsSet() bool { return t.TraceID != [16]byte{} }

// Sampled reports whether the caller asked for the trace to be sampled.
func (t TraceContext) Sampled() bool { return t.Flags&1 == 1 }
