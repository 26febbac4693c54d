//! Every `Error` variant, reached by corrupting one thing in a valid frame
//! (parse side) or one thing in a valid `FrameRepr` (build side).
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

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

#[test]
fn truncated() {
    let b = base();
    assert_eq!(parse(&[]), Err(Error::Truncated));
    assert_eq!(parse(&b[..95]), Err(Error::Truncated));
    assert_eq!(parse(&b[..96]), Err(Error::Truncated));
    assert_eq!(parse(&b[..FRAME_LEN - 1]), Err(Error::Truncated));
}

#[test]
fn bad_magic() {
    assert_eq!(corrupt(&base(), |b| b[0] = b'X'), Err(Error::BadMagic));
    assert_eq!(corrupt(&base(), |b| b[3] = b'e'), Err(Error::BadMagic));
}

#[test]
fn unsupported_version() {
    for v in [0, 2, 255] {
        assert_eq!(
            corrupt(&base(), |b| b[4] = v),
            Err(Error::UnsupportedVersion)
        );
    }
    assert_eq!(
        Error::UnsupportedVersion.code(),
        ErrorCode::UnsupportedVersion
    );
}

#[test]
fn unknown_kind() {
    for k in [0, 8, 255] {
        assert_eq!(corrupt(&base(), |b| b[5] = k), Err(Error::UnknownKind));
    }
}

#[test]
fn reserved() {
    let b = base();
    assert_eq!(corrupt(&b, |b| b[6] |= 0x04), Err(Error::Reserved));
    assert_eq!(corrupt(&b, |b| b[7] |= 0x80), Err(Error::Reserved));
    assert_eq!(corrupt(&b, |b| b[10] = 1), Err(Error::Reserved));
    assert_eq!(corrupt(&b, |b| b[11] = 1), Err(Error::Reserved));
    assert_eq!(corrupt(&b, |b| b[79] = 1), Err(Error::Reserved));
    assert_eq!(corrupt(&b, |b| b[TB + 3] = 1), Err(Error::Reserved));
    // Body reserved bytes: negotiate request at body+5, response at body+13.
    assert_eq!(
        corrupt(&negotiate_request(), |b| b[96 + 6] = 1),
        Err(Error::Reserved)
    );
    assert_eq!(
        corrupt(&negotiate_response(), |b| b[96 + 15] = 1),
        Err(Error::Reserved)
    );
    // The defined flags are accepted.
    assert_eq!(corrupt(&b, |b| b[6] = 0x03), Ok(()));
}

#[test]
fn bad_header_len() {
    let b = base();
    // header_len below the fixed header or above the limit.
    assert_eq!(corrupt(&b, |b| put_u16(b, 8, 95)), Err(Error::BadHeaderLen));
    assert_eq!(corrupt(&b, |b| put_u16(b, 8, 0)), Err(Error::BadHeaderLen));
    assert_eq!(
        corrupt(&b, |b| put_u16(b, 8, 4097)),
        Err(Error::BadHeaderLen)
    );
    // One byte longer than the parts (frame length kept): parts end early.
    let longer = corrupt(&b, |b| {
        put_u16(b, 8, HEADER_LEN as u16 + 1);
        put_u32(b, 32, (FRAME_LEN - HEADER_LEN - 1) as u32);
    });
    assert_eq!(longer, Err(Error::BadHeaderLen));
    // One byte shorter: the last tensor entry runs past the header.
    let shorter = corrupt(&b, |b| {
        put_u16(b, 8, HEADER_LEN as u16 - 1);
        put_u32(b, 32, (FRAME_LEN - HEADER_LEN + 1) as u32);
    });
    assert_eq!(shorter, Err(Error::BadHeaderLen));
    // A routing string past the end of a bare fixed header.
    let ping = kind_frame(Kind::Ping, BodyRepr::None);
    assert_eq!(corrupt(&ping, |b| b[73] = 1), Err(Error::BadHeaderLen));
    // Extension lengths, key and value past the end.
    assert_eq!(corrupt(&ping, |b| b[77] = 1), Err(Error::BadHeaderLen));
    let one_ext = emit(&FrameRepr {
        extensions: &[ExtRepr {
            key: "k",
            value: b"",
        }],
        ..FrameRepr::default()
    });
    assert_eq!(corrupt(&one_ext, |b| b[96] = 2), Err(Error::BadHeaderLen));
    assert_eq!(corrupt(&b, |b| b[EXT + 1] = 255), Err(Error::BadHeaderLen));
    // A tensor's dims or name past the end.
    assert_eq!(corrupt(&b, |b| b[TB + 1] = 8), Err(Error::BadHeaderLen));
}

#[test]
fn field_too_long() {
    let b = base();
    assert_eq!(corrupt(&b, |b| b[73] = 65), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[74] = 33), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[75] = 65), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[76] = 33), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[EXT] = 0), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[EXT] = 33), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[TA + 2] = 0), Err(Error::FieldTooLong));
    assert_eq!(corrupt(&b, |b| b[TA + 2] = 65), Err(Error::FieldTooLong));
}

#[test]
fn bad_string() {
    let b = base();
    for bad in [b' ', 0x7f, 0x80, 0, b'\n'] {
        assert_eq!(
            corrupt(&b, |b| b[96] = bad),
            Err(Error::BadString),
            "model byte {bad:#x}"
        );
        assert_eq!(
            corrupt(&b, |b| b[97] = bad),
            Err(Error::BadString),
            "version byte {bad:#x}"
        );
        assert_eq!(
            corrupt(&b, |b| b[EXT + 2] = bad),
            Err(Error::BadString),
            "ext key {bad:#x}"
        );
        assert_eq!(
            corrupt(&b, |b| b[TA + 20] = bad),
            Err(Error::BadString),
            "tensor name {bad:#x}"
        );
    }
    // Extension values are opaque bytes.
    assert_eq!(corrupt(&b, |b| b[EXT + 3] = 0), Ok(()));
    // An error message that is not UTF-8.
    assert_eq!(
        corrupt(&error_frame(), |b| b[96 + 4] = 0xff),
        Err(Error::BadString)
    );
    // A negotiation subject that is not a token.
    assert_eq!(
        corrupt(&negotiate_request(), |b| b[96 + 8] = b' '),
        Err(Error::BadString)
    );
}

#[test]
fn too_many_extensions() {
    assert_eq!(
        corrupt(&base(), |b| b[77] = 17),
        Err(Error::TooManyExtensions)
    );
    assert_eq!(
        corrupt(&base(), |b| b[77] = 255),
        Err(Error::TooManyExtensions)
    );
}

#[test]
fn too_many_tensors() {
    assert_eq!(corrupt(&base(), |b| b[78] = 17), Err(Error::TooManyTensors));
    // A tensor count in a kind without tensors.
    for kind in [Kind::Ping, Kind::Pong] {
        let f = kind_frame(kind, BodyRepr::None);
        assert_eq!(corrupt(&f, |b| b[78] = 1), Err(Error::TooManyTensors));
    }
    assert_eq!(
        corrupt(&error_frame(), |b| b[78] = 1),
        Err(Error::TooManyTensors)
    );
    // The same tensors relabelled as an error frame.
    assert_eq!(
        corrupt(&base(), |b| b[5] = Kind::Error as u8),
        Err(Error::TooManyTensors)
    );
}

#[test]
fn bad_dtype() {
    for d in [0, 8, 14, 15, 17, 255] {
        assert_eq!(
            corrupt(&base(), |b| b[TA] = d),
            Err(Error::BadDType),
            "dtype {d}"
        );
    }
    assert_eq!(Error::BadDType.code(), ErrorCode::BadTensor);
}

#[test]
fn bad_rank() {
    assert_eq!(corrupt(&base(), |b| b[TA + 1] = 9), Err(Error::BadRank));
    assert_eq!(corrupt(&base(), |b| b[TA + 1] = 255), Err(Error::BadRank));
}

#[test]
fn size_overflow() {
    // Element count times element size overflows u64.
    assert_eq!(
        corrupt(&base(), |b| put_u64(b, TA + 12, u64::MAX)),
        Err(Error::SizeOverflow)
    );
    // Fits u64 but exceeds the frame limit: 2^27 f32 = 512 MiB.
    assert_eq!(
        corrupt(&base(), |b| put_u64(b, TA + 12, 1 << 27)),
        Err(Error::SizeOverflow)
    );
}

/// Regression: a zero dimension used to let any other dimension through,
/// e.g. [0, u64::MAX], which turns into -1 ("dynamic") as an ONNX int64 shape;
/// and the result depended on the order of the dimensions.
#[test]
fn dims_beyond_i64_are_rejected_even_with_zero_elements() {
    let zero_then_huge = [0, u64::MAX];
    let t = [TensorRepr {
        name: "t",
        dtype: DType::U8,
        dims: &zero_then_huge,
        data: None,
    }];
    assert_eq!(
        build(FrameRepr {
            tensors: &t,
            ..request()
        }),
        Err(Error::SizeOverflow)
    );
    assert_eq!(DType::U8.byte_len(&[0, u64::MAX]), None);
    assert_eq!(DType::U8.byte_len(&[0, 1 << 63]), None);
    assert_eq!(DType::U8.byte_len(&[0, i64::MAX as u64]), Some(0));
    // Zero elements in any order, even where a left-to-right product overflows.
    let big = 1u64 << 62;
    assert_eq!(DType::F32.byte_len(&[big, 4, 0]), Some(0));
    assert_eq!(DType::F32.byte_len(&[0, big, 4]), Some(0));
    // On the wire: rank-2 tensor "a" rewritten to dims [0, 2^63], length 0.
    let mut rank2 = emit(&FrameRepr {
        tensors: &[TensorRepr {
            name: "a",
            dtype: DType::F32,
            dims: &[0, 5],
            data: None,
        }],
        ..FrameRepr::default()
    });
    assert_eq!(parse(&rank2), Ok(()));
    put_u64(&mut rank2, 96 + 12 + 8, 1 << 63);
    assert_eq!(parse(&rank2), Err(Error::SizeOverflow));
}

#[test]
fn bad_tensor_len() {
    assert_eq!(
        corrupt(&base(), |b| put_u32(b, TA + 8, 12)),
        Err(Error::BadTensorLen)
    );
    assert_eq!(
        corrupt(&base(), |b| put_u32(b, TA + 8, 0)),
        Err(Error::BadTensorLen)
    );
    // Changing a dimension breaks the length too.
    assert_eq!(
        corrupt(&base(), |b| put_u64(b, TA + 12, 3)),
        Err(Error::BadTensorLen)
    );
}

#[test]
fn misaligned() {
    for off in [193, 200, 224, 255] {
        assert_eq!(
            corrupt(&base(), |b| put_u32(b, TA + 4, off)),
            Err(Error::Misaligned)
        );
    }
}

#[test]
fn out_of_bounds() {
    let b = base();
    // Inside the header.
    assert_eq!(
        corrupt(&b, |b| put_u32(b, TA + 4, 128)),
        Err(Error::OutOfBounds)
    );
    assert_eq!(
        corrupt(&b, |b| put_u32(b, TA + 4, 0)),
        Err(Error::OutOfBounds)
    );
    // Past the end of the frame.
    assert_eq!(
        corrupt(&b, |b| put_u32(b, TB + 4, 320)),
        Err(Error::OutOfBounds)
    );
    assert_eq!(
        corrupt(&b, |b| put_u32(b, TB + 4, 0xffff_ffc0)),
        Err(Error::OutOfBounds)
    );
}

#[test]
fn overlap() {
    let b = base();
    // Both tensors at 192: "b" starts inside "a".
    assert_eq!(
        corrupt(&b, |b| put_u32(b, TB + 4, 192)),
        Err(Error::Overlap)
    );
    // "a" after "b": out of order (the body grown so both fit).
    let swapped = corrupt(&b, |b| {
        b.resize(FRAME_LEN + 64, 0);
        put_u32(b, 32, (FRAME_LEN + 64 - HEADER_LEN) as u32);
        put_u32(b, TA + 4, 256);
        put_u32(b, TB + 4, 192);
    });
    assert_eq!(swapped, Err(Error::Overlap));
}

#[test]
fn bad_body() {
    // Ping and pong carry no body.
    let mut ping = kind_frame(Kind::Ping, BodyRepr::None);
    ping.push(0);
    put_u32(&mut ping, 32, 1);
    assert_eq!(parse(&ping), Err(Error::BadBody));

    let e = error_frame();
    assert_eq!(corrupt(&e, |b| put_u16(b, 96 + 2, 5)), Err(Error::BadBody));
    assert_eq!(corrupt(&e, |b| put_u16(b, 96 + 2, 3)), Err(Error::BadBody));
    assert_eq!(
        corrupt(&e, |b| put_u16(b, 96 + 2, 257)),
        Err(Error::BadBody)
    );
    // Shorter than the error body's fixed part.
    let short = corrupt(&e, |b| {
        b.truncate(96 + 3);
        put_u32(b, 32, 3);
    });
    assert_eq!(short, Err(Error::BadBody));

    let nq = negotiate_request();
    assert_eq!(corrupt(&nq, |b| b[96 + 4] = 0), Err(Error::BadBody));
    assert_eq!(corrupt(&nq, |b| b[96 + 4] = 5), Err(Error::BadBody));

    let ns = negotiate_response();
    for t in [0, 5, 255] {
        assert_eq!(corrupt(&ns, |b| b[96 + 12] = t), Err(Error::BadBody));
    }
    assert_eq!(
        corrupt(&ns, |b| put_u32(b, 96 + 16, 3)),
        Err(Error::BadBody)
    );
    assert_eq!(
        corrupt(&ns, |b| put_u32(b, 96 + 16, u32::MAX)),
        Err(Error::BadBody)
    );
}

#[test]
fn too_large() {
    assert_eq!(
        corrupt(&base(), |b| put_u32(b, 32, u32::MAX)),
        Err(Error::TooLarge)
    );
    let over = (limits::FRAME_LEN_MAX - HEADER_LEN + 1) as u32;
    assert_eq!(
        corrupt(&base(), |b| put_u32(b, 32, over)),
        Err(Error::TooLarge)
    );
    // Exactly at the limit is only truncated, not too large.
    let at = (limits::FRAME_LEN_MAX - HEADER_LEN) as u32;
    assert_eq!(
        corrupt(&base(), |b| put_u32(b, 32, at)),
        Err(Error::Truncated)
    );
    assert_eq!(Error::TooLarge.code(), ErrorCode::FrameTooLarge);
}

#[test]
fn trailing_bytes() {
    assert_eq!(corrupt(&base(), |b| b.push(0)), Err(Error::TrailingBytes));
    assert_eq!(
        corrupt(&kind_frame(Kind::Ping, BodyRepr::None), |b| b.push(0)),
        Err(Error::TrailingBytes)
    );
}

#[test]
fn buffer_too_small() {
    let repr = FrameRepr {
        kind: Kind::Ping,
        ..FrameRepr::default()
    };
    assert_eq!(repr.emit(&mut [0u8; 95]), Err(Error::BufferTooSmall));
    assert_eq!(repr.emit(&mut []), Err(Error::BufferTooSmall));
    assert!(repr.emit(&mut [0u8; 96]).is_ok());
}

// ---- the builder side ----

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

#[test]
fn builder_strings() {
    let long = "x".repeat(65);
    assert_eq!(
        build(FrameRepr {
            model: &long,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    assert_eq!(
        build(FrameRepr {
            model: &long[..64],
            ..request()
        }),
        Ok(())
    );
    assert_eq!(
        build(FrameRepr {
            model_version: &long[..33],
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    assert_eq!(
        build(FrameRepr {
            adapter: &long,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    assert_eq!(
        build(FrameRepr {
            intent: &long[..33],
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    assert_eq!(
        build(FrameRepr {
            model: "a b",
            ..request()
        }),
        Err(Error::BadString)
    );
    assert_eq!(
        build(FrameRepr {
            intent: "é",
            ..request()
        }),
        Err(Error::BadString)
    );
}

#[test]
fn builder_flags() {
    assert_eq!(
        build(FrameRepr {
            flags: 4,
            ..request()
        }),
        Err(Error::Reserved)
    );
    assert_eq!(
        build(FrameRepr {
            flags: 3,
            ..request()
        }),
        Ok(())
    );
}

#[test]
fn builder_extensions() {
    let e = ExtRepr {
        key: "k",
        value: b"",
    };
    assert_eq!(
        build(FrameRepr {
            extensions: &[e; 17],
            ..request()
        }),
        Err(Error::TooManyExtensions)
    );
    assert_eq!(
        build(FrameRepr {
            extensions: &[e; 16],
            ..request()
        }),
        Ok(())
    );
    let long_key = "k".repeat(33);
    let bad = [ExtRepr {
        key: &long_key,
        value: b"",
    }];
    assert_eq!(
        build(FrameRepr {
            extensions: &bad,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    let empty = [ExtRepr {
        key: "",
        value: b"",
    }];
    assert_eq!(
        build(FrameRepr {
            extensions: &empty,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    let big = [0u8; 256];
    let long_val = [ExtRepr {
        key: "k",
        value: &big,
    }];
    assert_eq!(
        build(FrameRepr {
            extensions: &long_val,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    let spaced = [ExtRepr {
        key: "a b",
        value: b"",
    }];
    assert_eq!(
        build(FrameRepr {
            extensions: &spaced,
            ..request()
        }),
        Err(Error::BadString)
    );
}

#[test]
fn builder_tensors() {
    let t = TensorRepr {
        name: "t",
        dtype: DType::U8,
        dims: &[1],
        data: None,
    };
    assert_eq!(
        build(FrameRepr {
            tensors: &[t; 17],
            ..request()
        }),
        Err(Error::TooManyTensors)
    );
    assert_eq!(
        build(FrameRepr {
            tensors: &[t; 16],
            ..request()
        }),
        Ok(())
    );
    let ping = FrameRepr {
        kind: Kind::Ping,
        tensors: &[t],
        ..FrameRepr::default()
    };
    assert_eq!(build(ping), Err(Error::TooManyTensors));

    let name = "n".repeat(65);
    let long = [TensorRepr { name: &name, ..t }];
    assert_eq!(
        build(FrameRepr {
            tensors: &long,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    let empty = [TensorRepr { name: "", ..t }];
    assert_eq!(
        build(FrameRepr {
            tensors: &empty,
            ..request()
        }),
        Err(Error::FieldTooLong)
    );
    let spaced = [TensorRepr { name: "a b", ..t }];
    assert_eq!(
        build(FrameRepr {
            tensors: &spaced,
            ..request()
        }),
        Err(Error::BadString)
    );
    let rank9 = [TensorRepr { dims: &[1; 9], ..t }];
    assert_eq!(
        build(FrameRepr {
            tensors: &rank9,
            ..request()
        }),
        Err(Error::BadRank)
    );
    let huge = [TensorRepr {
        dims: &[u64::MAX, 2],
        ..t
    }];
    assert_eq!(
        build(FrameRepr {
            tensors: &huge,
            ..request()
        }),
        Err(Error::SizeOverflow)
    );
    let wrong = [TensorRepr {
        data: Some(&[0; 2]),
        ..t
    }];
    assert_eq!(
        build(FrameRepr {
            tensors: &wrong,
            ..request()
        }),
        Err(Error::BadTensorLen)
    );
    // Two tensors of 200 MiB: each fits, together they exceed 256 MiB.
    let big = TensorRepr {
        dims: &[200 << 20],
        ..t
    };
    assert_eq!(request().layout().map(|_| ()), Ok(()));
    assert_eq!(
        FrameRepr {
            tensors: &[big, big],
            ..request()
        }
        .layout()
        .map(|_| ()),
        Err(Error::TooLarge)
    );
    assert!(
        FrameRepr {
            tensors: &[big],
            ..request()
        }
        .layout()
        .is_ok()
    );
}

#[test]
fn builder_header_too_long() {
    // 16 extensions of 32-byte keys and 255-byte values: 4624 bytes.
    let key = "k".repeat(32);
    let value = [7u8; 255];
    let e = ExtRepr {
        key: &key,
        value: &value,
    };
    assert_eq!(
        build(FrameRepr {
            extensions: &[e; 16],
            ..request()
        }),
        Err(Error::BadHeaderLen)
    );
    assert_eq!(
        build(FrameRepr {
            extensions: &[e; 13],
            ..request()
        }),
        Ok(())
    );
}

#[test]
fn builder_bodies() {
    let err = BodyRepr::Error {
        code: ErrorCode::Internal,
        message: "x",
    };
    assert_eq!(
        build(FrameRepr {
            body: err,
            ..request()
        }),
        Err(Error::BadBody)
    );
    assert_eq!(
        build(FrameRepr {
            kind: Kind::Error,
            ..FrameRepr::default()
        }),
        Err(Error::BadBody)
    );
    assert_eq!(
        build(FrameRepr {
            kind: Kind::Error,
            body: err,
            ..FrameRepr::default()
        }),
        Ok(())
    );
    let nq = |subject| FrameRepr {
        kind: Kind::NegotiateRequest,
        body: BodyRepr::NegotiateRequest {
            subject,
            version_hint: 0,
        },
        ..FrameRepr::default()
    };
    let (s255, s256) = ("s".repeat(255), "s".repeat(256));
    assert_eq!(build(nq("")), Err(Error::FieldTooLong));
    assert_eq!(build(nq(&s256)), Err(Error::FieldTooLong));
    assert_eq!(build(nq(&s255)), Ok(()));
    assert_eq!(build(nq("a b")), Err(Error::BadString));
    let schema = vec![b'x'; limits::SCHEMA_LEN_MAX + 1];
    let ns = |schema| FrameRepr {
        kind: Kind::NegotiateResponse,
        body: BodyRepr::NegotiateResponse {
            schema_id: 1,
            version: 1,
            ttl_ms: 1,
            schema_type: SchemaType::Protobuf,
            schema,
        },
        ..FrameRepr::default()
    };
    assert_eq!(build(ns(&schema)), Err(Error::TooLarge));
    assert_eq!(build(ns(&schema[1..])), Ok(()));
}

#[test]
fn builder_truncates_long_error_messages_on_char_boundary() {
    // 255 ASCII bytes then a 2-byte character straddling the 256 limit.
    let msg = format!("{}é{}", "a".repeat(255), "b".repeat(10));
    let buf = kind_frame(
        Kind::Error,
        BodyRepr::Error {
            code: ErrorCode::Internal,
            message: &msg,
        },
    );
    let f = Frame::new_checked(&buf[..]).unwrap();
    let body = f.error_body().unwrap();
    assert_eq!(body.message, "a".repeat(255));
    assert_eq!(body.code(), Some(ErrorCode::Internal));
}

// ---- codes ----

#[test]
fn error_codes_round_trip_and_retry_rules() {
    for (i, c) in ErrorCode::ALL.iter().enumerate() {
        assert_eq!(*c as u16, i as u16 + 1, "codes are dense from 1");
        assert_eq!(ErrorCode::from_u16(*c as u16), Some(*c));
    }
    assert_eq!(ErrorCode::from_u16(0), None);
    assert_eq!(ErrorCode::from_u16(ErrorCode::ALL.len() as u16 + 1), None);
    let retryable: Vec<_> = ErrorCode::ALL
        .iter()
        .filter(|c| c.retryable())
        .map(|c| c.as_str())
        .collect();
    assert_eq!(
        retryable,
        [
            "busy",
            "peer_down",
            "internal",
            "shutting_down",
            "connection_lost"
        ]
    );
}

#[test]
fn error_code_mapping() {
    use Error::*;
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
    ];
    let mut texts: Vec<_> = all.iter().map(|e| e.as_str()).collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), all.len(), "descriptions are distinct");
    for e in all {
        let want = match e {
            UnsupportedVersion => ErrorCode::UnsupportedVersion,
            TooLarge => ErrorCode::FrameTooLarge,
            BadDType | BadRank | SizeOverflow | BadTensorLen | Misaligned => ErrorCode::BadTensor,
            _ => ErrorCode::MalformedFrame,
        };
        assert_eq!(e.code(), want, "{e:?}");
        assert_eq!(e.to_string(), e.as_str());
    }
}
