//! The engine's own ceiling (issue 22 item 7): one worker's burst loop
//! (`Worker::poll_once`: receive a burst, classify, admit, run the null
//! model into the reply buffer, send) over an in-memory transport that
//! makes no syscall and copies nothing: requests sit in a pre-built arena
//! that receive buffers point into, and a send counts the answer and frees
//! its buffer at once (a NIC that completed). Requests per second on one
//! core, next to `classify_frame` alone on the same frame.
//!
//! Two cases: unsigned (`[auth] mode = "none"`), and signed by a tenant
//! with the freshness rule and the replay table on, every frame distinct
//! (its own request id, so its own tag) with a deadline in the window.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU8;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_engine::config::Config;
use sluice_engine::handler::{Handler, NullHandler};
use sluice_engine::rcu::Rcu;
use sluice_engine::stats::{HistExchange, WorkerCounters};
use sluice_engine::tables::LiveConfig;
use sluice_engine::transport::{RxPacket, Transport, TransportCounters, TxPacket};
use sluice_engine::worker::{
    Shared, Verdict, Worker, WorkerLinks, WorkerParams, classify_frame, state,
};
use sluice_wire::{DType, Frame, FrameRepr, Kind, TenantKey, TensorRepr};

use crate::{KEY, Result, TENANT, tenant};

/// Bytes per request slot in the arena (a small request is ~120 bytes).
const STRIDE: usize = 256;
/// Transmit buffers and their size.
const TX_N: u32 = 256;
const TX_SIZE: usize = 2048;
/// Distinct signed frames per round: below the replay table's default
/// capacity (262,144), so every one is fresh.
const SIGNED_N: usize = 200_000;
/// Frames per unsigned round (they repeat: nothing remembers them).
const UNSIGNED_N: usize = 1_000_000;
const ROUNDS: usize = 7;
const BURST: usize = 32;

/// Requests in an arena, handed out once each.
struct LoopTransport {
    arena: Vec<u8>,
    lens: Vec<u32>,
    next: usize,
    /// Frames to hand out this round (may wrap the arena).
    left: usize,
    tx_mem: Vec<u8>,
    tx_free: Vec<u32>,
    answers: u64,
    not_responses: u64,
}

impl LoopTransport {
    fn new(frames: &[Vec<u8>]) -> LoopTransport {
        let mut arena = vec![0u8; frames.len() * STRIDE];
        let mut lens = Vec::with_capacity(frames.len());
        for (i, f) in frames.iter().enumerate() {
            assert!(f.len() <= STRIDE, "a request of {} bytes", f.len());
            arena[i * STRIDE..i * STRIDE + f.len()].copy_from_slice(f);
            lens.push(f.len() as u32);
        }
        LoopTransport {
            arena,
            lens,
            next: 0,
            left: 0,
            tx_mem: vec![0u8; TX_N as usize * TX_SIZE],
            tx_free: (0..TX_N).rev().collect(),
            answers: 0,
            not_responses: 0,
        }
    }
}

const PEER: SocketAddr = SocketAddr::V4(std::net::SocketAddrV4::new(
    std::net::Ipv4Addr::LOCALHOST,
    9,
));

impl Transport for LoopTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        let n = out.len().min(self.left);
        for o in out.iter_mut().take(n) {
            let i = self.next;
            self.next = (self.next + 1) % self.lens.len();
            *o = RxPacket {
                buf: i as u32,
                off: 0,
                len: self.lens[i],
                peer: PEER,
                truncated: false,
                port: sluice_engine::transport::PORT_SERVICE,
                conn: sluice_engine::transport::CONN_DATAGRAM,
            };
        }
        self.left -= n;
        n
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.tx_free.pop()
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        let r = rx.buf as usize * STRIDE;
        let t = tx as usize * TX_SIZE;
        (
            &self.arena[r..r + rx.len as usize],
            &mut self.tx_mem[t..t + TX_SIZE],
        )
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let r = rx.buf as usize * STRIDE;
        &self.arena[r..r + rx.len as usize]
    }

    fn rx_release(&mut self, _rx: &RxPacket) {}

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        for p in pkts {
            let t = p.buf as usize * TX_SIZE;
            // One byte read: the answer's kind (a Response, not an error).
            let f = Frame::new_unchecked(&self.tx_mem[t..t + p.len as usize]);
            if f.kind() != Kind::Response {
                self.not_responses += 1;
            }
            self.answers += 1;
            self.tx_free.push(p.buf);
        }
    }

    fn tx_free(&mut self, tx: u32) {
        self.tx_free.push(tx);
    }

    fn wait(&mut self, _timeout: Duration) {}

    fn counters(&self) -> TransportCounters {
        TransportCounters::default()
    }

    fn local_addr(&self) -> SocketAddr {
        PEER
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// A small request (one f32[1,4] tensor) to the null model, signed when
/// `key` is given, with a deadline 9 s ahead.
fn request(id: u64, key: Option<&TenantKey>) -> Result<Vec<u8>> {
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let dx = [1u64, 4];
    let t = [TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dx,
        data: Some(&x),
    }];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: if key.is_some() { TENANT } else { 0 },
        deadline_us: if key.is_some() {
            now_us() + 9_000_000
        } else {
            0
        },
        model: "null",
        model_version: "1.0.0",
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; STRIDE];
    let n = repr.emit(&mut buf)?.frame_len;
    buf.truncate(n);
    if let Some(k) = key {
        k.sign(&mut Frame::new_unchecked(&mut buf[..]));
    }
    Ok(buf)
}

/// The config's tables with one route: model `null` to shard `main`.
fn tables(cfg: &Config) -> Result<sluice_engine::tables::Tables> {
    let mut live = LiveConfig::of(cfg);
    live.routes = vec![sluice_engine::config::RouteCfg {
        name: "r".into(),
        model: Some("null".into()),
        shard: "main".into(),
        ..Default::default()
    }];
    crate::build(&live, cfg)
}

fn worker(cfg: &Config, t: LoopTransport) -> Result<Worker<LoopTransport>> {
    let tables = tables(cfg)?;
    let shared = Arc::new(Shared {
        tables: Rcu::new(tables),
        state: AtomicU8::new(state::RUNNING),
    });
    let (_ctrl_tx, ctrl) = crossbeam_channel::bounded(1);
    let (returned, _ret_rx) = crossbeam_channel::bounded(1);
    let handlers: Vec<Option<Box<dyn Handler>>> = vec![Some(Box::new(NullHandler))];
    let p = WorkerParams {
        index: 0,
        rx_burst_max: BURST,
        poll: sluice_engine::config::PollMode::Busy,
        spin: Duration::ZERO,
        forward_timeout: Duration::from_millis(100),
        replay_entries: cfg.auth.replay_entries as usize,
        replay_senders: cfg.auth.replay_senders as usize,
        replay_window_ids: cfg.auth.replay_window_ids as usize,
        sampler: sluice_engine::trace::Sampler::new(0.0),
    };
    Ok(Worker::new(
        p,
        t,
        shared,
        handlers,
        WorkerLinks {
            ctrl,
            returned,
            counters: Arc::new(WorkerCounters::default()),
            hist_out: Arc::new(HistExchange::new()),
            spans: Arc::new(sluice_engine::trace::SpanRing::new(16)),
            wake: None,
            load: Arc::new(sluice_engine::load::LoadRing::new()),
        },
    ))
}

/// Requests per second of one round of `n` requests through `w`.
fn round(w: &mut Worker<LoopTransport>, n: usize) -> Result<f64> {
    w.transport_mut().left = n;
    let before = w.transport().answers;
    let t = Instant::now();
    while w.transport().left > 0 {
        w.poll_once(false);
    }
    let s = t.elapsed().as_secs_f64();
    let got = w.transport().answers - before;
    if got != n as u64 || w.transport().not_responses > 0 {
        return Err(format!(
            "{got} answers to {n} requests, {} not responses",
            w.transport().not_responses
        )
        .into());
    }
    Ok(n as f64 / s)
}

/// Fastest `classify_frame` of `bytes` (ns), without the replay table.
fn classify_ns(cfg: &Config, bytes: &[u8]) -> Result<f64> {
    let t = tables(cfg)?;
    let now = now_us();
    let v = classify_frame(bytes, false, &t, false, now, None);
    if !matches!(v, Verdict::Admit { .. }) {
        return Err(format!("the request is not admitted: {v:?}").into());
    }
    Ok(crate::time(21, 20.0, || {
        black_box(classify_frame(
            black_box(bytes),
            false,
            &t,
            false,
            now,
            None,
        ));
    }))
}

// The same detection sha2 0.10's x86 backend runs before it picks its
// SHA-NI path over the portable one (sha2/src/sha256/x86.rs).
cpufeatures::new!(shani, "sha", "sse2", "ssse3", "sse4.1");

/// Which SHA-256 path runs, what a compression costs, and an HMAC over
/// `covered` bytes through the hmac crate against `TenantKey`'s pre-keyed
/// states.
fn sha_path(covered: usize) {
    use hmac::Mac;
    use sha2::Digest;
    let data = vec![0x5au8; 64 * 1024];
    let block_ns = crate::time(11, 10.0, || {
        black_box(sha2::Sha256::digest(black_box(&data)));
    }) / (data.len() / 64) as f64;
    let msg = vec![0x33u8; covered];
    let crate_ns = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(&KEY)
        .ok()
        .map_or(f64::NAN, |m| {
            crate::time(21, 10.0, || {
                let mut m = m.clone();
                m.update(black_box(&msg));
                black_box(m.finalize());
            })
        });
    let key = TenantKey::new(&KEY);
    let ours_ns = crate::time(21, 10.0, || {
        black_box(key.sign_message(black_box(&msg)));
    });
    println!(
        "SHA-256: SHA-NI detected (the test sha2 0.10 runs) = {}; {block_ns:.1} ns per 64-byte block (64 KiB digest).",
        shani::get()
    );
    println!(
        "HMAC-SHA256 of {covered} bytes ({} inner blocks + 1 outer): hmac crate, pre-keyed and cloned, {crate_ns:.0} ns; TenantKey (pre-keyed states, sha2::compress256) {ours_ns:.0} ns ({:.2}x)\n",
        (covered + 9).div_ceil(64),
        ours_ns / crate_ns
    );
}

pub fn ceiling(base: &Config) -> Result<()> {
    println!(
        "## 8. The engine's ceiling: one worker's loop over an in-memory transport (no syscalls), null model, bursts of {BURST} (fastest of {ROUNDS} rounds)\n"
    );
    // Unsigned.
    let mut cfg = base.clone();
    cfg.auth.mode = sluice_engine::config::AuthMode::None;
    cfg.tenants.clear();
    let c_unsigned = classify_ns(&cfg, &request(1, None)?)?;
    let frames: Vec<Vec<u8>> = (0..1024).map(|i| request(i, None)).collect::<Result<_>>()?;
    let mut w = worker(&cfg, LoopTransport::new(&frames))?;
    round(&mut w, 10_000)?;
    let mut unsigned = 0.0f64;
    for _ in 0..ROUNDS {
        unsigned = unsigned.max(round(&mut w, UNSIGNED_N)?);
    }
    // Signed, every frame distinct.
    let mut cfg = base.clone();
    cfg.tenants = vec![tenant("t", TENANT)];
    let key = TenantKey::new(&KEY);
    let one = request(1, Some(&key))?;
    let c_signed = classify_ns(&cfg, &one)?;
    let f = Frame::new_checked(&one[..])?;
    let (a, b) = f.auth_covered();
    let covered = a.len() + b.len();
    let verify_ns = crate::time(21, 10.0, || {
        black_box(key.verify(black_box(&f)));
    });
    let mut signed = 0.0f64;
    for r in 0..ROUNDS {
        let frames: Vec<Vec<u8>> = (0..SIGNED_N)
            .map(|i| request((r * SIGNED_N + i) as u64, Some(&key)))
            .collect::<Result<_>>()?;
        // A fresh worker (and replay table) per round.
        let mut w = worker(&cfg, LoopTransport::new(&frames))?;
        signed = signed.max(round(&mut w, SIGNED_N)?);
    }
    println!(
        "Signed small request: {} bytes, {covered} covered by the tag; TenantKey::verify {verify_ns:.0} ns.",
        one.len()
    );
    sha_path(covered);
    println!(
        "| request | classify_frame ns | worker loop req/s | ns per request in the loop | loop / eRPC 10M/s |"
    );
    println!("| --- | ---: | ---: | ---: | ---: |");
    row("unsigned", c_unsigned, unsigned);
    row("signed (HMAC, freshness, replay table)", c_signed, signed);
    println!();
    Ok(())
}

fn row(what: &str, classify_ns: f64, rps: f64) {
    println!(
        "| {what} | {classify_ns:.0} | {:.0} | {:.0} | {:.2}× |",
        rps,
        1e9 / rps,
        rps / 10e6
    );
}
