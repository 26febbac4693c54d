//! Error codes: dense numbering, retry rules, and the parse/build error
//! to wire code mapping.

use super::*;

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
            "connection_lost",
            "stream_limit"
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
        BadStream,
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
