//! Connection management: RDMA connections (the RDMA runtime is per
//! process, so its lists are narrowed to this engine's listen address) and
//! TCP connections of the io_uring transport (kept per engine).

use super::{Outcome, SluiceStatus};
use sluice_engine::Engine;
use sluice_engine::config::TransportKind;
use sluice_engine::transport::ConnStatus;

/// The RDMA listen address of a running RDMA engine.
#[cfg(feature = "rdma")]
fn rdma_listen(eng: &Engine) -> Option<std::net::SocketAddr> {
    use sluice_engine::transport::rdma::RdmaCfg;
    if eng.config().engine.transport != TransportKind::Rdma || !eng.is_running() {
        return None;
    }
    RdmaCfg::from_config(eng.config())
        .ok()
        .and_then(|c| c.listen_addr().ok())
}

#[cfg(feature = "rdma")]
fn mine(eng: &Engine) -> Vec<ConnStatus> {
    let Some(listen) = rdma_listen(eng) else {
        return Vec::new();
    };
    let mut v = sluice_engine::transport::rdma::connections();
    v.retain(|c| c.listen == listen);
    v.sort_by_key(|c| c.id);
    v
}

/// Both totals lists as JSON values (TCP's carries more counters).
fn values<A: serde::Serialize, B: serde::Serialize>(
    a: &[A],
    b: &[B],
) -> serde_json::Result<Vec<u8>> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    for x in a {
        v.push(serde_json::to_value(x)?);
    }
    for x in b {
        v.push(serde_json::to_value(x)?);
    }
    serde_json::to_vec(&v)
}

pub(super) fn list_json(eng: &Engine) -> serde_json::Result<Vec<u8>> {
    #[cfg(feature = "rdma")]
    let mut all = mine(eng);
    #[cfg(not(feature = "rdma"))]
    let mut all: Vec<ConnStatus> = Vec::new();
    if eng.is_running() {
        all.extend(eng.tcp_connections());
    }
    serde_json::to_vec(&all)
}

pub(super) fn totals_json(eng: &Engine) -> serde_json::Result<Vec<u8>> {
    let tcp = eng.tcp_connection_totals();
    #[cfg(feature = "rdma")]
    {
        let mut v = match rdma_listen(eng) {
            Some(listen) => {
                let mut v = sluice_engine::transport::rdma::connection_totals();
                v.retain(|t| t.listen == listen);
                v
            }
            None => Vec::new(),
        };
        v.sort_by_key(|t| t.worker);
        values(&v, &tcp)
    }
    #[cfg(not(feature = "rdma"))]
    values::<(), _>(&[], &tcp)
}

pub(super) fn close(eng: &Engine, id: u64) -> Outcome {
    if eng.is_running() && eng.tcp_connections().iter().any(|c| c.id == id) {
        return eng.close_tcp_connection(id).map_err(|e| match e {
            // Gone between the list and the close.
            sluice_engine::EngineError::NotFound(_) => {
                (SluiceStatus::NotFound, format!("no connection {id}"))
            }
            e => (SluiceStatus::Internal, e.to_string()),
        });
    }
    #[cfg(feature = "rdma")]
    if mine(eng).iter().any(|c| c.id == id) {
        use sluice_engine::transport::rdma::{RdmaError, close_connection};
        return close_connection(id).map_err(|e| match e {
            // Gone between the list and the close.
            RdmaError::UnknownConnection(_) => {
                (SluiceStatus::NotFound, format!("no connection {id}"))
            }
            e => (SluiceStatus::Internal, e.to_string()),
        });
    }
    let tcp = !eng.config().io_uring.tcp_listen.is_empty();
    let why = match eng.config().engine.transport {
        _ if !eng.is_running() => " (the engine is not running)",
        TransportKind::IoUring if tcp => "",
        TransportKind::IoUring => {
            " (io_uring serves connections only with io_uring.tcp_listen set)"
        }
        TransportKind::Rdma if !cfg!(feature = "rdma") => {
            " (this library is built without the `rdma` feature)"
        }
        TransportKind::Rdma => "",
        TransportKind::Dpdk => {
            " (only the rdma transport and io_uring with tcp_listen have connections)"
        }
    };
    Err((SluiceStatus::NotFound, format!("no connection {id}{why}")))
}
