//! The example frames of `docs/wire.md`, built with the crate's own builder.
//! The spec test checks that the hex in the document equals these bytes, so
//! the document and the code cannot drift apart.
#![allow(dead_code)]
// Test and vector-generator support: a failed expect is a failed run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_wire::{
    BodyRepr, DType, EndReason, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, SchemaType,
    StreamHeader, TenantKey, TensorRepr, TraceContext, stream_flags,
};

/// The documented example tenant key (ASCII bytes, no terminator).
pub const EXAMPLE_KEY: &[u8] = b"sluice-example-key-tenant-7";
/// Names of the examples, in document order.
pub const EXAMPLES: &[&str] = &[
    "ping",
    "pong",
    "request",
    "response",
    "error",
    "negotiate_request",
    "negotiate_request_signed",
    "negotiate_response",
    "stream_open",
    "stream_token",
    "stream_cancel",
    "stream_sequence_error",
];

/// The stream id of the stream examples.
pub const STREAM_ID: u64 = 0x0123_4567_89ab_cdef;

/// The W3C trace-context example ids (traceparent
/// `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`).
pub const TRACE: TraceContext = TraceContext {
    trace_id: [
        0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47,
        0x36,
    ],
    parent_id: [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
    flags: 1,
};

/// 2026-01-01T00:00:00Z in microseconds since the Unix epoch.
pub const DEADLINE_US: u64 = 1_767_225_600_000_000;

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn emit(repr: &FrameRepr<'_>) -> Vec<u8> {
    let layout = repr.layout().expect("example is valid");
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf).expect("example emits");
    buf
}

/// Builds the named example frame.
pub fn example(name: &str) -> Vec<u8> {
    let input = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let output = f32_bytes(&[0.25, 0.75]);
    match name {
        "ping" => emit(&FrameRepr {
            kind: Kind::Ping,
            request_id: 1,
            tenant_id: 7,
            ..FrameRepr::default()
        }),
        "pong" => emit(&FrameRepr {
            kind: Kind::Pong,
            request_id: 1,
            tenant_id: 7,
            ..FrameRepr::default()
        }),
        "request" => {
            let mut buf = emit(&FrameRepr {
                kind: Kind::Request,
                request_id: 42,
                tenant_id: 7,
                deadline_us: DEADLINE_US,
                schema_id: 3,
                schema_version: 2,
                token_count: 12,
                trace: TRACE,
                model: "resnet50",
                model_version: "v2",
                adapter: "lora-a",
                intent: "classify",
                extensions: &[ExtRepr {
                    key: "x-region",
                    value: b"eu",
                }],
                tensors: &[TensorRepr {
                    name: "input",
                    dtype: DType::F32,
                    dims: &[1, 4],
                    data: Some(&input),
                }],
                ..FrameRepr::default()
            });
            let mut frame = Frame::new_checked(&mut buf[..]).expect("example parses");
            TenantKey::new(EXAMPLE_KEY).sign(&mut frame);
            buf
        }
        "response" => emit(&FrameRepr {
            kind: Kind::Response,
            request_id: 42,
            tenant_id: 7,
            trace: TRACE,
            model: "resnet50",
            model_version: "v2",
            tensors: &[TensorRepr {
                name: "output",
                dtype: DType::F32,
                dims: &[1, 2],
                data: Some(&output),
            }],
            ..FrameRepr::default()
        }),
        "error" => emit(&FrameRepr {
            kind: Kind::Error,
            request_id: 42,
            tenant_id: 7,
            trace: TRACE,
            body: BodyRepr::Error {
                code: ErrorCode::ModelVersionRequired,
                message: "model version required",
            },
            ..FrameRepr::default()
        }),
        "negotiate_request" => emit(&FrameRepr {
            kind: Kind::NegotiateRequest,
            request_id: 43,
            tenant_id: 7,
            body: BodyRepr::NegotiateRequest {
                subject: "resnet50-input",
                version_hint: 0,
            },
            ..FrameRepr::default()
        }),
        "negotiate_request_signed" => {
            let mut buf = emit(&FrameRepr {
                kind: Kind::NegotiateRequest,
                request_id: 44,
                tenant_id: 7,
                deadline_us: DEADLINE_US,
                body: BodyRepr::NegotiateRequest {
                    subject: "resnet50-input",
                    version_hint: 0,
                },
                ..FrameRepr::default()
            });
            let mut frame = Frame::new_checked(&mut buf[..]).expect("example parses");
            TenantKey::new(EXAMPLE_KEY).sign(&mut frame);
            buf
        }
        "negotiate_response" => emit(&FrameRepr {
            kind: Kind::NegotiateResponse,
            request_id: 43,
            tenant_id: 7,
            body: BodyRepr::NegotiateResponse {
                schema_id: 3,
                version: 2,
                ttl_ms: 60_000,
                schema_type: SchemaType::Json,
                schema: br#"{"type":"object"}"#,
            },
            ..FrameRepr::default()
        }),
        "stream_open" => {
            let stream = StreamHeader {
                stream_id: STREAM_ID,
                seq: 0,
                flags: stream_flags::OPEN,
                end_reason: 0,
                tokens_per_frame: 1,
                max_tokens: 16,
            }
            .to_bytes();
            let prompt = [104u8, 105];
            emit(&FrameRepr {
                kind: Kind::Request,
                request_id: 50,
                tenant_id: 7,
                model: "bytelm",
                model_version: "1",
                extensions: &[ExtRepr::stream(&stream)],
                tensors: &[TensorRepr {
                    name: "prompt",
                    dtype: DType::U8,
                    dims: &[2],
                    data: Some(&prompt),
                }],
                ..FrameRepr::default()
            })
        }
        "stream_token" => {
            let stream = StreamHeader {
                stream_id: STREAM_ID,
                seq: 3,
                flags: stream_flags::CONTINUE | stream_flags::END,
                end_reason: EndReason::MaxTokens as u8,
                tokens_per_frame: 0,
                max_tokens: 0,
            }
            .to_bytes();
            let token = 33i64.to_le_bytes();
            emit(&FrameRepr {
                kind: Kind::Response,
                request_id: 50,
                tenant_id: 7,
                model: "bytelm",
                model_version: "1",
                extensions: &[ExtRepr::stream(&stream)],
                tensors: &[TensorRepr {
                    name: "token",
                    dtype: DType::I64,
                    dims: &[1],
                    data: Some(&token),
                }],
                ..FrameRepr::default()
            })
        }
        "stream_cancel" => {
            let stream = StreamHeader {
                stream_id: STREAM_ID,
                seq: 1,
                flags: stream_flags::CANCEL,
                ..StreamHeader::default()
            }
            .to_bytes();
            emit(&FrameRepr {
                kind: Kind::Request,
                request_id: 51,
                tenant_id: 7,
                model: "bytelm",
                model_version: "1",
                extensions: &[ExtRepr::stream(&stream)],
                ..FrameRepr::default()
            })
        }
        "stream_sequence_error" => {
            let stream = StreamHeader {
                stream_id: STREAM_ID,
                seq: 5,
                flags: stream_flags::CONTINUE,
                ..StreamHeader::default()
            }
            .to_bytes();
            emit(&FrameRepr {
                kind: Kind::Error,
                request_id: 52,
                tenant_id: 7,
                extensions: &[ExtRepr::stream(&stream)],
                body: BodyRepr::Error {
                    code: ErrorCode::StreamSequence,
                    message: "stream frame out of sequence",
                },
                ..FrameRepr::default()
            })
        }
        other => panic!("no example named {other}"),
    }
}

/// Formats bytes the way `docs/wire.md` shows them: 16 bytes a line, each
/// line led by its offset in hex.
pub fn hex_dump(bytes: &[u8]) -> String {
    let mut out = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        out.push_str(&format!("{:04x}:", i * 16));
        for b in chunk {
            out.push_str(&format!(" {b:02x}"));
        }
        out.push('\n');
    }
    out
}

/// Parses a hex dump made by [`hex_dump`], checking the offsets.
pub fn parse_hex_dump(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let (off, rest) = line
            .split_once(':')
            .ok_or_else(|| format!("line {n}: no offset"))?;
        let off = usize::from_str_radix(off, 16).map_err(|e| format!("line {n}: {e}"))?;
        if off != out.len() {
            return Err(format!(
                "line {n}: offset {off:#x}, expected {:#x}",
                out.len()
            ));
        }
        for tok in rest.split_whitespace() {
            if tok.len() != 2 {
                return Err(format!("line {n}: bad byte {tok:?}"));
            }
            out.push(u8::from_str_radix(tok, 16).map_err(|e| format!("line {n}: {e}"))?);
        }
    }
    Ok(out)
}
