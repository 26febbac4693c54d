//! Every `Error` variant, reached by corrupting one thing in a valid frame
//! (parse side) or one thing in a valid `FrameRepr` (build side).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod builder;
mod codes;
mod frame;
mod header;
mod stream;
mod tensors;

use sluice_wire::{
    BodyRepr, DType, Error, ErrorCode, ExtRepr, Frame, FrameRepr, Kind, SchemaType, TensorRepr,
    limits,
};

// Layout of `base()`: strings "m" "1" at 96..98, extension "k"="v" at
// 98..102, tensor "a" (f32 [2]) entry at 102..123, tensor "b" (u8 [3]) entry
// at 123..144; data of "a" at 192..200, of "b" at 256..259.
const HEADER_LEN: usize = 144;
const EXT: usize = 98;
const TA: usize = 102;
const TB: usize = 123;
const FRAME_LEN: usize = 259;

fn emit(repr: &FrameRepr<'_>) -> Vec<u8> {
    let mut buf = vec![0u8; repr.layout().unwrap().frame_len];
    repr.emit(&mut buf).unwrap();
    buf
}

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

fn kind_frame(kind: Kind, body: BodyRepr<'_>) -> Vec<u8> {
    emit(&FrameRepr {
        kind,
        body,
        ..FrameRepr::default()
    })
}

fn error_frame() -> Vec<u8> {
    kind_frame(
        Kind::Error,
        BodyRepr::Error {
            code: ErrorCode::Busy,
            message: "full",
        },
    )
}

fn negotiate_request() -> Vec<u8> {
    kind_frame(
        Kind::NegotiateRequest,
        BodyRepr::NegotiateRequest {
            subject: "subj",
            version_hint: 4,
        },
    )
}

fn negotiate_response() -> Vec<u8> {
    kind_frame(
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

fn parse(b: &[u8]) -> Result<(), Error> {
    Frame::new_checked(b).map(|_| ())
}

/// Applies `f` to a copy of `frame` and parses the result.
fn corrupt(frame: &[u8], f: impl FnOnce(&mut Vec<u8>)) -> Result<(), Error> {
    let mut b = frame.to_vec();
    f(&mut b);
    parse(&b)
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

#[test]
fn base_layout_is_as_documented() {
    let b = base();
    let f = Frame::new_checked(&b[..]).unwrap();
    assert_eq!(f.header_len(), HEADER_LEN);
    assert_eq!(f.frame_len(), FRAME_LEN);
    let t: Vec<_> = f.tensors().collect();
    assert_eq!((t[0].data_offset, t[0].data_len), (192, 8));
    assert_eq!((t[1].data_offset, t[1].data_len), (256, 3));
    assert_eq!(&b[EXT..EXT + 4], &[1, 1, b'k', b'v']);
    assert_eq!(&b[TA..TA + 4], &[1, 1, 1, 0]);
    assert_eq!(&b[TB..TB + 4], &[2, 1, 1, 0]);
    for frame in [error_frame(), negotiate_request(), negotiate_response()] {
        parse(&frame).unwrap();
    }
}

// The builder side (builder.rs, and the dims regression in tensors.rs).

fn build(repr: FrameRepr<'_>) -> Result<(), Error> {
    let layout = repr.layout()?;
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf)?;
    // Whatever the builder accepts, the parser accepts.
    parse(&buf).expect("builder output parses");
    Ok(())
}

fn request<'a>() -> FrameRepr<'a> {
    FrameRepr {
        kind: Kind::Request,
        ..FrameRepr::default()
    }
}
