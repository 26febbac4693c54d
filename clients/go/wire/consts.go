// Package wire reads and writes Sluice frames, version 1, as specified
// byte for byte in docs/wire.md.
//
// [Parse] checks a whole frame once and returns a [Frame], a view over the
// caller's buffer: getters read the bytes where they are, and tensor data
// and bodies are sub-slices of that buffer, never copies. [Repr] describes
// a frame and [Repr.Emit] writes it into a caller buffer. Both allocate
// nothing. [TenantKey] computes and checks the HMAC-SHA256 tags.
//
// The package is tested against the conformance vectors of
// docs/vectors/frames.json, which the Rust crate sluice-wire generates.
package wire

// Version is the wire format version this package reads and writes.
const Version = 1

// Magic is the four bytes that open every frame: "SLCE".
const Magic = "SLCE"

// FixedHeaderLen is the length of the fixed header.
const FixedHeaderLen = 96

// TensorAlign is the alignment of tensor data, relative to the frame start.
const TensorAlign = 64

// SectionTensorName is the tensor-table entry that carries a request's
// structured section (JSON, Avro or Protobuf bytes): a rank-1 u8 tensor.
const SectionTensorName = "$section"

// AuthTagLen is the length of the authentication tag on the wire.
const AuthTagLen = 16

// Flag bits. Every other bit is reserved and must be zero.
const (
	// FlagAuthenticated: the auth tag is set and covers the header.
	FlagAuthenticated uint16 = 1 << 0
	// FlagForwarded: a peer appliance relayed the frame.
	FlagForwarded uint16 = 1 << 1
	// FlagsAll is every defined bit.
	FlagsAll = FlagAuthenticated | FlagForwarded
)

// Limits, each checked on parse and on build (docs/wire.md).
const (
	ModelNameLenMax    = 64
	ModelVersionLenMax = 32
	AdapterLenMax      = 64
	IntentLenMax       = 32
	ExtCountMax        = 16
	ExtKeyLenMax       = 32
	ExtValueLenMax     = 255
	TensorCountMax     = 16
	TensorNameLenMax   = 64
	RankMax            = 8
	HeaderLenMax       = 4096
	FrameLenMax        = 256 << 20 // 256 MiB
	ErrorMessageLenMax = 256
	SubjectLenMax      = 255
	SchemaLenMax       = 48 << 10 // 48 KiB: a negotiation answer fits one datagram
)

// Byte offsets of the fixed header.
const (
	offVersion       = 4
	offKind          = 5
	offFlags         = 6
	offHeaderLen     = 8
	offReserved0     = 10
	offTenantID      = 12
	offRequestID     = 16
	offDeadlineUs    = 24
	offPayloadLen    = 32
	offSchemaID      = 36
	offSchemaVersion = 40
	offTokenCount    = 44
	offTraceID       = 48
	offSpanID        = 64
	offTraceFlags    = 72
	offModelLen      = 73 // then model_version_len, adapter_len, intent_len
	offExtCount      = 77
	offTensorCount   = 78
	offReserved1     = 79
	offAuthTag       = 80

	tensorEntryFixedLen = 12

	errorFixedLen      = 4
	negotiateReqFixed  = 8
	negotiateRespFixed = 20
)

// isToken reports whether every byte is printable ASCII without space.
func isToken[S ~string | ~[]byte](s S) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func alignUp(n int) int { return (n + TensorAlign - 1) &^ (TensorAlign - 1) }
