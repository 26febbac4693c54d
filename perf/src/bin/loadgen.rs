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
    // A closed pipe (`| head`) is not worth a panic.
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(format!("cannot write the report: {e}"));
    }
    Ok(())
}
