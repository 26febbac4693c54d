//! Peer connections, run by the control thread: one RC connection per
//! worker to each rdma peer, connected with a bounded backoff, replaced when
//! lost or when a send on it fails.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::super::proto::{ClientHello, ServerHello};
use super::super::verbs::{self, CmEventKind, CmId, ConnParams, QpCaps};
use super::*;

/// Peer connections, once per control poll: acknowledgements from workers,
/// failed sends, closes asked for, connect deadlines and new attempts.
pub(super) fn peer_upkeep(
    inner: &Inner,
    peers: &mut [PeerConn],
    asked: &[u64],
    acks: &mut Vec<(usize, u32, u32)>,
    generation: &mut u32,
    now: Instant,
    doomed: &mut Vec<CmId>,
) {
    let np = inner.peer_addrs.len();
    if np == 0 {
        acks.clear();
        return;
    }
    // The worker let go of a closing connection: destroy it, retry later.
    for (w, k, g) in acks.drain(..) {
        let Some(pc) = peers.get_mut(w * np + k as usize) else {
            continue;
        };
        if pc.generation == g && pc.state == PeerState::Closing {
            if let Some(port) = inner.ports[w].get() {
                port.peer_stats[pc.peer].retire_into(&port.retired);
            }
            if let Some(id) = pc.id.take() {
                doomed.push(id);
            }
            pc.qp = None;
            pc.state = PeerState::Idle;
            pc.next_attempt = now + pc.backoff;
        }
    }
    for (w, port) in inner.ports.iter().enumerate() {
        let Some(port) = port.get() else { continue };
        while let Some((k, g)) = port.peer_errors.pop() {
            if let Some(pc) = peers.get_mut(w * np + k as usize)
                && pc.generation == g
                && pc.state == PeerState::Up
            {
                log::warn!(
                    "rdma: peer connection {} to {} failed a send; reconnecting",
                    pc.conn_id,
                    pc.addr
                );
                if let Some(id) = pc.id.as_mut() {
                    id.disconnect();
                }
                peer_begin_close(inner, pc);
            }
        }
    }
    let all_ready = inner.ports.iter().all(|p| p.get().is_some());
    for (j, pc) in peers.iter_mut().enumerate() {
        if asked.contains(&pc.conn_id) {
            match pc.state {
                PeerState::Up => {
                    log::info!("rdma: peer connection {} closed by request", pc.conn_id);
                    if let Some(id) = pc.id.as_mut() {
                        id.disconnect();
                    }
                    // Reconnect after the shortest wait.
                    pc.backoff = PEER_RECONNECT_MIN;
                    peer_begin_close(inner, pc);
                }
                PeerState::Resolving | PeerState::Connecting => {
                    peer_failed(pc, "closed by request", now, doomed)
                }
                _ => {}
            }
        }
        let Some(port) = inner.ports[pc.worker].get() else {
            continue;
        };
        if port.closing.load(Ordering::Acquire) {
            continue;
        }
        match pc.state {
            PeerState::Idle if all_ready && now >= pc.next_attempt => {
                *generation = generation.wrapping_add(1).max(1);
                pc.generation = *generation;
                let index = inner.ports.len() * inner.cfg.connections_max as usize + j + 1;
                pc.conn_id = ((pc.generation as u64) << 32) | index as u64;
                pc.since = now;
                match CmId::new(&inner.channel) {
                    Ok(mut id) => {
                        id.set_token(pc.conn_id);
                        let src = SocketAddr::new(inner.listen.ip(), 0);
                        let r = id.resolve_addr_from(Some(src), pc.addr, PEER_RESOLVE_TIMEOUT_MS);
                        pc.id = Some(id);
                        pc.state = PeerState::Resolving;
                        if let Err(e) = r {
                            peer_failed(pc, &format!("resolve_addr: {e}"), now, doomed);
                        }
                    }
                    Err(e) => peer_failed(pc, &format!("create_id: {e}"), now, doomed),
                }
            }
            PeerState::Resolving | PeerState::Connecting
                if now.duration_since(pc.since) > PEER_CONNECT_TIMEOUT =>
            {
                peer_failed(pc, "connect timed out", now, doomed)
            }
            _ => {}
        }
    }
}

/// An rdma_cm event on peer connection `j`.
pub(super) fn peer_event(inner: &Inner, j: usize, ev: &verbs::CmEvent, doomed: &mut Vec<CmId>) {
    let Ok(mut peers) = inner.peers.lock() else {
        return;
    };
    let Some(pc) = peers.get_mut(j) else { return };
    if pc.conn_id != ev.id_token() {
        return; // an attempt given up on already
    }
    let now = Instant::now();
    let kind = ev.kind();
    match (kind, pc.state) {
        (CmEventKind::AddrResolved, PeerState::Resolving) => {
            let r = pc
                .id
                .as_mut()
                .map(|id| id.resolve_route(PEER_RESOLVE_TIMEOUT_MS));
            if let Some(Err(e)) = r {
                peer_failed(pc, &format!("resolve_route: {e}"), now, doomed);
            }
        }
        (CmEventKind::RouteResolved, PeerState::Resolving) => match peer_connect(inner, pc) {
            Ok(()) => pc.state = PeerState::Connecting,
            Err(why) => peer_failed(pc, &why, now, doomed),
        },
        (CmEventKind::Established, PeerState::Connecting) => {
            let hello = ServerHello::decode(ev.private_data());
            let port = inner.ports[pc.worker].get();
            match (hello, port, pc.qp.take()) {
                (Some(hello), Some(port), Some(qp)) => {
                    port.peer_stats[pc.peer].reset();
                    let up = ConnMsg::PeerUp {
                        peer: pc.peer as u32,
                        generation: pc.generation,
                        qp,
                        hello,
                    };
                    if port.inbox.push(up).is_err() {
                        if let Some(id) = pc.id.as_mut() {
                            id.disconnect();
                        }
                        peer_failed(pc, "worker inbox full", now, doomed);
                        return;
                    }
                    log::info!(
                        "rdma: peer connection {} to {} up on worker {}",
                        pc.conn_id,
                        pc.addr,
                        pc.worker
                    );
                    pc.state = PeerState::Up;
                    pc.backoff = PEER_RECONNECT_MIN;
                }
                _ => {
                    if let Some(id) = pc.id.as_mut() {
                        id.disconnect();
                    }
                    peer_failed(
                        pc,
                        "the peer is not a Sluice RDMA appliance (bad accept data)",
                        now,
                        doomed,
                    );
                }
            }
        }
        (
            CmEventKind::Disconnected | CmEventKind::Error(_) | CmEventKind::Rejected,
            PeerState::Up,
        ) => {
            log::warn!(
                "rdma: peer connection {} to {} lost ({kind:?})",
                pc.conn_id,
                pc.addr
            );
            peer_begin_close(inner, pc);
        }
        (
            CmEventKind::Disconnected | CmEventKind::Error(_) | CmEventKind::Rejected,
            PeerState::Resolving | PeerState::Connecting,
        ) => {
            let why = format!("{kind:?} (status {})", ev.status());
            peer_failed(pc, &why, now, doomed);
        }
        _ => {}
    }
}

/// Route resolved: create the QP on the worker's CQ and SRQ and connect.
fn peer_connect(inner: &Inner, pc: &mut PeerConn) -> Result<(), String> {
    let id = pc.id.as_mut().ok_or("no id")?;
    let ctx = id
        .context()
        .ok_or_else(|| format!("{} is reached through no RDMA device", pc.addr))?;
    if !ctx.same(&inner.ctx) {
        return Err(format!(
            "{} is reached through another RDMA device than {}",
            pc.addr, inner.device
        ));
    }
    let port = inner.ports[pc.worker].get().ok_or("worker not started")?;
    // Every forward holds a receive buffer until its send completes, so
    // the send queue never holds more than rx_buffers.
    let caps = QpCaps {
        send_wr: inner.cfg.rx_buffers.min(4096),
        recv_wr: 0,
    };
    let qp = id
        .create_qp(&inner.pd, &port.cq, Some(&port.srq), caps)
        .map_err(|e| format!("create_qp: {e}"))?;
    pc.qp = Some(qp);
    // No reply slots: answers come back by SEND into this worker's SRQ.
    let hello = ClientHello {
        buffer_size: inner.cfg.buffer_size,
        ..ClientHello::default()
    };
    id.connect(&ConnParams {
        private_data: &hello.encode(),
    })
    .map_err(|e| format!("connect: {e}"))
}

/// An attempt failed: drop it and wait (doubling, bounded) before the next.
fn peer_failed(pc: &mut PeerConn, why: &str, now: Instant, doomed: &mut Vec<CmId>) {
    if pc.backoff == PEER_RECONNECT_MIN {
        log::warn!(
            "rdma: cannot connect worker {} to peer {}: {why}; retrying with backoff",
            pc.worker,
            pc.addr
        );
    } else {
        log::debug!("rdma: peer {} still unreachable: {why}", pc.addr);
    }
    if let Some(id) = pc.id.take() {
        doomed.push(id);
    }
    pc.qp = None;
    pc.state = PeerState::Idle;
    pc.next_attempt = now + pc.backoff;
    pc.backoff = (pc.backoff * 2).min(PEER_RECONNECT_MAX);
}

/// Tells the worker to stop using an up peer connection; its acknowledgement
/// lets the QP go (`peer_upkeep`).
fn peer_begin_close(inner: &Inner, pc: &mut PeerConn) {
    pc.state = PeerState::Closing;
    if let Some(port) = inner.ports[pc.worker].get() {
        let down = ConnMsg::PeerDown {
            peer: pc.peer as u32,
            generation: pc.generation,
        };
        if port.inbox.push(down).is_err() {
            log::error!(
                "rdma: worker {} inbox full; peer connection {} closes late",
                pc.worker,
                pc.conn_id
            );
        }
    }
}
