package engine

// Span kinds of a SpanRecord.
const (
	SpanLocal   = 0 // run on this appliance
	SpanForward = 1 // forwarded to a peer: the peer's span is its child
	// SpanBackend is a front-door hop to a model-server backend: ValidateNs
	// the body read, RouteNs placed, RunStartNs sent upstream, RunEndNs the
	// answer's first byte, SendNs its last byte relayed; Outcome the HTTP
	// status when not 2xx (499: the client went away).
	SpanBackend = 2
)

// SpanRecord is one traced request on one appliance, as its worker wrote
// it (the engine's SluiceSpan). Timestamps are ns since the Unix epoch; 0
// for a stage the request did not reach.
type SpanRecord struct {
	TraceID  [16]byte
	ParentID [8]byte // the caller's span; zero: the request starts the trace
	SpanID   [8]byte

	RecvNs, AuthNs, ValidateNs, RouteNs uint64
	RunStartNs, RunEndNs, SendNs        uint64

	RequestID  uint64
	TenantID   uint32
	TokenCount uint32
	Outcome    uint16 // wire error code; 0 for a response
	Shard      uint16 // index into the shard table; 65535: not routed
	Worker     uint16
	Kind       uint8 // SpanLocal or SpanForward
	Flags      uint8 // trace flags of the request

	Model, Version, Adapter string
}

// SpanSource is an engine that traces requests: Spans moves up to len(out)
// records out of the workers' rings and returns how many. The daemon calls
// it in batches, never per request.
type SpanSource interface {
	Spans(out []SpanRecord) (int, error)
}
