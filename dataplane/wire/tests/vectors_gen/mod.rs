//! The conformance vectors, `docs/vectors/frames.json`: every example frame
//! of docs/wire.md plus edge cases, built with this crate's builder, and
//! invalid frames with the parse error each must give. The file format is
//! docs/vectors/README.md.
//!
//! `cargo run -p sluice-wire --example gen-vectors > docs/vectors/frames.json`
//! writes the file; `tests/vectors.rs` fails when the committed file differs
//! from what this module generates, and rebuilds every valid vector from its
//! decoded fields byte for byte.
// Test tooling: a broken vector is a bug to stop at, so it panics.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde::{Deserialize, Serialize};
use sluice_wire::{
    BodyRepr, DType, Error, ErrorCode, ExtRepr, FIXED_HEADER_LEN, Frame, FrameRepr, Kind,
    SECTION_TENSOR_NAME, STREAM_EXT_KEY, SchemaType, StreamHeader, TenantKey, TensorRepr,
    TraceContext, flags, limits, stream_flags,
};

use crate::common::{EXAMPLE_KEY, EXAMPLES, TRACE, example};

/// Version of the file format (docs/vectors/README.md).
pub const FORMAT: u32 = 1;

/// The whole file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VectorFile {
    pub format: u32,
    pub wire_version: u8,
    pub valid: Vec<Valid>,
    pub invalid: Vec<Invalid>,
}

/// A frame every implementation must parse into `frame` and rebuild from
/// `frame` into `hex`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Valid {
    pub name: String,
    pub source: String,
    pub hex: String,
    pub frame: FrameDoc,
}

/// Bytes every implementation must reject with `error` (a `sluice_wire::Error`
/// variant name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Invalid {
    pub name: String,
    pub hex: String,
    pub error: String,
}

/// Every field of a frame. u64 header fields are decimal strings, so that
/// JSON readers with 53-bit numbers lose nothing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FrameDoc {
    pub kind: String,
    pub version: u8,
    pub flags: u16,
    pub tenant_id: u32,
    pub request_id: String,
    pub deadline_us: String,
    pub schema_id: u32,
    pub schema_version: u32,
    pub token_count: u32,
    pub trace: TraceDoc,
    pub model: String,
    pub model_version: String,
    pub adapter: String,
    pub intent: String,
    pub extensions: Vec<ExtDoc>,
    pub tensors: Vec<TensorDoc>,
    pub body: Option<BodyDoc>,
    pub auth: Option<AuthDoc>,
    /// The decoded stream header (docs/wire.md, "Streams"); absent when the
    /// frame carries none. Its bytes are also in `extensions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<StreamDoc>,
    /// The sender id of a valid `sluice-sender` header (docs/wire.md,
    /// "Replay windows"), a u64 as a decimal string; absent when the frame
    /// names no sender. Its bytes are also in `extensions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sender_id: Option<String>,
}

/// The fields of a `sluice-stream` extension header.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamDoc {
    /// u64 as a decimal string, like the header's u64 fields.
    pub stream_id: String,
    pub seq: u32,
    pub flags: u8,
    pub end_reason: u8,
    pub tokens_per_frame: u16,
    pub max_tokens: u32,
}

impl StreamDoc {
    pub fn of(h: &StreamHeader) -> StreamDoc {
        StreamDoc {
            stream_id: h.stream_id.to_string(),
            seq: h.seq,
            flags: h.flags,
            end_reason: h.end_reason,
            tokens_per_frame: h.tokens_per_frame,
            max_tokens: h.max_tokens,
        }
    }

    pub fn header(&self) -> StreamHeader {
        StreamHeader {
            stream_id: self.stream_id.parse().expect("u64 string"),
            seq: self.seq,
            flags: self.flags,
            end_reason: self.end_reason,
            tokens_per_frame: self.tokens_per_frame,
            max_tokens: self.max_tokens,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceDoc {
    pub trace_id: String,
    pub span_id: String,
    pub flags: u8,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtDoc {
    pub key: String,
    pub value_hex: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorDoc {
    pub name: String,
    pub dtype: u8,
    pub dtype_name: String,
    pub dims: Vec<u64>,
    pub data_offset: usize,
    pub data_len: usize,
    pub data_hex: String,
}

/// The body of the kinds without tensors; `null` for the others.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum BodyDoc {
    Error(ErrorDoc),
    NegotiateRequest(NegotiateRequestDoc),
    NegotiateResponse(NegotiateResponseDoc),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDoc {
    pub code: u16,
    /// `None` (null) for a code this build does not know.
    pub code_name: Option<String>,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NegotiateRequestDoc {
    pub subject: String,
    pub version_hint: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NegotiateResponseDoc {
    pub schema_id: u32,
    pub version: u32,
    pub ttl_ms: u32,
    pub schema_type: u8,
    pub schema_hex: String,
}

/// Present when the frame is signed: the key that signs it and the tag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthDoc {
    pub tenant_key_hex: String,
    pub tag_hex: String,
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

pub fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Request => "request",
        Kind::Response => "response",
        Kind::Error => "error",
        Kind::NegotiateRequest => "negotiate_request",
        Kind::NegotiateResponse => "negotiate_response",
        Kind::Ping => "ping",
        Kind::Pong => "pong",
    }
}

pub fn kind_from_name(s: &str) -> Kind {
    (1..=7)
        .filter_map(Kind::from_u8)
        .find(|k| kind_name(*k) == s)
        .unwrap_or_else(|| panic!("unknown kind {s:?}"))
}

/// The decoded fields of a valid frame (panics on an invalid one).
pub fn doc_of(bytes: &[u8], key: Option<&[u8]>) -> FrameDoc {
    let f = Frame::new_checked(bytes).unwrap_or_else(|e| panic!("vector does not parse: {e}"));
    let t = f.trace();
    let body = match f.kind() {
        Kind::Error => {
            let b = f.error_body().expect("error body");
            Some(BodyDoc::Error(ErrorDoc {
                code: b.code_raw,
                code_name: b.code().map(|c| c.as_str().to_string()),
                message: b.message.to_string(),
            }))
        }
        Kind::NegotiateRequest => {
            let b = f.negotiate_request().expect("negotiate request body");
            Some(BodyDoc::NegotiateRequest(NegotiateRequestDoc {
                subject: b.subject.to_string(),
                version_hint: b.version_hint,
            }))
        }
        Kind::NegotiateResponse => {
            let b = f.negotiate_response().expect("negotiate response body");
            Some(BodyDoc::NegotiateResponse(NegotiateResponseDoc {
                schema_id: b.schema_id,
                version: b.version,
                ttl_ms: b.ttl_ms,
                schema_type: b.schema_type as u8,
                schema_hex: hex(b.schema),
            }))
        }
        _ => None,
    };
    let auth = key.map(|k| {
        assert!(
            TenantKey::new(k).verify(&f),
            "a signed vector verifies with its key"
        );
        AuthDoc {
            tenant_key_hex: hex(k),
            tag_hex: hex(f.auth_tag()),
        }
    });
    FrameDoc {
        kind: kind_name(f.kind()).to_string(),
        version: f.version(),
        flags: f.flags(),
        tenant_id: f.tenant_id(),
        request_id: f.request_id().to_string(),
        deadline_us: f.deadline_us().to_string(),
        schema_id: f.schema_id(),
        schema_version: f.schema_version(),
        token_count: f.token_count(),
        trace: TraceDoc {
            trace_id: hex(&t.trace_id),
            span_id: hex(&t.parent_id),
            flags: t.flags,
        },
        model: f.model().to_string(),
        model_version: f.model_version().to_string(),
        adapter: f.adapter().to_string(),
        intent: f.intent().to_string(),
        extensions: f
            .extensions()
            .map(|e| ExtDoc {
                key: e.key.to_string(),
                value_hex: hex(e.value),
            })
            .collect(),
        tensors: f
            .tensors()
            .map(|d| TensorDoc {
                name: d.name.to_string(),
                dtype: d.dtype as u8,
                dtype_name: d.dtype.as_str().to_string(),
                dims: d.dims().to_vec(),
                data_offset: d.data_offset,
                data_len: d.data_len,
                data_hex: hex(f.tensor_data(&d)),
            })
            .collect(),
        body,
        auth,
        stream: f.stream().map(|h| StreamDoc::of(&h)),
        sender_id: f.sender_id().map(|id| id.to_string()),
    }
}

// ---- building ----

fn emit(repr: &FrameRepr<'_>) -> Vec<u8> {
    let layout = repr
        .layout()
        .unwrap_or_else(|e| panic!("vector builds: {e}"));
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf).expect("vector emits");
    buf
}

fn sign(mut bytes: Vec<u8>, key: &[u8]) -> Vec<u8> {
    let mut f = Frame::new_checked(&mut bytes[..]).expect("vector parses");
    TenantKey::new(key).sign(&mut f);
    bytes
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Printable ASCII without space, repeated to `len` bytes from `skip`.
fn token(len: usize, skip: usize) -> String {
    (0..len)
        .map(|i| char::from(0x21 + ((i + skip) % 94) as u8))
        .collect()
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

/// Three elements of each dtype, at its extremes where it has them.
fn dtype_data(d: DType) -> Vec<u8> {
    match d {
        DType::F32 => le(&[1.5f32, -2.0, 0.0], f32::to_le_bytes),
        DType::U8 => vec![0, 127, 255],
        DType::I8 => le(&[i8::MIN, 0, i8::MAX], i8::to_le_bytes),
        DType::U16 => le(&[0u16, 1, u16::MAX], u16::to_le_bytes),
        DType::I16 => le(&[i16::MIN, 0, i16::MAX], i16::to_le_bytes),
        DType::I32 => le(&[i32::MIN, 0, i32::MAX], i32::to_le_bytes),
        DType::I64 => le(&[i64::MIN, 0, i64::MAX], i64::to_le_bytes),
        DType::Bool => vec![1, 0, 1],
        // 1.0, -2.0, 0.5 in IEEE half precision.
        DType::F16 => le(&[0x3c00u16, 0xc000, 0x3800], u16::to_le_bytes),
        DType::F64 => le(&[1.5f64, -2.0, 0.25], f64::to_le_bytes),
        DType::U32 => le(&[0u32, 1, u32::MAX], u32::to_le_bytes),
        DType::U64 => le(&[0u64, 1, u64::MAX], u64::to_le_bytes),
        // 1.0, -2.0, 0.5 in bfloat16.
        DType::BF16 => le(&[0x3f80u16, 0xc000, 0x3f00], u16::to_le_bytes),
    }
}

struct Case {
    name: String,
    source: String,
    bytes: Vec<u8>,
    key: Option<Vec<u8>>,
}

fn case(name: &str, source: &str, bytes: Vec<u8>) -> Case {
    Case {
        name: name.to_string(),
        source: source.to_string(),
        bytes,
        key: None,
    }
}

fn signed_case(name: &str, source: &str, bytes: Vec<u8>, key: &[u8]) -> Case {
    Case {
        name: name.to_string(),
        source: source.to_string(),
        bytes: sign(bytes, key),
        key: Some(key.to_vec()),
    }
}

fn request<'a>() -> FrameRepr<'a> {
    FrameRepr {
        kind: Kind::Request,
        request_id: 100,
        tenant_id: 1,
        model: "echo",
        model_version: "1",
        ..FrameRepr::default()
    }
}

fn tensor<'a>(name: &'a str, dtype: DType, dims: &'a [u64], data: &'a [u8]) -> TensorRepr<'a> {
    TensorRepr {
        name,
        dtype,
        dims,
        data: Some(data),
    }
}

fn wire_md_cases() -> Vec<Case> {
    EXAMPLES
        .iter()
        .map(|name| {
            let key =
                (*name == "request" || name.ends_with("_signed")).then(|| EXAMPLE_KEY.to_vec());
            Case {
                name: format!("wire-md-{}", name.replace('_', "-")),
                source: format!("wire.md example {name}"),
                bytes: example(name),
                key,
            }
        })
        .collect()
}

fn dtype_cases() -> Vec<Case> {
    DType::ALL
        .iter()
        .map(|&d| {
            let data = dtype_data(d);
            let t = [tensor("t", d, &[3], &data)];
            case(
                &format!("dtype-{}", d.as_str()),
                &format!("edge: dtype {} ({}), 3 elements", d.as_str(), d as u8),
                emit(&FrameRepr {
                    tensors: &t,
                    ..request()
                }),
            )
        })
        .collect()
}

fn tensor_shape_cases() -> Vec<Case> {
    let one = 2.5f32.to_le_bytes();
    let rank8: Vec<u8> = le(&[1.0f32, 2.0], f32::to_le_bytes);
    let two = le(&[7i64, 8], i64::to_le_bytes);
    let names: Vec<String> = (0..16).map(|i| format!("t{i}")).collect();
    let dims16: Vec<[u64; 1]> = (0..16).map(|i| [i as u64]).collect();
    let data16: Vec<Vec<u8>> = (0..16).map(|i| vec![i as u8; i]).collect();
    let many: Vec<TensorRepr<'_>> = (0..16)
        .map(|i| tensor(&names[i], DType::U8, &dims16[i], &data16[i]))
        .collect();
    let long_name = token(limits::TENSOR_NAME_LEN_MAX, 5);
    vec![
        case(
            "tensor-rank0-scalar",
            "edge: rank 0 scalar (one element)",
            emit(&FrameRepr {
                tensors: &[tensor("s", DType::F32, &[], &one)],
                ..request()
            }),
        ),
        case(
            "tensor-empty-dim0",
            "edge: empty tensor, shape [0]",
            emit(&FrameRepr {
                tensors: &[tensor("e", DType::F32, &[0], &[])],
                ..request()
            }),
        ),
        case(
            "tensor-empty-shares-offset",
            "edge: an empty tensor [2, 0, 3] and the next tensor share one data offset",
            emit(&FrameRepr {
                tensors: &[
                    tensor("e", DType::F32, &[2, 0, 3], &[]),
                    tensor("x", DType::I64, &[2], &two),
                ],
                ..request()
            }),
        ),
        case(
            "tensor-rank8",
            "edge: rank 8 (the limit)",
            emit(&FrameRepr {
                tensors: &[tensor("r8", DType::F32, &[1, 1, 1, 1, 1, 1, 1, 2], &rank8)],
                ..request()
            }),
        ),
        case(
            "tensor-count16",
            "edge: 16 tensors (the limit), u8 of lengths 0 to 15",
            emit(&FrameRepr {
                tensors: &many,
                ..request()
            }),
        ),
        case(
            "tensor-name-max",
            "edge: tensor name of 64 bytes (the limit)",
            emit(&FrameRepr {
                tensors: &[tensor(&long_name, DType::U8, &[1], &[9])],
                ..request()
            }),
        ),
        case(
            "tensor-duplicate-names",
            "edge: two tensors of one name (lookup by name returns the first)",
            emit(&FrameRepr {
                tensors: &[
                    tensor("x", DType::U8, &[1], &[1]),
                    tensor("x", DType::U8, &[1], &[2]),
                ],
                ..request()
            }),
        ),
        case(
            "request-no-tensors",
            "edge: a request without tensors",
            emit(&request()),
        ),
    ]
}

fn header_cases() -> Vec<Case> {
    let model = token(limits::MODEL_NAME_LEN_MAX, 0);
    let version = token(limits::MODEL_VERSION_LEN_MAX, 64);
    let adapter = token(limits::ADAPTER_LEN_MAX, 3);
    let intent = token(limits::INTENT_LEN_MAX, 40);
    let key32 = token(limits::EXT_KEY_LEN_MAX, 7);
    let value255: Vec<u8> = (0..limits::EXT_VALUE_LEN_MAX).map(|i| i as u8).collect();
    let ext16: Vec<ExtRepr<'_>> = (0..limits::EXT_COUNT_MAX)
        .map(|i| ExtRepr {
            key: &key32[..i % 32 + 1],
            value: &value255[..i],
        })
        .collect();
    // 13 extensions of 32 + 255 bytes and one of 48 fill the header to 4096.
    let mut ext_max: Vec<ExtRepr<'_>> = (0..13)
        .map(|_| ExtRepr {
            key: &key32,
            value: &value255,
        })
        .collect();
    ext_max.push(ExtRepr {
        key: "k",
        value: &value255[..48],
    });
    let x = le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
    let section = br#"{"intent":"reasoning","priority":1}"#;
    let trace_unsampled = TraceContext { flags: 0, ..TRACE };
    vec![
        case(
            "strings-max",
            "edge: model 64, version 32, adapter 64, intent 32 bytes (the limits), every token byte incl. \" and \\",
            emit(&FrameRepr {
                model: &model,
                model_version: &version,
                adapter: &adapter,
                intent: &intent,
                ..request()
            }),
        ),
        case(
            "strings-empty",
            "edge: no routing strings at all (valid on the wire; the engine answers model_version_required)",
            emit(&FrameRepr {
                model: "",
                model_version: "",
                ..request()
            }),
        ),
        case(
            "extensions-16",
            "edge: 16 extension headers (the limit), keys 1 to 16 bytes, values 0 to 15 bytes",
            emit(&FrameRepr {
                extensions: &ext16,
                ..request()
            }),
        ),
        case(
            "extension-max-key-value",
            "edge: extension key 32 bytes, value 255 bytes (the limits)",
            emit(&FrameRepr {
                extensions: &[ExtRepr {
                    key: &key32,
                    value: &value255,
                }],
                ..request()
            }),
        ),
        case(
            "extension-opaque-value-duplicate-key",
            "edge: an empty value, a value of non-printable bytes, a repeated key (lookup returns the first)",
            emit(&FrameRepr {
                extensions: &[
                    ExtRepr {
                        key: "x-empty",
                        value: b"",
                    },
                    ExtRepr {
                        key: "x-bin",
                        value: &[0x00, 0xff, 0x20, 0x7f, 0x0a],
                    },
                    ExtRepr {
                        key: "x-bin",
                        value: b"second",
                    },
                ],
                ..request()
            }),
        ),
        case(
            "header-len-max",
            "edge: a header of exactly 4096 bytes (the limit): routing strings at their limits and 14 extension headers",
            emit(&FrameRepr {
                model: &model,
                model_version: &version,
                adapter: &adapter,
                intent: &intent,
                extensions: &ext_max,
                ..request()
            }),
        ),
        case(
            "header-max-values",
            "edge: every numeric header field at its maximum (u64 ids as decimal strings)",
            emit(&FrameRepr {
                request_id: u64::MAX,
                tenant_id: u32::MAX,
                deadline_us: u64::MAX,
                schema_id: u32::MAX,
                schema_version: u32::MAX,
                token_count: u32::MAX,
                trace: TraceContext {
                    trace_id: [0xff; 16],
                    parent_id: [0xff; 8],
                    flags: 0xff,
                },
                ..request()
            }),
        ),
        case(
            "trace-unsampled",
            "edge: a trace context with the sampled bit clear",
            emit(&FrameRepr {
                trace: trace_unsampled,
                tensors: &[tensor("x", DType::F32, &[1, 4], &x)],
                ..request()
            }),
        ),
        case(
            "request-section-json",
            "edge: a structured section ($section, u8 rank 1) with schema id 5 version 1 beside an input tensor",
            emit(&FrameRepr {
                model: "mlp",
                schema_id: 5,
                schema_version: 1,
                tensors: &[
                    tensor("x", DType::F32, &[1, 4], &x),
                    tensor(
                        SECTION_TENSOR_NAME,
                        DType::U8,
                        &[section.len() as u64],
                        section,
                    ),
                ],
                ..request()
            }),
        ),
        case(
            "response-two-outputs",
            "edge: a response with two output tensors",
            emit(&FrameRepr {
                kind: Kind::Response,
                model: "two_io",
                tensors: &[
                    tensor("sum", DType::F32, &[1, 2], &x[..8]),
                    tensor("prod", DType::F32, &[1, 2], &x[8..]),
                ],
                ..request()
            }),
        ),
    ]
}

fn auth_cases() -> Vec<Case> {
    let x = le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
    let long_key: Vec<u8> = (0..100u8).collect();
    // The demo tenant's key of cfg/sluice.toml (hex:7375...3030).
    let demo_key = b"suice-demo-key-0000000000000000";
    let mlp = || FrameRepr {
        model: "mlp",
        tensors: &[],
        ..request()
    };
    let t = [tensor("x", DType::F32, &[1, 4], &x)];
    vec![
        signed_case(
            "auth-request-demo-tenant",
            "edge: a request signed with the demo tenant's key (cfg/sluice.toml, tenant 1)",
            emit(&FrameRepr {
                tensors: &t,
                ..mlp()
            }),
            demo_key,
        ),
        signed_case(
            "auth-forwarded",
            "edge: FORWARDED and AUTHENTICATED set (flags 3); the tag reads FORWARDED as 0",
            emit(&FrameRepr {
                flags: flags::FORWARDED,
                tensors: &t,
                ..mlp()
            }),
            demo_key,
        ),
        signed_case(
            "auth-long-key",
            "edge: a 100-byte key (longer than the SHA-256 block: HMAC hashes it first)",
            emit(&FrameRepr {
                tensors: &t,
                ..mlp()
            }),
            &long_key,
        ),
        signed_case(
            "auth-empty-key",
            "edge: an empty key (HMAC allows it)",
            emit(&mlp()),
            b"",
        ),
        signed_case(
            "auth-extensions-covered",
            "edge: a signed request with an extension header and a trace (both covered by the tag)",
            emit(&FrameRepr {
                trace: TRACE,
                extensions: &[ExtRepr {
                    key: "x-region",
                    value: b"eu",
                }],
                tensors: &t,
                ..mlp()
            }),
            demo_key,
        ),
        signed_case(
            "auth-ping",
            "edge: a signed ping",
            emit(&FrameRepr {
                kind: Kind::Ping,
                request_id: 5,
                tenant_id: 1,
                ..FrameRepr::default()
            }),
            demo_key,
        ),
        signed_case(
            "auth-negotiate-request",
            "edge: a signed negotiation request (the tag covers the body: the subject)",
            emit(&FrameRepr {
                kind: Kind::NegotiateRequest,
                request_id: 6,
                tenant_id: 1,
                body: BodyRepr::NegotiateRequest {
                    subject: "mlp-input",
                    version_hint: 0,
                },
                ..FrameRepr::default()
            }),
            demo_key,
        ),
        signed_case(
            "auth-negotiate-other-subject",
            "edge: the same header as auth-negotiate-request asking for another subject and version: another tag",
            emit(&FrameRepr {
                kind: Kind::NegotiateRequest,
                request_id: 6,
                tenant_id: 1,
                body: BodyRepr::NegotiateRequest {
                    subject: "mlp-output",
                    version_hint: 2,
                },
                ..FrameRepr::default()
            }),
            demo_key,
        ),
    ]
}

fn error_frame(code: ErrorCode, message: &str) -> Vec<u8> {
    emit(&FrameRepr {
        kind: Kind::Error,
        request_id: 100,
        tenant_id: 1,
        body: BodyRepr::Error { code, message },
        ..FrameRepr::default()
    })
}

fn error_cases() -> Vec<Case> {
    let mut out: Vec<Case> = ErrorCode::ALL
        .iter()
        .map(|&c| {
            case(
                &format!("error-code-{}", c.as_str().replace('_', "-")),
                &format!(
                    "edge: error code {} {} (retryable: {})",
                    c as u16,
                    c.as_str(),
                    c.retryable()
                ),
                error_frame(c, c.as_str()),
            )
        })
        .collect();
    let max = "m".repeat(limits::ERROR_MESSAGE_LEN_MAX);
    // 255 ASCII bytes and a two-byte character: the builder cuts before it.
    let clipped = format!("{}é", "c".repeat(limits::ERROR_MESSAGE_LEN_MAX - 1));
    let mut unknown = error_frame(ErrorCode::Internal, "from a newer peer");
    put_u16(&mut unknown, FIXED_HEADER_LEN, 1000);
    out.extend([
        case(
            "error-message-max",
            "edge: an error message of 256 bytes (the limit)",
            error_frame(ErrorCode::Busy, &max),
        ),
        case(
            "error-message-clipped-at-char",
            "edge: a 257-byte message ending in a 2-byte character, cut by the builder to 255 bytes",
            error_frame(ErrorCode::Busy, &clipped),
        ),
        case(
            "error-message-utf8",
            "edge: a message with multi-byte UTF-8",
            error_frame(ErrorCode::BadTensor, "forme attendue [1, 4] — reçu [1, 5] ✓"),
        ),
        case(
            "error-message-empty",
            "edge: an empty message",
            error_frame(ErrorCode::NoRoute, ""),
        ),
        case(
            "error-unknown-code",
            "edge: code 1000, unknown to this build: accepted, surfaced raw, not retryable",
            unknown,
        ),
        case(
            "error-echoes-trace",
            "edge: an error frame made by error_for, echoing the request's id, tenant and trace",
            {
                let req = example("request");
                let f = Frame::new_checked(&req[..]).expect("example parses");
                emit(&FrameRepr::error_for(
                    &f,
                    ErrorCode::UnknownModel,
                    "no model resnet50 version v2",
                ))
            },
        ),
    ]);
    out
}

fn negotiate_frame(body: BodyRepr<'_>) -> Vec<u8> {
    let kind = match body {
        BodyRepr::NegotiateRequest { .. } => Kind::NegotiateRequest,
        _ => Kind::NegotiateResponse,
    };
    emit(&FrameRepr {
        kind,
        request_id: 200,
        tenant_id: 1,
        body,
        ..FrameRepr::default()
    })
}

fn negotiate_cases() -> Vec<Case> {
    let subject = token(limits::SUBJECT_LEN_MAX, 11);
    let schema_max: Vec<u8> = (0..limits::SCHEMA_LEN_MAX)
        .map(|i| (i % 251) as u8)
        .collect();
    let mut out = vec![
        case(
            "negotiate-request-subject-max",
            "edge: a subject of 255 bytes (the limit), version hint 7",
            negotiate_frame(BodyRepr::NegotiateRequest {
                subject: &subject,
                version_hint: 7,
            }),
        ),
        case(
            "negotiate-response-empty-schema",
            "edge: an empty schema, ttl 0 (not cacheable)",
            negotiate_frame(BodyRepr::NegotiateResponse {
                schema_id: 1,
                version: 1,
                ttl_ms: 0,
                schema_type: SchemaType::Json,
                schema: b"",
            }),
        ),
        case(
            "negotiate-response-schema-max",
            "edge: a schema of 49152 bytes (the limit), binary descriptor bytes",
            negotiate_frame(BodyRepr::NegotiateResponse {
                schema_id: u32::MAX,
                version: u32::MAX,
                ttl_ms: u32::MAX,
                schema_type: SchemaType::Protobuf,
                schema: &schema_max,
            }),
        ),
    ];
    for (t, name, text) in [
        (
            SchemaType::Avro,
            "avro",
            &br#"{"type":"record","name":"r","fields":[]}"#[..],
        ),
        (
            SchemaType::Protobuf,
            "protobuf",
            b"syntax = \"proto3\"; message M { int32 a = 1; }",
        ),
        (SchemaType::Json, "json", br#"{"type":"object"}"#),
        (
            SchemaType::Tensor,
            "tensor",
            br#"{"inputs":[{"name":"x","dtype":"f32","shape":[-1,4]}]}"#,
        ),
    ] {
        out.push(case(
            &format!("negotiate-response-{name}"),
            &format!("edge: schema type {} ({name})", t as u8),
            negotiate_frame(BodyRepr::NegotiateResponse {
                schema_id: 9,
                version: 2,
                ttl_ms: 60_000,
                schema_type: t,
                schema: text,
            }),
        ));
    }
    out
}

fn ping_cases() -> Vec<Case> {
    let frame = |kind| {
        emit(&FrameRepr {
            kind,
            request_id: u64::MAX,
            tenant_id: 1,
            ..FrameRepr::default()
        })
    };
    vec![
        case(
            "ping-max-request-id",
            "edge: a ping with request id 2^64 - 1",
            frame(Kind::Ping),
        ),
        case("pong-max-request-id", "edge: its pong", frame(Kind::Pong)),
    ]
}

fn valid_cases() -> Vec<Case> {
    let mut all = wire_md_cases();
    all.extend(dtype_cases());
    all.extend(tensor_shape_cases());
    all.extend(header_cases());
    all.extend(auth_cases());
    all.extend(error_cases());
    all.extend(negotiate_cases());
    all.extend(ping_cases());
    all.extend(stream_cases());
    all.extend(sender_cases());
    all
}

/// Sender headers (docs/wire.md, "Replay windows"): signed with a sender
/// id at its extremes, beside a stream header, and two values that name no
/// sender (0, and a value of the wrong length), which parse as plain
/// extensions.
fn sender_cases() -> Vec<Case> {
    let x = le(&[1.0f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
    let t = [tensor("x", DType::F32, &[1, 4], &x)];
    let signed = |name: &str, source: &str, exts: &[ExtRepr<'_>]| {
        signed_case(
            name,
            source,
            emit(&FrameRepr {
                request_id: 1_000_001,
                deadline_us: 1_767_225_600_000_000,
                extensions: exts,
                tensors: &t,
                ..request()
            }),
            EXAMPLE_KEY,
        )
    };
    let id = sluice_wire::sender_value(0x5eed_0000_0000_0001);
    let max = sluice_wire::sender_value(u64::MAX);
    let one = sluice_wire::sender_value(1);
    let zero = sluice_wire::sender_value(0);
    let st = stream_ext(StreamHeader {
        stream_id: 7,
        flags: stream_flags::OPEN,
        ..StreamHeader::default()
    });
    vec![
        signed(
            "auth-sender",
            "edge: a signed request naming its sender: its request id is that sender's counter (the tag covers the sender header)",
            &[ExtRepr::sender(&id)],
        ),
        signed(
            "auth-sender-max-and-stream",
            "edge: sender id 2^64 - 1 after a stream header",
            &[ExtRepr::stream(&st), ExtRepr::sender(&max)],
        ),
        signed(
            "auth-sender-first-counts",
            "edge: two sender headers: the first (id 1) counts",
            &[ExtRepr::sender(&one), ExtRepr::sender(&id)],
        ),
        case(
            "sender-zero-names-none",
            "edge: a sender header with id 0 names no sender (no sender_id)",
            emit(&FrameRepr {
                extensions: &[ExtRepr::sender(&zero)],
                ..request()
            }),
        ),
        case(
            "sender-short-names-none",
            "edge: a sender header of 7 bytes names no sender (no sender_id)",
            emit(&FrameRepr {
                extensions: &[ExtRepr {
                    key: sluice_wire::SENDER_EXT_KEY,
                    value: &id[..7],
                }],
                ..request()
            }),
        ),
    ]
}

fn stream_ext(h: StreamHeader) -> [u8; sluice_wire::STREAM_EXT_LEN] {
    h.to_bytes()
}

/// Stream headers (docs/wire.md, "Streams"): every flag combination the
/// rules allow, every end reason, fields at their maxima, beside other
/// extensions, in an error frame, and signed.
fn stream_cases() -> Vec<Case> {
    use stream_flags::*;
    let h = |seq, flags, end_reason| StreamHeader {
        stream_id: 7,
        seq,
        flags,
        end_reason,
        tokens_per_frame: 0,
        max_tokens: 0,
    };
    let chunk = [0u8; 8];
    let t = [tensor("input", DType::F32, &[1, 2], &chunk)];
    let mut out = Vec::new();
    for (name, flags) in [
        ("open", OPEN),
        ("open-end", OPEN | END),
        ("continue", CONTINUE),
        ("continue-end", CONTINUE | END),
        ("cancel", CANCEL),
    ] {
        let v = stream_ext(h(1, flags, 0));
        out.push(case(
            &format!("stream-request-{name}"),
            &format!("edge: stream request, flags {flags:#04x}"),
            emit(&FrameRepr {
                extensions: &[ExtRepr::stream(&v)],
                tensors: if flags & CANCEL == 0 { &t } else { &[] },
                ..request()
            }),
        ));
    }
    for reason in 1..=6u8 {
        let v = stream_ext(h(9, CONTINUE | END, reason));
        out.push(case(
            &format!("stream-response-end-reason-{reason}"),
            &format!("edge: last token frame, end_reason {reason}"),
            emit(&FrameRepr {
                kind: Kind::Response,
                extensions: &[ExtRepr::stream(&v)],
                ..request()
            }),
        ));
    }
    let max = stream_ext(StreamHeader {
        stream_id: u64::MAX,
        seq: u32::MAX,
        flags: OPEN,
        end_reason: 0,
        tokens_per_frame: u16::MAX,
        max_tokens: u32::MAX,
    });
    out.push(case(
        "stream-fields-at-max",
        "edge: stream id 2^64-1, seq, tokens_per_frame and max_tokens at their maxima",
        emit(&FrameRepr {
            extensions: &[ExtRepr::stream(&max)],
            ..request()
        }),
    ));
    let v = stream_ext(h(3, CONTINUE, 0));
    out.push(case(
        "stream-among-extensions",
        "edge: the stream header between two other extensions",
        emit(&FrameRepr {
            extensions: &[
                ExtRepr {
                    key: "a",
                    value: b"1",
                },
                ExtRepr::stream(&v),
                ExtRepr {
                    key: "sluice-stream2",
                    value: b"",
                },
            ],
            ..request()
        }),
    ));
    let v = stream_ext(h(4, CONTINUE | END, 6));
    out.push(case(
        "stream-error-ends-stream",
        "edge: an error that ends a stream (state mismatch), end_reason 6",
        emit(&FrameRepr {
            kind: Kind::Error,
            extensions: &[ExtRepr::stream(&v)],
            body: BodyRepr::Error {
                code: ErrorCode::StreamStateMismatch,
                message: "stream state shapes changed",
            },
            ..request()
        }),
    ));
    let v = stream_ext(h(0, OPEN, 0));
    out.push(signed_case(
        "auth-stream-open",
        "edge: a signed OPEN: the tag covers the stream header",
        emit(&FrameRepr {
            deadline_us: 1_767_225_600_000_000,
            extensions: &[ExtRepr::stream(&v)],
            tensors: &t,
            ..request()
        }),
        EXAMPLE_KEY,
    ));
    out
}

// ---- invalid frames ----

// Layout of `base()`, as in tests/errors/main.rs: strings "m" "1" at 96..98,
// extension "k"="v" at 98..102, tensor "a" (f32 [2]) entry at 102..123,
// tensor "b" (u8 [3]) entry at 123..144; data of "a" at 192..200, of "b" at
// 256..259.
const HEADER_LEN: usize = 144;
const EXT: usize = 98;
const TA: usize = 102;
const TB: usize = 123;
const FRAME_LEN: usize = 259;

fn base() -> Vec<u8> {
    emit(&FrameRepr {
        kind: Kind::Request,
        request_id: 9,
        model: "m",
        model_version: "1",
        extensions: &[ExtRepr {
            key: "k",
            value: b"v",
        }],
        tensors: &[
            TensorRepr {
                name: "a",
                dtype: DType::F32,
                dims: &[2],
                data: Some(&[1; 8]),
            },
            TensorRepr {
                name: "b",
                dtype: DType::U8,
                dims: &[3],
                data: Some(&[2; 3]),
            },
        ],
        ..FrameRepr::default()
    })
}

fn bare(kind: Kind, body: BodyRepr<'_>) -> Vec<u8> {
    emit(&FrameRepr {
        kind,
        body,
        ..FrameRepr::default()
    })
}

fn error_body_frame() -> Vec<u8> {
    bare(
        Kind::Error,
        BodyRepr::Error {
            code: ErrorCode::Busy,
            message: "full",
        },
    )
}

fn negotiate_request_frame() -> Vec<u8> {
    bare(
        Kind::NegotiateRequest,
        BodyRepr::NegotiateRequest {
            subject: "subj",
            version_hint: 4,
        },
    )
}

fn negotiate_response_frame() -> Vec<u8> {
    bare(
        Kind::NegotiateResponse,
        BodyRepr::NegotiateResponse {
            schema_id: 1,
            version: 2,
            ttl_ms: 3,
            schema_type: SchemaType::Avro,
            schema: b"{}",
        },
    )
}

fn with(mut b: Vec<u8>, f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    f(&mut b);
    b
}

/// Every parse error, each reached by corrupting one thing in a valid frame;
/// several per error where the checks of docs/wire.md ("Parse errors") reach
/// it in different places. (`BufferTooSmall` is a builder error: no bytes
/// can produce it.)
fn invalid_cases() -> Vec<(&'static str, Vec<u8>, Error)> {
    use Error::*;
    let b = base();
    let ping = bare(Kind::Ping, BodyRepr::None);
    let err = error_body_frame();
    let nq = negotiate_request_frame();
    let ns = negotiate_response_frame();
    let one_ext = emit(&FrameRepr {
        extensions: &[ExtRepr {
            key: "k",
            value: b"",
        }],
        ..FrameRepr::default()
    });
    let zero_dim = emit(&FrameRepr {
        tensors: &[TensorRepr {
            name: "a",
            dtype: DType::F32,
            dims: &[0, 5],
            data: None,
        }],
        ..FrameRepr::default()
    });
    vec![
        ("truncated-empty", vec![], Truncated),
        ("truncated-95-bytes", b[..95].to_vec(), Truncated),
        ("truncated-fixed-header-only", b[..96].to_vec(), Truncated),
        (
            "truncated-one-byte-short",
            b[..FRAME_LEN - 1].to_vec(),
            Truncated,
        ),
        (
            "truncated-at-frame-limit",
            with(b.clone(), |b| {
                put_u32(b, 32, (limits::FRAME_LEN_MAX - HEADER_LEN) as u32)
            }),
            Truncated,
        ),
        ("bad-magic", with(b.clone(), |b| b[0] = b'X'), BadMagic),
        (
            "bad-magic-lower-case",
            with(b.clone(), |b| b[3] = b'e'),
            BadMagic,
        ),
        (
            "unsupported-version-0",
            with(b.clone(), |b| b[4] = 0),
            UnsupportedVersion,
        ),
        (
            "unsupported-version-2",
            with(b.clone(), |b| b[4] = 2),
            UnsupportedVersion,
        ),
        ("unknown-kind-0", with(b.clone(), |b| b[5] = 0), UnknownKind),
        ("unknown-kind-8", with(b.clone(), |b| b[5] = 8), UnknownKind),
        (
            "reserved-flag-bit-2",
            with(b.clone(), |b| b[6] |= 0x04),
            Reserved,
        ),
        (
            "reserved-flag-bit-15",
            with(b.clone(), |b| b[7] |= 0x80),
            Reserved,
        ),
        ("reserved0", with(b.clone(), |b| b[10] = 1), Reserved),
        ("reserved1", with(b.clone(), |b| b[79] = 1), Reserved),
        (
            "reserved-tensor-entry-byte",
            with(b.clone(), |b| b[TB + 3] = 1),
            Reserved,
        ),
        (
            "reserved-negotiate-request-body",
            with(nq.clone(), |b| b[96 + 6] = 1),
            Reserved,
        ),
        (
            "reserved-negotiate-response-body",
            with(ns.clone(), |b| b[96 + 15] = 1),
            Reserved,
        ),
        (
            "bad-header-len-95",
            with(b.clone(), |b| put_u16(b, 8, 95)),
            BadHeaderLen,
        ),
        (
            "bad-header-len-4097",
            with(b.clone(), |b| put_u16(b, 8, 4097)),
            BadHeaderLen,
        ),
        (
            "bad-header-len-parts-end-early",
            with(b.clone(), |b| {
                put_u16(b, 8, HEADER_LEN as u16 + 1);
                put_u32(b, 32, (FRAME_LEN - HEADER_LEN - 1) as u32);
            }),
            BadHeaderLen,
        ),
        (
            "bad-header-len-tensor-past-end",
            with(b.clone(), |b| {
                put_u16(b, 8, HEADER_LEN as u16 - 1);
                put_u32(b, 32, (FRAME_LEN - HEADER_LEN + 1) as u32);
            }),
            BadHeaderLen,
        ),
        (
            "bad-header-len-string-past-end",
            with(ping.clone(), |b| b[73] = 1),
            BadHeaderLen,
        ),
        (
            "bad-header-len-extension-lengths-past-end",
            with(ping.clone(), |b| b[77] = 1),
            BadHeaderLen,
        ),
        (
            "bad-header-len-extension-key-past-end",
            with(one_ext, |b| b[96] = 2),
            BadHeaderLen,
        ),
        (
            "bad-header-len-extension-value-past-end",
            with(b.clone(), |b| b[EXT + 1] = 255),
            BadHeaderLen,
        ),
        (
            "bad-header-len-tensor-dims-past-end",
            with(b.clone(), |b| b[TB + 1] = 8),
            BadHeaderLen,
        ),
        (
            "too-large-payload-len-max",
            with(b.clone(), |b| put_u32(b, 32, u32::MAX)),
            TooLarge,
        ),
        (
            "too-large-one-over-limit",
            with(b.clone(), |b| {
                put_u32(b, 32, (limits::FRAME_LEN_MAX - HEADER_LEN + 1) as u32)
            }),
            TooLarge,
        ),
        (
            "trailing-bytes",
            with(b.clone(), |b| b.push(0)),
            TrailingBytes,
        ),
        (
            "trailing-bytes-ping",
            with(ping.clone(), |b| b.push(0)),
            TrailingBytes,
        ),
        (
            "field-too-long-model",
            with(b.clone(), |b| b[73] = 65),
            FieldTooLong,
        ),
        (
            "field-too-long-model-version",
            with(b.clone(), |b| b[74] = 33),
            FieldTooLong,
        ),
        (
            "field-too-long-adapter",
            with(b.clone(), |b| b[75] = 65),
            FieldTooLong,
        ),
        (
            "field-too-long-intent",
            with(b.clone(), |b| b[76] = 33),
            FieldTooLong,
        ),
        (
            "field-too-long-extension-key-empty",
            with(b.clone(), |b| b[EXT] = 0),
            FieldTooLong,
        ),
        (
            "field-too-long-extension-key-33",
            with(b.clone(), |b| b[EXT] = 33),
            FieldTooLong,
        ),
        (
            "field-too-long-tensor-name-empty",
            with(b.clone(), |b| b[TA + 2] = 0),
            FieldTooLong,
        ),
        (
            "field-too-long-tensor-name-65",
            with(b.clone(), |b| b[TA + 2] = 65),
            FieldTooLong,
        ),
        (
            "bad-string-model-space",
            with(b.clone(), |b| b[96] = b' '),
            BadString,
        ),
        (
            "bad-string-model-version-del",
            with(b.clone(), |b| b[97] = 0x7f),
            BadString,
        ),
        (
            "bad-string-extension-key-nul",
            with(b.clone(), |b| b[EXT + 2] = 0),
            BadString,
        ),
        (
            "bad-string-tensor-name-high-byte",
            with(b.clone(), |b| b[TA + 20] = 0x80),
            BadString,
        ),
        (
            "bad-string-error-message-not-utf8",
            with(err.clone(), |b| b[96 + 4] = 0xff),
            BadString,
        ),
        (
            "bad-string-negotiate-subject-space",
            with(nq.clone(), |b| b[96 + 8] = b' '),
            BadString,
        ),
        (
            "too-many-extensions",
            with(b.clone(), |b| b[77] = 17),
            TooManyExtensions,
        ),
        (
            "too-many-tensors",
            with(b.clone(), |b| b[78] = 17),
            TooManyTensors,
        ),
        (
            "too-many-tensors-in-ping",
            with(ping.clone(), |b| b[78] = 1),
            TooManyTensors,
        ),
        (
            "too-many-tensors-request-relabelled-error",
            with(b.clone(), |b| b[5] = Kind::Error as u8),
            TooManyTensors,
        ),
        ("bad-dtype-0", with(b.clone(), |b| b[TA] = 0), BadDType),
        (
            "bad-dtype-8-string",
            with(b.clone(), |b| b[TA] = 8),
            BadDType,
        ),
        ("bad-dtype-17", with(b.clone(), |b| b[TA] = 17), BadDType),
        ("bad-rank-9", with(b.clone(), |b| b[TA + 1] = 9), BadRank),
        (
            "size-overflow-dim-u64-max",
            with(b.clone(), |b| put_u64(b, TA + 12, u64::MAX)),
            SizeOverflow,
        ),
        (
            "size-overflow-over-frame-limit",
            with(b.clone(), |b| put_u64(b, TA + 12, 1 << 27)),
            SizeOverflow,
        ),
        (
            "size-overflow-dim-2-63-with-zero",
            with(zero_dim, |b| put_u64(b, 96 + 12 + 8, 1 << 63)),
            SizeOverflow,
        ),
        (
            "bad-tensor-len",
            with(b.clone(), |b| put_u32(b, TA + 8, 12)),
            BadTensorLen,
        ),
        (
            "bad-tensor-len-dim-changed",
            with(b.clone(), |b| put_u64(b, TA + 12, 3)),
            BadTensorLen,
        ),
        (
            "misaligned-193",
            with(b.clone(), |b| put_u32(b, TA + 4, 193)),
            Misaligned,
        ),
        (
            "misaligned-224",
            with(b.clone(), |b| put_u32(b, TA + 4, 224)),
            Misaligned,
        ),
        (
            "out-of-bounds-inside-header",
            with(b.clone(), |b| put_u32(b, TA + 4, 128)),
            OutOfBounds,
        ),
        (
            "out-of-bounds-past-frame",
            with(b.clone(), |b| put_u32(b, TB + 4, 320)),
            OutOfBounds,
        ),
        (
            "out-of-bounds-offset-wraps",
            with(b.clone(), |b| put_u32(b, TB + 4, 0xffff_ffc0)),
            OutOfBounds,
        ),
        (
            "overlap-same-offset",
            with(b.clone(), |b| put_u32(b, TB + 4, 192)),
            Overlap,
        ),
        (
            "overlap-out-of-order",
            with(b.clone(), |b| {
                b.resize(FRAME_LEN + 64, 0);
                put_u32(b, 32, (FRAME_LEN + 64 - HEADER_LEN) as u32);
                put_u32(b, TA + 4, 256);
                put_u32(b, TB + 4, 192);
            }),
            Overlap,
        ),
        (
            "bad-body-ping-with-payload",
            with(ping.clone(), |b| {
                b.push(0);
                put_u32(b, 32, 1);
            }),
            BadBody,
        ),
        (
            "bad-body-error-message-len-long",
            with(err.clone(), |b| put_u16(b, 96 + 2, 5)),
            BadBody,
        ),
        (
            "bad-body-error-message-len-over-limit",
            with(err.clone(), |b| put_u16(b, 96 + 2, 257)),
            BadBody,
        ),
        (
            "bad-body-error-shorter-than-fixed-part",
            with(err.clone(), |b| {
                b.truncate(96 + 3);
                put_u32(b, 32, 3);
            }),
            BadBody,
        ),
        (
            "bad-body-negotiate-subject-empty",
            with(nq.clone(), |b| b[96 + 4] = 0),
            BadBody,
        ),
        (
            "bad-body-negotiate-subject-len-long",
            with(nq.clone(), |b| b[96 + 4] = 5),
            BadBody,
        ),
        (
            "bad-body-schema-type-0",
            with(ns.clone(), |b| b[96 + 12] = 0),
            BadBody,
        ),
        (
            "bad-body-schema-type-5",
            with(ns.clone(), |b| b[96 + 12] = 5),
            BadBody,
        ),
        (
            "bad-body-schema-len-mismatch",
            with(ns.clone(), |b| put_u32(b, 96 + 16, 3)),
            BadBody,
        ),
        (
            "bad-body-schema-len-max",
            with(ns, |b| put_u32(b, 96 + 16, u32::MAX)),
            BadBody,
        ),
    ]
    .into_iter()
    .chain(invalid_stream_cases())
    .collect()
}

/// A request with one stream header (OPEN, stream 7, seq 0) whose value
/// starts at offset 96 + 2 ("m" "1") + 2 + 13 = 113.
fn stream_base(kind: Kind) -> Vec<u8> {
    let v = StreamHeader {
        stream_id: 7,
        flags: stream_flags::OPEN,
        ..StreamHeader::default()
    }
    .to_bytes();
    emit(&FrameRepr {
        kind,
        model: "m",
        model_version: "1",
        extensions: &[ExtRepr::stream(&v)],
        ..FrameRepr::default()
    })
}

const SV: usize = 96 + 2 + 2 + 13;

/// Every rule of the stream header (docs/wire.md, "Stream header").
fn invalid_stream_cases() -> Vec<(&'static str, Vec<u8>, Error)> {
    use Error::BadStream;
    use stream_flags::*;
    let b = stream_base(Kind::Request);
    let resp = stream_base(Kind::Response);
    let flags = |f: u8| with(b.clone(), |b| b[SV + 12] = f);
    // A value of 23 bytes: the header shrinks by one, the frame too.
    let short = {
        let mut v = [0u8; 23];
        v[0] = 7;
        v[12] = OPEN;
        // The builder refuses it: build under another key, then rename.
        let f = emit(&FrameRepr {
            model: "m",
            model_version: "1",
            extensions: &[ExtRepr {
                key: "x".repeat(13).leak(),
                value: &v,
            }],
            ..FrameRepr::default()
        });
        with(f, |b| {
            b[SV - 13..SV].copy_from_slice(STREAM_EXT_KEY.as_bytes())
        })
    };
    let twice = {
        let v = StreamHeader {
            stream_id: 7,
            flags: OPEN,
            ..StreamHeader::default()
        }
        .to_bytes();
        let e = ExtRepr::stream(&v);
        // The builder refuses two; write one, then copy it in by hand.
        let one = emit(&FrameRepr {
            extensions: &[
                e,
                ExtRepr {
                    key: "x".repeat(13).leak(),
                    value: &v,
                },
            ],
            ..FrameRepr::default()
        });
        with(one, |b| {
            let second = 96 + 2 + 13 + 24;
            b[second + 2..second + 2 + 13].copy_from_slice(STREAM_EXT_KEY.as_bytes());
        })
    };
    let ping = with(
        emit(&FrameRepr {
            kind: Kind::Ping,
            model: "m",
            model_version: "1",
            extensions: &[ExtRepr {
                key: "x".repeat(13).leak(),
                value: &StreamHeader {
                    stream_id: 7,
                    flags: OPEN,
                    ..StreamHeader::default()
                }
                .to_bytes(),
            }],
            ..FrameRepr::default()
        }),
        |b| b[SV - 13..SV].copy_from_slice(STREAM_EXT_KEY.as_bytes()),
    );
    vec![
        ("bad-stream-value-23-bytes", short, BadStream),
        ("bad-stream-twice", twice, BadStream),
        ("bad-stream-in-ping", ping, BadStream),
        (
            "bad-stream-id-zero",
            with(b.clone(), |b| b[SV..SV + 8].fill(0)),
            BadStream,
        ),
        (
            "bad-stream-reserved",
            with(b.clone(), |b| b[SV + 23] = 1),
            BadStream,
        ),
        ("bad-stream-no-flag", flags(0), BadStream),
        ("bad-stream-end-alone", flags(END), BadStream),
        (
            "bad-stream-open-continue",
            flags(OPEN | CONTINUE),
            BadStream,
        ),
        ("bad-stream-open-cancel", flags(OPEN | CANCEL), BadStream),
        ("bad-stream-cancel-end", flags(CANCEL | END), BadStream),
        ("bad-stream-flag-bit-4", flags(OPEN | 0x10), BadStream),
        (
            "bad-stream-reason-in-request",
            with(b.clone(), |b| {
                b[SV + 12] = OPEN | END;
                b[SV + 13] = 1;
            }),
            BadStream,
        ),
        (
            "bad-stream-reason-without-end",
            with(resp.clone(), |b| b[SV + 13] = 1),
            BadStream,
        ),
        (
            "bad-stream-reason-7",
            with(resp, |b| {
                b[SV + 12] = CONTINUE | END;
                b[SV + 13] = 7;
            }),
            BadStream,
        ),
    ]
}

/// The vector file, as a value.
pub fn vectors() -> VectorFile {
    let valid = valid_cases()
        .into_iter()
        .map(|c| Valid {
            frame: doc_of(&c.bytes, c.key.as_deref()),
            hex: hex(&c.bytes),
            name: c.name,
            source: c.source,
        })
        .collect();
    let invalid = invalid_cases()
        .into_iter()
        .map(|(name, bytes, error)| {
            assert_eq!(
                Frame::new_checked(&bytes[..]).err(),
                Some(error),
                "invalid vector {name}"
            );
            Invalid {
                name: name.to_string(),
                hex: hex(&bytes),
                error: format!("{error:?}"),
            }
        })
        .collect();
    VectorFile {
        format: FORMAT,
        wire_version: sluice_wire::VERSION,
        valid,
        invalid,
    }
}

fn json<T: Serialize>(x: &T) -> String {
    serde_json::to_string(x).expect("vectors serialize")
}

/// The file's text: one vector per line, so that a change shows as the
/// lines of the vectors it touches.
pub fn render(v: &VectorFile) -> String {
    let valid: Vec<String> = v.valid.iter().map(|x| format!("    {}", json(x))).collect();
    let invalid: Vec<String> = v
        .invalid
        .iter()
        .map(|x| format!("    {}", json(x)))
        .collect();
    format!(
        "{{\n  \"format\": {},\n  \"wire_version\": {},\n  \"valid\": [\n{}\n  ],\n  \"invalid\": [\n{}\n  ]\n}}\n",
        v.format,
        v.wire_version,
        valid.join(",\n"),
        invalid.join(",\n")
    )
}
