//! Token streams of the bundled decoder (models/decoder.onnx), in one run:
//! - the decode step run in process (sluice-infer, the same step the
//!   worker runs: state in a ping-pong slot) against the inter-token
//!   latency a client sees through Sluice for one stream: the difference
//!   is what Sluice adds per token (loop, frame, UDP send and receive);
//! - time to first token with 1 and with 64 concurrent streams;
//! - tokens/s of 64 streams generating together (iteration-level
//!   scheduling: one step each per loop iteration, batched into one ONNX
//!   Runtime call) against the same 64 streams one at a time, and against
//!   64 together with each stream's step its own call (`--unbatched`).
//!
//! perf/tokens.sh starts the engine (`endless`: the decoder without EOS;
//! `endless1`: the same with `step_batch_max = 1`; `[auth] mode = "none"`)
//! and runs this.
#![deny(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use sluice_wire::{DType, ExtRepr, Frame, FrameRepr, Kind, StreamHeader, TensorRepr, stream_flags};

#[derive(Debug, Parser)]
#[command(name = "token-bench")]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7076")]
    addr: SocketAddr,
    /// The decoder model file (for the in-process baseline).
    #[arg(long)]
    model: std::path::PathBuf,
    /// Tokens per stream.
    #[arg(long, default_value_t = 2000)]
    tokens: u32,
    /// Concurrent streams.
    #[arg(long, default_value_t = 64)]
    streams: u64,
    /// The model whose decode steps run one stream per call.
    #[arg(long, default_value = "endless1")]
    unbatched: String,
    /// The engine's process id: its CPU time per token in the one-stream
    /// run (all its threads, from /proc/<pid>/task/*/schedstat) against
    /// the in-process step's CPU time, which a loaded host's waiting for a
    /// core does not inflate as it does wall time.
    #[arg(long)]
    engine_pid: Option<u32>,
    /// Only the one-stream phase, for this many seconds of tokens (a
    /// steady load to profile the worker under; prints tokens/s).
    #[arg(long)]
    profile_s: Option<u64>,
}

/// CPU time (ns on a core) of every thread of process `pid`, or of the
/// calling thread (`None`), from schedstat's first field.
fn cpu_ns(pid: Option<u32>) -> u64 {
    let one = |path: &std::path::Path| -> u64 {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|t| t.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0)
    };
    match pid {
        None => one(std::path::Path::new("/proc/thread-self/schedstat")),
        Some(p) => std::fs::read_dir(format!("/proc/{p}/task"))
            .map(|d| d.flatten().map(|e| one(&e.path().join("schedstat"))).sum())
            .unwrap_or(0),
    }
}

/// The client socket's receive buffer.
const RECV_BUFFER_BYTES: usize = 4 << 20;

fn hist() -> Histogram<u64> {
    #[allow(
        clippy::expect_used,
        reason = "constant bounds, valid by hdrhistogram's rules"
    )]
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn open(model: &str, id: u64, tokens: u32, tpf: u16) -> Vec<u8> {
    let prompt: Vec<u8> = b"bench"
        .iter()
        .flat_map(|&b| i64::from(b).to_le_bytes())
        .collect();
    let dims = [5u64];
    let t = [TensorRepr {
        name: "token",
        dtype: DType::I64,
        dims: &dims,
        data: Some(&prompt),
    }];
    let sh = StreamHeader {
        stream_id: id,
        seq: 0,
        flags: stream_flags::OPEN,
        tokens_per_frame: tpf,
        max_tokens: tokens,
        ..StreamHeader::default()
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&sh)];
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: id,
        tenant_id: 7,
        model,
        model_version: "1",
        extensions: &ext,
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 1024];
    let n = repr.emit(&mut buf).map(|l| l.frame_len).unwrap_or(0);
    buf.truncate(n);
    buf
}

/// Runs `ids` together to their end; returns (TTFT per stream ns, ITL
/// histogram ns, tokens, elapsed). A seq gap (a frame the client's socket
/// dropped) fails the run: the figures would not be of what was sent.
fn run(
    s: &UdpSocket,
    addr: SocketAddr,
    model: &str,
    ids: &[u64],
    tokens: u32,
    tpf: u16,
) -> Result<(Vec<u64>, Histogram<u64>, u64, Duration), String> {
    let t0 = Instant::now();
    for &id in ids {
        s.send_to(&open(model, id, tokens, tpf), addr)
            .map_err(|e| e.to_string())?;
    }
    let mut last = vec![None::<Instant>; ids.len()];
    let mut seqs = vec![0u32; ids.len()];
    let mut ttft = Vec::with_capacity(ids.len());
    let mut itl = hist();
    let (mut ended, mut got) = (0, 0u64);
    let base = ids.first().copied().unwrap_or(0);
    let mut buf = vec![0u8; 2048];
    while ended < ids.len() {
        let n = s.recv(&mut buf).map_err(|e| {
            format!(
                "recv ({model}, {} streams, {got} tokens, {ended} ended so far): {e}",
                ids.len()
            )
        })?;
        let now = Instant::now();
        let f = Frame::new_checked(&buf[..n]).map_err(|e| format!("{e:?}"))?;
        if f.kind() != Kind::Response {
            return Err(format!(
                "error frame: {:?}",
                f.error_body().map(|b| b.code())
            ));
        }
        let h = f.stream().ok_or("no stream header")?;
        let k = (h.stream_id - base) as usize;
        if h.seq != seqs[k] {
            return Err(format!(
                "stream {}: frame {} arrived, {} expected: frames were lost (UdpRcvbufErrors in nstat)",
                h.stream_id, h.seq, seqs[k]
            ));
        }
        seqs[k] += 1;
        let toks = f
            .tensors()
            .next()
            .map_or(0, |t| t.dims().first().copied().unwrap_or(0));
        got += toks;
        if toks > 0 {
            match last[k] {
                None => ttft.push((now - t0).as_nanos() as u64),
                Some(p) => itl.saturating_record((now - p).as_nanos() as u64),
            }
            last[k] = Some(now);
        }
        if h.has(stream_flags::END) {
            ended += 1;
        }
    }
    Ok((ttft, itl, got, t0.elapsed()))
}

/// The decode step run in process: its latency histogram, the whole
/// loop's time and its CPU time (ns).
fn in_process(
    model: &std::path::Path,
    steps: u32,
) -> Result<(Histogram<u64>, Duration, u64), String> {
    use sluice_infer::{ModelSpec, OrtModel, RunStats, StatePair};
    let lib = sluice_infer::library_path(None).ok_or("no ONNX Runtime library (SLUICE_ORT_LIB)")?;
    sluice_infer::init(&lib).map_err(|e| e.to_string())?;
    let mut m = OrtModel::load(&ModelSpec {
        name: "decoder".into(),
        version: "1".into(),
        path: model.to_path_buf(),
        adapters: vec![],
    })
    .map_err(|e| e.to_string())?;
    let spec = m.state_spec(&[StatePair {
        input: "h".into(),
        output: "hN".into(),
        dims: vec![1, 16],
    }])?;
    let tok = m.token_spec(&spec, "token", "next")?;
    // Two 64-byte aligned halves, as a stream slot.
    let mut slot = vec![0u8; 2 * spec.half_len + 64];
    let off = slot.as_ptr().align_offset(64);
    let (a, b) = slot[off..off + 2 * spec.half_len].split_at_mut(spec.half_len);
    let (mut cur, mut next) = (a, b);
    let mut stats = RunStats::default();
    let mut h = hist();
    let mut token = i64::from(b'b');
    let t0 = Instant::now();
    let cpu0 = cpu_ns(None);
    for _ in 0..steps {
        let t = Instant::now();
        token = m
            .run_token_step(&spec, tok, token, cur, next, &mut stats)
            .map_err(|e| e.to_string())?;
        h.saturating_record(t.elapsed().as_nanos() as u64);
        std::mem::swap(&mut cur, &mut next);
    }
    Ok((h, t0.elapsed(), cpu_ns(None) - cpu0))
}

fn p50(v: &mut [u64]) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = (|| -> Result<String, String> {
        let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        // 64 streams at one frame per token outrun a client thread on a
        // loaded host: with the default 208 KiB receive buffer the kernel
        // dropped frames (UdpRcvbufErrors) and the run waited for END
        // frames that never came. 4 MiB (net.core.rmem_max here) holds
        // them.
        socket2::SockRef::from(&s)
            .set_recv_buffer_size(RECV_BUFFER_BYTES)
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        if let Some(secs) = a.profile_s {
            // One stream, one token a frame, for about `secs` seconds.
            let t0 = Instant::now();
            let (mut got, mut id) = (0, 1);
            while t0.elapsed() < Duration::from_secs(secs) {
                got += run(&s, a.addr, "endless", &[id], a.tokens, 1)?.2;
                id += 1;
            }
            let rate = got as f64 / t0.elapsed().as_secs_f64();
            return Ok(serde_json::json!({ "tokens_per_s_1_stream": rate }).to_string());
        }
        // Ten times the steps: schedstat's CPU time moves at scheduler
        // ticks (4 ms here), so a short loop's reading would be coarse.
        let steps = a.tokens.max(1).saturating_mul(10);
        let (local, local_el, local_cpu) = in_process(&a.model, steps)?;
        let local_mean_ns = local_el.as_nanos() as f64 / f64::from(steps);
        let local_cpu_ns = local_cpu as f64 / f64::from(steps);
        // One stream: per-token latency and TTFT.
        let cpu0 = a.engine_pid.map(|p| cpu_ns(Some(p)));
        let (mut t1, itl1, got1, el1) = run(&s, a.addr, "endless", &[1], a.tokens, 1)?;
        let engine_cpu_ns = cpu0.map(|c| (cpu_ns(a.engine_pid) - c) as f64 / got1.max(1) as f64);
        // Per token, from the run's throughput: the worker's whole cycle
        // (a client that falls behind reads queued frames back to back,
        // which makes the inter-arrival p50 smaller than a step).
        let sluice_mean_ns = el1.as_nanos() as f64 / got1.max(1) as f64;
        // Many together, 8 tokens a frame (a UDP socket read by one
        // thread drops frames of 64 streams at one frame per token).
        let ids: Vec<u64> = (1000..1000 + a.streams).collect();
        let (mut tn, _, got_n, el_n) = run(&s, a.addr, "endless", &ids, a.tokens / 4, 8)?;
        // The same together, each stream's step its own call.
        let ids: Vec<u64> = (2000..2000 + a.streams).collect();
        let (_, _, got_u, el_u) = run(&s, a.addr, &a.unbatched, &ids, a.tokens / 4, 8)?;
        // The same streams one at a time.
        let mut got_1 = 0;
        let mut el_1 = Duration::ZERO;
        for id in 10_000..10_000 + a.streams {
            let (_, _, g, e) = run(&s, a.addr, "endless", &[id], a.tokens / 4, 8)?;
            got_1 += g;
            el_1 += e;
        }
        let step = local.value_at_quantile(0.5);
        let itl = itl1.value_at_quantile(0.5);
        Ok(serde_json::json!({
            "in_process_step_p50_ns": step,
            "itl_1_stream_p50_ns": itl,
            "itl_1_stream_p99_ns": itl1.value_at_quantile(0.99),
            "added_per_token_ns": itl.saturating_sub(step),
            "in_process_step_mean_ns": local_mean_ns,
            "sluice_1_stream_mean_ns": sluice_mean_ns,
            "added_per_token_mean_ns": sluice_mean_ns - local_mean_ns,
            "in_process_step_cpu_ns": local_cpu_ns,
            "engine_cpu_per_token_ns": engine_cpu_ns,
            "added_cpu_per_token_ns": engine_cpu_ns.map(|e| e - local_cpu_ns),
            "ttft_1_stream_ns": p50(&mut t1),
            "ttft_n_streams_p50_ns": p50(&mut tn),
            "streams": a.streams,
            "tokens_per_s_together": got_n as f64 / el_n.as_secs_f64(),
            "tokens_per_s_together_unbatched": got_u as f64 / el_u.as_secs_f64(),
            "tokens_per_s_one_at_a_time": got_1 as f64 / el_1.as_secs_f64(),
            "tokens_per_s_1_stream": got1 as f64 / el1.as_secs_f64(),
        })
        .to_string())
    })();
    match r {
        Ok(j) => {
            println!("{j}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("token-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
