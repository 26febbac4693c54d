//! Parse side, the frame as a whole: kind bodies, the size limit, bytes
//! past the end; and the emit buffer.

use super::*;

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
