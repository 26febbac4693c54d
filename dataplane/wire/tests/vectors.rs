//! The conformance vectors (`docs/vectors/frames.json`, format in
//! docs/vectors/README.md) against this crate: the committed file is what
//! the generator makes today; every valid vector parses into its fields and
//! rebuilds from them byte for byte; every invalid vector fails with its
//! error; and the file covers every error, dtype, kind and error code.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;
mod vectors_gen;

use std::collections::BTreeSet;
use std::path::PathBuf;

use sluice_wire::{
    BodyRepr, DType, Error, ErrorCode, ExtRepr, FIXED_HEADER_LEN, Frame, FrameRepr, SchemaType,
    TenantKey, TensorRepr, TraceContext,
};
use vectors_gen::{BodyDoc, FrameDoc, VectorFile, doc_of, kind_from_name, unhex};

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/vectors/frames.json")
}

fn committed() -> VectorFile {
    let text = std::fs::read_to_string(path()).expect("docs/vectors/frames.json");
    serde_json::from_str(&text).expect("frames.json parses")
}

#[test]
fn committed_file_is_current() {
    let want = vectors_gen::render(&vectors_gen::vectors());
    let have = std::fs::read_to_string(path()).unwrap_or_default();
    assert!(
        have == want,
        "docs/vectors/frames.json is stale; regenerate with \
         `cargo run -p sluice-wire --example gen-vectors > docs/vectors/frames.json`"
    );
}

#[test]
fn names_are_unique_kebab_case() {
    let v = committed();
    let mut seen = BTreeSet::new();
    let names = v.valid.iter().map(|x| &x.name);
    for name in names.chain(v.invalid.iter().map(|x| &x.name)) {
        assert!(seen.insert(name.clone()), "name {name} twice");
        assert!(
            name.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-'),
            "name {name} is not kebab-case"
        );
    }
    assert_eq!((v.format, v.wire_version), (1, 1));
}

#[test]
fn every_valid_vector_parses_into_its_fields() {
    for v in committed().valid {
        let bytes = unhex(&v.hex);
        let key = v.frame.auth.as_ref().map(|a| unhex(&a.tenant_key_hex));
        assert_eq!(doc_of(&bytes, key.as_deref()), v.frame, "vector {}", v.name);
        // The u64 fields are decimal strings of the header values.
        let f = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(f.request_id().to_string(), v.frame.request_id);
        assert_eq!(f.deadline_us().to_string(), v.frame.deadline_us);
        if let Some(a) = &v.frame.auth {
            assert_eq!(hex_of(f.auth_tag()), a.tag_hex, "vector {}", v.name);
        } else if f.flags() & sluice_wire::flags::AUTHENTICATED == 0 {
            assert_eq!(f.auth_tag(), &[0; 16], "vector {}", v.name);
        }
    }
}

#[test]
fn every_valid_vector_rebuilds_byte_exactly() {
    for v in committed().valid {
        assert_eq!(
            vectors_gen::hex(&rebuild(&v.frame)),
            v.hex,
            "vector {}",
            v.name
        );
    }
}

#[test]
fn every_invalid_vector_gives_its_error() {
    for v in committed().invalid {
        let got = Frame::new_checked(&unhex(&v.hex)[..]).err();
        assert_eq!(
            got.map(|e| format!("{e:?}")),
            Some(v.error.clone()),
            "vector {}",
            v.name
        );
    }
}

/// Every parse error of the crate has at least one invalid vector.
#[test]
fn every_parse_error_has_a_vector() {
    use Error::*;
    // Exhaustive: a new variant fails to compile here until it is listed.
    let parse_side = |e: Error| match e {
        Truncated | BadMagic | UnsupportedVersion | UnknownKind | Reserved | BadHeaderLen
        | FieldTooLong | BadString | TooManyExtensions | TooManyTensors | BadDType | BadRank
        | SizeOverflow | BadTensorLen | Misaligned | OutOfBounds | Overlap | BadBody | TooLarge
        | TrailingBytes | BadStream => true,
        BufferTooSmall => false,
    };
    let all = [
        Truncated,
        BadMagic,
        UnsupportedVersion,
        UnknownKind,
        Reserved,
        BadHeaderLen,
        FieldTooLong,
        BadString,
        TooManyExtensions,
        TooManyTensors,
        BadDType,
        BadRank,
        SizeOverflow,
        BadTensorLen,
        Misaligned,
        OutOfBounds,
        Overlap,
        BadBody,
        TooLarge,
        TrailingBytes,
        BufferTooSmall,
        BadStream,
    ];
    let have: BTreeSet<String> = committed().invalid.into_iter().map(|v| v.error).collect();
    for e in all.into_iter().filter(|&e| parse_side(e)) {
        assert!(
            have.contains(&format!("{e:?}")),
            "no invalid vector for {e:?}"
        );
    }
}

/// Every dtype, kind and error code appears in a valid vector.
#[test]
fn valid_vectors_cover_dtypes_kinds_and_codes() {
    let v = committed();
    let dtypes: BTreeSet<u8> = v
        .valid
        .iter()
        .flat_map(|x| x.frame.tensors.iter().map(|t| t.dtype))
        .collect();
    for d in DType::ALL {
        assert!(dtypes.contains(&(*d as u8)), "no vector with dtype {d:?}");
    }
    let kinds: BTreeSet<&str> = v.valid.iter().map(|x| x.frame.kind.as_str()).collect();
    assert_eq!(kinds.len(), 7, "{kinds:?}");
    let codes: BTreeSet<u16> = v
        .valid
        .iter()
        .filter_map(|x| match &x.frame.body {
            Some(BodyDoc::Error(e)) => Some(e.code),
            _ => None,
        })
        .collect();
    for c in ErrorCode::ALL {
        assert!(codes.contains(&(*c as u16)), "no vector with code {c:?}");
    }
    assert!(v.valid.iter().any(|x| x.frame.auth.is_some()));
}

fn hex_of(b: &[u8]) -> String {
    vectors_gen::hex(b)
}

fn array<const N: usize>(s: &str) -> [u8; N] {
    unhex(s).try_into().expect("hex of the right length")
}

/// Builds a frame from its decoded fields with the crate's builder, as every
/// implementation must (docs/vectors/README.md, "Rebuild").
fn rebuild(doc: &FrameDoc) -> Vec<u8> {
    assert_eq!(doc.version, sluice_wire::VERSION);
    let values: Vec<Vec<u8>> = doc.extensions.iter().map(|e| unhex(&e.value_hex)).collect();
    let extensions: Vec<ExtRepr<'_>> = doc
        .extensions
        .iter()
        .zip(&values)
        .map(|(e, value)| ExtRepr { key: &e.key, value })
        .collect();
    let data: Vec<Vec<u8>> = doc.tensors.iter().map(|t| unhex(&t.data_hex)).collect();
    let tensors: Vec<TensorRepr<'_>> = doc
        .tensors
        .iter()
        .zip(&data)
        .map(|(t, d)| TensorRepr {
            name: &t.name,
            dtype: DType::from_u8(t.dtype).expect("known dtype"),
            dims: &t.dims,
            data: Some(d),
        })
        .collect();
    let schema: Vec<u8>;
    // A code this build does not know is patched in after the build: the
    // builder takes only known codes.
    let mut raw_code = None;
    let body = match &doc.body {
        None => BodyRepr::None,
        Some(BodyDoc::Error(e)) => BodyRepr::Error {
            code: ErrorCode::from_u16(e.code).unwrap_or_else(|| {
                raw_code = Some(e.code);
                ErrorCode::Internal
            }),
            message: &e.message,
        },
        Some(BodyDoc::NegotiateRequest(n)) => BodyRepr::NegotiateRequest {
            subject: &n.subject,
            version_hint: n.version_hint,
        },
        Some(BodyDoc::NegotiateResponse(n)) => {
            schema = unhex(&n.schema_hex);
            BodyRepr::NegotiateResponse {
                schema_id: n.schema_id,
                version: n.version,
                ttl_ms: n.ttl_ms,
                schema_type: SchemaType::from_u8(n.schema_type).expect("schema type"),
                schema: &schema,
            }
        }
    };
    let repr = FrameRepr {
        kind: kind_from_name(&doc.kind),
        flags: doc.flags,
        request_id: doc.request_id.parse().expect("u64 string"),
        tenant_id: doc.tenant_id,
        deadline_us: doc.deadline_us.parse().expect("u64 string"),
        schema_id: doc.schema_id,
        schema_version: doc.schema_version,
        token_count: doc.token_count,
        trace: TraceContext {
            trace_id: array(&doc.trace.trace_id),
            parent_id: array(&doc.trace.span_id),
            flags: doc.trace.flags,
        },
        model: &doc.model,
        model_version: &doc.model_version,
        adapter: &doc.adapter,
        intent: &doc.intent,
        extensions: &extensions,
        tensors: &tensors,
        body,
    };
    // The stream header travels in `extensions`; its decoded form must
    // say the same.
    if let Some(st) = &doc.stream {
        let v = values
            .iter()
            .zip(&doc.extensions)
            .find(|(_, e)| e.key == sluice_wire::STREAM_EXT_KEY)
            .map(|(v, _)| v.clone())
            .expect("a stream doc has its extension");
        assert_eq!(v, st.header().to_bytes());
    }
    // So does the sender header's (docs/wire.md, "Replay windows").
    let sender = values
        .iter()
        .zip(&doc.extensions)
        .find(|(_, e)| e.key == sluice_wire::SENDER_EXT_KEY)
        .and_then(|(v, _)| sluice_wire::sender_of(v));
    assert_eq!(sender.map(|id| id.to_string()), doc.sender_id, "sender_id");
    let layout = repr.layout().expect("vector fields build");
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf).expect("vector emits");
    for (i, t) in doc.tensors.iter().enumerate() {
        assert_eq!(layout.tensor_offsets[i], t.data_offset, "tensor {}", t.name);
    }
    if let Some(code) = raw_code {
        buf[FIXED_HEADER_LEN..FIXED_HEADER_LEN + 2].copy_from_slice(&code.to_le_bytes());
    }
    if let Some(a) = &doc.auth {
        let mut f = Frame::new_checked(&mut buf[..]).expect("rebuilt frame parses");
        TenantKey::new(&unhex(&a.tenant_key_hex)).sign(&mut f);
    }
    buf
}
