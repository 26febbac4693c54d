package wire

// Error is why a byte buffer is not a valid frame, or why a frame cannot be
// built. The values are those of the Rust crate's sluice_wire::Error, and
// [Error.Name] gives its variant name, as the conformance vectors use.
// Compare with ==, or errors.Is.
type Error uint8

// Parse and build errors, in the order of sluice_wire::Error.
const (
	ErrTruncated          Error = iota + 1 // the buffer ends before the frame does
	ErrBadMagic                            // the first four bytes are not "SLCE"
	ErrUnsupportedVersion                  // the version byte is not 1
	ErrUnknownKind                         // the kind byte is not 1 to 7
	ErrReserved                            // a reserved field, byte or flag bit is not zero
	ErrBadHeaderLen                        // header_len out of range or disagreeing with the variable header
	ErrFieldTooLong                        // a string, key or name too long, or empty where it may not be
	ErrBadString                           // a token byte outside 0x21..0x7e, or a message that is not UTF-8
	ErrTooManyExtensions                   // more than 16 extension headers
	ErrTooManyTensors                      // more than 16 tensors, or tensors in a kind without them
	ErrBadDType                            // a dtype code not in the table
	ErrBadRank                             // rank above 8
	ErrSizeOverflow                        // a dimension above 2^63-1, or a byte length above 256 MiB
	ErrBadTensorLen                        // data_len differs from product(dims) x element size
	ErrMisaligned                          // data_offset not a multiple of 64
	ErrOutOfBounds                         // tensor data outside the body
	ErrOverlap                             // tensor data overlapping the previous tensor or out of order
	ErrBadBody                             // a malformed error, negotiation, ping or pong body
	ErrTooLarge                            // the frame exceeds 256 MiB
	ErrTrailingBytes                       // the buffer holds bytes after the frame
	ErrBufferTooSmall                      // builder only: the output buffer is too short
	ErrBadStream                           // a sluice-stream extension header that breaks its rules
)

var errorNames = [...]struct{ name, text string }{
	ErrTruncated:          {"Truncated", "frame truncated"},
	ErrBadMagic:           {"BadMagic", "bad magic"},
	ErrUnsupportedVersion: {"UnsupportedVersion", "unsupported wire version"},
	ErrUnknownKind:        {"UnknownKind", "unknown frame kind"},
	ErrReserved:           {"Reserved", "reserved field or flag set"},
	ErrBadHeaderLen:       {"BadHeaderLen", "header length mismatch"},
	ErrFieldTooLong:       {"FieldTooLong", "header field too long"},
	ErrBadString:          {"BadString", "header string has invalid bytes"},
	ErrTooManyExtensions:  {"TooManyExtensions", "too many extension headers"},
	ErrTooManyTensors:     {"TooManyTensors", "too many tensors"},
	ErrBadDType:           {"BadDType", "unknown tensor dtype"},
	ErrBadRank:            {"BadRank", "tensor rank too high"},
	ErrSizeOverflow:       {"SizeOverflow", "tensor size overflows"},
	ErrBadTensorLen:       {"BadTensorLen", "tensor length disagrees with shape"},
	ErrMisaligned:         {"Misaligned", "tensor data not 64-byte aligned"},
	ErrOutOfBounds:        {"OutOfBounds", "tensor data out of bounds"},
	ErrOverlap:            {"Overlap", "tensor data overlaps or is out of order"},
	ErrBadBody:            {"BadBody", "malformed frame body"},
	ErrTooLarge:           {"TooLarge", "frame too large"},
	ErrTrailingBytes:      {"TrailingBytes", "trailing bytes after frame"},
	ErrBufferTooSmall:     {"BufferTooSmall", "output buffer too small"},
	ErrBadStream:          {"BadStream", "malformed stream header"},
}

// Errors lists every error, in order.
var Errors = []Error{
	ErrTruncated, ErrBadMagic, ErrUnsupportedVersion, ErrUnknownKind, ErrReserved,
	ErrBadHeaderLen, ErrFieldTooLong, ErrBadString, ErrTooManyExtensions, ErrTooManyTensors,
	ErrBadDType, ErrBadRank, ErrSizeOverflow, ErrBadTensorLen, ErrMisaligned, ErrOutOfBounds,
	ErrOverlap, ErrBadBody, ErrTooLarge, ErrTrailingBytes, ErrBufferTooSmall, ErrBadStream,
}

func (e Error) valid() bool { return e >= ErrTruncated && e <= ErrBadStream }

// Error is the same short text the Rust crate uses, prefixed.
func (e Error) Error() string {
	if !e.valid() {
		return "sluice wire: unknown error"
	}
	return "sluice wire: " + errorNames[e].text
}

// Name is the sluice_wire::Error variant name ("BadMagic").
func (e Error) Name() string {
	if !e.valid() {
		return "Unknown"
	}
	return errorNames[e].name
}

// Code is the error code a server answers a frame failing this way with.
func (e Error) Code() Code {
	switch e {
	case ErrUnsupportedVersion:
		return CodeUnsupportedVersion
	case ErrTooLarge:
		return CodeFrameTooLarge
	case ErrBadDType, ErrBadRank, ErrSizeOverflow, ErrBadTensorLen, ErrMisaligned:
		return CodeBadTensor
	}
	return CodeMalformedFrame
}
