//! LoRA adapters beyond the per-session cache, against the real ONNX
//! Runtime: loaded on demand, least recently used evicted, counted, and
//! every answer still the adapter's.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use common::*;
use sluice_infer::{ADAPTER_CACHE_MAX, AdapterSpec, AlignedBuf, OrtModel, RunStats};
use sluice_models::bundled::{self, MLP_IN};
use sluice_wire::{DType, ErrorCode, Frame};

fn run(m: &mut OrtModel, x: &[f32], adapter: &str) -> Result<Vec<f32>, ErrorCode> {
    let data = f32_bytes(x);
    let rx = request(
        "mlp",
        adapter,
        &[Input {
            name: "x",
            dtype: DType::F32,
            dims: &[1, MLP_IN as u64],
            data: &data,
        }],
    );
    let req = Frame::new_checked(rx.as_slice()).unwrap();
    let mut tx = AlignedBuf::new(64 << 10);
    let mut stats = RunStats::default();
    let n = m
        .run_into(&req, Some(adapter), tx.as_mut_slice(), &mut stats)
        .map_err(|r| r.code)?;
    let resp = Frame::new_checked(&tx.as_slice()[..n]).unwrap();
    let y = resp.tensor("y").unwrap();
    Ok(f32s(resp.tensor_data(&y)))
}

#[test]
fn adapters_beyond_the_cache_load_on_demand_and_evict_the_least_recent() {
    init();
    // One adapter file per id (the same weights), so one can be removed.
    let n = ADAPTER_CACHE_MAX + 36;
    let formal = bundled::formal_adapter();
    let adapters: Vec<AdapterSpec> = (0..n)
        .map(|i| AdapterSpec {
            id: format!("a{i}"),
            path: write_temp(&format!("a{i}.onnx_adapter"), &formal),
        })
        .collect();
    let spec = sluice_infer::ModelSpec {
        adapters: adapters.clone(),
        ..mlp_spec()
    };
    let mut m = OrtModel::load(&spec).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.adapter_ids().count(), n);
    assert_eq!(
        m.adapter_cache(),
        (ADAPTER_CACHE_MAX, 0, 0),
        "the first ones are loaded at load"
    );

    let x = sixteenths(MLP_IN, 3);
    let want = bundled::mlp_reference(&x, Some(&bundled::formal_lora()));
    let before = sluice_infer::adapter_cache_totals();
    // Every adapter once: the ones past the cache are misses that evict.
    for i in 0..n {
        assert_eq!(
            run(&mut m, &x, &format!("a{i}")).unwrap(),
            want,
            "adapter a{i}"
        );
    }
    let (loaded, loads, evictions) = m.adapter_cache();
    assert_eq!(loaded, ADAPTER_CACHE_MAX);
    assert_eq!(loads, 36);
    assert_eq!(evictions, 36);
    // The most recent one is a hit; the least recent (a36: a0..a35 were
    // evicted first, then a36 is the oldest left) is still loaded, a0 is not.
    run(&mut m, &x, &format!("a{}", n - 1)).unwrap();
    assert_eq!(m.adapter_cache().1, 36, "a hit loads nothing");
    run(&mut m, &x, "a36").unwrap();
    assert_eq!(m.adapter_cache().1, 36, "a36 stayed loaded");
    assert_eq!(run(&mut m, &x, "a0").unwrap(), want);
    assert_eq!(m.adapter_cache(), (ADAPTER_CACHE_MAX, 37, 37));

    // Unknown ids are refused; a file gone since load is a clear failure.
    assert_eq!(run(&mut m, &x, "nope"), Err(ErrorCode::UnknownAdapter));
    std::fs::remove_file(&adapters[1].path).unwrap();
    assert_eq!(run(&mut m, &x, "a1"), Err(ErrorCode::InferenceFailed));
    let after = sluice_infer::adapter_cache_totals();
    assert!(after.loads >= before.loads + 37);
    assert!(after.evictions >= before.evictions + 37);
    assert!(after.load_failures > before.load_failures);
    // The session still answers.
    assert_eq!(run(&mut m, &x, "a2").unwrap(), want);
}
