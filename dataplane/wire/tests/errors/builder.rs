//! The builder side: each `FrameRepr` field the builder refuses, and
//! whatever it accepts parses.

use super::*;

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
