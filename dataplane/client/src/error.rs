use std::fmt;

use sluice_wire::ErrorCode;

/// Everything a client call can fail with.
#[derive(Debug)]
pub enum ClientError {
    /// The server answered with an error frame.
    Server {
        /// The code from the error frame.
        code: ErrorCode,
        /// The server's message.
        message: String,
        /// Whether the same request may succeed if sent again later.
        retryable: bool,
    },
    /// The server answered with an error code this build does not know
    /// (a newer server). Treated as not retryable.
    ServerUnknownCode {
        /// The raw code.
        code_raw: u16,
        /// The server's message.
        message: String,
    },
    /// No answer arrived within the configured timeout.
    Timeout,
    /// The socket failed.
    Io(std::io::Error),
    /// An answer carried this request's id but was not a valid answer to it
    /// (wrong frame kind, bad body, wrong tensor dtype for a conversion).
    Malformed(&'static str),
    /// The request cannot be built: a field exceeds a wire limit, a tensor's
    /// data disagrees with its shape, or the frame exceeds one datagram.
    InvalidRequest(sluice_wire::Error),
    /// `recv` was called with no request outstanding.
    NothingPending,
    /// `send` would exceed `ClientConfig::outstanding_max`; receive first.
    TooManyOutstanding,
    /// The TCP connection carrying the request was lost before its answer
    /// came (the server closed or reset it). Retryable: the next send
    /// connects again. The request may or may not have run.
    ConnectionLost,
}

impl ClientError {
    /// Whether retrying the same request later may succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ClientError::Server {
                retryable: true,
                ..
            } | ClientError::ConnectionLost
        )
    }

    /// The server's error code, when the server answered with a known one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Server { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Server { code, message, .. } => {
                write!(f, "server error {code}: {message}")
            }
            ClientError::ServerUnknownCode { code_raw, message } => {
                write!(f, "server error with unknown code {code_raw}: {message}")
            }
            ClientError::Timeout => f.write_str("timed out waiting for the answer"),
            ClientError::Io(e) => write!(f, "socket error: {e}"),
            ClientError::Malformed(why) => write!(f, "malformed answer: {why}"),
            ClientError::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            ClientError::NothingPending => f.write_str("no request is outstanding"),
            ClientError::TooManyOutstanding => {
                f.write_str("too many requests outstanding; receive answers first")
            }
            ClientError::ConnectionLost => {
                f.write_str("the TCP connection was lost before the answer came")
            }
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(e) => Some(e),
            ClientError::InvalidRequest(e) => Some(e),
            _ => None,
        }
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Io(e)
    }
}

impl From<sluice_wire::Error> for ClientError {
    fn from(e: sluice_wire::Error) -> Self {
        ClientError::InvalidRequest(e)
    }
}
