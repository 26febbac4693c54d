//! Test servers on 127.0.0.1 ephemeral ports: the io_uring and std echo
//! servers of this crate, and a minimal Sluice responder built on sluice-wire.
#![allow(dead_code)]

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use sluice_perf::uring::{self, EchoStats, UringEchoConfig};
use sluice_wire::{ErrorCode, Frame, FrameRepr, Kind, TensorRepr};

pub struct Server<T> {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T> Server<T> {
    /// Stops the server and returns what its thread returned.
    pub fn stop(mut self) -> T {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl<T> Drop for Server<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn spawn<T: Send + 'static>(
    f: impl FnOnce(UdpSocket, Arc<AtomicBool>) -> T + Send + 'static,
) -> Server<T> {
    let sock = uring::bind_reuse("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sock.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let thread = std::thread::spawn(move || f(sock, s));
    Server {
        addr,
        stop,
        thread: Some(thread),
    }
}

/// The io_uring echo server. Busy-polling is off so that tests do not
/// starve the 2-core machine; the code path is the same apart from the wait.
pub fn uring_echo(cfg: UringEchoConfig) -> Server<std::io::Result<EchoStats>> {
    spawn(move |sock, stop| uring::run(&sock, &cfg, &stop))
}

pub fn std_echo() -> Server<std::io::Result<EchoStats>> {
    spawn(|sock, stop| uring::run_std(&sock, &stop))
}

/// Answers requests by model name: "busy" -> Busy error, "stall" -> the
/// first one waits `stall` before its answer, anything else -> a response
/// echoing the tensors.
pub fn sluice_responder(stall: Duration) -> Server<u64> {
    spawn(move |sock, stop| {
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let mut buf = vec![0u8; 1 << 16];
        let mut out = vec![0u8; 1 << 16];
        let mut stalled = false;
        let mut answered = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Ok((n, from)) = sock.recv_from(&mut buf) else {
                continue;
            };
            let Ok(req) = Frame::new_checked(&buf[..n]) else {
                continue;
            };
            let len = match req.model() {
                "busy" => {
                    FrameRepr::error_for(&req, ErrorCode::Busy, "full")
                        .emit(&mut out)
                        .unwrap()
                        .frame_len
                }
                m => {
                    if m == "stall" && !stalled {
                        stalled = true;
                        std::thread::sleep(stall);
                    }
                    let descs: Vec<_> = req.tensors().collect();
                    let dims: Vec<Vec<u64>> = descs.iter().map(|d| d.dims().to_vec()).collect();
                    let tensors: Vec<TensorRepr<'_>> = descs
                        .iter()
                        .zip(&dims)
                        .map(|(d, dims)| TensorRepr {
                            name: d.name,
                            dtype: d.dtype,
                            dims,
                            data: Some(req.tensor_data(d)),
                        })
                        .collect();
                    let repr = FrameRepr {
                        kind: Kind::Response,
                        request_id: req.request_id(),
                        tenant_id: req.tenant_id(),
                        tensors: &tensors,
                        ..FrameRepr::default()
                    };
                    repr.emit(&mut out).unwrap().frame_len
                }
            };
            sock.send_to(&out[..len], from).unwrap();
            answered += 1;
        }
        answered
    })
}
