//! OpenAI's error body, `{"error":{"message","type","param","code"}}`,
//! with the status codes its clients expect.

use bytes::Bytes;
use http::{Response, StatusCode};

use crate::ctx::Ctx;
use crate::errors::Refusal;
use crate::http::body::Chunks;

/// An OpenAI API error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// For the client.
    pub message: String,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// A short code (`model_not_found`, Sluice's error codes, ...).
    pub code: Option<String>,
}

impl ApiError {
    /// An error with a status and a message.
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code: None,
        }
    }

    /// 400.
    pub fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    /// Names the field at fault.
    pub fn param(mut self, p: &'static str) -> ApiError {
        self.param = Some(p);
        self
    }

    /// Sets the code.
    pub fn code(mut self, c: impl Into<String>) -> ApiError {
        self.code = Some(c.into());
        self
    }

    /// OpenAI's `type` for the status.
    pub fn kind(&self) -> &'static str {
        match self.status.as_u16() {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "invalid_request_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind(),
                "param": self.param,
                "code": self.code,
            }
        })
    }

    /// The response, counted.
    pub fn response(&self, ctx: &Ctx) -> Response<Chunks> {
        ctx.stats.refusal(self.status);
        let body = serde_json::to_vec(&self.body()).unwrap_or_default();
        let mut r = Response::new(Chunks::one(Bytes::from(body)));
        *r.status_mut() = self.status;
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        if matches!(self.status.as_u16(), 429 | 503) {
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        r
    }
}

impl From<Refusal> for ApiError {
    fn from(r: Refusal) -> ApiError {
        let e = ApiError::new(r.status, r.message.into_owned());
        match r.code {
            Some(c) => e.code(c.as_str()),
            None => e,
        }
    }
}

impl From<sluice_backends::Failure> for ApiError {
    fn from(f: sluice_backends::Failure) -> ApiError {
        let code = match f.cause {
            sluice_backends::Cause::QueueFull => "busy",
            sluice_backends::Cause::Timeout => "deadline_exceeded",
            sluice_backends::Cause::Unavailable => "backend_unavailable",
            sluice_backends::Cause::Garbage => "backend_bad_answer",
            _ => "backend_error",
        };
        ApiError::new(f.status, f.message).code(code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape() {
        let e = ApiError::new(StatusCode::NOT_FOUND, "no such model")
            .param("model")
            .code("model_not_found");
        assert_eq!(
            e.body(),
            serde_json::json!({"error": {"message": "no such model", "type": "invalid_request_error", "param": "model", "code": "model_not_found"}})
        );
        assert_eq!(
            ApiError::new(StatusCode::TOO_MANY_REQUESTS, "x").kind(),
            "rate_limit_error"
        );
        assert_eq!(
            ApiError::new(StatusCode::BAD_GATEWAY, "x").body()["error"]["param"],
            serde_json::Value::Null
        );
    }
}
