//! Running one request on its own (the zero-copy path): deadline, the
//! transform if the route has one, the model's handler (plain request,
//! stream step or a token stream's OPEN), then the answer.

use std::time::Instant;

use sluice_wire::{ErrorCode, Frame};

use super::*;

impl<T: Transport> Worker<T> {
    /// Runs one request on its own (the zero-copy path), with `tx` when
    /// the caller took its transmit buffer already.
    /// The entry is `k` of shard `shard`'s queue; it is done once this
    /// returns.
    pub(super) fn run_one(&mut self, shard: usize, k: usize, tx: Option<u32>) {
        let p = self.queues[shard][k];
        let pkt = p.pkt;
        let started = Instant::now();
        // A buffer the caller took is in the worker's hand already.
        let tx = match tx {
            Some(tx) => tx,
            None => {
                let Some(tx) = self.transport.tx_alloc_for(&pkt) else {
                    bump(&self.counters.tx_no_buffers, 1);
                    self.release_queued(shard, k);
                    return;
                };
                self.hand.hold(tx, None);
                tx
            }
        };
        probes_sys::pool_alloc(|| (tx,));
        let now_us = self.now_us;
        // A stream frame whose stream another version of the model holds
        // (its alias switched): the state moves over when the new version
        // keeps state of the same shapes, else the stream ends.
        if let Some(sh) = Frame::new_unchecked(self.transport.rx_bytes(&pkt)).stream()
            && !sh.has(sluice_wire::stream_flags::OPEN)
        {
            let tenant = Frame::new_unchecked(self.transport.rx_bytes(&pkt)).tenant_id();
            if !self.follow_stream(p.slot as usize, tenant, sh.stream_id, now_us) {
                probes_sys::pool_free(|| (tx,));
                self.hand.let_go(tx);
                self.transport.tx_free(tx);
                self.reply_queued(
                    shard,
                    k,
                    Immediate::Stream {
                        code: ErrorCode::StreamStateMismatch,
                        message: "the model version behind the alias keeps state of other shapes; the stream ended",
                        seq: sh.seq,
                        ended: true,
                    },
                );
                return;
            }
        }
        let tx_len;
        let mut stream_refusal = None;
        // Whether token frames can go back the way this frame came.
        let pushable = self.transport.can_push(&pkt);
        let mut opened = false;
        let result = {
            let (rxb, txb) = self.transport.frames(&pkt, tx);
            tx_len = txb.len();
            let req = Frame::new_unchecked(rxb);
            let rid = req.request_id();
            probes_sys::infer_start(|| (rid, shard as u32));
            if req.deadline_us() != 0 && now_us > req.deadline_us() {
                Err(Reject::new(
                    ErrorCode::DeadlineExceeded,
                    "deadline passed before the request ran",
                ))
            } else {
                // A transform rebuilds the request in its instance's aligned
                // buffer (the one copy it costs); the model reads that.
                let rebuilt = match p.transform {
                    None => Ok(None),
                    Some(tr) => transform::run(
                        &mut self.transforms,
                        &self.tables,
                        &self.counters,
                        &req,
                        tr,
                        started,
                    )
                    .map(Some),
                };
                match rebuilt {
                    Err(r) => Err(r),
                    Ok(rebuilt) => {
                        let req = rebuilt.map_or(req, Frame::new_unchecked);
                        match self
                            .handlers
                            .get_mut(p.slot as usize)
                            .and_then(Option::as_mut)
                        {
                            Some(h) => {
                                let adapter = Some(req.adapter()).filter(|a| !a.is_empty());
                                let mut acct = RunAccount::default();
                                let token_open = match req.stream() {
                                    Some(sh) if sh.has(sluice_wire::stream_flags::OPEN) => h
                                        .token_open(
                                            &req, sh, &pkt, pushable, shard, now_us, &mut acct,
                                        ),
                                    _ => None,
                                };
                                let r = match (token_open, req.stream()) {
                                    // A token stream's OPEN: nothing to answer
                                    // now (length 0), its frames follow.
                                    (Some(Ok(())), _) => {
                                        opened = true;
                                        Ok(0)
                                    }
                                    (Some(Err(e)), _) => {
                                        stream_refusal = Some((e.seq, e.ended));
                                        Err(e.reject)
                                    }
                                    // A stream frame: its state lives in the
                                    // handler's table; a refusal says the seq.
                                    (None, Some(sh)) => h
                                        .handle_stream(&req, sh, adapter, now_us, txb, &mut acct)
                                        .map_err(|e| {
                                            stream_refusal = Some((e.seq, e.ended));
                                            e.reject
                                        }),
                                    (None, None) => h.handle(&req, adapter, txb, &mut acct),
                                };
                                bump(
                                    &self.counters.payload_bytes_copied,
                                    acct.payload_bytes_copied,
                                );
                                self.counters
                                    .copied(acct.copy_path, acct.payload_bytes_copied);
                                r
                            }
                            None => Err(Reject::new(
                                ErrorCode::UnknownModel,
                                "model is not loaded on this worker",
                            )),
                        }
                    }
                }
            }
        };
        let done = Instant::now();
        probes_sys::infer_end(|| {
            let rid = Frame::new_unchecked(self.transport.rx_bytes(&pkt)).request_id();
            let code = result.as_ref().err().map_or(0, |r| r.code as u32);
            (rid, shard as u32, code)
        });
        self.trace_ran(shard, k, started, done);
        record(&mut self.hist.queue[shard], started - p.arrived);
        record(&mut self.hist.service[shard], done - started);
        // A token stream's OPEN: its frames follow on the packet's route
        // (a front-door slot stays in flight until the stream ends); a
        // CANCEL may have ended one.
        if opened {
            self.transport.stream_keep(&pkt);
        }
        self.end_token_routes(p.slot as usize);
        match result {
            Ok(0) => {
                // Taken, answered later or never (a token stream's OPEN,
                // a keep-alive).
                probes_sys::pool_free(|| (tx,));
                self.hand.let_go(tx);
                self.transport.tx_free(tx);
                bump(&self.counters.ok, 1);
                self.release_queued(shard, k);
                self.note_token_slot(p.slot as usize);
                self.tokens_active = self.count_token_streams();
            }
            Ok(len) => {
                assert!(
                    len <= tx_len,
                    "handler claims a frame longer than its buffer"
                );
                bump(&self.counters.ok, 1);
                if let Some(m) = self.counters.models.get(p.slot as usize) {
                    m.execution(1, p.key.map_or(1, |k| u64::from(k.rows)));
                    m.queued(started - p.arrived);
                }
                self.hand.let_go(tx);
                self.sends.push(TxPacket::answer(&pkt, tx, len as u32));
                self.release_queued(shard, k);
                record(&mut self.hist.total, done - p.arrived);
            }
            Err(r) => {
                probes_sys::pool_free(|| (tx,));
                self.hand.let_go(tx);
                self.transport.tx_free(tx);
                let answer = if r.code == ErrorCode::ResponseTooLarge && r.needed_len != 0 {
                    Immediate::TooLarge {
                        needed_len: r.needed_len,
                        buffer_len: tx_len,
                    }
                } else if let Some((seq, ended)) = stream_refusal {
                    Immediate::Stream {
                        code: r.code,
                        message: r.message,
                        seq,
                        ended,
                    }
                } else {
                    Immediate::Error(r.code, r.message)
                };
                self.reply_queued(shard, k, answer);
            }
        }
    }

    /// Makes sure the handler of `slot` holds stream (`tenant`, `id`) when
    /// another version of the same model does: moves it over (one copy of
    /// its state) when the state signatures agree; returns false, ending
    /// the stream, when they do not. Streams held nowhere are left to the
    /// handler (`unknown_stream`).
    pub(super) fn follow_stream(&mut self, slot: usize, tenant: u32, id: u64, now_us: u64) -> bool {
        let Some(Some(h)) = self.handlers.get(slot) else {
            return true;
        };
        let Some((name, sig)) = h.stream_identity() else {
            return true;
        };
        if h.holds_stream(tenant, id) {
            return true;
        }
        let from = self.handlers.iter().enumerate().position(|(o, other)| {
            o != slot
                && other.as_ref().is_some_and(|x| {
                    x.holds_stream(tenant, id)
                        && x.stream_identity().is_some_and(|(n, _)| n == name)
                })
        });
        let Some(from) = from else {
            return true;
        };
        let same = self.handlers[from]
            .as_ref()
            .and_then(|x| x.stream_identity())
            .is_some_and(|(_, s)| s == sig);
        let (a, b) = if from < slot {
            let (lo, hi) = self.handlers.split_at_mut(slot);
            (&mut lo[from], &mut hi[0])
        } else {
            let (lo, hi) = self.handlers.split_at_mut(from);
            (&mut hi[0], &mut lo[slot])
        };
        let (Some(old), Some(new)) = (a.as_mut(), b.as_mut()) else {
            return true;
        };
        let Some((next_seq, state)) = old.take_stream(tenant, id) else {
            return true;
        };
        if !same {
            return false;
        }
        let moved = new.adopt_stream(tenant, id, next_seq, state, now_us);
        if moved {
            bump(&self.counters.streams.moved, 1);
        }
        true
    }
}
