//! Completions a worker polls from its CQ: receives (SEND and RDMA WRITE
//! into a request slot) become frames of the burst; sends give their
//! buffers back.

use super::super::proto::IMM_SLOT;
use super::super::verbs::{Wc, WcKind};
use super::*;
use crate::transport::RxPacket;

impl RdmaTransport {
    pub(super) fn on_completion(&mut self, wc: Wc, out: &mut [RxPacket], n: &mut usize) {
        debug_assert!(
            *n < out.len(),
            "a completion polled without room in the burst"
        );
        let idx = (wc.wr_id & INDEX_MASK) as u32;
        if wc.wr_id & TAG_HELD != 0 {
            if wc.ok {
                self.counters.tx_frames += 1;
            } else {
                self.counters.tx_errors += 1;
                self.send_failed(wc.qp_num);
            }
            if idx < self.rx_count {
                self.rx_in_use -= 1;
                self.repost(idx);
            }
            return;
        }
        if wc.wr_id & TAG_SEND != 0 {
            if wc.ok {
                self.counters.tx_frames += 1;
            } else {
                self.counters.tx_errors += 1;
                self.send_failed(wc.qp_num);
            }
            if idx < self.tx_count {
                self.release_tx(idx);
            }
            return;
        }
        if wc.wr_id & TAG_RECV == 0 || idx >= self.rx_count {
            return;
        }
        if !wc.ok {
            // Flushed by a QP that went to error: the buffer is ours again.
            self.repost(idx);
            return;
        }
        let mut slot = self.conn_by_qpn(wc.qp_num);
        if slot.is_none() && self.peer_by_qpn(wc.qp_num).is_none() {
            // The completion may have overtaken the hand-off: look again.
            self.drain_inbox();
            slot = self.conn_by_qpn(wc.qp_num);
        }
        if slot.is_none()
            && let Some(k) = self.peer_by_qpn(wc.qp_num)
        {
            // A peer's answer to a forward: to the worker's relay path.
            let stats = &self.port.peer_stats[k];
            if wc.kind == WcKind::Recv {
                bump(&stats.rx_frames, 1);
                bump(&stats.rx_bytes, wc.byte_len as u64);
                out[*n] = RxPacket {
                    buf: idx,
                    off: 0,
                    len: wc.byte_len.min(self.buf_size),
                    peer: self.peer_addrs[k],
                    truncated: false,
                    port: crate::transport::PORT_FORWARD,
                    conn: crate::transport::CONN_DATAGRAM,
                };
                *n += 1;
                self.rx_in_use += 1;
                self.rx_touch.take(idx);
                self.counters.rx_frames += 1;
            } else {
                // No slots were granted to peers: nothing else is valid.
                bump(&stats.errors, 1);
                self.repost(idx);
            }
            return;
        }
        let Some(slot) = slot else {
            self.repost(idx);
            self.counters.rx_no_buffers += 1;
            return;
        };
        let peer = self.peer_of(slot);
        let stats = &self.port.stats[slot];
        match wc.kind {
            WcKind::Recv => {
                bump(&stats.rx_frames, 1);
                bump(&stats.rx_bytes, wc.byte_len as u64);
                out[*n] = RxPacket {
                    buf: idx,
                    off: 0,
                    len: wc.byte_len.min(self.buf_size),
                    peer,
                    truncated: false,
                    port: crate::transport::PORT_SERVICE,
                    conn: crate::transport::CONN_DATAGRAM,
                };
                *n += 1;
                self.rx_in_use += 1;
                self.rx_touch.take(idx);
                self.counters.rx_frames += 1;
            }
            WcKind::RecvWriteImm => {
                // The write consumed a receive but put nothing in it.
                let k = wc.imm & 0xffff;
                let ok = wc.imm & IMM_SLOT != 0 && k < self.spc && wc.byte_len <= self.slot_size;
                let g = slot * self.spc as usize + k as usize;
                if !ok || self.large_busy[g] {
                    bump(&stats.errors, 1);
                    self.counters.rx_no_buffers += 1;
                } else {
                    bump(&stats.rx_frames, 1);
                    bump(&stats.rx_large, 1);
                    bump(&stats.rx_bytes, wc.byte_len as u64);
                    self.large_busy[g] = true;
                    out[*n] = RxPacket {
                        buf: self.rx_count + g as u32,
                        off: 0,
                        len: wc.byte_len,
                        peer,
                        truncated: false,
                        port: crate::transport::PORT_SERVICE,
                        conn: crate::transport::CONN_DATAGRAM,
                    };
                    *n += 1;
                    self.rx_in_use += 1;
                    self.rx_touch.take(self.rx_count + g as u32);
                    self.counters.rx_frames += 1;
                }
                self.repost(idx);
            }
            _ => self.repost(idx),
        }
    }
}
