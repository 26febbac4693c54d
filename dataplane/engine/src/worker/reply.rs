//! Answering at once: an immediate answer (an error, a pong) built into a
//! transmit buffer, and the queue-entry bookkeeping that goes with it.

use super::*;

/// Where a frame being answered is held: it is let go as its receive
/// buffer is released, so a panic before leaves it to be answered after.
#[derive(Clone, Copy)]
pub(super) enum Held {
    /// Frame `i` of this burst.
    Burst(usize),
    /// Entry `k` of shard `s`'s queue.
    Queued(usize, usize),
}

impl<T: Transport> Worker<T> {
    /// Ends shard `s`'s queue entry `k`: marked done first (a panic past
    /// here cannot release it twice), then its receive buffer released.
    pub(super) fn release_queued(&mut self, s: usize, k: usize) {
        self.queues[s][k].state = batch::State::Done;
        let pkt = self.queues[s][k].pkt;
        self.transport.rx_release(&pkt);
        self.trace_held_done(s, k, 0);
    }

    /// Answers shard `s`'s queue entry `k` at once and releases its buffer.
    /// Marked done as its buffer is released (after the answer is built):
    /// a panic while building leaves it open, answered once after it.
    pub(super) fn reply_queued(&mut self, s: usize, k: usize, r: Immediate) {
        let p = self.queues[s][k];
        if let Immediate::Error(code, _) = r {
            self.trace_held_done(s, k, code as u16);
        } else {
            self.trace_held_done(s, k, 0);
        }
        // Its span record, while the burst it arrived in is this one.
        let traced = (p.arrived == self.burst_start && p.span == trace::NO_SPAN)
            .then_some(usize::from(p.rx_index));
        self.reply_pkt(
            p.pkt,
            r,
            Some(s),
            Some(usize::from(p.slot)),
            traced,
            Held::Queued(s, k),
        );
    }

    /// Answers frame `i` of this burst at once and releases its buffer.
    pub(super) fn reply(&mut self, i: usize, r: Immediate, shard: Option<usize>) {
        self.reply_pkt(self.rx[i], r, shard, None, Some(i), Held::Burst(i));
    }

    /// Answers a received frame at once and releases its receive buffer;
    /// `traced` is its index in this burst, for its span's outcome.
    pub(super) fn reply_pkt(
        &mut self,
        pkt: RxPacket,
        r: Immediate,
        shard: Option<usize>,
        slot: Option<usize>,
        traced: Option<usize>,
        held: Held,
    ) {
        let Some(tx) = self.transport.tx_alloc_for(&pkt) else {
            bump(&self.counters.tx_no_buffers, 1);
            self.let_go_rx(held);
            self.transport.rx_release(&pkt);
            return;
        };
        self.hand.hold(tx, None);
        probes_sys::pool_alloc(|| (tx,));
        if let Immediate::Error(code, _)
        | Immediate::Stream { code, .. }
        | Immediate::Refused(crate::vocab::Refusal { code, .. }) = r
        {
            probes_sys::error(|| {
                let f = Frame::new_unchecked(self.transport.rx_bytes(&pkt));
                (
                    f.try_request_id().unwrap_or(0),
                    f.try_tenant_id().unwrap_or(0),
                    code as u32,
                )
            });
        }
        if let Immediate::Error(..) | Immediate::TooLarge { .. } | Immediate::Refused(_) = r {
            // The tenant id of a refused frame, or of one no configured
            // tenant holds, is only a claim: such errors share the overflow
            // cell, so unsigned datagrams cannot take the tenant cells.
            let claimed = Frame::new_unchecked(self.transport.rx_bytes(&pkt))
                .try_tenant_id()
                .unwrap_or(0);
            let known = !matches!(r, Immediate::Refused(_))
                && (!self.tables.auth.required || self.tables.tenant(claimed).is_some());
            let k = if known {
                self.load.key(shard, slot, claimed)
            } else {
                self.load.key_unclaimed(shard, slot)
            };
            self.load.error(k);
        }
        let len = {
            let (rxb, txb) = self.transport.frames(&pkt, tx);
            build_immediate(rxb, txb, &r, &self.tables)
        };
        match &r {
            Immediate::Error(code, _) | Immediate::Stream { code, .. } => {
                if let Some(i) = traced {
                    self.trace_outcome(i, *code as u16);
                }
                self.counters.error(*code);
                if let Some(s) = shard {
                    bump(&self.counters.shard_errors[s], 1);
                }
            }
            Immediate::TooLarge { .. } => {
                self.counters.error(ErrorCode::ResponseTooLarge);
                if let Some(s) = shard {
                    bump(&self.counters.shard_errors[s], 1);
                }
            }
            Immediate::Refused(r) => {
                if let Some(i) = traced {
                    self.trace_outcome(i, r.code as u16);
                }
                self.counters.error(r.code);
                self.counters.refused(r.cause);
            }
            Immediate::Pong => bump(&self.counters.pings, 1),
            Immediate::Negotiate(_) => bump(&self.counters.negotiations, 1),
        }
        self.let_go_rx(held);
        self.transport.rx_release(&pkt);
        self.hand.let_go(tx);
        match len {
            Some(len) => {
                self.sends.push(TxPacket::answer(&pkt, tx, len as u32));
                record(&mut self.hist.total, self.burst_start.elapsed());
            }
            None => {
                probes_sys::pool_free(|| (tx,));
                self.transport.tx_free(tx);
            }
        }
    }

    /// The worker stops holding a frame's receive buffer (just before it
    /// is released): no longer open in the burst, or its queue entry done.
    fn let_go_rx(&mut self, held: Held) {
        match held {
            Held::Burst(i) => self.rx_open[i] = false,
            Held::Queued(s, k) => self.queues[s][k].state = batch::State::Done,
        }
    }
}
