//! `docs/wire.md` against the code: every ```hex title=NAME block of the
//! spec is parsed with `Frame::new_checked`, its fields are compared with the
//! values the spec states, and its bytes with what the builder emits.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::BTreeMap;
use std::path::PathBuf;

use common::{
    DEADLINE_US, EXAMPLE_KEY, EXAMPLES, STREAM_ID, TRACE, example, f32_bytes, hex_dump,
    parse_hex_dump,
};
use sluice_wire::{
    DType, EndReason, ErrorCode, Frame, Kind, STREAM_EXT_KEY, STREAM_EXT_LEN, SchemaType,
    StreamHeader, TenantKey, flags, stream_flags,
};

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every ```hex title=NAME fenced block of the spec, by name.
fn spec_blocks() -> BTreeMap<String, Vec<u8>> {
    let path = repo_root().join("docs/wire.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut blocks = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line.trim().strip_prefix("```hex title=") else {
            continue;
        };
        let mut body = String::new();
        for l in lines.by_ref() {
            if l.trim() == "```" {
                break;
            }
            body.push_str(l);
            body.push('\n');
        }
        let bytes = parse_hex_dump(&body).unwrap_or_else(|e| panic!("block {name}: {e}"));
        assert!(
            blocks.insert(name.trim().to_string(), bytes).is_none(),
            "block {name} appears twice"
        );
    }
    blocks
}

#[test]
fn spec_has_exactly_the_examples() {
    let names: Vec<String> = spec_blocks().into_keys().collect();
    let mut want: Vec<String> = EXAMPLES.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(names, want);
}

#[test]
fn spec_bytes_equal_builder_output() {
    for (name, bytes) in spec_blocks() {
        assert_eq!(
            bytes,
            example(&name),
            "docs/wire.md block {name} differs from the builder; regenerate with \
             `cargo test -p sluice-wire --test spec -- --ignored print_examples --nocapture`"
        );
    }
}

fn parsed(name: &str) -> Frame<Vec<u8>> {
    let bytes = spec_blocks()
        .remove(name)
        .unwrap_or_else(|| panic!("no block {name}"));
    Frame::new_checked(bytes).unwrap_or_else(|e| panic!("block {name}: {e}"))
}

#[test]
fn ping_and_pong() {
    for (name, kind) in [("ping", Kind::Ping), ("pong", Kind::Pong)] {
        let f = parsed(name);
        assert_eq!(f.kind(), kind);
        assert_eq!(f.version(), 1);
        assert_eq!(f.as_bytes().len(), 96);
        assert_eq!(f.header_len(), 96);
        assert_eq!(f.payload_len(), 0);
        assert_eq!(f.request_id(), 1);
        assert_eq!(f.tenant_id(), 7);
        assert_eq!(f.flags(), 0);
        assert!(!f.trace().is_set());
        assert_eq!(f.model(), "");
        assert_eq!(f.extensions().count(), 0);
        assert_eq!(f.tensor_count(), 0);
    }
}

#[test]
fn request() {
    let f = parsed("request");
    assert_eq!(f.kind(), Kind::Request);
    assert_eq!(f.flags(), flags::AUTHENTICATED);
    assert_eq!(f.header_len(), 165);
    assert_eq!(f.payload_len(), 43);
    assert_eq!(f.frame_len(), 208);
    assert_eq!(f.tenant_id(), 7);
    assert_eq!(f.request_id(), 42);
    assert_eq!(f.deadline_us(), DEADLINE_US);
    assert_eq!(f.schema_id(), 3);
    assert_eq!(f.schema_version(), 2);
    assert_eq!(f.token_count(), 12);
    assert_eq!(f.trace(), TRACE);
    assert!(f.trace().sampled());
    assert_eq!(f.model(), "resnet50");
    assert_eq!(f.model_version(), "v2");
    assert_eq!(f.adapter(), "lora-a");
    assert_eq!(f.intent(), "classify");
    let exts: Vec<_> = f
        .extensions()
        .map(|e| (e.key.to_string(), e.value.to_vec()))
        .collect();
    assert_eq!(exts, vec![("x-region".to_string(), b"eu".to_vec())]);
    assert_eq!(f.extension("x-region"), Some(&b"eu"[..]));
    assert_eq!(f.tensor_count(), 1);
    let t = f.tensor("input").expect("tensor input");
    assert_eq!(t.dtype, DType::F32);
    assert_eq!(t.dims(), &[1, 4]);
    assert_eq!(t.data_offset, 192);
    assert_eq!(t.data_len, 16);
    assert_eq!(t.elem_count(), 4);
    assert_eq!(f.tensor_data(&t), &f32_bytes(&[1.0, 2.0, 3.0, 4.0])[..]);
    // The padding between the header and the tensor is zero.
    assert!(f.as_bytes()[165..192].iter().all(|&b| b == 0));

    // The documented tag, and that it verifies with the documented key only.
    assert_eq!(
        f.auth_tag(),
        &[
            0x66, 0x15, 0xdc, 0xed, 0xe0, 0xdb, 0x52, 0x59, 0x7f, 0xea, 0x3f, 0xbc, 0x77, 0xcb,
            0x66, 0xcb
        ]
    );
    assert!(TenantKey::new(EXAMPLE_KEY).verify(&f));
    assert!(!TenantKey::new(b"sluice-example-key-tenant-8").verify(&f));
}

#[test]
fn request_tag_is_hmac_sha256_over_documented_ranges() {
    use hmac::{Hmac, Mac};
    let f = parsed("request");
    let b = f.as_bytes();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(EXAMPLE_KEY).unwrap();
    mac.update(&b[..80]);
    mac.update(&b[96..f.header_len()]);
    let full = mac.finalize().into_bytes();
    assert_eq!(f.auth_tag(), &full[..16]);
}

#[test]
fn response() {
    let f = parsed("response");
    assert_eq!(f.kind(), Kind::Response);
    assert_eq!(f.flags(), 0);
    assert_eq!(f.request_id(), 42);
    assert_eq!(f.trace(), TRACE);
    assert_eq!(f.model(), "resnet50");
    assert_eq!(f.model_version(), "v2");
    assert_eq!(f.adapter(), "");
    let t: Vec<_> = f.tensors().collect();
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].name, "output");
    assert_eq!(t[0].dtype, DType::F32);
    assert_eq!(t[0].dims(), &[1, 2]);
    assert_eq!(t[0].data_offset, 192);
    assert_eq!(f.tensor_data(&t[0]), &f32_bytes(&[0.25, 0.75])[..]);
    assert_eq!(f.frame_len(), 200);
}

#[test]
fn error() {
    let f = parsed("error");
    assert_eq!(f.kind(), Kind::Error);
    assert_eq!(f.request_id(), 42);
    let body = f.error_body().expect("error body");
    assert_eq!(body.code_raw, 5);
    assert_eq!(body.code(), Some(ErrorCode::ModelVersionRequired));
    assert_eq!(body.message, "model version required");
    assert_eq!(f.payload_len(), 4 + 22);
}

#[test]
fn negotiate_request() {
    let f = parsed("negotiate_request");
    assert_eq!(f.kind(), Kind::NegotiateRequest);
    assert_eq!(f.request_id(), 43);
    let body = f.negotiate_request().expect("negotiate request body");
    assert_eq!(body.subject, "resnet50-input");
    assert_eq!(body.version_hint, 0);
    assert_eq!(f.payload_len(), 8 + 14);
}

/// A negotiate request's tag covers its body too: the subject it asks for.
#[test]
fn negotiate_request_tag_covers_the_body() {
    use hmac::{Hmac, Mac};
    let f = parsed("negotiate_request_signed");
    assert_eq!(f.flags(), flags::AUTHENTICATED);
    assert_eq!((f.request_id(), f.deadline_us()), (44, DEADLINE_US));
    let b = f.as_bytes();
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(EXAMPLE_KEY).unwrap();
    mac.update(&b[..80]);
    mac.update(&b[96..f.header_len()]);
    mac.update(&b[f.header_len()..]);
    let full = mac.finalize().into_bytes();
    assert_eq!(f.auth_tag(), &full[..16]);
    assert!(TenantKey::new(EXAMPLE_KEY).verify(&f));
    // Another subject under the same header does not verify.
    let mut other = b.to_vec();
    *other.last_mut().unwrap() = b'X';
    let g = Frame::new_checked(&other[..]).unwrap();
    assert!(!TenantKey::new(EXAMPLE_KEY).verify(&g));
    let text = std::fs::read_to_string(repo_root().join("docs/wire.md")).unwrap();
    let tag: String = f.auth_tag().iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&tag), "docs/wire.md states the tag {tag}");
}

#[test]
fn negotiate_response() {
    let f = parsed("negotiate_response");
    assert_eq!(f.kind(), Kind::NegotiateResponse);
    assert_eq!(f.request_id(), 43);
    let body = f.negotiate_response().expect("negotiate response body");
    assert_eq!(body.schema_id, 3);
    assert_eq!(body.version, 2);
    assert_eq!(body.ttl_ms, 60_000);
    assert_eq!(body.schema_type, SchemaType::Json);
    assert_eq!(body.schema, br#"{"type":"object"}"#);
    assert_eq!(f.payload_len(), 20 + 17);
}

/// The spec's fixed-header table, row by row, against the request example:
/// each field's documented offset and size hold the value the example sets,
/// and the rows tile the 96 bytes with no gap or overlap.
#[test]
fn spec_fixed_header_table_matches_bytes() {
    let text = std::fs::read_to_string(repo_root().join("docs/wire.md")).unwrap();
    let section = text
        .split("## Fixed header (96 bytes)")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("fixed header section");
    let f = parsed("request");
    let b = f.as_bytes();
    let want = |field: &str| -> Vec<u8> {
        match field {
            "magic" => b"SLCE".to_vec(),
            "version" | "kind" | "trace_flags" | "ext_count" | "tensor_count" => vec![1],
            "flags" => 1u16.to_le_bytes().to_vec(),
            "header_len" => 165u16.to_le_bytes().to_vec(),
            "reserved0" => vec![0, 0],
            "tenant_id" => 7u32.to_le_bytes().to_vec(),
            "request_id" => 42u64.to_le_bytes().to_vec(),
            "deadline_us" => DEADLINE_US.to_le_bytes().to_vec(),
            "payload_len" => 43u32.to_le_bytes().to_vec(),
            "schema_id" => 3u32.to_le_bytes().to_vec(),
            "schema_version" => 2u32.to_le_bytes().to_vec(),
            "token_count" => 12u32.to_le_bytes().to_vec(),
            "trace_id" => TRACE.trace_id.to_vec(),
            "span_id" => TRACE.parent_id.to_vec(),
            "model_len" | "intent_len" => vec![8],
            "model_version_len" => vec![2],
            "adapter_len" => vec![6],
            "reserved1" => vec![0],
            "auth_tag" => f.auth_tag().to_vec(),
            other => panic!("field {other} is not in the code"),
        }
    };
    let mut next = 0;
    let mut rows = 0;
    let rows_only =
        |l: &&str| l.starts_with("| ") && !l.starts_with("| offset") && !l.starts_with("| ---");
    for line in section.lines().filter(rows_only) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let (off, size) = (
            cells[1].parse::<usize>().unwrap(),
            cells[2].parse::<usize>().unwrap(),
        );
        let field = cells[3].trim_matches('`');
        assert_eq!(off, next, "row {field} leaves a gap or overlaps");
        assert_eq!(
            b[off..off + size],
            want(field)[..],
            "field {field} at {off}..{}",
            off + size
        );
        next = off + size;
        rows += 1;
    }
    assert_eq!((next, rows), (96, 24));
}

/// The key and tag the spec's prose quotes are the ones the test uses.
#[test]
fn spec_quotes_example_key_and_tag() {
    let text = std::fs::read_to_string(repo_root().join("docs/wire.md")).unwrap();
    let key_hex: Vec<String> = EXAMPLE_KEY.iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&key_hex.join(" ")), "key hex");
    assert!(
        text.contains(std::str::from_utf8(EXAMPLE_KEY).unwrap()),
        "key text"
    );
    let f = parsed("request");
    let tag: String = f.auth_tag().iter().map(|b| format!("{b:02x}")).collect();
    assert!(text.contains(&tag), "tag hex {tag}");
}

/// Every error code in the spec's table with its number, name and retry rule.
#[test]
fn spec_error_code_table_matches() {
    let text = std::fs::read_to_string(repo_root().join("docs/wire.md")).unwrap();
    for code in ErrorCode::ALL {
        let row = format!(
            "| {} | `{}` | {} |",
            *code as u16,
            code.as_str(),
            if code.retryable() { "yes" } else { "no" }
        );
        assert!(
            text.contains(&row),
            "docs/wire.md lacks the row starting {row:?}"
        );
    }
}

fn stream_of(name: &str) -> (Frame<Vec<u8>>, StreamHeader) {
    let f = parsed(name);
    let s = f
        .stream()
        .unwrap_or_else(|| panic!("{name} has a stream header"));
    (f, s)
}

#[test]
fn stream_open() {
    let (f, s) = stream_of("stream_open");
    assert_eq!(f.kind(), Kind::Request);
    assert_eq!((f.request_id(), f.tenant_id()), (50, 7));
    assert_eq!((f.model(), f.model_version()), ("bytelm", "1"));
    assert_eq!(f.extensions().count(), 1);
    let raw = f.extension(STREAM_EXT_KEY).unwrap();
    assert_eq!(raw.len(), STREAM_EXT_LEN);
    // The value starts at offset 103 + 2 + 13, as the spec says.
    assert_eq!(&f.as_bytes()[103..105], &[13, 24]);
    assert_eq!(&f.as_bytes()[105..118], STREAM_EXT_KEY.as_bytes());
    assert_eq!(
        s,
        StreamHeader {
            stream_id: STREAM_ID,
            seq: 0,
            flags: stream_flags::OPEN,
            end_reason: 0,
            tokens_per_frame: 1,
            max_tokens: 16,
        }
    );
    let p = f.tensor("prompt").unwrap();
    assert_eq!((p.dtype, p.dims()), (DType::U8, &[2u64][..]));
    assert_eq!(f.tensor_data(&p), b"hi");
}

#[test]
fn stream_token() {
    let (f, s) = stream_of("stream_token");
    assert_eq!(f.kind(), Kind::Response);
    assert_eq!(f.request_id(), 50);
    assert_eq!(s.stream_id, STREAM_ID);
    assert_eq!(s.seq, 3);
    assert!(s.has(stream_flags::CONTINUE) && s.has(stream_flags::END));
    assert_eq!(s.reason(), EndReason::MaxTokens);
    let t = f.tensor("token").unwrap();
    assert_eq!((t.dtype, t.dims()), (DType::I64, &[1u64][..]));
    assert_eq!(f.tensor_data(&t), &33i64.to_le_bytes());
}

#[test]
fn stream_cancel() {
    let (f, s) = stream_of("stream_cancel");
    assert_eq!(
        (f.kind(), f.request_id(), f.tensor_count()),
        (Kind::Request, 51, 0)
    );
    assert_eq!((s.seq, s.flags, s.end_reason), (1, stream_flags::CANCEL, 0));
}

#[test]
fn stream_sequence_error() {
    let (f, s) = stream_of("stream_sequence_error");
    assert_eq!(f.kind(), Kind::Error);
    let b = f.error_body().unwrap();
    assert_eq!(b.code(), Some(ErrorCode::StreamSequence));
    assert_eq!(b.message, "stream frame out of sequence");
    assert_eq!((s.seq, s.flags), (5, stream_flags::CONTINUE));
}

/// Prints the spec's hex blocks (to paste into docs/wire.md after a change).
#[test]
#[ignore]
fn print_examples() {
    for name in EXAMPLES {
        println!("```hex title={name}\n{}```\n", hex_dump(&example(name)));
    }
}
