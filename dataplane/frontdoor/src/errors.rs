//! One table from every Sluice error code to an HTTP status and a gRPC
//! status code (docs/frontdoor.md prints it; a test checks the two agree),
//! and the front door's own refusals.

use std::borrow::Cow;

use http::StatusCode;
use sluice_wire::ErrorCode;
use tonic::Code;

/// A refusal on its way to a client: KServe error JSON (`{"error": ...}`)
/// over HTTP, a status over gRPC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status.
    pub status: StatusCode,
    /// gRPC status code.
    pub grpc: Code,
    /// The Sluice error code, when a worker (or the same rule applied
    /// early) refused the request.
    pub code: Option<ErrorCode>,
    /// Message for the client.
    pub message: Cow<'static, str>,
}

impl Refusal {
    /// A refusal for a Sluice error code.
    pub fn code(code: ErrorCode, message: impl Into<Cow<'static, str>>) -> Refusal {
        let (status, grpc) = map(code);
        Refusal {
            status,
            grpc,
            code: Some(code),
            message: message.into(),
        }
    }

    /// 400 / INVALID_ARGUMENT: a malformed request.
    pub fn bad(message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal::other(StatusCode::BAD_REQUEST, Code::InvalidArgument, message)
    }

    /// 404 / NOT_FOUND.
    pub fn not_found(message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal::other(StatusCode::NOT_FOUND, Code::NotFound, message)
    }

    /// A refusal of the front door's own (no Sluice code).
    pub fn other(status: StatusCode, grpc: Code, message: impl Into<Cow<'static, str>>) -> Refusal {
        Refusal {
            status,
            grpc,
            code: None,
            message: message.into(),
        }
    }

    /// Whether a client may retry the same request later.
    pub fn retryable(&self) -> bool {
        match self.code {
            Some(c) => c.retryable(),
            None => self.status == StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The gRPC status.
    pub fn to_status(&self) -> tonic::Status {
        tonic::Status::new(self.grpc, self.message.to_string())
    }
}

/// HTTP status and gRPC code of a Sluice error code.
pub const fn map(code: ErrorCode) -> (StatusCode, Code) {
    use ErrorCode as E;
    match code {
        E::MalformedFrame
        | E::UnsupportedVersion
        | E::ModelVersionRequired
        | E::UnknownSchema
        | E::SchemaMismatch
        | E::BadTensor
        | E::UnsupportedKind => (StatusCode::BAD_REQUEST, Code::InvalidArgument),
        E::Unauthenticated => (StatusCode::UNAUTHORIZED, Code::Unauthenticated),
        E::Forbidden => (StatusCode::FORBIDDEN, Code::PermissionDenied),
        E::NoRoute | E::UnknownModel | E::UnknownAdapter | E::UnknownSubject => {
            (StatusCode::NOT_FOUND, Code::NotFound)
        }
        E::DeadlineExceeded => (StatusCode::GATEWAY_TIMEOUT, Code::DeadlineExceeded),
        E::Busy | E::PeerDown | E::ShuttingDown | E::ConnectionLost | E::NoRouteToShard => {
            (StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable)
        }
        E::Stale => (StatusCode::BAD_REQUEST, Code::InvalidArgument),
        E::Replayed => (StatusCode::CONFLICT, Code::AlreadyExists),
        E::UnknownStream => (StatusCode::NOT_FOUND, Code::NotFound),
        E::StreamSequence | E::StreamStateMismatch => {
            (StatusCode::CONFLICT, Code::FailedPrecondition)
        }
        E::StreamLimit => (StatusCode::TOO_MANY_REQUESTS, Code::ResourceExhausted),
        E::StreamUnsupported => (StatusCode::NOT_IMPLEMENTED, Code::Unimplemented),
        E::FrameTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, Code::ResourceExhausted),
        E::ResponseTooLarge => (StatusCode::INTERNAL_SERVER_ERROR, Code::ResourceExhausted),
        E::InferenceFailed | E::Internal => (StatusCode::INTERNAL_SERVER_ERROR, Code::Internal),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in docs/frontdoor.md is the one above.
    #[test]
    fn docs_table_matches() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/frontdoor.md"
        ))
        .unwrap();
        for &c in ErrorCode::ALL {
            let (status, grpc) = map(c);
            let row = format!(
                "| {} | `{}` | {} | `{}` |",
                c as u16,
                c.as_str(),
                status.as_u16(),
                grpc_name(grpc)
            );
            assert!(doc.contains(&row), "docs/frontdoor.md lacks the row\n{row}");
        }
    }

    fn grpc_name(c: Code) -> &'static str {
        match c {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::Unauthenticated => "UNAUTHENTICATED",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::NotFound => "NOT_FOUND",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::Unavailable => "UNAVAILABLE",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::Internal => "INTERNAL",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Unimplemented => "UNIMPLEMENTED",
            _ => "OTHER",
        }
    }
}
