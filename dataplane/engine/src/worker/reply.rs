//! Answering at once: an immediate answer (an error, a pong) built into a
//! transmit buffer, and the queue-entry bookkeeping that goes with it.

use super::*;

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
    pub(super) fn reply_queued(&mut self, s: usize, k: usize, r: Immediate) {
        self.queues[s][k].state = batch::State::Done;
        let p = self.queues[s][k];
        if let Immediate::Error(code, _) = r {
            self.trace_held_done(s, k, code as u16);
        } else {
            self.trace_held_done(s, k, 0);
        }
        // Its span record, while the burst it arrived in is this one.
        let traced = (p.arrived == self.burst_start && p.span == trace::NO_SPAN)
            .then_some(usize::from(p.rx_index));
        self.reply_pkt(p.pkt, r, Some(s), Some(usize::from(p.slot)), traced);
    }

    /// Answers frame `i` of this burst at once and releases its buffer.
    pub(super) fn reply(&mut self, i: usize, r: Immediate, shard: Option<usize>) {
        self.rx_open[i] = false;
        self.reply_pkt(self.rx[i], r, shard, None, Some(i));
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
    ) {
        let Some(tx) = self.transport.tx_alloc_for(&pkt) else {
            bump(&self.counters.tx_no_buffers, 1);
            self.transport.rx_release(&pkt);
            return;
        };
        probes_sys::pool_alloc(|| (tx,));
        if let Immediate::Error(code, _)
        | Immediate::Stream { code, .. }
        | Immediate::Refused(crate::auth::Refusal { code, .. }) = r
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
        self.transport.rx_release(&pkt);
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
}
