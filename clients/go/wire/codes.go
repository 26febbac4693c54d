package wire

import "strconv"

// Code is an error code carried in an error frame's body (docs/wire.md,
// "Error codes"). Codes unknown to this build are kept raw and are not
// retryable.
type Code uint16

// Error codes.
const (
	CodeMalformedFrame       Code = 1
	CodeUnsupportedVersion   Code = 2
	CodeUnauthenticated      Code = 3
	CodeForbidden            Code = 4
	CodeModelVersionRequired Code = 5
	CodeNoRoute              Code = 6
	CodeUnknownModel         Code = 7
	CodeUnknownAdapter       Code = 8
	CodeUnknownSchema        Code = 9
	CodeSchemaMismatch       Code = 10
	CodeBadTensor            Code = 11
	CodeDeadlineExceeded     Code = 12
	CodeBusy                 Code = 13
	CodeNoRouteToShard       Code = 14
	CodePeerDown             Code = 15
	CodeInferenceFailed      Code = 16
	CodeInternal             Code = 17
	CodeShuttingDown         Code = 18
	CodeFrameTooLarge        Code = 19
	CodeResponseTooLarge     Code = 20
	CodeUnknownSubject       Code = 21
	CodeConnectionLost       Code = 22
	CodeUnsupportedKind      Code = 23
	CodeStale                Code = 24
	CodeReplayed             Code = 25
	CodeUnknownStream        Code = 26
	CodeStreamSequence       Code = 27
	CodeStreamLimit          Code = 28
	CodeStreamStateMismatch  Code = 29
	CodeStreamUnsupported    Code = 30
)

var codeTable = [...]struct {
	name      string
	retryable bool
}{
	CodeMalformedFrame:       {"malformed_frame", false},
	CodeUnsupportedVersion:   {"unsupported_version", false},
	CodeUnauthenticated:      {"unauthenticated", false},
	CodeForbidden:            {"forbidden", false},
	CodeModelVersionRequired: {"model_version_required", false},
	CodeNoRoute:              {"no_route", false},
	CodeUnknownModel:         {"unknown_model", false},
	CodeUnknownAdapter:       {"unknown_adapter", false},
	CodeUnknownSchema:        {"unknown_schema", false},
	CodeSchemaMismatch:       {"schema_mismatch", false},
	CodeBadTensor:            {"bad_tensor", false},
	CodeDeadlineExceeded:     {"deadline_exceeded", false},
	CodeBusy:                 {"busy", true},
	CodeNoRouteToShard:       {"no_route_to_shard", false},
	CodePeerDown:             {"peer_down", true},
	CodeInferenceFailed:      {"inference_failed", false},
	CodeInternal:             {"internal", true},
	CodeShuttingDown:         {"shutting_down", true},
	CodeFrameTooLarge:        {"frame_too_large", false},
	CodeResponseTooLarge:     {"response_too_large", false},
	CodeUnknownSubject:       {"unknown_subject", false},
	CodeConnectionLost:       {"connection_lost", true},
	CodeUnsupportedKind:      {"unsupported_kind", false},
	CodeStale:                {"stale", false},
	CodeReplayed:             {"replayed", false},
	CodeUnknownStream:        {"unknown_stream", false},
	CodeStreamSequence:       {"stream_sequence", false},
	CodeStreamLimit:          {"stream_limit", true},
	CodeStreamStateMismatch:  {"stream_state_mismatch", false},
	CodeStreamUnsupported:    {"stream_unsupported", false},
}

// Codes lists every code this build knows, in numeric order.
var Codes = func() []Code {
	var cs []Code
	for c := range codeTable {
		if codeTable[c].name != "" {
			cs = append(cs, Code(c))
		}
	}
	return cs
}()

// Known reports whether this build knows the code.
func (c Code) Known() bool { return int(c) < len(codeTable) && codeTable[c].name != "" }

// Retryable reports whether the same request may succeed if sent again
// later. Unknown codes are not retryable.
func (c Code) Retryable() bool { return c.Known() && codeTable[c].retryable }

// String is the stable snake_case name ("model_version_required"); unknown
// codes read "code_N".
func (c Code) String() string {
	if !c.Known() {
		return "code_" + strconv.Itoa(int(c))
	}
	return codeTable[c].name
}
