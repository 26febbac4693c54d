//! Property tests: any valid `FrameRepr` round-trips through `emit` and
//! `Frame::new_checked` with every getter returning what was put in, and no
//! mutation of a valid frame makes the parser panic or accept a frame that
//! breaks the format's invariants.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use proptest::prelude::*;
use sluice_wire::{
    BodyRepr, DType, Error, ErrorCode, ExtRepr, FIXED_HEADER_LEN, Frame, FrameRepr, Kind,
    SchemaType, TENSOR_ALIGN, TenantKey, TensorRepr, TraceContext, limits,
};

/// Bytes the test buffer is filled with before `emit`, so that reserved
/// (`data: None`) tensor regions can be told apart.
const PREFILL: u8 = 0xa5;

#[derive(Debug, Clone)]
struct OwnedTensor {
    name: String,
    dtype: DType,
    dims: Vec<u64>,
    data: Vec<u8>,
    /// Whether the builder copies `data` in or only reserves the region.
    copy: bool,
}

#[derive(Debug, Clone)]
enum OwnedBody {
    None,
    Error {
        code: ErrorCode,
        message: String,
    },
    NegotiateRequest {
        subject: String,
        version_hint: u32,
    },
    NegotiateResponse {
        schema_id: u32,
        version: u32,
        ttl_ms: u32,
        schema_type: SchemaType,
        schema: Vec<u8>,
    },
}

#[derive(Debug, Clone)]
struct Owned {
    kind: Kind,
    flags: u16,
    request_id: u64,
    tenant_id: u32,
    deadline_us: u64,
    schema_id: u32,
    schema_version: u32,
    token_count: u32,
    trace: TraceContext,
    strings: [String; 4],
    exts: Vec<(String, Vec<u8>)>,
    tensors: Vec<OwnedTensor>,
    body: OwnedBody,
}

impl Owned {
    /// Header length the spec gives for this frame.
    fn header_len(&self) -> usize {
        FIXED_HEADER_LEN
            + self.strings.iter().map(String::len).sum::<usize>()
            + self
                .exts
                .iter()
                .map(|(k, v)| 2 + k.len() + v.len())
                .sum::<usize>()
            + self
                .tensors
                .iter()
                .map(|t| 12 + 8 * t.dims.len() + t.name.len())
                .sum::<usize>()
    }
}

fn token(min: usize, max: usize) -> impl Strategy<Value = String> {
    proptest::string::string_regex(&format!("[!-~]{{{min},{max}}}")).unwrap()
}

fn kinds() -> impl Strategy<Value = Kind> {
    prop::sample::select(vec![
        Kind::Request,
        Kind::Response,
        Kind::Error,
        Kind::NegotiateRequest,
        Kind::NegotiateResponse,
        Kind::Ping,
        Kind::Pong,
    ])
}

fn dims() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(
        prop_oneof![6 => 1u64..=4, 1 => Just(0u64), 1 => 5u64..=32],
        0..=limits::RANK_MAX,
    )
    .prop_filter("small tensors", |d| d.iter().product::<u64>() <= 2048)
}

fn tensor() -> impl Strategy<Value = OwnedTensor> {
    (
        token(1, limits::TENSOR_NAME_LEN_MAX),
        prop::sample::select(DType::ALL),
        dims(),
        any::<bool>(),
    )
        .prop_flat_map(|(name, dtype, dims, copy)| {
            let len = dtype.byte_len(&dims).unwrap();
            prop::collection::vec(any::<u8>(), len).prop_map(move |data| OwnedTensor {
                name: name.clone(),
                dtype,
                dims: dims.clone(),
                data,
                copy,
            })
        })
}

fn ext() -> impl Strategy<Value = (String, Vec<u8>)> {
    let value = prop_oneof![
        4 => prop::collection::vec(any::<u8>(), 0..=16),
        1 => prop::collection::vec(any::<u8>(), 0..=limits::EXT_VALUE_LEN_MAX),
    ];
    (token(1, limits::EXT_KEY_LEN_MAX), value)
}

fn body(kind: Kind) -> BoxedStrategy<OwnedBody> {
    match kind {
        Kind::Error => (prop::sample::select(ErrorCode::ALL), "\\PC{0,300}")
            .prop_map(|(code, message)| OwnedBody::Error { code, message })
            .boxed(),
        Kind::NegotiateRequest => (token(1, limits::SUBJECT_LEN_MAX), any::<u32>())
            .prop_map(|(subject, version_hint)| OwnedBody::NegotiateRequest {
                subject,
                version_hint,
            })
            .boxed(),
        Kind::NegotiateResponse => (
            any::<(u32, u32, u32)>(),
            prop::sample::select(vec![
                SchemaType::Avro,
                SchemaType::Protobuf,
                SchemaType::Json,
                SchemaType::Tensor,
            ]),
            prop::collection::vec(any::<u8>(), 0..=600),
        )
            .prop_map(|((schema_id, version, ttl_ms), schema_type, schema)| {
                OwnedBody::NegotiateResponse {
                    schema_id,
                    version,
                    ttl_ms,
                    schema_type,
                    schema,
                }
            })
            .boxed(),
        _ => Just(OwnedBody::None).boxed(),
    }
}

fn frame() -> impl Strategy<Value = Owned> {
    kinds().prop_flat_map(|kind| {
        let tensors = if kind.has_tensors() {
            prop::collection::vec(tensor(), 0..=limits::TENSOR_COUNT_MAX).boxed()
        } else {
            Just(Vec::new()).boxed()
        };
        let ids = (
            0u16..=3,
            any::<u64>(),
            any::<u32>(),
            any::<u64>(),
            any::<(u32, u32, u32)>(),
        );
        let trace = (any::<[u8; 16]>(), any::<[u8; 8]>(), any::<u8>()).prop_map(
            |(trace_id, parent_id, flags)| TraceContext {
                trace_id,
                parent_id,
                flags,
            },
        );
        let strings = (
            token(0, limits::MODEL_NAME_LEN_MAX),
            token(0, limits::MODEL_VERSION_LEN_MAX),
            token(0, limits::ADAPTER_LEN_MAX),
            token(0, limits::INTENT_LEN_MAX),
        );
        (
            ids,
            trace,
            strings,
            prop::collection::vec(ext(), 0..=limits::EXT_COUNT_MAX),
            tensors,
            body(kind),
        )
            .prop_map(move |(ids, trace, s, exts, tensors, body)| {
                let (
                    flags,
                    request_id,
                    tenant_id,
                    deadline_us,
                    (schema_id, schema_version, token_count),
                ) = ids;
                Owned {
                    kind,
                    flags,
                    request_id,
                    tenant_id,
                    deadline_us,
                    schema_id,
                    schema_version,
                    token_count,
                    trace,
                    strings: [s.0, s.1, s.2, s.3],
                    exts,
                    tensors,
                    body,
                }
            })
    })
}

/// Builds the repr over `o` and hands it to `f`.
fn with_repr<R>(o: &Owned, f: impl FnOnce(&FrameRepr<'_>) -> R) -> R {
    let exts: Vec<ExtRepr<'_>> = o
        .exts
        .iter()
        .map(|(k, v)| ExtRepr { key: k, value: v })
        .collect();
    let tensors: Vec<TensorRepr<'_>> = o
        .tensors
        .iter()
        .map(|t| TensorRepr {
            name: &t.name,
            dtype: t.dtype,
            dims: &t.dims,
            data: t.copy.then_some(&t.data[..]),
        })
        .collect();
    let body = match &o.body {
        OwnedBody::None => BodyRepr::None,
        OwnedBody::Error { code, message } => BodyRepr::Error {
            code: *code,
            message,
        },
        OwnedBody::NegotiateRequest {
            subject,
            version_hint,
        } => BodyRepr::NegotiateRequest {
            subject,
            version_hint: *version_hint,
        },
        OwnedBody::NegotiateResponse {
            schema_id,
            version,
            ttl_ms,
            schema_type,
            schema,
        } => BodyRepr::NegotiateResponse {
            schema_id: *schema_id,
            version: *version,
            ttl_ms: *ttl_ms,
            schema_type: *schema_type,
            schema,
        },
    };
    let repr = FrameRepr {
        kind: o.kind,
        flags: o.flags,
        request_id: o.request_id,
        tenant_id: o.tenant_id,
        deadline_us: o.deadline_us,
        schema_id: o.schema_id,
        schema_version: o.schema_version,
        token_count: o.token_count,
        trace: o.trace,
        model: &o.strings[0],
        model_version: &o.strings[1],
        adapter: &o.strings[2],
        intent: &o.strings[3],
        extensions: &exts,
        tensors: &tensors,
        body,
    };
    f(&repr)
}

/// Emits `o`; `None` when its header exceeds the limit (checked to be the
/// builder's answer too).
fn emit(o: &Owned) -> Option<Vec<u8>> {
    with_repr(o, |repr| {
        if o.header_len() > limits::HEADER_LEN_MAX {
            assert_eq!(repr.layout(), Err(Error::BadHeaderLen));
            return None;
        }
        let layout = repr.layout().expect("valid repr lays out");
        let mut buf = vec![PREFILL; layout.frame_len];
        assert_eq!(repr.emit(&mut buf), Ok(layout));
        Some(buf)
    })
}

/// Reads everything a receiver can read from `bytes`; when the frame is
/// accepted, checks the invariants the spec promises of an accepted frame.
fn exercise(bytes: &[u8]) {
    let Ok(f) = Frame::new_checked(bytes) else {
        return;
    };
    let header_len = f.header_len();
    assert!((FIXED_HEADER_LEN..=limits::HEADER_LEN_MAX).contains(&header_len));
    assert_eq!(f.frame_len(), bytes.len());
    assert!(bytes.len() <= limits::FRAME_LEN_MAX);
    assert_eq!(f.version(), 1);
    let _ = (
        f.kind(),
        f.flags(),
        f.tenant_id(),
        f.request_id(),
        f.deadline_us(),
    );
    let _ = (
        f.schema_id(),
        f.schema_version(),
        f.token_count(),
        f.trace(),
        f.payload(),
    );
    for s in [f.model(), f.model_version(), f.adapter(), f.intent()] {
        assert!(s.bytes().all(|c| (0x21..=0x7e).contains(&c)));
    }
    assert!(f.model().len() <= limits::MODEL_NAME_LEN_MAX);
    let exts: Vec<_> = f.extensions().collect();
    assert_eq!(exts.len(), bytes[77] as usize);
    for e in &exts {
        assert!(!e.key.is_empty() && e.key.len() <= limits::EXT_KEY_LEN_MAX);
        assert!(f.extension(e.key).is_some());
    }
    let tensors: Vec<_> = f.tensors().collect();
    assert_eq!(tensors.len(), f.tensor_count());
    let mut prev_end = header_len;
    for t in &tensors {
        assert_eq!(t.data_offset % TENSOR_ALIGN, 0);
        assert!(t.data_offset >= prev_end);
        assert!(t.data_range().end <= bytes.len());
        assert_eq!(Some(t.data_len), t.dtype.byte_len(t.dims()));
        assert!(t.dims().len() <= limits::RANK_MAX);
        assert_eq!(f.tensor_data(t).len(), t.data_len);
        assert_eq!(f.tensor(t.name).map(|x| x.name), Some(t.name));
        prev_end = t.data_range().end;
    }
    if !f.kind().has_tensors() {
        assert!(tensors.is_empty());
    }
    match f.kind() {
        Kind::Error => assert!(f.error_body().is_some()),
        Kind::NegotiateRequest => assert!(f.negotiate_request().is_some()),
        Kind::NegotiateResponse => assert!(f.negotiate_response().is_some()),
        Kind::Ping | Kind::Pong => assert_eq!(f.payload_len(), 0),
        Kind::Request | Kind::Response => {}
    }
    let key = TenantKey::new(b"k");
    let tag = key.tag(&f);
    assert_eq!(key.verify(&f), f.auth_tag() == tag);
}

#[derive(Debug, Clone)]
enum Mutation {
    Set(usize, u8),
    Xor(usize, u8),
    Truncate(usize),
    Append(Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        8 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Mutation::Set(i, v)),
        8 => (any::<usize>(), 1u8..).prop_map(|(i, v)| Mutation::Xor(i, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => prop::collection::vec(any::<u8>(), 1..8).prop_map(Mutation::Append),
    ]
}

/// Mutations land in the header most of the time: that is where the checks are.
fn apply(b: &mut Vec<u8>, m: &Mutation) {
    let header = b.len().clamp(1, 256);
    match m {
        Mutation::Set(i, v) if !b.is_empty() => {
            let i = if i % 4 == 0 {
                i % b.len()
            } else {
                i % header.min(b.len())
            };
            b[i] = *v;
        }
        Mutation::Xor(i, v) if !b.is_empty() => {
            let i = if i % 4 == 0 {
                i % b.len()
            } else {
                i % header.min(b.len())
            };
            b[i] ^= *v;
        }
        Mutation::Truncate(n) => b.truncate(n % (b.len() + 1)),
        Mutation::Append(bytes) => b.extend_from_slice(bytes),
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn round_trip(o in frame()) {
        let Some(buf) = emit(&o) else { return Ok(()) };
        let f = Frame::new_checked(&buf[..]).expect("emitted frame parses");
        prop_assert_eq!(f.kind(), o.kind);
        prop_assert_eq!(f.version(), 1);
        prop_assert_eq!(f.flags(), o.flags);
        prop_assert_eq!(f.request_id(), o.request_id);
        prop_assert_eq!(f.tenant_id(), o.tenant_id);
        prop_assert_eq!(f.deadline_us(), o.deadline_us);
        prop_assert_eq!(f.schema_id(), o.schema_id);
        prop_assert_eq!(f.schema_version(), o.schema_version);
        prop_assert_eq!(f.token_count(), o.token_count);
        prop_assert_eq!(f.trace(), o.trace);
        prop_assert_eq!(f.header_len(), o.header_len());
        prop_assert_eq!(f.model(), o.strings[0].as_str());
        prop_assert_eq!(f.model_version(), o.strings[1].as_str());
        prop_assert_eq!(f.adapter(), o.strings[2].as_str());
        prop_assert_eq!(f.intent(), o.strings[3].as_str());
        prop_assert!(buf[80..96].iter().all(|&b| b == 0), "unsigned tag is zero");

        let exts: Vec<(String, Vec<u8>)> =
            f.extensions().map(|e| (e.key.to_string(), e.value.to_vec())).collect();
        prop_assert_eq!(&exts, &o.exts);
        for (k, _) in &o.exts {
            let first = o.exts.iter().find(|(k2, _)| k2 == k).map(|(_, v)| v.as_slice());
            prop_assert_eq!(f.extension(k), first);
        }

        let tensors: Vec<_> = f.tensors().collect();
        prop_assert_eq!(tensors.len(), o.tensors.len());
        let mut end = o.header_len();
        for (t, want) in tensors.iter().zip(&o.tensors) {
            prop_assert_eq!(t.name, want.name.as_str());
            prop_assert_eq!(t.dtype, want.dtype);
            prop_assert_eq!(t.dims(), &want.dims[..]);
            prop_assert_eq!(t.data_len, want.data.len());
            // The builder places each tensor at the next 64-byte boundary.
            prop_assert_eq!(t.data_offset, end.div_ceil(TENSOR_ALIGN) * TENSOR_ALIGN);
            prop_assert!(buf[end..t.data_offset].iter().all(|&b| b == 0), "padding is zero");
            let data = f.tensor_data(t);
            if want.copy {
                prop_assert_eq!(data, &want.data[..]);
            } else {
                prop_assert!(data.iter().all(|&b| b == PREFILL), "reserved region untouched");
            }
            let first = o.tensors.iter().find(|x| x.name == want.name).unwrap();
            prop_assert_eq!(f.tensor(&want.name).map(|x| x.dims().to_vec()), Some(first.dims.clone()));
            end = t.data_range().end;
        }

        match &o.body {
            OwnedBody::None => {
                prop_assert_eq!(f.frame_len(), end);
                prop_assert!(f.error_body().is_none() && f.negotiate_request().is_none());
            }
            OwnedBody::Error { code, message } => {
                let b = f.error_body().expect("error body");
                prop_assert_eq!(b.code(), Some(*code));
                // Long messages are cut at a character boundary, never split.
                prop_assert!(message.starts_with(b.message));
                prop_assert!(b.message.len() <= limits::ERROR_MESSAGE_LEN_MAX);
                if message.len() <= limits::ERROR_MESSAGE_LEN_MAX {
                    prop_assert_eq!(b.message, message.as_str());
                } else {
                    prop_assert!(b.message.len() > limits::ERROR_MESSAGE_LEN_MAX - 4);
                }
            }
            OwnedBody::NegotiateRequest { subject, version_hint } => {
                let b = f.negotiate_request().expect("negotiate request body");
                prop_assert_eq!(b.subject, subject.as_str());
                prop_assert_eq!(b.version_hint, *version_hint);
            }
            OwnedBody::NegotiateResponse { schema_id, version, ttl_ms, schema_type, schema } => {
                let b = f.negotiate_response().expect("negotiate response body");
                prop_assert_eq!(b.schema_id, *schema_id);
                prop_assert_eq!(b.version, *version);
                prop_assert_eq!(b.ttl_ms, *ttl_ms);
                prop_assert_eq!(b.schema_type, *schema_type);
                prop_assert_eq!(b.schema, &schema[..]);
            }
        }
        exercise(&buf);
    }

    #[test]
    fn emit_into_small_buffer_fails_cleanly(o in frame(), short in 1usize..=4096) {
        let Some(full) = emit(&o) else { return Ok(()) };
        let len = full.len().saturating_sub(short);
        let mut small = vec![0x5au8; len];
        prop_assert_eq!(with_repr(&o, |r| r.emit(&mut small)), Err(Error::BufferTooSmall));
        prop_assert!(small.iter().all(|&b| b == 0x5a), "nothing written on failure");
        // A larger buffer gets the frame at its start and nothing after it.
        let mut big = vec![0x5au8; full.len() + 64];
        big[..full.len()].fill(PREFILL);
        prop_assert!(with_repr(&o, |r| r.emit(&mut big)).is_ok());
        prop_assert_eq!(&big[..full.len()], &full[..]);
        prop_assert!(big[full.len()..].iter().all(|&b| b == 0x5a));
    }

    #[test]
    fn signed_frames_verify(o in frame(), key in prop::collection::vec(any::<u8>(), 0..100)) {
        let Some(mut buf) = emit(&o) else { return Ok(()) };
        let k = TenantKey::new(&key);
        let mut f = Frame::new_checked(&mut buf[..]).unwrap();
        k.sign(&mut f);
        prop_assert!(f.flags() & sluice_wire::flags::AUTHENTICATED != 0);
        let f = Frame::new_checked(&buf[..]).expect("signed frame parses");
        prop_assert!(k.verify(&f));
        let mut other = key.clone();
        other.push(1);
        prop_assert!(!TenantKey::new(&other).verify(&f));
    }

    #[test]
    fn mutated_frames_never_panic(o in frame(), muts in prop::collection::vec(mutation(), 1..6)) {
        let Some(mut buf) = emit(&o) else { return Ok(()) };
        for m in &muts {
            apply(&mut buf, m);
        }
        exercise(&buf);
    }

    #[test]
    fn random_bytes_never_panic(mut bytes in prop::collection::vec(any::<u8>(), 0..400), fix in any::<bool>()) {
        if fix && bytes.len() >= 12 {
            // A plausible fixed header prefix gets the parser past the first checks.
            bytes[..4].copy_from_slice(b"SLCE");
            bytes[4] = 1;
            bytes[5] = bytes[5] % 7 + 1;
            bytes[6..8].fill(0);
            let hl = (bytes.len().min(4096) as u16).max(96);
            bytes[8..10].copy_from_slice(&hl.to_le_bytes());
            bytes[10..12].fill(0);
        }
        exercise(&bytes);
    }
}
