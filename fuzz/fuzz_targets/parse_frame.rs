//! `Frame::new_checked` on arbitrary bytes; when a frame is accepted, every
//! getter, iterator, body accessor and the MAC are exercised, and the
//! invariants the spec promises of an accepted frame are asserted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::{
    ErrorCode, FIXED_HEADER_LEN, Frame, FrameRepr, Kind, TENSOR_ALIGN, TenantKey, limits,
};

fn is_token(s: &str) -> bool {
    s.bytes().all(|c| (0x21..=0x7e).contains(&c))
}

fuzz_target!(|data: &[u8]| {
    let f = match Frame::new_checked(data) {
        Ok(f) => f,
        Err(e) => {
            // Every parse error maps to a code an endpoint can answer with.
            let _ = (e.as_str(), e.code().retryable());
            return;
        }
    };
    let header_len = f.header_len();
    assert!((FIXED_HEADER_LEN..=limits::HEADER_LEN_MAX).contains(&header_len));
    assert_eq!(f.frame_len(), data.len());
    assert_eq!(f.payload().len(), f.payload_len());
    let _ = (
        f.version(),
        f.flags(),
        f.tenant_id(),
        f.request_id(),
        f.deadline_us(),
    );
    let _ = (
        f.schema_id(),
        f.schema_version(),
        f.token_count(),
        f.trace().sampled(),
    );
    for (s, max) in [
        (f.model(), limits::MODEL_NAME_LEN_MAX),
        (f.model_version(), limits::MODEL_VERSION_LEN_MAX),
        (f.adapter(), limits::ADAPTER_LEN_MAX),
        (f.intent(), limits::INTENT_LEN_MAX),
    ] {
        assert!(s.len() <= max && is_token(s));
    }
    let mut n = 0;
    for e in f.extensions() {
        assert!(!e.key.is_empty() && e.key.len() <= limits::EXT_KEY_LEN_MAX && is_token(e.key));
        assert!(f.extension(e.key).is_some());
        n += 1;
    }
    assert_eq!(n, data[77] as usize);
    let mut prev_end = header_len;
    let mut n = 0;
    for t in f.tensors() {
        assert_eq!(t.data_offset % TENSOR_ALIGN, 0);
        assert!(t.data_offset >= prev_end);
        assert!(t.data_range().end <= data.len());
        assert_eq!(t.dtype.byte_len(t.dims()), Some(t.data_len));
        assert_eq!(f.tensor_data(&t).len(), t.data_len);
        assert!(is_token(t.name) && !t.name.is_empty());
        assert!(f.tensor(t.name).is_some());
        let _ = t.elem_count();
        prev_end = t.data_range().end;
        n += 1;
    }
    assert_eq!(n, f.tensor_count());
    match f.kind() {
        Kind::Error => {
            let b = f.error_body().expect("checked error frame has a body");
            let _ = b.code();
        }
        Kind::NegotiateRequest => assert!(f.negotiate_request().is_some()),
        Kind::NegotiateResponse => assert!(f.negotiate_response().is_some()),
        Kind::Ping | Kind::Pong => assert_eq!(f.payload_len(), 0),
        Kind::Request | Kind::Response => assert!(n > 0 || f.tensor_count() == 0),
    }
    let key = TenantKey::new(b"fuzz");
    assert_eq!(key.verify(&f), key.tag(&f) == f.auth_tag());

    // An endpoint answers any accepted frame with an error frame: that must build.
    let answer = FrameRepr::error_for(&f, ErrorCode::Busy, f.model());
    let mut buf = [0u8; 512];
    let layout = answer.emit(&mut buf).expect("error answer builds");
    assert!(Frame::new_checked(&buf[..layout.frame_len]).is_ok());
});
