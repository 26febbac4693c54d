//! Client-driven (stateful) streams (docs/wire.md "Streams"): the
//! appliance keeps the model's state between steps; a [`StateStream`]
//! numbers the steps and puts the stream header on each request.

use sluice_wire::{STREAM_EXT_KEY, StreamHeader, stream_flags};

use crate::{Client, ClientError, Request, Response};

/// One stateful stream. Keeps one step in flight (each `step` waits for its
/// answer), so its frames never arrive out of order; send all of them
/// through the same [`Client`] (one socket: the appliance holds the state
/// on the worker that socket's flow reaches).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateStream {
    id: u64,
    next_seq: u32,
    ended: bool,
}

impl StateStream {
    /// A stream with id `id` (not 0; unique among the tenant's open
    /// streams: [`StateStream::with_random_id`] picks one).
    pub fn new(id: u64) -> StateStream {
        StateStream {
            id: id.max(1),
            next_seq: 0,
            ended: false,
        }
    }

    /// A stream with an id drawn from the clock and the process id, which
    /// does not repeat within a client process.
    pub fn with_random_id() -> StateStream {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mixed = (t ^ (u64::from(std::process::id()) << 40) ^ N.fetch_add(1, Ordering::Relaxed))
            .wrapping_mul(0x9e37_79b9_7f4a_7c15);
        StateStream::new(mixed)
    }

    /// The stream id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The seq of the next step.
    pub fn next_seq(&self) -> u32 {
        self.next_seq
    }

    /// Whether the stream has ended (its last step, a cancel, or a
    /// refusal that ended it).
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Runs the next step: `req` carries only the step's inputs (not the
    /// state). The first step opens the stream.
    pub fn step(&mut self, c: &mut Client, req: Request<'_>) -> Result<Response, ClientError> {
        self.send(c, req, false)
    }

    /// Runs the last step and ends the stream (its slot is freed).
    pub fn finish(&mut self, c: &mut Client, req: Request<'_>) -> Result<Response, ClientError> {
        self.send(c, req, true)
    }

    /// Abandons the stream: the appliance frees its state at once. `req`
    /// names the model and version (its tensors, if any, are not sent).
    pub fn cancel(&mut self, c: &mut Client, req: Request<'_>) -> Result<(), ClientError> {
        let h = StreamHeader {
            stream_id: self.id,
            seq: self.next_seq,
            flags: stream_flags::CANCEL,
            ..StreamHeader::default()
        }
        .to_bytes();
        let mut req = req.extension(STREAM_EXT_KEY, &h);
        req.tensors.clear();
        let r = c.call(&req);
        self.ended = true;
        r.map(|_| ())
    }

    fn send(
        &mut self,
        c: &mut Client,
        req: Request<'_>,
        end: bool,
    ) -> Result<Response, ClientError> {
        if self.ended {
            return Err(ClientError::Malformed("the stream has ended"));
        }
        let mut flags = if self.next_seq == 0 {
            stream_flags::OPEN
        } else {
            stream_flags::CONTINUE
        };
        if end {
            flags |= stream_flags::END;
        }
        let seq = self.next_seq;
        let h = StreamHeader {
            stream_id: self.id,
            seq,
            flags,
            ..StreamHeader::default()
        }
        .to_bytes();
        let req = req.extension(STREAM_EXT_KEY, &h);
        match c.call(&req) {
            Ok(resp) => {
                // An appliance that keeps no streams ignores the header and
                // answers without one.
                let Some(got) = resp.frame().stream() else {
                    self.ended = true;
                    return Err(ClientError::Server {
                        code: sluice_wire::ErrorCode::StreamUnsupported,
                        message:
                            "the answer carries no stream header: the appliance keeps no streams"
                                .into(),
                        retryable: false,
                    });
                };
                if got.stream_id != self.id || got.seq != seq {
                    return Err(ClientError::Malformed("answer for another stream step"));
                }
                self.next_seq += 1;
                self.ended = end;
                Ok(resp)
            }
            Err(e) => {
                // The stream is gone on the appliance's side for these.
                if matches!(
                    e.code(),
                    Some(
                        sluice_wire::ErrorCode::UnknownStream
                            | sluice_wire::ErrorCode::StreamStateMismatch
                            | sluice_wire::ErrorCode::StreamUnsupported
                    )
                ) {
                    self.ended = true;
                }
                Err(e)
            }
        }
    }
}
