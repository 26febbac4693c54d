//! Relaying an endpoint's server-sent events to the client as they arrive,
//! measuring the time to the first token and between tokens on the way.
//! Each chunk the endpoint sends goes on as the same bytes (no re-encode).
//! A stream that is cut (the endpoint went away, or ended without
//! `data: [DONE]`) or passes its deadline ends with an OpenAI error event;
//! a client that goes away drops the upstream request, which closes its
//! connection: the endpoint sees the cancel.

use std::sync::atomic::Ordering;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::sync::mpsc;

use crate::pool::Lease;
use crate::stats::Cause;

/// How a relayed stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `data: [DONE]` relayed.
    Done,
    /// Cut or timed out: an error event was sent.
    Failed(Cause),
    /// The client went away.
    Cancelled,
}

/// Finds `data: [DONE]` across chunk boundaries and counts events.
#[derive(Debug, Default)]
struct Scan {
    tail: Vec<u8>,
    done: bool,
}

const DONE: &[u8] = b"data: [DONE]";

impl Scan {
    /// Data events that start in `chunk`, and whether `[DONE]` was seen.
    fn feed(&mut self, chunk: &[u8]) -> usize {
        let mut joined = std::mem::take(&mut self.tail);
        let old = joined.len();
        joined.extend_from_slice(chunk);
        // Events wholly inside the kept tail were counted with the last chunk.
        let events = count(&joined, b"data:") - count(&joined[..old], b"data:");
        if !self.done && find(&joined, DONE) {
            self.done = true;
        }
        let keep = joined.len().min(DONE.len() - 1);
        self.tail = joined[joined.len() - keep..].to_vec();
        events
    }
}

fn count(h: &[u8], n: &[u8]) -> usize {
    h.windows(n.len()).filter(|w| *w == n).count()
}

fn find(h: &[u8], n: &[u8]) -> bool {
    h.windows(n.len()).any(|w| w == n)
}

/// The OpenAI error event a cut stream ends with.
pub fn error_event(message: &str, code: &str) -> Bytes {
    let body = serde_json::json!({
        "error": { "message": message, "type": "server_error", "param": null, "code": code }
    });
    Bytes::from(format!("data: {body}\n\n"))
}

/// Relays `body` (a 2xx event stream sent at `sent`, its place held by
/// `lease`) to `tx` until its end, the deadline, or the client going away;
/// counts and times it.
pub async fn relay(
    lease: Lease,
    sent: Instant,
    mut body: Incoming,
    tx: mpsc::Sender<Bytes>,
    model: &str,
    deadline: tokio::time::Instant,
) -> Ended {
    let pool = lease.pool();
    let ep = lease.endpoint();
    let cfg = &pool.cfg;
    let mstats = lease.model_stats(model);
    let mut scan = Scan::default();
    let mut last: Option<Instant> = None;
    let ended = loop {
        // A client that goes away is seen at once, even while the backend
        // is silent (a long prefill).
        let next = tokio::select! {
            f = tokio::time::timeout_at(deadline, body.frame()) => f,
            // A client that read [DONE] may close before the backend ends
            // its body: that stream is done, not cancelled.
            () = tx.closed() => break if scan.done { Ended::Done } else { Ended::Cancelled },
        };
        let frame = match next {
            Err(_) => break Ended::Failed(Cause::Timeout),
            Ok(None) => {
                break if scan.done {
                    Ended::Done
                } else {
                    Ended::Failed(Cause::StreamCut)
                };
            }
            Ok(Some(Err(_))) => break Ended::Failed(Cause::StreamCut),
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let events = scan.feed(&data);
        if events > 0 {
            let now = Instant::now();
            match last {
                None => {
                    let us = now.duration_since(sent).as_micros() as u64;
                    pool.stats.ttft.record(us);
                    if let Some(m) = mstats {
                        m.ttft.record(us);
                    }
                }
                Some(t) => {
                    let us = now.duration_since(t).as_micros() as u64 / events as u64;
                    pool.stats.itl.record(us);
                    if let Some(m) = mstats {
                        m.itl.record(us);
                    }
                }
            }
            last = Some(now);
        }
        if tx.send(data).await.is_err() {
            break if scan.done {
                Ended::Done
            } else {
                Ended::Cancelled
            };
        }
    };
    match ended {
        Ended::Done => {
            ep.succeeded();
            pool.stats.ok.fetch_add(1, Ordering::Relaxed);
            let us = sent.elapsed().as_micros() as u64;
            pool.stats.latency.record(us);
            if let Some(m) = mstats {
                m.latency.record(us);
            }
        }
        Ended::Cancelled => pool.stats.failed(Cause::Cancelled),
        Ended::Failed(c) => {
            pool.stats.failed(c);
            ep.failed(
                lease.now_ms(),
                cfg.eject_errors,
                cfg.eject_ms,
                cfg.eject_max_ms,
            );
            let (msg, code) = if c == Cause::Timeout {
                (
                    "the request's deadline passed during the stream",
                    "deadline_exceeded",
                )
            } else {
                ("the backend went away mid-stream", "backend_stream_cut")
            };
            let _ = tx
                .send(error_event(&format!("{msg} ({})", ep.url), code))
                .await;
        }
    }
    // The upstream body is dropped here, before the place is given back:
    // a cancelled stream's connection closes and the endpoint stops.
    drop(body);
    drop(lease);
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn done_across_chunks() {
        let mut s = Scan::default();
        assert_eq!(s.feed(b"data: {\"a\":1}\n\ndata: {\"b\":2}\n\n"), 2);
        assert!(!s.done);
        assert_eq!(s.feed(b"data: [DO"), 1);
        s.feed(b"NE]\n\n");
        assert!(s.done);
    }
}
