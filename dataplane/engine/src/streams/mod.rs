//! Streams (docs/wire.md "Streams", docs/design.md "Streams"): the state a
//! worker keeps between the frames of a stream.

mod aligned;
pub mod generate;
pub mod table;

pub use generate::{DecodeStep, GenLimits, GenTally, Generator, TokenSink};
pub use table::{SlotId, StreamLimits, StreamRefusal, StreamTable, TableCounts};

use sluice_wire::{
    EndReason, ErrorCode, ExtRepr, Frame, FrameRepr, Reject, StreamHeader, stream_flags,
};

/// Runs one frame of a client-driven stream through `table`: `CANCEL` ends
/// the stream and is answered at once; `OPEN` makes the stream (zero
/// state) and `CONTINUE` finds it, each checked for its `seq`; then `step`
/// runs with the slot's current state, the half it writes, the stream
/// header the response carries and `tx`. A step that succeeds makes the
/// written half current; `END` then ends the stream. A step that fails
/// changes no state (an `OPEN` that fails makes no stream).
pub fn run_frame<F>(
    table: &mut StreamTable,
    req: &Frame<&[u8]>,
    h: StreamHeader,
    now_us: u64,
    tx: &mut [u8],
    step: F,
) -> Result<usize, StreamRefusal>
where
    F: FnOnce(&[u8], &mut [u8], &[ExtRepr<'_>], &mut [u8]) -> Result<usize, Reject>,
{
    use stream_flags::*;
    let tenant = req.tenant_id();
    if h.has(CANCEL) {
        let slot = table.find_stream(tenant, h.stream_id, h.seq)?;
        let seq = table.next_seq(slot);
        table.end(slot);
        return write_end(req, h.stream_id, seq, EndReason::Cancelled, tx).map_err(|reject| {
            StreamRefusal {
                reject,
                seq: h.seq,
                ended: true,
            }
        });
    }
    let open = h.has(OPEN);
    let slot = if open {
        table.open_stream(tenant, h.stream_id, h.seq, now_us)?
    } else {
        table.step(tenant, h.stream_id, h.seq, now_us)?
    };
    let end = h.has(END);
    let reply = StreamHeader {
        stream_id: h.stream_id,
        seq: h.seq,
        flags: h.flags & (OPEN | CONTINUE | END),
        end_reason: if end { EndReason::Client as u8 } else { 0 },
        tokens_per_frame: 0,
        max_tokens: 0,
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&reply)];
    let (cur, next) = table.buffers(slot);
    match step(cur, next, &ext, tx) {
        Ok(len) => {
            table.commit(slot, now_us);
            if end {
                table.end(slot);
            }
            Ok(len)
        }
        Err(reject) => {
            if open || end {
                table.end(slot);
            } else {
                table.touch(slot, now_us);
            }
            Err(StreamRefusal {
                reject,
                seq: h.seq,
                ended: end && !open,
            })
        }
    }
}

/// The answer to a `CANCEL`: a response without tensors whose stream header
/// says the stream ended (`CONTINUE` + `END`, `end_reason`), `seq` being
/// the number of frames the stream had taken.
pub fn write_end(
    req: &Frame<&[u8]>,
    stream_id: u64,
    seq: u32,
    reason: EndReason,
    tx: &mut [u8],
) -> Result<usize, Reject> {
    let h = StreamHeader {
        stream_id,
        seq,
        flags: stream_flags::CONTINUE | stream_flags::END,
        end_reason: reason as u8,
        tokens_per_frame: 0,
        max_tokens: 0,
    }
    .to_bytes();
    let ext = [ExtRepr::stream(&h)];
    let repr = FrameRepr {
        extensions: &ext,
        ..FrameRepr::response_to(req)
    };
    repr.emit(tx).map(|l| l.frame_len).map_err(|_| {
        Reject::new(
            ErrorCode::ResponseTooLarge,
            "response does not fit the reply buffer",
        )
    })
}

/// The stream header of an error frame answering a stream frame with
/// header `h`: the refusal's `seq` (the expected one for
/// `stream_sequence`), and `END` with `end_reason` 6 when the refusal ended
/// the stream.
pub fn error_header(h: StreamHeader, seq: u32, ended: bool) -> StreamHeader {
    use stream_flags::*;
    let ends = ended && !h.has(CANCEL);
    StreamHeader {
        stream_id: h.stream_id,
        seq,
        flags: if ends {
            (h.flags & (OPEN | CONTINUE)) | END
        } else {
            h.flags & !END
        },
        end_reason: if ends { EndReason::Error as u8 } else { 0 },
        tokens_per_frame: 0,
        max_tokens: 0,
    }
}
