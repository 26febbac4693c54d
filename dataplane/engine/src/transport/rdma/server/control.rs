//! The control thread: rdma_cm events for client connections (accept,
//! establish, disconnect), closes asked for by the control plane, and
//! teardown of stopping workers. Peer connections are in `peers`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::super::proto::{ClientHello, ServerHello};
use super::super::verbs::{CmChannel, CmEventKind, CmId, ConnParams, Pd, QpCaps};
use super::super::{RdmaCfg, device_check};
use super::peers::{peer_event, peer_upkeep};
use super::*;

pub(super) fn start_runtime(
    cfg: &RdmaCfg,
    listen: SocketAddr,
    workers: usize,
    peers: &[SocketAddr],
) -> Result<Runtime, RdmaError> {
    device_check().map_err(RdmaError::NoDevice)?;
    let channel = CmChannel::new().map_err(|e| RdmaError::Cm("create_event_channel", e))?;
    let mut lid = CmId::new(&channel).map_err(|e| RdmaError::Cm("create_id", e))?;
    lid.bind(listen).map_err(|e| {
        RdmaError::Setup(format!(
            "cannot bind rdma.listen {listen}: {e} (it must be an IP of an RDMA device's netdev)"
        ))
    })?;
    let ctx = lid
        .context()
        .ok_or_else(|| RdmaError::Setup(format!("rdma.listen {listen} is on no RDMA device")))?;
    let pd = Pd::new(ctx).map_err(|e| RdmaError::Verbs("alloc_pd", e))?;
    // Listening starts once every worker has registered its pools (see
    // `with_runtime`): a connect request before that would find no worker.
    let device = ctx.device_name();
    let per = cfg.connections_max as usize;
    let now = Instant::now();
    let peer_conns = (0..workers)
        .flat_map(|w| {
            peers.iter().enumerate().map(move |(k, &addr)| PeerConn {
                worker: w,
                peer: k,
                addr,
                conn_id: 0,
                generation: 0,
                state: PeerState::Idle,
                id: None,
                qp: None,
                next_attempt: now,
                backoff: PEER_RECONNECT_MIN,
                since: now,
            })
        })
        .collect();
    let inner = Arc::new(Inner {
        conns: Mutex::new((0..workers * per).map(|_| None).collect()),
        peers: Mutex::new(peer_conns),
        peer_addrs: peers.to_vec(),
        listen,
        ports: (0..workers).map(|_| OnceLock::new()).collect(),
        close_requests: Mutex::new(Vec::new()),
        stop: AtomicBool::new(false),
        cfg: cfg.clone(),
        device,
        ctx,
        pd,
        _listen_id: Mutex::new(lid),
        channel,
    });
    let i2 = Arc::clone(&inner);
    let thread = std::thread::Builder::new()
        .name("sluice-rdma-cm".into())
        .spawn(move || control_loop(&i2))
        .map_err(|e| RdmaError::Setup(format!("spawn control thread: {e}")))?;
    Ok(Runtime {
        listen,
        inner,
        thread: Mutex::new(Some(thread)),
    })
}

/// What the control thread carries from one poll to the next.
struct ControlState {
    /// Where the round-robin choice of a worker for the next client starts.
    next_worker: usize,
    /// Generation of the last connection made (client or peer).
    generation: u32,
    /// (worker, peer, generation) of peer connections a worker let go of.
    peer_acks: Vec<(usize, u32, u32)>,
}

fn control_loop(inner: &Inner) {
    let mut st = ControlState {
        next_worker: 0,
        generation: 0,
        peer_acks: Vec::new(),
    };
    while !inner.stop.load(Ordering::Acquire) {
        let mut doomed: Vec<CmId> = Vec::new();
        if let Some(ev) = inner.channel.next_timeout(CONTROL_POLL_MS) {
            on_event(inner, &mut st, ev, &mut doomed);
        }
        let now = Instant::now();
        // Closes asked for by the control plane.
        let asked: Vec<u64> = inner
            .close_requests
            .lock()
            .map(|mut q| std::mem::take(&mut *q))
            .unwrap_or_default();
        if let Ok(mut conns) = inner.conns.lock() {
            close_asked(inner, &mut conns, &asked);
            for (w, port) in inner.ports.iter().enumerate() {
                let Some(port) = port.get() else { continue };
                release_acknowledged(inner, w, port, &mut conns, &mut st.peer_acks, &mut doomed);
                // A stopping worker polls no more: tear its connections
                // (clients and peers) down now, before it frees its pool.
                if port.closing.load(Ordering::Acquire) && !port.closed.load(Ordering::Acquire) {
                    tear_down_worker(inner, w, port, &mut conns, &mut doomed);
                }
            }
        }
        if let Ok(mut peers) = inner.peers.lock() {
            peer_upkeep(
                inner,
                &mut peers,
                &asked,
                &mut st.peer_acks,
                &mut st.generation,
                now,
                &mut doomed,
            );
        }
        drop(doomed);
    }
    shut_down(inner);
}

/// One rdma_cm event: a peer connection's, a connect request, or a client
/// connection's state change.
fn on_event(inner: &Inner, st: &mut ControlState, ev: verbs::CmEvent, doomed: &mut Vec<CmId>) {
    let kind = ev.kind();
    let client_ids = inner.ports.len() * inner.cfg.connections_max as usize;
    // Ids of peer connections come after every client slot.
    let peer_ix = ((ev.id_token() & INDEX_MASK) as usize)
        .checked_sub(client_ids + 1)
        .filter(|_| kind != CmEventKind::ConnectRequest);
    if let Some(j) = peer_ix {
        peer_event(inner, j, &ev, doomed);
        return;
    }
    match kind {
        CmEventKind::ConnectRequest => on_connect_request(inner, st, ev),
        CmEventKind::Established | CmEventKind::Disconnected | CmEventKind::Error(_) => {
            let token = ev.id_token();
            let Ok(mut conns) = inner.conns.lock() else {
                return;
            };
            let Some(c) = conns.iter_mut().flatten().find(|c| c.conn_id == token) else {
                return;
            };
            if kind == CmEventKind::Established {
                if c.state == ConnState::Accepting {
                    c.state = ConnState::Up;
                }
            } else if c.state != ConnState::Closing {
                log::info!("rdma: connection {} lost ({kind:?})", c.conn_id);
                begin_close(inner, c);
            }
        }
        _ => {}
    }
}

/// A client asks to connect: accept it on a worker, or reject it with the
/// reason in the private data.
fn on_connect_request(inner: &Inner, st: &mut ControlState, ev: verbs::CmEvent) {
    let Some(mut id) = ev.take_new_id() else {
        return;
    };
    let hello = ClientHello::decode(ev.private_data());
    st.generation = st.generation.wrapping_add(1).max(1);
    let generation = st.generation;
    match accept(inner, &mut id, hello, &mut st.next_worker, generation) {
        Ok((worker, slot, conn_id)) => {
            let peer = id.peer_addr();
            log::info!("rdma: connection {conn_id} from {peer:?} on worker {worker}");
            let per = inner.cfg.connections_max as usize;
            if let Ok(mut conns) = inner.conns.lock() {
                if let Some(p) = inner.ports[worker].get() {
                    bump(&p.accepted, 1);
                }
                conns[worker * per + slot as usize] = Some(Conn {
                    id,
                    worker,
                    slot,
                    generation,
                    conn_id,
                    peer,
                    state: ConnState::Accepting,
                });
            }
            drop(ev);
        }
        Err(why) => {
            log::warn!(
                "rdma: refused a connection from {:?}: {why}",
                id.peer_addr()
            );
            id.reject(why.as_bytes());
            // The event must be acked before its id is destroyed.
            drop(ev);
            drop(id);
        }
    }
}

/// Disconnects the client connections the control plane asked to close.
fn close_asked(inner: &Inner, conns: &mut [Option<Conn>], asked: &[u64]) {
    for id in asked {
        if let Some(c) = conns
            .iter_mut()
            .flatten()
            .find(|c| c.conn_id == *id && c.state != ConnState::Closing)
        {
            c.id.disconnect();
            begin_close(inner, c);
        }
    }
}

/// Worker `w` stopped using some connections: their QPs can go. Peer
/// acknowledgements are collected for `peer_upkeep`.
fn release_acknowledged(
    inner: &Inner,
    w: usize,
    port: &Port,
    conns: &mut [Option<Conn>],
    peer_acks: &mut Vec<(usize, u32, u32)>,
    doomed: &mut Vec<CmId>,
) {
    let per = inner.cfg.connections_max as usize;
    while let Some((slot, g)) = port.outbox.pop() {
        if slot & PEER_SLOT != 0 {
            peer_acks.push((w, slot & !PEER_SLOT, g));
            continue;
        }
        let k = w * per + slot as usize;
        if conns[k]
            .as_ref()
            .is_some_and(|c| c.generation == g && c.state == ConnState::Closing)
            && let Some(c) = conns[k].take()
        {
            retire(port, slot);
            doomed.push(c.id);
        }
    }
}

/// Worker `w` is stopping: its client and peer connections go now.
fn tear_down_worker(
    inner: &Inner,
    w: usize,
    port: &Port,
    conns: &mut [Option<Conn>],
    doomed: &mut Vec<CmId>,
) {
    let per = inner.cfg.connections_max as usize;
    for c in conns[w * per..(w + 1) * per].iter_mut() {
        if let Some(mut c) = c.take() {
            retire(port, c.slot);
            c.id.disconnect();
            c.id.destroy_qp();
            doomed.push(c.id);
        }
    }
    if let Ok(mut peers) = inner.peers.lock() {
        for pc in peers.iter_mut().filter(|p| p.worker == w) {
            if let Some(mut id) = pc.id.take() {
                id.disconnect();
                id.destroy_qp();
                doomed.push(id);
            }
            if let Some(k) = port.peer_stats.get(pc.peer) {
                k.retire_into(&port.retired);
            }
            pc.qp = None;
            pc.state = PeerState::Stopped;
        }
    }
    port.closed.store(true, Ordering::Release);
}

/// Stopping: every QP goes before the CQs, SRQs and PD.
fn shut_down(inner: &Inner) {
    if let Ok(mut conns) = inner.conns.lock() {
        for c in conns.iter_mut() {
            if let Some(mut c) = c.take() {
                c.id.disconnect();
            }
        }
    }
    if let Ok(mut peers) = inner.peers.lock() {
        for pc in peers.iter_mut() {
            if let Some(mut id) = pc.id.take() {
                id.disconnect();
            }
            pc.state = PeerState::Stopped;
        }
    }
    for p in inner.ports.iter().filter_map(OnceLock::get) {
        p.closed.store(true, Ordering::Release);
    }
}

/// A connection slot is released: its counts join the worker's totals.
fn retire(port: &Port, slot: u32) {
    if let Some(k) = port.stats.get(slot as usize) {
        k.retire_into(&port.retired);
    }
    bump(&port.closed_conns, 1);
}

fn begin_close(inner: &Inner, c: &mut Conn) {
    c.state = ConnState::Closing;
    if let Some(port) = inner.ports[c.worker].get()
        && port
            .inbox
            .push(ConnMsg::Down {
                slot: c.slot,
                generation: c.generation,
            })
            .is_err()
    {
        log::error!(
            "rdma: worker {} inbox full; connection {} closes late",
            c.worker,
            c.conn_id
        );
    }
}

/// Picks a worker and slot, creates the QP, tells the worker, accepts.
fn accept(
    inner: &Inner,
    id: &mut CmId,
    hello: Option<ClientHello>,
    next_worker: &mut usize,
    generation: u32,
) -> Result<(usize, u32, u64), String> {
    let hello = hello.ok_or("not a Sluice RDMA client (bad or missing private data)")?;
    let per = inner.cfg.connections_max as usize;
    let nw = inner.ports.len();
    let (worker, slot) = {
        let conns = inner
            .conns
            .lock()
            .map_err(|_| "connection table poisoned")?;
        let mut found = None;
        for step in 0..nw {
            let w = (*next_worker + step) % nw;
            let Some(port) = inner.ports[w].get() else {
                continue;
            };
            if port.closing.load(Ordering::Acquire) {
                continue;
            }
            if let Some(s) = (0..per).find(|&s| conns[w * per + s].is_none()) {
                found = Some((w, s as u32));
                break;
            }
        }
        found.ok_or("every worker is at rdma.connections_max")?
    };
    *next_worker = (worker + 1) % nw;
    let port = inner.ports[worker].get().ok_or("worker not started")?;
    let cfg = &inner.cfg;
    // Replies from transmit buffers, and answers relayed from receive buffers.
    let caps = QpCaps {
        send_wr: (cfg.tx_buffers + cfg.large_tx_buffers + cfg.rx_buffers).min(4096),
        recv_wr: 0,
    };
    let qp = id
        .create_qp(&inner.pd, &port.cq, Some(&port.srq), caps)
        .map_err(|e| format!("create_qp: {e}"))?;
    let conn_id = ((generation as u64) << 32) | (worker * per + slot as usize + 1) as u64;
    id.set_token(conn_id);
    port.stats[slot as usize].reset();
    let peer = id
        .peer_addr()
        .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
    port.inbox
        .push(ConnMsg::Up {
            slot,
            generation,
            qp,
            peer,
            hello,
        })
        .map_err(|_| "worker inbox full".to_string())?;
    let (base, rkey) = port.grants[slot as usize];
    let sh = ServerHello {
        conn_id,
        slot_base: base,
        slot_rkey: rkey,
        slot_count: cfg.slots_per_connection,
        slot_size: cfg.slot_size,
        buffer_size: cfg.buffer_size,
        credits: (cfg.rx_buffers / cfg.connections_max).max(1),
    };
    let data = sh.encode();
    if let Err(e) = id.accept(&ConnParams {
        private_data: &data,
    }) {
        let _ = port.inbox.push(ConnMsg::Down { slot, generation });
        // The worker acknowledges; the connection entry is not stored, so
        // wait here (bounded) until it has, then the caller rejects.
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(1) {
            if let Some((s, g)) = port.outbox.pop()
                && s == slot
                && g == generation
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        return Err(format!("accept: {e}"));
    }
    Ok((worker, slot, conn_id))
}
