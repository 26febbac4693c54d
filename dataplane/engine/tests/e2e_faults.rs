//! A worker that fails under traffic (issue 13.2): a model whose handler
//! panics is injected through the engine's handler factory (test code only;
//! nothing in the product can ask for it). The failing worker's requests are
//! answered (a retryable `internal`, or the answer it had already built),
//! the panic and the restart are counted and visible in status and stats,
//! live changes keep working, and both workers serve again (issue 29.1;
//! e2e_supervise.rs covers restarts under load and crash loops). Requests a
//! batching shard holds across loop iterations, and the members of a
//! batched run the fault cut short, are answered too.
// Tests may unwrap and expect: a failed unwrap is a failed test (clippy.toml
// covers #[test] functions; this covers their helpers).
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod common;

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use common::*;
use sluice_engine::config::ModelCfg;
use sluice_engine::handler::{BatchKey, BatchSlot, Handler, Reject, RunAccount};
use sluice_engine::{Config, Engine, EngineOptions};
use sluice_wire::{ErrorCode, Frame, Kind};

/// The tests here make workers panic on purpose and time what follows; a
/// panic elsewhere in the process (its message and backtrace printed under
/// the panic hook's lock) would stretch that timing, so they run one at a
/// time.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Panics on every request: the injected fault.
struct Boom;

impl Handler for Boom {
    fn handle(
        &mut self,
        _req: &Frame<&[u8]>,
        _adapter: Option<&str>,
        _tx: &mut [u8],
        _acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        panic!("injected fault: the boom model always panics");
    }
}

/// A null model that stacks every request (one row, one key) and answers
/// each on its own after the batched run; with `boom`, the batched run
/// panics.
struct Stack {
    inner: Box<dyn Handler>,
    boom: bool,
}

impl Handler for Stack {
    fn handle(
        &mut self,
        req: &Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        self.inner.handle(req, adapter, tx, acct)
    }

    fn batch_key(&self, _req: &Frame<&[u8]>, _adapter: Option<&str>) -> Option<BatchKey> {
        Some(BatchKey { rows: 1, key: 1 })
    }

    fn run_batch(
        &mut self,
        reqs: &[&[u8]],
        _adapter: Option<&str>,
        _input: &mut [u8],
        _output: &mut [u8],
        slots: &mut [BatchSlot],
        _acct: &mut RunAccount,
    ) -> Result<usize, Reject> {
        if self.boom {
            panic!("injected fault: a batched run panics");
        }
        slots.fill(BatchSlot::Left);
        Ok(reqs.len())
    }
}

/// The default handlers, plus `boom` for models named "boom" and `Stack`
/// for "stack" (and "stackboom", whose batched runs panic).
fn factory(m: &ModelCfg, cfg: &Config) -> Result<Box<dyn Handler>, String> {
    match m.name.as_str() {
        "boom" => Ok(Box::new(Boom)),
        "stack" | "stackboom" => Ok(Box::new(Stack {
            inner: sluice_engine::engine::default_factory(m, cfg)?,
            boom: m.name == "stackboom",
        })),
        _ => sluice_engine::engine::default_factory(m, cfg),
    }
}

fn engine() -> Engine {
    // Unsigned traffic: the flows and resends below rely on the kernel's
    // flow hash and on no replay table (docs/wire.md, "What the appliance
    // checks", mode "none").
    let text = r#"
[auth]
mode = "none"
[engine]
workers = [0, 1]
poll = "adaptive"
spin_us = 50
rx_burst_max = 32
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[[shards]]
name = "main"
max_concurrency = 4
queue_depth = 64
[[routes]]
name = "boom"
model = "boom"
shard = "main"
[[routes]]
name = "rest"
shard = "main"
[[models]]
name = "null"
version = "1"
kind = "null"
[[models]]
name = "boom"
version = "1"
kind = "null"
"#;
    let cfg = Config::parse(text, std::env::temp_dir()).unwrap();
    let mut e = Engine::with_factory(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
        factory,
    )
    .unwrap();
    e.start().unwrap();
    e
}

fn request(id: u64, model: &str, buf: &mut [u8]) -> usize {
    build(
        &Req {
            id,
            model,
            version: "1",
            sign: false,
            ..Req::default()
        },
        buf,
    )
}

/// (request id, kind, error code) of each answer until `want` arrived or
/// the socket stayed quiet for its timeout.
fn collect(s: &UdpSocket, want: usize) -> BTreeMap<u64, (Kind, Option<ErrorCode>)> {
    let mut got = BTreeMap::new();
    let mut buf = vec![0u8; 70_000];
    while got.len() < want {
        let Ok((n, _)) = s.recv_from(&mut buf) else {
            break;
        };
        let f = Frame::new_checked(&buf[..n]).unwrap();
        let code = f.error_body().and_then(|b| b.code());
        assert!(
            got.insert(f.request_id(), (f.kind(), code)).is_none(),
            "request {} answered twice",
            f.request_id()
        );
    }
    got
}

/// A client that sends one request at a time and retries one that timed
/// out once (as a real client does): returns (answered, lost after retry).
fn steady_traffic(to: SocketAddr, stop: Arc<AtomicBool>) -> (u64, u64) {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (mut answered, mut lost) = (0, 0);
    let mut buf = vec![0u8; 4096];
    let mut rb = vec![0u8; 70_000];
    let mut id = 1_000_000u64;
    while !stop.load(Ordering::Relaxed) {
        id += 1;
        let n = request(id, "null", &mut buf);
        let mut ok = false;
        for _ in 0..2 {
            s.send_to(&buf[..n], to).unwrap();
            // Answers to an earlier try of another id are skipped.
            while let Ok((m, _)) = s.recv_from(&mut rb) {
                let f = Frame::new_checked(&rb[..m]).unwrap();
                if f.request_id() == id {
                    let k = f.kind();
                    let code = f.error_body().and_then(|b| b.code());
                    assert!(
                        k == Kind::Response || code == Some(ErrorCode::Internal),
                        "{k:?} {code:?}"
                    );
                    ok = true;
                    break;
                }
            }
            if ok {
                break;
            }
        }
        if ok {
            answered += 1;
        } else {
            lost += 1;
        }
    }
    (answered, lost)
}

#[test]
fn a_failing_worker_answers_what_it_held_is_reported_and_restarted() {
    let _serial = serial();
    let mut e = engine();
    let to = e.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let traffic: Vec<_> = (0..3)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || steady_traffic(to, stop))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));

    // One flow, pipelined: requests ahead of the fault, the fault, requests
    // behind it. They reach one worker, most in one burst.
    let s = client();
    s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut buf = vec![0u8; 4096];
    let mut sent = Vec::new();
    for id in 1..=8u64 {
        let n = request(id, "null", &mut buf);
        s.send_to(&buf[..n], to).unwrap();
        sent.push(id);
    }
    let n = request(100, "boom", &mut buf);
    s.send_to(&buf[..n], to).unwrap();
    sent.push(100);
    for id in 101..=108u64 {
        let n = request(id, "null", &mut buf);
        s.send_to(&buf[..n], to).unwrap();
        sent.push(id);
    }
    let got = collect(&s, sent.len());
    for id in &sent {
        let a = got.get(id).copied();
        assert!(a.is_some(), "request {id} got no answer: {got:?}");
    }
    assert_eq!(
        got[&100],
        (Kind::Error, Some(ErrorCode::Internal)),
        "the request that hit the fault is answered with a retryable internal"
    );
    for (id, (kind, code)) in &got {
        assert!(
            *kind == Kind::Response || *code == Some(ErrorCode::Internal),
            "request {id}: {kind:?} {code:?}"
        );
    }
    assert!(ErrorCode::Internal.retryable());

    // Reported: status names the worker that failed and why; stats count
    // it; the supervisor restarted it on its thread (after answering).
    let t0 = Instant::now();
    while !e.status().workers.iter().all(|w| w.alive) {
        assert!(t0.elapsed() < Duration::from_secs(1), "not restarted");
        std::thread::sleep(Duration::from_millis(1));
    }
    let st = e.status();
    let failed: Vec<_> = st.workers.iter().filter(|w| w.panics > 0).collect();
    assert_eq!(failed.len(), 1, "{:?}", st.workers);
    assert_eq!(failed[0].panics, 1);
    assert_eq!(failed[0].restarts, 1);
    assert!(failed[0].alive && !failed[0].failed, "{:?}", failed[0]);
    let why = failed[0].failure.clone().unwrap_or_default();
    assert!(why.contains("injected fault"), "{why}");
    assert!(st.workers.iter().all(|w| w.alive), "{:?}", st.workers);
    let json = serde_json::to_string(&st).unwrap();
    assert!(
        json.contains("\"restarts\":1") && json.contains("injected fault"),
        "{json}"
    );
    let (_, totals, _) = e.totals();
    assert_eq!((totals.workers_failed, totals.worker_restarts), (0, 1));
    let stats = e.stats();
    assert_eq!(stats.total(|w| w.panics), 1);
    assert!(stats.errors(ErrorCode::Internal) >= 1);

    // Live changes keep working.
    let t0 = Instant::now();
    let mut live = e.live();
    live.routes.reverse();
    e.apply(live).expect("an apply succeeds after a restart");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    // Every flow is served again, the restarted worker's too.
    for k in 0..20u64 {
        let c = client();
        let n = request(5000 + k, "null", &mut buf);
        assert_eq!(
            answer_kind(&roundtrip(&c, to, &buf[..n])),
            (Kind::Response, None)
        );
    }
    stop.store(true, Ordering::Relaxed);
    let mut answered = 0;
    for t in traffic {
        let (a, lost) = t.join().unwrap();
        answered += a;
        assert_eq!(lost, 0, "a steady client lost a request (after one retry)");
    }
    assert!(answered > 0);
    e.stop(Duration::ZERO);
}

/// One worker; shard `batch` stacks up to `batch_max` requests and holds
/// a batch for up to 1 s (the limit) waiting for more.
fn batching_engine(batch_max: u32) -> Engine {
    // Unsigned frames, as the other tests here: they are about faults.
    let text = format!(
        r#"
[auth]
mode = "none"
[engine]
workers = [0]
poll = "adaptive"
spin_us = 50
rx_burst_max = 32
[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 256
tx_buffers = 256
[[shards]]
name = "main"
queue_depth = 64
[[shards]]
name = "batch"
queue_depth = 64
batch_max = {batch_max}
batch_delay_us = 1000000
[[routes]]
name = "boom"
model = "boom"
shard = "main"
[[routes]]
name = "stack"
model = "stack"
shard = "batch"
[[routes]]
name = "stackboom"
model = "stackboom"
shard = "batch"
[[routes]]
name = "rest"
shard = "main"
[[models]]
name = "null"
version = "1"
kind = "null"
[[models]]
name = "boom"
version = "1"
kind = "null"
[[models]]
name = "stack"
version = "1"
kind = "null"
[[models]]
name = "stackboom"
version = "1"
kind = "null"
"#
    );
    let cfg = Config::parse(&text, std::env::temp_dir()).unwrap();
    let mut e = Engine::with_factory(
        cfg,
        EngineOptions {
            no_pin: true,
            ..Default::default()
        },
        factory,
    )
    .unwrap();
    e.start().unwrap();
    e
}

#[test]
fn requests_a_batch_holds_are_answered_when_the_worker_fails() {
    let _serial = serial();
    let mut e = batching_engine(8);
    let to = e.local_addr().unwrap();
    let s = client();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = vec![0u8; 4096];
    // Three of eight rows: the batch waits (up to 1 s) for more, across
    // loop iterations; then the fault hits the worker holding them.
    for id in 1..=3u64 {
        let n = request(id, "stack", &mut buf);
        s.send_to(&buf[..n], to).unwrap();
    }
    std::thread::sleep(Duration::from_millis(50));
    let t0 = Instant::now();
    let n = request(100, "boom", &mut buf);
    s.send_to(&buf[..n], to).unwrap();
    let got = collect(&s, 4);
    assert_eq!(got.len(), 4, "every request is answered: {got:?}");
    for id in [1, 2, 3, 100] {
        assert_eq!(
            got[&id],
            (Kind::Error, Some(ErrorCode::Internal)),
            "request {id}: a held request that ran (a response) means the batch's delay ended before the fault: {got:?}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "answered by the failing worker, not by the batch's delay: {:?}",
        t0.elapsed()
    );
    let st = e.status();
    assert_eq!(st.workers[0].panics, 1, "{:?}", st.workers);
    e.stop(Duration::ZERO);
}

#[test]
fn members_of_a_batched_run_that_panics_are_answered() {
    let _serial = serial();
    let mut e = batching_engine(4);
    let to = e.local_addr().unwrap();
    let s = client();
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = vec![0u8; 4096];
    // Four rows fill the batch: it runs at once, and the run panics.
    for id in 1..=4u64 {
        let n = request(id, "stackboom", &mut buf);
        s.send_to(&buf[..n], to).unwrap();
    }
    let got = collect(&s, 4);
    assert_eq!(got.len(), 4, "every member is answered: {got:?}");
    for (id, a) in &got {
        assert_eq!(
            *a,
            (Kind::Error, Some(ErrorCode::Internal)),
            "request {id}: {got:?}"
        );
    }
    let st = e.status();
    assert_eq!(st.workers[0].panics, 1, "{:?}", st.workers);
    let why = st.workers[0].failure.clone().unwrap_or_default();
    assert!(why.contains("a batched run panics"), "{why}");
    e.stop(Duration::ZERO);
}
