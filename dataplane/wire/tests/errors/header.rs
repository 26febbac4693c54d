//! Parse side, the fixed header and its strings and tables: length,
//! magic, version, kind, reserved bits, header length, strings,
//! extension and tensor counts.

use super::*;

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
