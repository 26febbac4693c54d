//! nats-responder: answers Sluice request frames arriving over NATS
//! request-reply with the same ONNX model, run in place by sluice-infer.
//!
//! nats-responder --nats 127.0.0.1:4222 --model models/mlp.onnx --name mlp --version 1.0.0 \
//!     [--adapter formal=models/mlp_formal.onnx_adapter] [--tenant 1=hex:...] \
//!     [--subject sluice.infer] [--queue responders] [--spin-us 200] [--duration-s N]
#![deny(unsafe_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use sluice_infer::{AdapterSpec, ModelSpec, OrtModel};
use sluice_nats_responder::Responder;
use sluice_wire::TenantKey;

/// How long a blocked wait for a message lasts before the loop looks at
/// its stop time again.
const BLOCK_WAIT: Duration = Duration::from_millis(100);

struct Args {
    nats: SocketAddr,
    subject: String,
    queue: String,
    spec: ModelSpec,
    tenants: HashMap<u32, TenantKey>,
    ort_lib: Option<PathBuf>,
    spin_us: u64,
    duration_s: Option<u64>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        nats: SocketAddr::from(([127, 0, 0, 1], 4222)),
        subject: "sluice.infer".into(),
        queue: "responders".into(),
        spec: ModelSpec {
            name: "mlp".into(),
            version: "1.0.0".into(),
            path: PathBuf::new(),
            adapters: vec![],
        },
        tenants: HashMap::new(),
        ort_lib: None,
        spin_us: 200,
        duration_s: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--nats" => a.nats = val()?.parse().map_err(|e| format!("--nats: {e}"))?,
            "--subject" => a.subject = val()?,
            "--queue" => a.queue = val()?,
            "--model" => a.spec.path = val()?.into(),
            "--name" => a.spec.name = val()?,
            "--version" => a.spec.version = val()?,
            "--adapter" => {
                let v = val()?;
                let (id, path) = v.split_once('=').ok_or("--adapter wants ID=PATH")?;
                a.spec.adapters.push(AdapterSpec {
                    id: id.into(),
                    path: path.into(),
                });
            }
            "--tenant" => {
                let v = val()?;
                let (id, key) = v.split_once('=').ok_or("--tenant wants ID=KEY")?;
                let id: u32 = id.parse().map_err(|e| format!("--tenant id: {e}"))?;
                let key =
                    sluice_perf::mix::parse_key(key).map_err(|e| format!("--tenant key: {e}"))?;
                a.tenants.insert(id, TenantKey::new(&key));
            }
            "--ort-lib" => a.ort_lib = Some(val()?.into()),
            "--spin-us" => a.spin_us = val()?.parse().map_err(|e| format!("--spin-us: {e}"))?,
            "--duration-s" => {
                a.duration_s = Some(val()?.parse().map_err(|e| format!("--duration-s: {e}"))?)
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if a.spec.path.as_os_str().is_empty() {
        return Err("--model PATH is required".into());
    }
    Ok(a)
}

fn main() -> ExitCode {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("nats-responder: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(lib) = sluice_infer::library_path(a.ort_lib.as_deref()) else {
        eprintln!(
            "nats-responder: no ONNX Runtime library: set SLUICE_ORT_LIB or --ort-lib (scripts/setup-onnxruntime.sh)"
        );
        return ExitCode::from(1);
    };
    if let Err(e) = sluice_infer::init(&lib) {
        eprintln!("nats-responder: {e}");
        return ExitCode::from(1);
    }
    let model = match OrtModel::load(&a.spec) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("nats-responder: {e}");
            return ExitCode::from(1);
        }
    };
    let mut r = match Responder::new(a.nats, &a.subject, &a.queue, model, a.tenants) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nats-responder: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "nats-responder: serving {} {} on {:?} via {}",
        a.spec.name, a.spec.version, a.subject, a.nats
    );
    let stop = a
        .duration_s
        .map(|s| Instant::now() + Duration::from_secs(s));
    let spin = Duration::from_micros(a.spin_us);
    let mut last = Instant::now();
    loop {
        if stop.is_some_and(|s| Instant::now() >= s) {
            break;
        }
        // Adaptive, as the engine's poll = "adaptive": spin for spin_us
        // after the last message, then sleep in the kernel.
        let wait = if last.elapsed() < spin {
            None
        } else {
            Some(BLOCK_WAIT)
        };
        match r.serve_one(wait) {
            Ok(true) => last = Instant::now(),
            Ok(false) => std::hint::spin_loop(),
            Err(e) => {
                eprintln!("nats-responder: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let s = &r.stats;
    eprintln!(
        "nats-responder: ok {} errors {} malformed {} in-place bytes {} copied bytes {}",
        s.ok, s.errors, s.malformed, s.run.payload_bytes_in_place, s.run.payload_bytes_copied
    );
    ExitCode::SUCCESS
}
