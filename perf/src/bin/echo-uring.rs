//! UDP echo server: io_uring (multishot recvmsg, provided buffers, busy
//! polling) by default, or a plain blocking std socket with `--std`; with
//! `--tcp`, an io_uring TCP echo of the byte stream.
#![deny(unsafe_code)]

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use sluice_perf::uring::{self, UringEchoConfig};

/// The raw-echo floor of the io_uring UDP transport.
#[derive(Debug, Parser)]
#[command(name = "echo-uring", version)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Use a plain blocking std socket instead of io_uring.
    #[arg(long)]
    std: bool,
    /// Echo TCP connections (io_uring: receive into a per-connection
    /// buffer, send the same bytes back) instead of datagrams.
    #[arg(long, conflicts_with = "std")]
    tcp: bool,
    /// TCP: bytes each connection receives at once.
    #[arg(long, default_value_t = 4 << 20)]
    tcp_buffer_bytes: usize,
    /// io_uring: sleep in io_uring_enter instead of busy-polling.
    #[arg(long)]
    block: bool,
    /// io_uring with --block: spin this long after the last datagram before
    /// sleeping (like the engine's adaptive poll mode).
    #[arg(long, default_value_t = 0)]
    spin_us: u64,
    /// io_uring: receive buffers (power of two).
    #[arg(long, default_value_t = 256)]
    buffers: u16,
    /// io_uring: bytes per receive buffer.
    #[arg(long, default_value_t = 65536 + 128)]
    buffer_size: u32,
    /// io_uring: submission queue entries.
    #[arg(long, default_value_t = 512)]
    ring_entries: u32,
    /// Socket receive and send buffer size, so that bursts that arrive while
    /// the server is descheduled are queued rather than dropped.
    #[arg(long, default_value_t = 4 << 20)]
    socket_buffer_bytes: usize,
    /// Exit after this many seconds (0: run until killed).
    #[arg(long, default_value_t = 0)]
    duration_s: u64,
}

fn stop_after(secs: u64) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    if secs > 0 {
        let s = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(secs));
            s.store(true, Ordering::Relaxed);
        });
    }
    stop
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.tcp {
        let l = match sluice_perf::uring_tcp::listen(args.listen) {
            Ok(l) => l,
            Err(e) => {
                eprintln!("echo-uring: cannot listen on {}: {e}", args.listen);
                return ExitCode::FAILURE;
            }
        };
        let local = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        eprintln!("echo-uring: io_uring tcp echo on {local}");
        let cfg = sluice_perf::uring_tcp::TcpEchoConfig {
            ring_entries: args.ring_entries,
            buffer_size: args.tcp_buffer_bytes,
            busy_poll: !args.block,
            ..Default::default()
        };
        return match sluice_perf::uring_tcp::run(&l, &cfg, &stop_after(args.duration_s)) {
            Ok(stats) => {
                eprintln!("echo-uring: {stats:?}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("echo-uring: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let sock = match uring::bind_reuse(args.listen) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("echo-uring: cannot bind {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = uring::set_socket_buffers(&sock, args.socket_buffer_bytes) {
        eprintln!("echo-uring: cannot size the socket buffers: {e}");
        return ExitCode::FAILURE;
    }
    let local = sock.local_addr().map(|a| a.to_string()).unwrap_or_default();
    eprintln!(
        "echo-uring: {} echo on {local}",
        if args.std { "std" } else { "io_uring" }
    );
    let stop = stop_after(args.duration_s);
    let res = if args.std {
        uring::run_std(&sock, &stop)
    } else {
        let cfg = UringEchoConfig {
            ring_entries: args.ring_entries,
            buffer_count: args.buffers,
            buffer_size: args.buffer_size,
            busy_poll: !args.block,
            spin_us: args.spin_us,
        };
        uring::run(&sock, &cfg, &stop)
    };
    match res {
        Ok(stats) => {
            eprintln!("echo-uring: {stats:?}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("echo-uring: {e}");
            ExitCode::FAILURE
        }
    }
}
