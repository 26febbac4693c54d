//! Forwarding: a request for a shard this host does not serve goes to a
//! peer that carries the shard's labels, one hop only; the peer's answer is
//! relayed to the client. Every forward waits in a fixed-size table
//! ([`PendingForwards`]) and is answered `peer_down` when its peer does not
//! answer in time or its connection is lost.

use std::time::{Duration, Instant};

use sluice_wire::{BodyRepr, ErrorCode, Frame, FrameRepr, Kind, TraceContext, flags};

use super::*;
use crate::pending::Forwarded;
use crate::stats::bump;
use crate::transport::{PeerAddr, Transport, TxPacket};
use crate::vocab::CopyPath;

/// Requests a worker may have forwarded to peers and not yet seen answered.
pub const FORWARD_PENDING_MAX: usize = 1024;

/// How long a peer that missed an answer is avoided.
const PEER_DOWN_BACKOFF: Duration = Duration::from_secs(1);

/// How often pending forwards are checked for timeouts.
pub(super) const FORWARD_SCAN_EVERY: Duration = Duration::from_millis(1);

/// A peer this worker found unresponsive, and until when it is avoided.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerDown {
    peer: std::net::SocketAddr,
    until: Instant,
}

impl<T: Transport> Worker<T> {
    /// Sends a request for a shard this host does not serve to a peer that
    /// carries its labels, remembering where the answer must go.
    pub(super) fn forward(&mut self, i: usize, shard: usize) {
        let pkt = self.rx[i];
        // One hop only: a request that came from a peer is not sent on.
        let from_peer = self.tables.peers.iter().any(|p| p.addr == pkt.peer);
        let target = if from_peer {
            None
        } else {
            self.tables
                .peer_for(&self.tables.shards[shard])
                .map(|(_, p)| PeerAddr {
                    addr: p.addr,
                    tcp: p.tcp_addr,
                })
        };
        let Some(peer) = target else {
            self.reply(
                i,
                Immediate::Error(ErrorCode::NoRouteToShard, "no route to shard"),
                Some(shard),
            );
            return;
        };
        if let Err((code, why)) = self.transport.forward_check(&pkt, peer) {
            self.reply(i, Immediate::Error(code, why), Some(shard));
            return;
        }
        let now = Instant::now();
        if self
            .peers_down
            .iter()
            .flatten()
            .any(|d| d.peer == peer.addr && d.until > now)
        {
            self.reply(
                i,
                Immediate::Error(ErrorCode::PeerDown, "the peer serving this shard is down"),
                Some(shard),
            );
            return;
        }
        let (rid, tenant) = {
            let b = self.transport.rx_bytes(&pkt);
            let f = Frame::new_unchecked(b);
            (f.request_id(), f.tenant_id())
        };
        let entry = Forwarded {
            peer: peer.addr,
            request_id: rid,
            tenant_id: tenant,
            client: pkt.peer,
            client_conn: pkt.conn,
            sent: now,
        };
        // Recorded before sending. Refused when full, or when the same id
        // already waits on this peer (the two answers could not be told
        // apart).
        if self.forwarded.insert(entry).is_err() {
            self.reply(
                i,
                Immediate::Error(ErrorCode::Busy, "too many requests in flight to the peer"),
                Some(shard),
            );
            return;
        }
        // Mark the frame relayed (outside the tag) so the peer never sends
        // it on: one hop only.
        let mut frame = Frame::new_unchecked(self.transport.rx_bytes_mut(&pkt));
        if frame.check_len().is_ok() {
            frame.set_flags(frame.flags() | flags::FORWARDED);
        }
        // The transport owns the buffer from here (sent or released).
        self.rx_open[i] = false;
        match self.transport.forward(&pkt, peer) {
            Some(copied) => {
                bump(&self.counters.forwarded, 1);
                bump(&self.counters.forward_bytes_copied, copied);
                self.counters.copied(CopyPath::Forward, copied);
            }
            None => {
                bump(&self.counters.tx_no_buffers, 1);
                if let Some(f) = self.forwarded.take(&peer.addr, rid) {
                    // Sent with the burst's other answers.
                    self.answer_forward(
                        f,
                        ErrorCode::PeerDown,
                        "the request could not be sent to the peer",
                    );
                }
            }
        }
    }

    /// The connection to `peer` was lost: its forwards fail at once.
    pub(super) fn fail_forwards_to(&mut self, peer: std::net::SocketAddr) {
        let mut cursor = 0;
        while let Some(f) = self.forwarded.next_to_peer(&mut cursor, &peer) {
            self.answer_forward(
                f,
                ErrorCode::PeerDown,
                "the connection to the peer serving this shard was lost",
            );
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.flush_sends();
    }

    /// Queues a retryable `peer_down` for a forward that will get no answer.
    pub(super) fn answer_forward(&mut self, f: Forwarded, code: ErrorCode, message: &'static str) {
        let Some(tx) = self.transport.tx_alloc() else {
            bump(&self.counters.tx_no_buffers, 1);
            return;
        };
        self.hand.hold(tx, None);
        let repr = FrameRepr {
            body: BodyRepr::Error { code, message },
            ..FrameRepr::answer(
                Kind::Error,
                f.request_id,
                f.tenant_id,
                TraceContext::default(),
            )
        };
        let emitted = repr.emit(self.transport.tx_bytes(tx));
        self.hand.let_go(tx);
        match emitted {
            Ok(l) => {
                self.counters.error(code);
                self.sends.push(TxPacket {
                    buf: tx,
                    len: l.frame_len as u32,
                    peer: f.client,
                    conn: f.client_conn,
                });
            }
            Err(_) => self.transport.tx_free(tx),
        }
    }

    /// A peer's answer on the forwarding port: relay it to the client.
    pub(super) fn relay_answer(&mut self, i: usize) {
        let pkt = self.rx[i];
        let rid = {
            let f = Frame::new_unchecked(self.transport.rx_bytes(&pkt));
            f.has_magic().then(|| f.try_request_id()).flatten()
        };
        let Some(f) = rid.and_then(|rid| self.forwarded.take(&pkt.peer, rid)) else {
            bump(&self.counters.forward_stale, 1);
            self.release(i);
            return;
        };
        for d in self.peers_down.iter_mut() {
            if d.is_some_and(|d| d.peer == f.peer) {
                *d = None;
            }
        }
        self.rx_open[i] = false;
        match self.transport.relay(&pkt, f.client, f.client_conn) {
            Some(copied) => {
                bump(&self.counters.relayed, 1);
                bump(&self.counters.forward_bytes_copied, copied);
                self.counters.copied(CopyPath::Relay, copied);
            }
            None => bump(&self.counters.tx_no_buffers, 1),
        }
    }

    /// Answers forwards whose peer did not answer in time with a retryable
    /// `peer_down`, and avoids that peer for a while.
    pub(super) fn expire_forwards(&mut self) {
        let now = Instant::now();
        self.last_forward_scan = now;
        let timeout = self.p.forward_timeout;
        let mut cursor = 0;
        while let Some(f) = self.forwarded.next_expired(&mut cursor, now, timeout) {
            bump(&self.counters.forward_timeouts, 1);
            let until = now + PEER_DOWN_BACKOFF;
            match self
                .peers_down
                .iter()
                .position(|d| d.is_some_and(|d| d.peer == f.peer))
            {
                Some(k) => {
                    self.peers_down[k] = Some(PeerDown {
                        peer: f.peer,
                        until,
                    })
                }
                None => {
                    if let Some(k) = self.peers_down.iter().position(Option::is_none) {
                        self.peers_down[k] = Some(PeerDown {
                            peer: f.peer,
                            until,
                        });
                    }
                }
            }
            self.answer_forward(
                f,
                ErrorCode::PeerDown,
                "the peer serving this shard did not answer",
            );
            if self.sends.len() == self.sends.capacity() {
                self.flush_sends();
            }
        }
        self.flush_sends();
    }
}
