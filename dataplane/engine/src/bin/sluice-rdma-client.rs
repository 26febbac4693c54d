//! RDMA client for end-to-end checks and benchmarks against a running
//! appliance (`transport = "rdma"`).
//!
//! sluice-rdma-client --server IP:PORT [--tenant ID --key hex:..] check
//! sluice-rdma-client --server IP:PORT [..] bench [--small N] [--large N] [--large-mib M]
//! sluice-rdma-client --server IP:PORT [..] hold [--seconds S] [--reconnect S]
//! sluice-rdma-client --server IP:PORT [..] echo [--small N]
//!
//! `check` prints one line per check and a closing "N passed, N failed".
//! `bench` prints `rdma_bench key=value ...` (round trip in µs, MB/s).
//! `hold` keeps requests in flight until the connection drops and exits 0
//! only if that surfaced as a retryable connection-loss error; with
//! `--reconnect S` the same client then connects again and must be served
//! for S seconds (what a client does with a retryable error).
//! `echo` sends N 1000-byte echo requests one at a time (SEND only), checks
//! each answer's tensor, and prints `rdma_echo ok=.. errors=.. error=CODE
//! retryable=.. p50_us=..`; it exits 0 when all were echoed, 3 when every
//! one got the same error frame, 1 otherwise.

use std::net::SocketAddr;
use std::process::exit;
use std::time::{Duration, Instant};

use sluice_engine::transport::rdma::client::ReplyPath;
use sluice_engine::transport::rdma::{ClientError, ClientOpts, RdmaClient};
use sluice_wire::{DType, ErrorCode, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

const REPLY_WAIT: Duration = Duration::from_secs(10);

struct Args {
    server: SocketAddr,
    tenant: u32,
    key: Option<TenantKey>,
    cmd: String,
    small: u32,
    large: u32,
    large_mib: u32,
    seconds: u64,
    reconnect_s: u64,
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("sluice-rdma-client: {msg}");
    }
    eprintln!(
        "usage: sluice-rdma-client --server IP:PORT [--tenant ID --key hex:..] \
         (check | bench [--small N] [--large N] [--large-mib M] | hold [--seconds S] [--reconnect S] | echo [--small N])"
    );
    exit(2)
}

fn parse_key(s: &str) -> Option<TenantKey> {
    let hex = s.strip_prefix("hex:")?;
    if hex.len() % 2 != 0 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect();
    Some(TenantKey::new(&bytes?))
}

fn args() -> Args {
    let mut a = Args {
        server: SocketAddr::from(([127, 0, 0, 1], 7471)),
        tenant: 0,
        key: None,
        cmd: String::new(),
        small: 2000,
        large: 8,
        large_mib: 16,
        seconds: 30,
        reconnect_s: 0,
    };
    let mut it = std::env::args().skip(1);
    let num = |v: Option<String>, what: &str| -> u64 {
        v.and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage(&format!("{what} needs a number")))
    };
    while let Some(s) = it.next() {
        match s.as_str() {
            "--server" => {
                a.server = it
                    .next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| usage("--server needs IP:PORT"))
            }
            "--tenant" => a.tenant = num(it.next(), "--tenant") as u32,
            "--key" => {
                a.key = Some(
                    it.next()
                        .as_deref()
                        .and_then(parse_key)
                        .unwrap_or_else(|| usage("--key needs hex:...")),
                )
            }
            "--small" => a.small = num(it.next(), "--small") as u32,
            "--large" => a.large = num(it.next(), "--large") as u32,
            "--large-mib" => a.large_mib = num(it.next(), "--large-mib") as u32,
            "--seconds" => a.seconds = num(it.next(), "--seconds"),
            "--reconnect" => a.reconnect_s = num(it.next(), "--reconnect"),
            "-h" | "--help" => usage(""),
            c if a.cmd.is_empty() && !c.starts_with('-') => a.cmd = c.to_string(),
            other => usage(&format!("unknown argument {other}")),
        }
    }
    if a.cmd.is_empty() {
        usage("no command");
    }
    a
}

/// Builds a request with one u8 tensor of `len` bytes filled by `fill`
/// (in place: the buffer is the registered send buffer or staging slot).
fn build(
    buf: &mut [u8],
    a: &Args,
    id: u64,
    model: &str,
    version: &str,
    len: usize,
    seed: u8,
) -> usize {
    let dims = [len as u64];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::U8,
        dims: &dims,
        data: None,
    }];
    // A signed frame needs a fresh deadline (docs/wire.md, "Clients").
    let deadline_us = match a.key {
        Some(_) => {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64)
                + 2_000_000
        }
        None => 0,
    };
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: a.tenant,
        deadline_us,
        model,
        model_version: version,
        tensors: &t,
        ..FrameRepr::default()
    };
    let Ok(layout) = repr.emit(buf) else {
        return usize::MAX;
    };
    let off = layout.tensor_offsets[0];
    fill(&mut buf[off..off + len], seed);
    if let Some(k) = &a.key {
        let mut f = Frame::new_unchecked(&mut buf[..layout.frame_len]);
        k.sign(&mut f);
    }
    layout.frame_len
}

fn fill(b: &mut [u8], seed: u8) {
    for (i, x) in b.iter_mut().enumerate() {
        *x = (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8);
    }
}

/// What a reply said, checked against the request it answers.
#[derive(Debug)]
#[allow(dead_code)] // fields are read through Debug in failure messages
enum Outcome {
    /// A response whose tensor matches the pattern sent.
    Match { path: ReplyPath },
    /// A response whose tensor differs (with why).
    Mismatch(String),
    /// An error frame.
    Error(Option<ErrorCode>),
}

fn judge(bytes: &[u8], id: u64, len: usize, seed: u8, path: ReplyPath) -> Outcome {
    let f = match Frame::new_checked(bytes) {
        Ok(f) => f,
        Err(e) => return Outcome::Mismatch(format!("reply does not parse: {e}")),
    };
    if f.request_id() != id {
        return Outcome::Mismatch(format!("reply to {} instead of {id}", f.request_id()));
    }
    match f.kind() {
        Kind::Error => Outcome::Error(f.error_body().and_then(|b| b.code())),
        Kind::Response => {
            let Some(d) = f.tensor("x") else {
                return Outcome::Mismatch("no tensor x".into());
            };
            let data = f.tensor_data(&d);
            if data.len() != len {
                return Outcome::Mismatch(format!("tensor of {} bytes, sent {len}", data.len()));
            }
            if !(data.as_ptr() as usize).is_multiple_of(64) {
                return Outcome::Mismatch(
                    "reply tensor not 64-byte aligned in the receive memory".into(),
                );
            }
            let mut want = vec![0u8; 4096.min(len)];
            // Compare chunk by chunk without a second full-size buffer.
            for (ci, chunk) in data.chunks(4096).enumerate() {
                let w = &mut want[..chunk.len()];
                for (j, x) in w.iter_mut().enumerate() {
                    let i = ci * 4096 + j;
                    *x = (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 8) as u8);
                }
                if chunk != w {
                    return Outcome::Mismatch(format!(
                        "tensor differs in bytes {}..{}",
                        ci * 4096,
                        ci * 4096 + chunk.len()
                    ));
                }
            }
            Outcome::Match { path }
        }
        k => Outcome::Mismatch(format!("unexpected frame kind {k:?}")),
    }
}

fn connect(a: &Args, large_mib: u32) -> Result<RdmaClient, ClientError> {
    let slot = ((large_mib + 2).div_ceil(2) * 2) << 20;
    // Generous: emulated RDMA (Soft-RoCE under TCG) is slow to set up.
    RdmaClient::connect(
        a.server,
        ClientOpts {
            slot_size: slot,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        },
    )
}

struct Tally {
    passed: u32,
    failed: u32,
}

impl Tally {
    fn check(&mut self, name: &str, r: Result<String, String>) {
        match r {
            Ok(m) => {
                self.passed += 1;
                println!("rdma check {name}: ok ({m})");
            }
            Err(m) => {
                self.failed += 1;
                println!("rdma check {name}: FAILED: {m}");
            }
        }
    }
}

fn roundtrip_small(
    c: &mut RdmaClient,
    a: &Args,
    id: u64,
    model: &str,
    version: &str,
    len: usize,
) -> Result<Outcome, ClientError> {
    let seed = id as u8;
    c.send(|b| build(b, a, id, model, version, len, seed))?;
    c.recv(REPLY_WAIT, |bytes, path| judge(bytes, id, len, seed, path))
}

fn check(a: &Args) -> i32 {
    let mut t = Tally {
        passed: 0,
        failed: 0,
    };
    let mut c = match connect(a, a.large_mib) {
        Ok(c) => c,
        Err(e) => {
            println!("rdma check connect: FAILED: {e}");
            println!("0 passed, 1 failed");
            return 1;
        }
    };
    let g = c.server();
    t.check(
        "connect",
        if g.slot_count >= 1 && g.slot_size as usize >= (a.large_mib as usize) << 20 {
            Ok(format!(
                "conn {} granted {} slot(s) of {} MiB, credits {}",
                g.conn_id,
                g.slot_count,
                g.slot_size >> 20,
                g.credits
            ))
        } else {
            Err(format!(
                "grant too small for a {} MiB tensor: {g:?}",
                a.large_mib
            ))
        },
    );
    // 1. One small frame by SEND, echoed back by SEND.
    t.check(
        "small_echo",
        match roundtrip_small(&mut c, a, 1, "echo", "1", 1000) {
            Ok(Outcome::Match {
                path: ReplyPath::Send,
            }) => Ok("1000-byte tensor echoed by SEND".into()),
            other => Err(format!("{other:?}")),
        },
    );
    // 2. Many small frames pipelined up to the credit limit.
    let n = 500u64;
    let r = (|| -> Result<String, String> {
        let credit = c.server().credits.min(8) as u64;
        let (mut sent, mut got) = (0u64, 0u64);
        while got < n {
            while sent < n && sent - got < credit {
                let id = 100 + sent;
                c.send(|b| build(b, a, id, "echo", "1", 256, id as u8))
                    .map_err(|e| e.to_string())?;
                sent += 1;
            }
            // Replies come back in order on one QP and one worker.
            let id = 100 + got;
            let o = c
                .recv(REPLY_WAIT, |bytes, path| {
                    judge(bytes, id, 256, id as u8, path)
                })
                .map_err(|e| e.to_string())?;
            if !matches!(o, Outcome::Match { .. }) {
                return Err(format!("request {id}: {o:?}"));
            }
            got += 1;
        }
        Ok(format!(
            "{n} pipelined requests, window {credit}, all matched"
        ))
    })();
    t.check("small_pipelined", r);
    // 3. A request without a model version gets the clear error.
    t.check(
        "error_frame",
        match roundtrip_small(&mut c, a, 2, "echo", "", 64) {
            Ok(Outcome::Error(Some(ErrorCode::ModelVersionRequired))) => {
                Ok("model_version_required".into())
            }
            other => Err(format!("{other:?}")),
        },
    );
    // 4. A large tensor through RDMA WRITE into a granted slot, echoed back
    //    by RDMA WRITE into our reply slot; every byte checked.
    let len = (a.large_mib as usize) << 20;
    let r = (|| -> Result<String, String> {
        for (i, slot) in (0..c.slot_count()).enumerate() {
            let id = 10_000 + i as u64;
            let seed = 7 + i as u8;
            let t0 = Instant::now();
            c.write_slot(slot, |b| build(b, a, id, "echo", "1", len, seed))
                .map_err(|e| e.to_string())?;
            let o = c
                .recv(Duration::from_secs(60), |bytes, path| {
                    judge(bytes, id, len, seed, path)
                })
                .map_err(|e| e.to_string())?;
            match o {
                Outcome::Match {
                    path: ReplyPath::Slot(k),
                } if k == slot => {
                    println!(
                        "  slot {slot}: {} MiB round trip in {:.1} ms",
                        a.large_mib,
                        t0.elapsed().as_secs_f64() * 1e3
                    );
                }
                o => return Err(format!("slot {slot}: {o:?}")),
            }
        }
        Ok(format!(
            "{} MiB tensor written to each of {} slot(s), reply written back and checked",
            a.large_mib,
            c.slot_count()
        ))
    })();
    t.check("large_write", r);
    // 5. A slot index the appliance never granted cannot be used.
    t.check(
        "slot_out_of_range",
        match c.write_slot(c.slot_count(), |_| 0) {
            Err(ClientError::SlotBusy(_)) => Ok("refused locally".into()),
            other => Err(format!("{other:?}")),
        },
    );
    // 6. Small frames still work after the large ones.
    t.check(
        "small_after_large",
        match roundtrip_small(&mut c, a, 3, "echo", "1", 4000) {
            Ok(Outcome::Match { .. }) => Ok("ok".into()),
            other => Err(format!("{other:?}")),
        },
    );
    println!("{} passed, {} failed", t.passed, t.failed);
    i32::from(t.failed > 0)
}

fn bench(a: &Args) -> i32 {
    let mut c = match connect(a, a.large_mib) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice-rdma-client: {e}");
            return 1;
        }
    };
    // Small round trips, one at a time: the null model answers zeros.
    let mut rtts: Vec<f64> = Vec::with_capacity(a.small as usize);
    for i in 0..(a.small as u64 + 100) {
        let t0 = Instant::now();
        let r = c
            .send(|b| build(b, a, i, "null", "1", 64, 0))
            .and_then(|()| c.recv(REPLY_WAIT, |b, _| Frame::new_checked(b).map(|f| f.kind())));
        match r {
            Ok(Ok(Kind::Response)) => {}
            other => {
                eprintln!("sluice-rdma-client: small request {i}: {other:?}");
                return 1;
            }
        }
        if i >= 100 {
            rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    rtts.sort_by(|x, y| x.total_cmp(y));
    let pct = |p: f64| {
        rtts.get(((rtts.len() as f64 - 1.0) * p) as usize)
            .copied()
            .unwrap_or(0.0)
    };
    // Large: write a tensor, wait for the reply (null: zeros of the same size
    // written back), one slot at a time, so bytes moved = 2 x tensor.
    let len = (a.large_mib as usize) << 20;
    let t0 = Instant::now();
    for i in 0..a.large as u64 {
        let slot = (i % c.slot_count() as u64) as u32;
        let r = c
            .write_slot(slot, |b| build(b, a, 1_000_000 + i, "null", "1", len, 1))
            .and_then(|()| {
                c.recv(Duration::from_secs(60), |b, p| {
                    (Frame::new_checked(b).map(|f| f.kind()), p)
                })
            });
        match r {
            Ok((Ok(Kind::Response), ReplyPath::Slot(_))) => {}
            other => {
                eprintln!("sluice-rdma-client: large request {i}: {other:?}");
                return 1;
            }
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let mb_s = (2 * len as u64 * a.large as u64) as f64 / secs / 1e6;
    println!(
        "rdma_bench small_n={} small_rtt_p50_us={:.2} small_rtt_p99_us={:.2} large_n={} large_mib={} large_mb_s={:.2} large_req_ms={:.1}",
        rtts.len(),
        pct(0.5),
        pct(0.99),
        a.large,
        a.large_mib,
        mb_s,
        secs * 1e3 / a.large.max(1) as f64
    );
    0
}

fn hold(a: &Args) -> i32 {
    let mut c = match connect(a, 2) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice-rdma-client: {e}");
            return 1;
        }
    };
    println!(
        "hold: connected as {}; keeping requests in flight",
        c.server().conn_id
    );
    let first = c.server().conn_id;
    let code = match pump(&mut c, a, Duration::from_secs(a.seconds), 0) {
        Ok(ok) => {
            println!(
                "hold: connection still up after {}s ({ok} replies)",
                a.seconds
            );
            return 1;
        }
        Err((e, ok)) => lost(e, ok),
    };
    if code != 0 || a.reconnect_s == 0 {
        return code;
    }
    // What a client does with a retryable error: connect again, resend.
    drop(c);
    let mut c = match connect(a, 2) {
        Ok(c) => c,
        Err(e) => {
            println!("hold: reconnect failed: {e}");
            return 1;
        }
    };
    let again = c.server().conn_id;
    println!("hold: reconnected as {again} (was {first})");
    match pump(&mut c, a, Duration::from_secs(a.reconnect_s), 1 << 32) {
        Ok(ok) if ok > 0 && again != first => {
            println!("hold: served again: {ok} replies on connection {again}");
            0
        }
        Ok(ok) => {
            println!("hold: after reconnecting: {ok} replies on connection {again}");
            1
        }
        Err((e, ok)) => {
            println!("hold: after reconnecting and {ok} replies: {e}");
            1
        }
    }
}

/// Keeps up to 4 requests in flight for `span`; the number of replies, or
/// the first error other than a timeout with the replies before it.
fn pump(
    c: &mut RdmaClient,
    a: &Args,
    span: Duration,
    id_base: u64,
) -> Result<u64, (ClientError, u64)> {
    let deadline = Instant::now() + span;
    let mut ok = 0u64;
    let mut id = id_base;
    while Instant::now() < deadline {
        while c.outstanding() < 4 {
            id += 1;
            let i = id;
            c.send(|b| build(b, a, i, "echo", "1", 512, i as u8))
                .map_err(|e| (e, ok))?;
        }
        match c.recv(Duration::from_secs(5), |_, _| ()) {
            Ok(()) => ok += 1,
            Err(ClientError::Timeout) => {}
            Err(e) => return Err((e, ok)),
        }
    }
    Ok(ok)
}

fn lost(e: ClientError, ok: u64) -> i32 {
    let retryable = e.retryable();
    println!("hold: after {ok} replies: {e} (retryable: {retryable})");
    if matches!(e, ClientError::ConnectionLost { .. }) && retryable {
        println!("hold: connection loss surfaced as a retryable error");
        0
    } else {
        1
    }
}

fn echo(a: &Args) -> i32 {
    let mut c = match RdmaClient::connect(
        a.server,
        ClientOpts {
            slots: 0,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        },
    ) {
        Ok(c) => c,
        Err(e) => {
            println!("rdma_echo connect failed: {e}");
            return 1;
        }
    };
    let n = a.small.max(1) as u64;
    let (mut ok, mut errors, mut other) = (0u64, 0u64, 0u64);
    let mut first_error: Option<ErrorCode> = None;
    let mut rtt_us = Vec::with_capacity(n as usize);
    for id in 1..=n {
        let t = Instant::now();
        match roundtrip_small(&mut c, a, id, "echo", "1", 1000) {
            Ok(Outcome::Match { .. }) => {
                ok += 1;
                rtt_us.push(t.elapsed().as_secs_f64() * 1e6);
            }
            Ok(Outcome::Error(code)) => {
                errors += 1;
                if first_error.is_none() {
                    first_error = code;
                }
                if code != first_error {
                    other += 1;
                }
            }
            Ok(Outcome::Mismatch(m)) => {
                println!("rdma_echo request {id}: {m}");
                other += 1;
            }
            Err(e) => {
                println!("rdma_echo request {id}: {e} (retryable: {})", e.retryable());
                other += 1;
                break;
            }
        }
    }
    rtt_us.sort_by(f64::total_cmp);
    let p50 = rtt_us.get(rtt_us.len() / 2).copied();
    println!(
        "rdma_echo ok={ok} errors={errors} error={} retryable={} p50_us={}",
        first_error.map_or("none", |e| e.as_str()),
        first_error.is_some_and(|e| e.retryable()),
        p50.map_or("NA".into(), |p| format!("{p:.1}"))
    );
    if other > 0 {
        1
    } else if ok == n {
        0
    } else if errors == n {
        3
    } else {
        1
    }
}

fn main() {
    let a = args();
    let code = match a.cmd.as_str() {
        "echo" => echo(&a),
        "check" => check(&a),
        "bench" => bench(&a),
        "hold" => hold(&a),
        c => usage(&format!("unknown command {c}")),
    };
    exit(code)
}
