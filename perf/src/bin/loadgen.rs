//! Load generator for Sluice and for the raw echo floor.
#![deny(unsafe_code)]

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use sluice_perf::driver::{self, Load, RunConfig, Stop, Transport};
use sluice_perf::mix::Mix;
use sluice_perf::mmsg::MmsgTransport;
use sluice_perf::transport::{EchoTcpTransport, EchoTransport, SluiceTransport};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Via {
    /// Datagrams to --addr.
    Udp,
    /// One TCP connection to --addr (the server's tcp_listen).
    Tcp,
    /// Datagrams to --addr for frames that fit one, TCP to --tcp-addr for
    /// the rest (sluice mode only).
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Mode {
    /// Sluice requests, answers matched and checked by sluice-client.
    Sluice,
    /// The same bytes as raw datagrams to an echo server: the floor.
    Echo,
}

/// Closed loop (`--closed N`) or open loop (`--rate R`, latency from the
/// intended send time) against a Sluice server or an echo server.
#[derive(Debug, Parser)]
#[command(name = "loadgen", version)]
struct Args {
    /// Server address.
    #[arg(long, default_value = "127.0.0.1:7070")]
    addr: String,
    /// Transport.
    #[arg(long, value_enum, default_value_t = Via::Udp)]
    transport: Via,
    /// The server's TCP address, with --transport auto.
    #[arg(long)]
    tcp_addr: Option<String>,
    /// TCP socket buffer size; 0 (default) leaves the kernel's autotuning.
    #[arg(long, default_value_t = 0)]
    tcp_buffer_bytes: usize,
    /// Request mix (TOML).
    #[arg(long, default_value = "perf/mixes/null-small.toml")]
    mix: PathBuf,
    /// What to drive.
    #[arg(long, value_enum, default_value_t = Mode::Sluice)]
    mode: Mode,
    /// Closed loop: keep N requests outstanding (default: 1).
    #[arg(long, conflicts_with = "rate")]
    closed: Option<usize>,
    /// Open loop: send R requests per second on a fixed schedule.
    #[arg(long)]
    rate: Option<f64>,
    /// Open loop: most requests in flight; later sends wait (and their wait
    /// counts in their latency).
    #[arg(long, default_value_t = 4096)]
    outstanding_max: usize,
    /// Run this long after warm-up ("10s", "500ms", "2m"; default 5s).
    #[arg(long, conflicts_with = "requests", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Send this many requests after warm-up.
    #[arg(long)]
    requests: Option<u64>,
    /// Unmeasured traffic first.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    warmup: Duration,
    /// Per-request timeout.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    timeout: Duration,
    /// Sleep in the kernel while waiting instead of spinning (spinning is
    /// the default: a wake-up costs 20-50 µs on a VM).
    #[arg(long)]
    block: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Seed of the mix picker.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Socket receive and send buffer size, so that bursts that arrive while
    /// the generator is descheduled are queued rather than dropped.
    #[arg(long, default_value_t = SOCKET_BUFFER_BYTES_DEFAULT)]
    socket_buffer_bytes: usize,
    /// UDP only: send the requests queued since the last answers with one
    /// sendmmsg and read answers with one recvmmsg (up to 64 each). Every
    /// request is still encoded and signed, every answer parsed and its
    /// tag verified, as the client does; in echo mode the echoes are
    /// checked the same way (the generator's ceiling with this path).
    #[arg(long)]
    mmsg: bool,
    /// Allow a non-loopback server address.
    #[arg(long)]
    allow_remote: bool,
    /// Streaming mix: open token streams at this rate (per second) on an
    /// open-loop schedule, mixed with plain requests from --mix at --rate
    /// (no plain requests without --rate); reports TTFT, ITL, tokens/s,
    /// streams/s. UDP, sluice mode, --duration only.
    #[arg(long, conflicts_with_all = ["closed", "requests", "mmsg"])]
    stream_rate: Option<f64>,
    /// Streaming mix: the generative model (`[models.stream.generate]`).
    #[arg(long, default_value = "decoder")]
    stream_model: String,
    /// Streaming mix: its version.
    #[arg(long, default_value = "1")]
    stream_version: String,
    /// Streaming mix: the tenant that opens the streams.
    #[arg(long, default_value_t = 0)]
    stream_tenant: u32,
    /// Streaming mix: that tenant's key ("hex:..." or text); none = unsigned.
    #[arg(long)]
    stream_key: Option<String>,
    /// Streaming mix: the model's token input.
    #[arg(long, default_value = "token")]
    token_input: String,
    /// Streaming mix: the prompt (its bytes are the tokens).
    #[arg(long, default_value = "hello")]
    prompt: String,
    /// Streaming mix: tokens per stream at most (0 = the model's limit).
    #[arg(long, default_value_t = 64)]
    max_tokens: u32,
    /// Streaming mix: tokens per frame at most.
    #[arg(long, default_value_t = 1)]
    tokens_per_frame: u16,
    /// Streaming mix: most streams running at once; later opens wait, and
    /// their wait counts in their TTFT.
    #[arg(long, default_value_t = 64)]
    streams_max: usize,
}

/// 4 MiB: the usual `net.core.rmem_max`; root may go beyond.
const SOCKET_BUFFER_BYTES_DEFAULT: usize = 4 << 20;

/// Longest run accepted, so a typo cannot start a day-long run.
const DURATION_MAX: Duration = Duration::from_secs(24 * 3600);

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => v,
        "ms" => v / 1e3,
        "us" | "µs" => v / 1e6,
        "m" => v * 60.0,
        _ => return Err(format!("bad duration unit in {s:?} (use us, ms, s or m)")),
    };
    let d = Duration::try_from_secs_f64(secs).map_err(|_| format!("bad duration {s:?}"))?;
    if d > DURATION_MAX {
        return Err(format!("duration {s:?} exceeds 24 h"));
    }
    Ok(d)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn resolve(flag: &str, a: &str, allow_remote: bool) -> Result<SocketAddr, String> {
    let addr: SocketAddr = a
        .to_socket_addrs()
        .map_err(|e| format!("bad {flag} {a}: {e}"))?
        .next()
        .ok_or_else(|| format!("{flag} {a} resolves to nothing"))?;
    if !sluice_perf::is_loopback(&addr) && !allow_remote {
        return Err(format!(
            "{addr} is not loopback; pass --allow-remote to send there"
        ));
    }
    Ok(addr)
}

fn run(args: &Args) -> Result<(), String> {
    let addr = resolve("--addr", &args.addr, args.allow_remote)?;
    if let Some(r) = args.stream_rate {
        return run_streams(args, addr, r);
    }
    let tcp_addr = match (&args.tcp_addr, args.transport) {
        (Some(a), _) => Some(resolve("--tcp-addr", a, args.allow_remote)?),
        (None, Via::Auto) => return Err("--transport auto needs --tcp-addr".into()),
        (None, _) => None,
    };
    let mix = Mix::load(&args.mix).map_err(|e| format!("{}: {e}", args.mix.display()))?;
    let load = match (args.closed, args.rate) {
        (_, Some(r)) if !(r.is_finite() && r > 0.0) => return Err("--rate must be positive".into()),
        (_, Some(r)) => Load::Open {
            rate_per_sec: r,
            outstanding_max: args.outstanding_max.max(1),
        },
        (Some(0), _) => return Err("--closed must be at least 1".into()),
        (n, None) => Load::Closed {
            outstanding: n.unwrap_or(1),
        },
    };
    let stop = match (args.requests, args.duration) {
        (Some(n), _) => Stop::Requests(n),
        (None, d) => Stop::Duration(d.unwrap_or(Duration::from_secs(5))),
    };
    let cfg = RunConfig {
        load,
        stop,
        spin: !args.block,
        warmup: args.warmup,
        seed: args.seed,
    };
    let pick = |r: u64| mix.pick(r);

    if args.mmsg && args.transport != Via::Udp {
        return Err("--mmsg takes --transport udp".into());
    }
    let cpu_before = sluice_perf::self_cpu_ns();
    let (report, extra) = match args.mode {
        _ if args.mmsg => {
            let mut t = MmsgTransport::connect(addr, &mix, args.timeout, args.mode == Mode::Echo)
                .map_err(|e| e.to_string())?;
            t.set_socket_buffers(args.socket_buffer_bytes)
                .map_err(|e| format!("cannot size the socket buffers: {e}"))?;
            let report = driver::run(&mut t as &mut dyn Transport, &pick, &cfg);
            let extra = serde_json::json!({
                "sendmmsg_calls": t.send_calls, "recvmmsg_calls": t.recv_calls, "ignored": t.ignored,
            });
            (report, extra)
        }
        Mode::Sluice => {
            use sluice_client::{Endpoints, TransportMode};
            let (ep, mode) = match args.transport {
                Via::Udp => (
                    Endpoints {
                        udp: Some(addr),
                        tcp: None,
                    },
                    TransportMode::Udp,
                ),
                Via::Tcp => (
                    Endpoints {
                        udp: None,
                        tcp: Some(addr),
                    },
                    TransportMode::Tcp,
                ),
                Via::Auto => (
                    Endpoints {
                        udp: Some(addr),
                        tcp: tcp_addr,
                    },
                    TransportMode::Auto,
                ),
            };
            let mut t = SluiceTransport::connect_endpoints(ep, mode, &mix, args.timeout, cfg.spin)
                .map_err(|e| e.to_string())?;
            t.set_socket_buffers(args.socket_buffer_bytes)
                .map_err(|e| format!("cannot size the socket buffers: {e}"))?;
            t.set_tcp_buffers(args.tcp_buffer_bytes)
                .map_err(|e| format!("cannot size the tcp buffers: {e}"))?;
            let report = driver::run(&mut t as &mut dyn Transport, &pick, &cfg);
            let s = t.client_stats();
            let extra = serde_json::json!({
                "stale": s.stale, "garbled": s.malformed, "bad_tag": s.bad_tag,
            });
            (report, extra)
        }
        Mode::Echo if args.transport == Via::Tcp => {
            let mut t = EchoTcpTransport::connect(addr, &mix, args.timeout, cfg.spin)
                .map_err(|e| e.to_string())?;
            let sizes: Vec<usize> = (0..mix.entries.len()).map(|i| t.frame_len(i)).collect();
            t.set_socket_buffers(args.tcp_buffer_bytes)
                .map_err(|e| format!("cannot size the tcp buffers: {e}"))?;
            let report = driver::run(&mut t as &mut dyn Transport, &pick, &cfg);
            (report, serde_json::json!({ "frame_bytes": sizes }))
        }
        Mode::Echo if args.transport == Via::Auto => {
            return Err("--mode echo takes --transport udp or tcp".into());
        }
        Mode::Echo => {
            let mut t =
                EchoTransport::connect(addr, &mix, args.timeout).map_err(|e| e.to_string())?;
            let sizes: Vec<usize> = (0..mix.entries.len()).map(|i| t.datagram_len(i)).collect();
            t.set_socket_buffers(args.socket_buffer_bytes)
                .map_err(|e| format!("cannot size the socket buffers: {e}"))?;
            let report = driver::run(&mut t as &mut dyn Transport, &pick, &cfg);
            (report, serde_json::json!({ "datagram_bytes": sizes }))
        }
    };

    // The generator's own CPU per answer (warm-up included in both terms).
    let cpu_ns = sluice_perf::self_cpu_ns()
        .zip(cpu_before)
        .map(|(a, b)| a.saturating_sub(b));
    let text = if args.json {
        let mut v = report.json();
        v["loadgen_cpu_s"] = serde_json::json!(cpu_ns.map(|n| n as f64 / 1e9));
        v["mode"] = serde_json::json!(format!("{:?}", args.mode).to_lowercase());
        v["transport"] = serde_json::json!(format!("{:?}", args.transport).to_lowercase());
        v["addr"] = serde_json::json!(addr.to_string());
        v["load"] = match load {
            Load::Closed { outstanding } => serde_json::json!({ "closed": outstanding }),
            Load::Open {
                rate_per_sec,
                outstanding_max,
            } => {
                serde_json::json!({ "rate_per_sec": rate_per_sec, "outstanding_max": outstanding_max })
            }
        };
        v["spin"] = serde_json::json!(cfg.spin);
        v["extra"] = extra;
        format!("{v}\n")
    } else {
        format!(
            "{:?} {addr} {:?} spin={}\n{}{extra}\n",
            args.mode,
            load,
            cfg.spin,
            report.human()
        )
    };
    write_out(&text)
}

/// The streaming mix (`--stream-rate`).
fn run_streams(args: &Args, addr: SocketAddr, stream_rate: f64) -> Result<(), String> {
    use sluice_perf::streammix::{StreamMix, StreamMixConfig, TokenOpen};
    if !(stream_rate.is_finite() && stream_rate > 0.0) {
        return Err("--stream-rate must be positive".into());
    }
    if args.mode != Mode::Sluice || args.transport != Via::Udp {
        return Err("--stream-rate takes --mode sluice --transport udp".into());
    }
    let plain_rate = match args.rate {
        Some(r) if !(r.is_finite() && r > 0.0) => return Err("--rate must be positive".into()),
        Some(r) => r,
        None => 0.0,
    };
    let mix = match args.rate {
        Some(_) => Some(Mix::load(&args.mix).map_err(|e| format!("{}: {e}", args.mix.display()))?),
        None => None,
    };
    let key = args
        .stream_key
        .as_deref()
        .map(sluice_perf::mix::parse_key)
        .transpose()
        .map_err(|e| format!("--stream-key: {e}"))?
        .map(|k| sluice_client::TenantKey::new(&k));
    let open = TokenOpen {
        model: args.stream_model.clone(),
        version: args.stream_version.clone(),
        tenant_id: args.stream_tenant,
        key,
        token_input: args.token_input.clone(),
        prompt: args.prompt.bytes().map(i64::from).collect(),
        tokens_per_frame: args.tokens_per_frame.max(1),
        max_tokens: args.max_tokens,
    };
    let cfg = StreamMixConfig {
        plain_rate_per_sec: plain_rate,
        stream_rate_per_sec: stream_rate,
        streams_max: args.streams_max.max(1),
        plain_outstanding_max: args.outstanding_max.max(1),
        warmup: args.warmup,
        duration: args.duration.unwrap_or(Duration::from_secs(5)),
        timeout: args.timeout,
        spin: !args.block,
        seed: args.seed,
    };
    let mut g = StreamMix::connect(addr, mix.as_ref(), open).map_err(|e| e.to_string())?;
    g.set_socket_buffers(args.socket_buffer_bytes)
        .map_err(|e| format!("cannot size the socket buffers: {e}"))?;
    let report = g.run(&cfg);
    let text = if args.json {
        let mut v = report.json();
        v["addr"] = serde_json::json!(addr.to_string());
        v["load"] = serde_json::json!({
            "stream_rate_per_sec": stream_rate, "plain_rate_per_sec": plain_rate,
            "streams_max": cfg.streams_max, "max_tokens": args.max_tokens,
            "tokens_per_frame": args.tokens_per_frame.max(1),
        });
        v["spin"] = serde_json::json!(cfg.spin);
        format!("{v}\n")
    } else {
        format!(
            "streaming mix {addr}: {stream_rate} streams/s (at most {} at once, {} tokens each), {plain_rate} plain req/s, spin={}\n{}",
            cfg.streams_max,
            args.max_tokens,
            cfg.spin,
            report.human()
        )
    };
    write_out(&text)
}

fn write_out(text: &str) -> Result<(), String> {
    // A closed pipe (`| head`) is not worth a panic.
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(format!("cannot write the report: {e}"));
    }
    Ok(())
}
