package wire

import "math/bits"

// StreamExtKey is the key of the stream extension header (docs/wire.md,
// "Streams"); StreamExtLen the length of its value.
const (
	StreamExtKey = "sluice-stream"
	StreamExtLen = 24
)

// Stream flag bits (the value's byte 12).
const (
	StreamOpen     uint8 = 1 << 0
	StreamContinue uint8 = 1 << 1
	StreamEnd      uint8 = 1 << 2
	StreamCancel   uint8 = 1 << 3
	streamFlagsAll       = StreamOpen | StreamContinue | StreamEnd | StreamCancel
)

// EndReason says why a stream ended (the value's byte 13, answers with
// StreamEnd only).
type EndReason uint8

// End reasons.
const (
	EndNone      EndReason = 0
	EndEOS       EndReason = 1
	EndMaxTokens EndReason = 2
	EndDeadline  EndReason = 3
	EndCancelled EndReason = 4
	EndClient    EndReason = 5
	EndError     EndReason = 6
)

var endNames = [...]string{"none", "eos", "max_tokens", "deadline", "cancelled", "client", "error"}

// String is the snake_case name ("max_tokens").
func (r EndReason) String() string {
	if int(r) < len(endNames) {
		return endNames[r]
	}
	return "unknown"
}

// StreamHeader is the decoded value of a sluice-stream extension header.
type StreamHeader struct {
	StreamID       uint64
	Seq            uint32
	Flags          uint8
	EndReason      EndReason
	TokensPerFrame uint16
	MaxTokens      uint32
}

// Has reports whether flag is set.
func (h StreamHeader) Has(flag uint8) bool { return h.Flags&flag != 0 }

// ParseStreamHeader decodes and checks a value for a frame of kind.
func ParseStreamHeader(v []byte, kind Kind) (StreamHeader, error) {
	if len(v) != StreamExtLen || le.Uint32(v[20:]) != 0 {
		return StreamHeader{}, ErrBadStream
	}
	h := StreamHeader{
		StreamID:       le.Uint64(v[0:]),
		Seq:            le.Uint32(v[8:]),
		Flags:          v[12],
		EndReason:      EndReason(v[13]),
		TokensPerFrame: le.Uint16(v[14:]),
		MaxTokens:      le.Uint32(v[16:]),
	}
	if err := h.Check(kind); err != nil {
		return StreamHeader{}, err
	}
	return h, nil
}

// Check applies the rules of docs/wire.md ("Stream header").
func (h StreamHeader) Check(kind Kind) error {
	if (kind != KindRequest && kind != KindResponse && kind != KindError) || h.StreamID == 0 {
		return ErrBadStream
	}
	f := h.Flags
	if f&^streamFlagsAll != 0 || bits.OnesCount8(f&(StreamOpen|StreamContinue|StreamCancel)) != 1 {
		return ErrBadStream
	}
	if f&StreamCancel != 0 && f&StreamEnd != 0 {
		return ErrBadStream
	}
	if h.EndReason > EndError {
		return ErrBadStream
	}
	mayEnd := f&StreamEnd != 0 && kind != KindRequest
	if h.EndReason != EndNone && !mayEnd {
		return ErrBadStream
	}
	return nil
}

// Bytes is the 24-byte value.
func (h StreamHeader) Bytes() []byte {
	v := make([]byte, StreamExtLen)
	le.PutUint64(v[0:], h.StreamID)
	le.PutUint32(v[8:], h.Seq)
	v[12] = h.Flags
	v[13] = byte(h.EndReason)
	le.PutUint16(v[14:], h.TokensPerFrame)
	le.PutUint32(v[16:], h.MaxTokens)
	return v
}

// Extension is the header as an extension to put in a [Repr].
func (h StreamHeader) Extension() Extension {
	return Extension{Key: StreamExtKey, Value: h.Bytes()}
}

// Stream is the frame's stream header; ok is false when it has none. A
// parsed frame's header is valid (Parse rejects a bad one).
func (f *Frame) Stream() (h StreamHeader, ok bool) {
	v, found := f.ExtensionValue(StreamExtKey)
	if !found {
		return StreamHeader{}, false
	}
	h, err := ParseStreamHeader(v, f.Kind())
	return h, err == nil
}
