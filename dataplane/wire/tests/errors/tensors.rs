//! Parse side, the tensor table: dtype, rank, sizes, data lengths,
//! alignment, bounds and overlap.

use super::*;

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
