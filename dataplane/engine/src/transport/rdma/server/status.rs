//! The registry of RDMA runtimes in this process, and what it reports:
//! connections, per-worker totals, and closing a connection by id.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;

use super::super::RdmaCfg;
use super::control::start_runtime;
use super::*;
pub use crate::transport::ConnStatus;

static RUNTIMES: Mutex<Vec<Weak<Runtime>>> = Mutex::new(Vec::new());

pub(super) fn runtime_for(
    cfg: &RdmaCfg,
    workers: usize,
    peers: &[SocketAddr],
) -> Result<Arc<Runtime>, RdmaError> {
    let listen = cfg.listen_addr().map_err(RdmaError::Config)?;
    let mut reg = RUNTIMES
        .lock()
        .map_err(|_| RdmaError::Setup("runtime registry poisoned".into()))?;
    reg.retain(|w| w.strong_count() > 0);
    if let Some(rt) = reg
        .iter()
        .filter_map(Weak::upgrade)
        .find(|r| r.listen == listen)
    {
        return Ok(rt);
    }
    let rt = Arc::new(start_runtime(cfg, listen, workers, peers)?);
    reg.push(Arc::downgrade(&rt));
    Ok(rt)
}

/// One worker's connection counters since start: the final counts of its
/// closed connections plus the counts of its open ones, so they only grow
/// (Prometheus counters). In `connection_totals()`.
#[derive(Debug, Clone, Serialize)]
pub struct ConnTotals {
    /// Always "rdma".
    pub transport: &'static str,
    /// The listen address of the runtime.
    pub listen: SocketAddr,
    /// Worker index.
    pub worker: usize,
    /// Connections open now (any state).
    pub open: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed and released.
    pub closed: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received by RDMA WRITE into a slot.
    pub rx_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent by RDMA WRITE into a reply slot.
    pub tx_large: u64,
    /// Failed or refused operations.
    pub errors: u64,
}

/// Connections of every RDMA listener in this process, with counters.
pub fn connections() -> Vec<ConnStatus> {
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for rt in rts {
        let inner = &rt.inner;
        let Ok(conns) = inner.conns.lock() else {
            continue;
        };
        for c in conns.iter().flatten() {
            let Some(port) = inner.ports[c.worker].get() else {
                continue;
            };
            let k = &port.stats[c.slot as usize];
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.push(ConnStatus {
                id: c.conn_id,
                transport: "rdma",
                role: "client",
                listen: rt.listen,
                worker: c.worker,
                peer: c.peer,
                device: inner.device.clone(),
                state: match c.state {
                    ConnState::Accepting => "accepting",
                    ConnState::Up => "up",
                    ConnState::Closing => "closing",
                },
                rx_frames: ld(&k.rx_frames),
                rx_bytes: ld(&k.rx_bytes),
                rx_large: ld(&k.rx_large),
                tx_frames: ld(&k.tx_frames),
                tx_bytes: ld(&k.tx_bytes),
                tx_large: ld(&k.tx_large),
                errors: ld(&k.errors),
            });
        }
        drop(conns);
        let Ok(peers) = inner.peers.lock() else {
            continue;
        };
        for pc in peers.iter() {
            let state = match pc.state {
                PeerState::Idle | PeerState::Stopped => continue,
                PeerState::Resolving | PeerState::Connecting => "connecting",
                PeerState::Up => "up",
                PeerState::Closing => "closing",
            };
            let Some(port) = inner.ports[pc.worker].get() else {
                continue;
            };
            let k = &port.peer_stats[pc.peer];
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            out.push(ConnStatus {
                id: pc.conn_id,
                transport: "rdma",
                role: "peer",
                listen: rt.listen,
                worker: pc.worker,
                peer: Some(pc.addr),
                device: inner.device.clone(),
                state,
                rx_frames: ld(&k.rx_frames),
                rx_bytes: ld(&k.rx_bytes),
                rx_large: ld(&k.rx_large),
                tx_frames: ld(&k.tx_frames),
                tx_bytes: ld(&k.tx_bytes),
                tx_large: ld(&k.tx_large),
                errors: ld(&k.errors),
            });
        }
    }
    out
}

/// Per-worker connection counters of every RDMA listener in this process
/// (closed connections included: the values only grow while it runs).
pub fn connection_totals() -> Vec<ConnTotals> {
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    let mut out = Vec::new();
    for rt in rts {
        let inner = &rt.inner;
        let per = inner.cfg.connections_max as usize;
        // Held while reading: a release moves counts under this lock, so
        // nothing is seen twice or missed.
        let Ok(conns) = inner.conns.lock() else {
            continue;
        };
        for (w, port) in inner.ports.iter().enumerate() {
            let Some(port) = port.get() else { continue };
            let ld = |a: &AtomicU64| a.load(Ordering::Relaxed);
            let mut sum = [0u64; 7];
            for k in port
                .stats
                .iter()
                .chain(port.peer_stats.iter())
                .chain(std::iter::once(&port.retired))
            {
                for (s, a) in sum.iter_mut().zip(k.fields()) {
                    *s += ld(a);
                }
            }
            let open = conns
                .get(w * per..(w + 1) * per)
                .map_or(0, |c| c.iter().flatten().count());
            out.push(ConnTotals {
                transport: "rdma",
                listen: rt.listen,
                worker: w,
                open: open as u64,
                accepted: ld(&port.accepted),
                closed: ld(&port.closed_conns),
                rx_frames: sum[0],
                rx_bytes: sum[1],
                rx_large: sum[2],
                tx_frames: sum[3],
                tx_bytes: sum[4],
                tx_large: sum[5],
                errors: sum[6],
            });
        }
    }
    out
}

/// Disconnects a connection; its in-flight requests are dropped and the
/// client sees a retryable connection loss.
pub fn close_connection(id: u64) -> Result<(), RdmaError> {
    if !connections().iter().any(|c| c.id == id) {
        return Err(RdmaError::UnknownConnection(id));
    }
    let rts: Vec<Arc<Runtime>> = RUNTIMES
        .lock()
        .map(|r| r.iter().filter_map(Weak::upgrade).collect())
        .unwrap_or_default();
    for rt in rts {
        if let Ok(mut q) = rt.inner.close_requests.lock() {
            q.push(id);
        }
    }
    Ok(())
}
