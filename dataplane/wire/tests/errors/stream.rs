//! The stream header's rules on the builder side (the parse side is in the
//! conformance vectors, `bad-stream-*`), and `Frame::stream` on frames
//! without one.

use super::*;
use sluice_wire::{EndReason, STREAM_EXT_KEY, StreamHeader, stream_flags};

fn build(kind: Kind, exts: &[ExtRepr<'_>]) -> Result<Vec<u8>, Error> {
    let body = match kind {
        Kind::Error => BodyRepr::Error {
            code: ErrorCode::UnknownStream,
            message: "unknown stream",
        },
        _ => BodyRepr::None,
    };
    let repr = FrameRepr {
        kind,
        extensions: exts,
        body,
        ..FrameRepr::default()
    };
    let layout = repr.layout()?;
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf)?;
    Ok(buf)
}

fn header(flags: u8, end_reason: u8) -> StreamHeader {
    StreamHeader {
        stream_id: 1,
        flags,
        end_reason,
        ..StreamHeader::default()
    }
}

#[test]
fn builder_refuses_what_the_parse_refuses() {
    use stream_flags::*;
    let bad = [
        (Kind::Request, header(0, 0)),
        (Kind::Request, header(OPEN | CONTINUE, 0)),
        (Kind::Request, header(CANCEL | END, 0)),
        (Kind::Request, header(OPEN | END, EndReason::Eos as u8)),
        (Kind::Response, header(CONTINUE, EndReason::Eos as u8)),
        (Kind::Response, header(CONTINUE | END, 7)),
        (Kind::Response, header(0x10 | OPEN, 0)),
        (Kind::Ping, header(OPEN, 0)),
        (
            Kind::Request,
            StreamHeader {
                stream_id: 0,
                ..header(OPEN, 0)
            },
        ),
    ];
    for (kind, h) in bad {
        let v = h.to_bytes();
        assert_eq!(
            build(kind, &[ExtRepr::stream(&v)]).err(),
            Some(Error::BadStream),
            "{kind:?} {h:?}"
        );
    }
    let v = header(OPEN, 0).to_bytes();
    assert_eq!(
        build(Kind::Request, &[ExtRepr::stream(&v), ExtRepr::stream(&v)]).err(),
        Some(Error::BadStream),
        "two stream headers"
    );
    assert_eq!(
        build(
            Kind::Request,
            &[ExtRepr {
                key: STREAM_EXT_KEY,
                value: &v[..23]
            }]
        )
        .err(),
        Some(Error::BadStream)
    );
}

#[test]
fn every_allowed_header_round_trips() {
    use stream_flags::*;
    for (kind, flags, reason) in [
        (Kind::Request, OPEN, 0),
        (Kind::Request, OPEN | END, 0),
        (Kind::Request, CONTINUE | END, 0),
        (Kind::Request, CANCEL, 0),
        (Kind::Response, CONTINUE | END, 2),
        (Kind::Error, OPEN | END, 6),
    ] {
        let h = StreamHeader {
            stream_id: u64::MAX,
            seq: 77,
            flags,
            end_reason: reason,
            tokens_per_frame: 3,
            max_tokens: 9,
        };
        let v = h.to_bytes();
        let buf = build(kind, &[ExtRepr::stream(&v)]).unwrap();
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(f.stream(), Some(h));
        assert_eq!(h.tokens_per_frame_or_1(), 3);
    }
    let plain = build(Kind::Request, &[]).unwrap();
    assert_eq!(Frame::new_checked(&plain[..]).unwrap().stream(), None);
}
