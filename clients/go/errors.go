package sluice

import (
	"errors"
	"fmt"

	"github.com/sluice-ai/sluice/clients/go/wire"
)

// Sentinel errors, one per error code of docs/wire.md. A server's error
// frame comes back as a *ServerError that wraps the sentinel of its code,
// so test with errors.Is(err, sluice.ErrBusy); errors.As gives the message.
var (
	ErrMalformedFrame       = errors.New("sluice: malformed_frame")
	ErrUnsupportedVersion   = errors.New("sluice: unsupported_version")
	ErrUnauthenticated      = errors.New("sluice: unauthenticated")
	ErrForbidden            = errors.New("sluice: forbidden")
	ErrModelVersionRequired = errors.New("sluice: model_version_required")
	ErrNoRoute              = errors.New("sluice: no_route")
	ErrUnknownModel         = errors.New("sluice: unknown_model")
	ErrUnknownAdapter       = errors.New("sluice: unknown_adapter")
	ErrUnknownSchema        = errors.New("sluice: unknown_schema")
	ErrSchemaMismatch       = errors.New("sluice: schema_mismatch")
	ErrBadTensor            = errors.New("sluice: bad_tensor")
	ErrDeadlineExceeded     = errors.New("sluice: deadline_exceeded")
	ErrBusy                 = errors.New("sluice: busy")
	ErrNoRouteToShard       = errors.New("sluice: no_route_to_shard")
	ErrPeerDown             = errors.New("sluice: peer_down")
	ErrInferenceFailed      = errors.New("sluice: inference_failed")
	ErrInternal             = errors.New("sluice: internal")
	ErrShuttingDown         = errors.New("sluice: shutting_down")
	ErrFrameTooLarge        = errors.New("sluice: frame_too_large")
	ErrResponseTooLarge     = errors.New("sluice: response_too_large")
	ErrUnknownSubject       = errors.New("sluice: unknown_subject")
	// ErrConnectionLost is also what requests in flight fail with when the
	// client's own stream connection (TCP) breaks. Retryable.
	ErrConnectionLost  = errors.New("sluice: connection_lost")
	ErrUnsupportedKind = errors.New("sluice: unsupported_kind")
	// ErrStale: a signed frame's deadline was 0 or beyond the appliance's
	// freshness window (docs/wire.md, "What the appliance checks"); the
	// client writes fresh deadlines itself (Options.SignedDeadline).
	ErrStale = errors.New("sluice: stale")
	// ErrReplayed: the appliance already accepted a frame with this tag.
	// The client never resends a frame (each retry has a new request id),
	// so this means a copy of one of its frames arrived first.
	ErrReplayed = errors.New("sluice: replayed")
	// Stream errors (docs/wire.md, "Streams").
	ErrUnknownStream       = errors.New("sluice: unknown_stream")
	ErrStreamSequence      = errors.New("sluice: stream_sequence")
	ErrStreamLimit         = errors.New("sluice: stream_limit")
	ErrStreamStateMismatch = errors.New("sluice: stream_state_mismatch")
	ErrStreamUnsupported   = errors.New("sluice: stream_unsupported")
	// ErrUnknownCode: the server answered with a code this build does not
	// know (a newer server). Not retryable.
	ErrUnknownCode = errors.New("sluice: unknown error code")
)

// Client-side errors.
var (
	// ErrTimeout: no answer came before the context's deadline or
	// Options.Timeout. Not retried: inference is not assumed idempotent.
	ErrTimeout = errors.New("sluice: timed out waiting for the answer")
	// ErrClosed: the client was closed.
	ErrClosed = errors.New("sluice: client closed")
	// ErrTooManyOutstanding: Options.OutstandingMax requests are in flight.
	ErrTooManyOutstanding = errors.New("sluice: too many requests outstanding")
	// ErrInvalidRequest: the request breaks a wire limit (it wraps the
	// wire.Error), or does not fit the transport (one datagram over UDP).
	ErrInvalidRequest = errors.New("sluice: invalid request")
	// ErrMalformedAnswer: an answer carried the request's id but was not a
	// valid answer to it (wrong frame kind).
	ErrMalformedAnswer = errors.New("sluice: malformed answer")
	// ErrDType: an output was read as a type it does not hold.
	ErrDType = errors.New("sluice: tensor dtype mismatch")
	// ErrFrameLost: a token stream's frame did not arrive (a gap in seq,
	// UDP loss); the stream is cancelled.
	ErrFrameLost = errors.New("sluice: a token frame was lost")
)

var codeSentinels = [...]error{
	wire.CodeMalformedFrame:       ErrMalformedFrame,
	wire.CodeUnsupportedVersion:   ErrUnsupportedVersion,
	wire.CodeUnauthenticated:      ErrUnauthenticated,
	wire.CodeForbidden:            ErrForbidden,
	wire.CodeModelVersionRequired: ErrModelVersionRequired,
	wire.CodeNoRoute:              ErrNoRoute,
	wire.CodeUnknownModel:         ErrUnknownModel,
	wire.CodeUnknownAdapter:       ErrUnknownAdapter,
	wire.CodeUnknownSchema:        ErrUnknownSchema,
	wire.CodeSchemaMismatch:       ErrSchemaMismatch,
	wire.CodeBadTensor:            ErrBadTensor,
	wire.CodeDeadlineExceeded:     ErrDeadlineExceeded,
	wire.CodeBusy:                 ErrBusy,
	wire.CodeNoRouteToShard:       ErrNoRouteToShard,
	wire.CodePeerDown:             ErrPeerDown,
	wire.CodeInferenceFailed:      ErrInferenceFailed,
	wire.CodeInternal:             ErrInternal,
	wire.CodeShuttingDown:         ErrShuttingDown,
	wire.CodeFrameTooLarge:        ErrFrameTooLarge,
	wire.CodeResponseTooLarge:     ErrResponseTooLarge,
	wire.CodeUnknownSubject:       ErrUnknownSubject,
	wire.CodeConnectionLost:       ErrConnectionLost,
	wire.CodeUnsupportedKind:      ErrUnsupportedKind,
	wire.CodeStale:                ErrStale,
	wire.CodeReplayed:             ErrReplayed,
	wire.CodeUnknownStream:        ErrUnknownStream,
	wire.CodeStreamSequence:       ErrStreamSequence,
	wire.CodeStreamLimit:          ErrStreamLimit,
	wire.CodeStreamStateMismatch:  ErrStreamStateMismatch,
	wire.CodeStreamUnsupported:    ErrStreamUnsupported,
}

// CodeError returns the sentinel of a code; ErrUnknownCode for codes this
// build does not know.
func CodeError(c wire.Code) error {
	if int(c) < len(codeSentinels) && codeSentinels[c] != nil {
		return codeSentinels[c]
	}
	return ErrUnknownCode
}

// ServerError is an error frame from the server.
type ServerError struct {
	Code      wire.Code // may be unknown to this build
	Message   string
	RequestID uint64
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("sluice: server error %s (%d): %s", e.Code, uint16(e.Code), e.Message)
}

// Unwrap gives the sentinel of the code.
func (e *ServerError) Unwrap() error { return CodeError(e.Code) }

// Retryable reports whether the same request may succeed if sent again.
func (e *ServerError) Retryable() bool { return e.Code.Retryable() }

// IsRetryable reports whether err says the same request may succeed if sent
// again later: a server error with a retryable code (busy, peer_down,
// internal, shutting_down, connection_lost), or a lost connection.
// Timeouts are not: the request may have run.
func IsRetryable(err error) bool {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Retryable()
	}
	return errors.Is(err, ErrConnectionLost)
}

// CodeOf returns the server's error code carried by err, if any.
func CodeOf(err error) (wire.Code, bool) {
	var se *ServerError
	if errors.As(err, &se) {
		return se.Code, true
	}
	return 0, false
}
