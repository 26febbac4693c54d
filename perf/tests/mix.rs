//! Mix files: the checked-in ones load, bad ones are refused with a reason.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

use sluice_perf::mix::{Mix, MixError, parse_key};
use sluice_wire::{DType, Frame};

#[test]
fn checked_in_mixes_load_and_encode() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/mixes");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "toml") {
            let mix = Mix::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for entry in &mix.entries {
                let mut buf = vec![0u8; entry.request().encoded_len().unwrap()];
                let len = entry.request().encode(&mut buf, 9, 0, None).unwrap();
                let f = Frame::new_checked(&buf[..len]).unwrap();
                assert_eq!(f.model(), entry.model);
                assert_eq!(f.tenant_id(), entry.tenant_id);
                assert_eq!(
                    entry.key.is_some(),
                    f.flags() & sluice_wire::flags::AUTHENTICATED != 0
                );
                if let Some(k) = &entry.key {
                    assert!(k.verify(&f));
                }
            }
            n += 1;
        }
    }
    assert!(n >= 3);
}

#[test]
fn fields_and_fill_reach_the_frame() {
    let mix = Mix::parse(
        r#"
        [[request]]
        model = "mlp"
        version = "1.0.0"
        adapter = "formal"
        intent = "chat"
        tenant_id = 9
        key = "hex:0001ff"
        deadline_offset_us = 5000
        token_count = 33
        schema_id = 4
        schema_version = 2
        [[request.tensors]]
        name = "x"
        dtype = "f32"
        shape = [2, 3]
        fill = 0.75
        [[request.tensors]]
        name = "ids"
        dtype = "i64"
        shape = [4]
        fill = -3
        "#,
    )
    .unwrap();
    let e = &mix.entries[0];
    assert_eq!(e.weight, 1);
    let mut buf = vec![0u8; 4096];
    let len = e.request().encode(&mut buf, 5, 0, None).unwrap();
    let f = Frame::new_checked(&buf[..len]).unwrap();
    assert_eq!(
        (f.model(), f.model_version(), f.adapter(), f.intent()),
        ("mlp", "1.0.0", "formal", "chat")
    );
    assert_eq!(
        (
            f.tenant_id(),
            f.token_count(),
            f.schema_id(),
            f.schema_version()
        ),
        (9, 33, 4, 2)
    );
    assert_ne!(f.deadline_us(), 0);
    assert!(sluice_wire::TenantKey::new(&[0, 1, 0xff]).verify(&f));
    let x = f.tensor("x").unwrap();
    assert_eq!((x.dtype, x.dims()), (DType::F32, &[2u64, 3][..]));
    assert!(
        f.tensor_data(&x)
            .chunks(4)
            .all(|c| f32::from_le_bytes(c.try_into().unwrap()) == 0.75)
    );
    let ids = f.tensor("ids").unwrap();
    assert!(
        f.tensor_data(&ids)
            .chunks(8)
            .all(|c| i64::from_le_bytes(c.try_into().unwrap()) == -3)
    );
}

#[test]
fn picks_follow_the_weights() {
    let mix = Mix::parse(
        r#"
        [[request]]
        weight = 1
        model = "a"
        version = "1"
        tenant_id = 1
        [[request]]
        weight = 3
        model = "b"
        version = "1"
        tenant_id = 1
        "#,
    )
    .unwrap();
    // Every residue of the total weight maps to the right entry.
    let picks: Vec<usize> = (0..8).map(|r| mix.pick(r)).collect();
    assert_eq!(picks, [0, 1, 1, 1, 0, 1, 1, 1]);
}

fn err(text: &str) -> String {
    match Mix::parse(text) {
        Ok(_) => panic!("accepted:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_mixes_are_refused_with_a_reason() {
    let base = "[[request]]\nmodel = \"m\"\nversion = \"1\"\ntenant_id = 1\n";
    assert!(matches!(Mix::parse(""), Err(MixError::Count(0))));
    assert!(err(&format!("{base}weight = 0\n")).contains("weight"));
    assert!(err(&format!("{base}colour = \"red\"\n")).contains("colour"));
    assert!(err(&format!("{base}key = \"hex:abc\"\n")).contains("odd"));
    assert!(err(&format!("{base}key = \"hex:zz\"\n")).contains("non-hex"));
    let t = |dtype: &str, shape: &str| {
        format!("{base}[[request.tensors]]\nname = \"x\"\ndtype = \"{dtype}\"\nshape = {shape}\n")
    };
    assert!(err(&t("f31", "[1]")).contains("unknown dtype"));
    // Larger than a datagram is fine (TCP); larger than a frame is not.
    assert!(Mix::parse(&t("f32", "[100000]")).is_ok());
    assert!(err(&t("f32", "[67108865]")).contains("larger than a frame"));
    assert!(err(&t("f32", "[4294967296, 4294967296]")).contains("larger than a frame"));
    assert!(err(&format!("{}fill = 1.0\n", t("f16", "[2]"))).contains("f16"));
    // Wire limits are checked at load: a model name with a space.
    assert!(
        err("[[request]]\nmodel = \"a b\"\nversion = \"1\"\ntenant_id = 1\n").contains("entry 0")
    );
    assert!(
        err(&format!(
            "{base}{}",
            "[[request.tensors]]\nname = \"x\"\ndtype = \"u8\"\nshape = [1,1,1,1,1,1,1,1,1]\n"
        ))
        .contains("rank")
    );
}

#[test]
fn keys_are_hex_or_text() {
    assert_eq!(parse_key("hex:00ff10").unwrap(), [0, 255, 16]);
    assert_eq!(parse_key("plain").unwrap(), b"plain");
}
