//! Whatever the parser accepts, the builder accepts too, and the rebuilt
//! frame decodes to the same values.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_wire::{BodyRepr, ExtRepr, Frame, FrameRepr, Kind, TensorRepr, limits};

fuzz_target!(|data: &[u8]| {
    let Ok(f) = Frame::new_checked(data) else {
        return;
    };
    let mut exts = [ExtRepr {
        key: "",
        value: &[],
    }; limits::EXT_COUNT_MAX];
    let mut n_ext = 0;
    for (slot, e) in exts.iter_mut().zip(f.extensions()) {
        *slot = ExtRepr {
            key: e.key,
            value: e.value,
        };
        n_ext += 1;
    }
    let descs: Vec<_> = f.tensors().collect();
    let tensors: Vec<_> = descs
        .iter()
        .map(|t| TensorRepr {
            name: t.name,
            dtype: t.dtype,
            dims: t.dims(),
            data: Some(f.tensor_data(t)),
        })
        .collect();
    let body = match f.kind() {
        Kind::Error => {
            let b = f.error_body().unwrap();
            match b.code() {
                Some(code) => BodyRepr::Error {
                    code,
                    message: b.message,
                },
                // The builder only writes known codes.
                None => return,
            }
        }
        Kind::NegotiateRequest => {
            let b = f.negotiate_request().unwrap();
            BodyRepr::NegotiateRequest {
                subject: b.subject,
                version_hint: b.version_hint,
            }
        }
        Kind::NegotiateResponse => {
            let b = f.negotiate_response().unwrap();
            BodyRepr::NegotiateResponse {
                schema_id: b.schema_id,
                version: b.version,
                ttl_ms: b.ttl_ms,
                schema_type: b.schema_type,
                schema: b.schema,
            }
        }
        _ => BodyRepr::None,
    };
    let repr = FrameRepr {
        kind: f.kind(),
        flags: f.flags(),
        request_id: f.request_id(),
        tenant_id: f.tenant_id(),
        deadline_us: f.deadline_us(),
        schema_id: f.schema_id(),
        schema_version: f.schema_version(),
        token_count: f.token_count(),
        trace: f.trace(),
        model: f.model(),
        model_version: f.model_version(),
        adapter: f.adapter(),
        intent: f.intent(),
        extensions: &exts[..n_ext],
        tensors: &tensors,
        body,
    };
    let layout = repr
        .layout()
        .expect("builder accepts what the parser accepts");
    // The builder packs tensors, so its frame is never longer than the input.
    assert!(layout.frame_len <= data.len());
    assert_eq!(layout.header_len, f.header_len());
    let mut buf = vec![0u8; layout.frame_len];
    repr.emit(&mut buf).expect("emit");
    let g = Frame::new_checked(&buf[..]).expect("rebuilt frame parses");
    // The header is byte-identical apart from payload_len and tensor offsets.
    assert_eq!(g.kind(), f.kind());
    assert_eq!(g.trace(), f.trace());
    assert_eq!(g.auth_covered().0[..32], f.auth_covered().0[..32]);
    assert_eq!(g.auth_covered().0[36..], f.auth_covered().0[36..]);
    assert_eq!(
        (g.model(), g.model_version(), g.adapter(), g.intent()),
        (f.model(), f.model_version(), f.adapter(), f.intent())
    );
    assert!(g.extensions().eq(f.extensions()));
    for (a, b) in g.tensors().zip(f.tensors()) {
        assert_eq!((a.name, a.dtype, a.dims()), (b.name, b.dtype, b.dims()));
        assert_eq!(g.tensor_data(&a), f.tensor_data(&b));
    }
    assert_eq!(g.error_body(), f.error_body());
    assert_eq!(g.negotiate_request(), f.negotiate_request());
    assert_eq!(g.negotiate_response(), f.negotiate_response());
});
