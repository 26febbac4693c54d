use core::fmt;

/// Why a byte buffer is not a valid frame, or why a frame cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer ends before the frame does.
    Truncated,
    /// The first four bytes are not "SLCE".
    BadMagic,
    /// The format version is not one this build reads.
    UnsupportedVersion,
    /// The frame kind byte is unknown.
    UnknownKind,
    /// A reserved field or flag bit is not zero.
    Reserved,
    /// The header length disagrees with its contents or limits.
    BadHeaderLen,
    /// A string or key exceeds its limit.
    FieldTooLong,
    /// A routing string holds a byte outside printable ASCII, or a message is not UTF-8.
    BadString,
    /// More extension headers than allowed.
    TooManyExtensions,
    /// More tensors than allowed, or tensors in a frame kind that has none.
    TooManyTensors,
    /// Unknown tensor element type.
    BadDType,
    /// Tensor rank above the limit.
    BadRank,
    /// Element count or byte length overflows.
    SizeOverflow,
    /// Tensor byte length disagrees with dtype and shape.
    BadTensorLen,
    /// Tensor data is not 64-byte aligned relative to the frame start.
    Misaligned,
    /// Tensor data lies outside the body.
    OutOfBounds,
    /// Tensor data regions overlap or are out of order.
    Overlap,
    /// The body of an error, negotiation or ping frame is malformed.
    BadBody,
    /// The frame exceeds the frame length limit.
    TooLarge,
    /// The buffer holds bytes after the frame.
    TrailingBytes,
    /// The output buffer given to the builder is too small.
    BufferTooSmall,
    /// A `sluice-stream` extension header breaks the stream header's rules.
    BadStream,
}

impl Error {
    /// A short, stable description used in error frames and logs.
    pub const fn as_str(self) -> &'static str {
        match self {
            Error::Truncated => "frame truncated",
            Error::BadMagic => "bad magic",
            Error::UnsupportedVersion => "unsupported wire version",
            Error::UnknownKind => "unknown frame kind",
            Error::Reserved => "reserved field or flag set",
            Error::BadHeaderLen => "header length mismatch",
            Error::FieldTooLong => "header field too long",
            Error::BadString => "header string has invalid bytes",
            Error::TooManyExtensions => "too many extension headers",
            Error::TooManyTensors => "too many tensors",
            Error::BadDType => "unknown tensor dtype",
            Error::BadRank => "tensor rank too high",
            Error::SizeOverflow => "tensor size overflows",
            Error::BadTensorLen => "tensor length disagrees with shape",
            Error::Misaligned => "tensor data not 64-byte aligned",
            Error::OutOfBounds => "tensor data out of bounds",
            Error::Overlap => "tensor data overlaps or is out of order",
            Error::BadBody => "malformed frame body",
            Error::TooLarge => "frame too large",
            Error::TrailingBytes => "trailing bytes after frame",
            Error::BufferTooSmall => "output buffer too small",
            Error::BadStream => "malformed stream header",
        }
    }

    /// The error code a server answers with when a request fails this way.
    pub const fn code(self) -> ErrorCode {
        match self {
            Error::UnsupportedVersion => ErrorCode::UnsupportedVersion,
            Error::TooLarge => ErrorCode::FrameTooLarge,
            Error::BadDType
            | Error::BadRank
            | Error::SizeOverflow
            | Error::BadTensorLen
            | Error::Misaligned => ErrorCode::BadTensor,
            _ => ErrorCode::MalformedFrame,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl core::error::Error for Error {}

macro_rules! error_codes {
    ($( $(#[$doc:meta])* $name:ident = $val:literal, $retry:literal, $text:literal; )*) => {
        /// Numeric error codes carried by error frames. `docs/wire.md` lists them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum ErrorCode {
            $( $(#[$doc])* $name = $val, )*
        }

        impl ErrorCode {
            /// Every code, in numeric order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// Decodes a code; unknown values yield `None`.
            pub const fn from_u16(v: u16) -> Option<ErrorCode> {
                match v {
                    $( $val => Some(ErrorCode::$name), )*
                    _ => None,
                }
            }

            /// Whether the same request may succeed if sent again later.
            pub const fn retryable(self) -> bool {
                match self { $( ErrorCode::$name => $retry, )* }
            }

            /// Stable snake_case name, used in metrics labels.
            pub const fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$name => $text, )* }
            }
        }
    };
}

error_codes! {
    /// The frame failed the checked parse.
    MalformedFrame = 1, false, "malformed_frame";
    /// The wire version is not supported.
    UnsupportedVersion = 2, false, "unsupported_version";
    /// The tenant is unknown or the authentication tag is wrong.
    Unauthenticated = 3, false, "unauthenticated";
    /// The tenant may not do this. Kept for compatibility: the engine
    /// answers a model, adapter, route or subject outside a tenant's lists
    /// as if it did not exist.
    Forbidden = 4, false, "forbidden";
    /// The request carries no model version.
    ModelVersionRequired = 5, false, "model_version_required";
    /// No route matches the request.
    NoRoute = 6, false, "no_route";
    /// The model name or version is not loaded.
    UnknownModel = 7, false, "unknown_model";
    /// The LoRA adapter is not registered for the model.
    UnknownAdapter = 8, false, "unknown_adapter";
    /// The schema id or version is unknown or retired.
    UnknownSchema = 9, false, "unknown_schema";
    /// The payload does not match its schema.
    SchemaMismatch = 10, false, "schema_mismatch";
    /// A tensor's dtype, shape or alignment does not fit the model.
    BadTensor = 11, false, "bad_tensor";
    /// The deadline passed before the request ran.
    DeadlineExceeded = 12, false, "deadline_exceeded";
    /// A queue or table the frame needs is full (the shard queue, or the
    /// worker's replay table).
    Busy = 13, true, "busy";
    /// The shard is not served here and no peer carries its labels.
    NoRouteToShard = 14, false, "no_route_to_shard";
    /// The peer that serves the shard is down.
    PeerDown = 15, true, "peer_down";
    /// The inference run failed.
    InferenceFailed = 16, false, "inference_failed";
    /// An internal error; the request was not run.
    Internal = 17, true, "internal";
    /// The appliance is shutting down and accepts nothing new.
    ShuttingDown = 18, true, "shutting_down";
    /// The frame exceeds a size limit of the transport or the frame format.
    FrameTooLarge = 19, false, "frame_too_large";
    /// The response would not fit the transport's reply buffer.
    ResponseTooLarge = 20, false, "response_too_large";
    /// The schema subject is unknown.
    UnknownSubject = 21, false, "unknown_subject";
    /// The connection carrying the request was lost.
    ConnectionLost = 22, true, "connection_lost";
    /// The frame kind is valid but not accepted by this endpoint.
    UnsupportedKind = 23, false, "unsupported_kind";
    /// An authenticated frame's deadline is 0 or lies further ahead than
    /// the appliance's freshness window.
    Stale = 24, false, "stale";
    /// An authenticated frame with this tag was already accepted and its
    /// deadline has not passed: a replay, or a resend of the same frame.
    Replayed = 25, false, "replayed";
    /// A CONTINUE, END or CANCEL frame names a stream this worker does not
    /// hold: never opened, ended, reclaimed after `stream_idle_ms`, or on
    /// another worker.
    UnknownStream = 26, false, "unknown_stream";
    /// The frame's sequence number is not the one the stream expects next;
    /// the error frame's stream header carries the expected one.
    StreamSequence = 27, false, "stream_sequence";
    /// A stream limit is reached: streams per worker or per tenant, or
    /// frames per stream.
    StreamLimit = 28, true, "stream_limit";
    /// The model version behind an alias changed to one whose stream state
    /// has other shapes; the stream is ended.
    StreamStateMismatch = 29, false, "stream_state_mismatch";
    /// The model serves no streams of this sort (no `[models.stream]`), or
    /// a stream frame reached an endpoint that does not keep streams.
    StreamUnsupported = 30, false, "stream_unsupported";
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a request was refused: the code and message of the error frame that
/// answers it. The message is static, so refusing allocates nothing and
/// nothing about other tenants or internals leaks into error frames. Every
/// layer that refuses requests (validation, routing, models) returns this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reject {
    /// Error code for the error frame.
    pub code: ErrorCode,
    /// Message for the error frame.
    pub message: &'static str,
    /// For `response_too_large`: the response length in bytes that would
    /// have been needed, when known (the error frame's message then says
    /// it); 0 otherwise.
    pub needed_len: usize,
}

impl Reject {
    /// A refusal with `code` and `message`.
    pub const fn new(code: ErrorCode, message: &'static str) -> Reject {
        Reject {
            code,
            message,
            needed_len: 0,
        }
    }

    /// A `response_too_large` refusal that needed `needed_len` bytes.
    pub const fn too_large(message: &'static str, needed_len: usize) -> Reject {
        Reject {
            code: ErrorCode::ResponseTooLarge,
            message,
            needed_len,
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)?;
        if self.needed_len != 0 {
            write!(f, " (needs {} bytes)", self.needed_len)?;
        }
        Ok(())
    }
}

impl core::error::Error for Reject {}
