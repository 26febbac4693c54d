//! A connection's timers: handshake, idle, header, body (HTTP/2 frames)
//! and write. The IO wrapper (`conn::io`) reports bytes read and writes
//! that block or progress; the service reports requests starting and
//! ending; `watchdog` sleeps until the earliest deadline and returns its
//! cause when it passes, and the connection task then drops the
//! connection. hyper cannot do this alone: hyper-util's protocol detection
//! has no timer, and HTTP/2 has no handshake or idle timeout.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use sluice_engine::config::FrontdoorCfg;

/// Why a connection was closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// No protocol shown in time (`handshake_timeout_ms`).
    Handshake,
    /// No request in flight for `idle_timeout_ms`.
    Idle,
    /// Headers (or an HTTP/2 frame) too slow (`header_timeout_ms`).
    Header,
    /// An HTTP/2 DATA frame too slow (`body_timeout_ms`).
    Body,
    /// A write made no progress (`write_timeout_ms`).
    Write,
    /// `connections_max` was reached and this connection had had no
    /// request in flight for the longest (`conn::Live::evict_idlest`).
    Evicted,
}

/// The limits, from `[frontdoor]`.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// `handshake_timeout_ms`.
    pub handshake: Duration,
    /// `idle_timeout_ms`.
    pub idle: Duration,
    /// `header_timeout_ms`.
    pub header: Duration,
    /// `body_timeout_ms`.
    pub body: Duration,
    /// `write_timeout_ms`.
    pub write: Duration,
}

impl Timeouts {
    /// From the config.
    pub fn of(c: &FrontdoorCfg) -> Timeouts {
        let ms = |v: u32| Duration::from_millis(u64::from(v));
        Timeouts {
            handshake: ms(c.handshake_timeout_ms),
            idle: ms(c.idle_timeout_ms),
            header: ms(c.header_timeout_ms),
            body: ms(c.body_timeout_ms),
            write: ms(c.write_timeout_ms),
        }
    }

    fn of_cause(&self, c: Cause) -> Duration {
        match c {
            Cause::Handshake => self.handshake,
            Cause::Idle => self.idle,
            Cause::Header => self.header,
            Cause::Body => self.body,
            Cause::Write => self.write,
            Cause::Evicted => Duration::ZERO,
        }
    }
}

/// The HTTP/2 client preface.
pub const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const FRAME_DATA: u8 = 0;
const FRAME_HEADERS: u8 = 1;
const FRAME_SETTINGS: u8 = 4;
const FRAME_CONTINUATION: u8 = 9;
const FLAG_END_HEADERS: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Matching the first bytes against the HTTP/2 preface.
    Detect {
        matched: usize,
    },
    /// The preface came; waiting for the end of the first frame, which
    /// must be SETTINGS.
    H2Settings,
    H1,
    H2,
}

/// Where the HTTP/2 frame reader stands (frame boundaries only: hyper's
/// h2 parses the frames themselves).
#[derive(Debug, Default)]
struct Frames {
    head: [u8; 9],
    head_got: usize,
    payload_left: usize,
    kind: u8,
    /// A HEADERS frame without END_HEADERS: CONTINUATIONs follow.
    header_block: bool,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    accepted: Instant,
    inflight: usize,
    /// When the connection last had no request in flight.
    idle_since: Instant,
    /// HTTP/1: the first byte of a request head read while idle.
    head_since: Option<Instant>,
    /// HTTP/2: a frame (or header block) begun and not yet whole.
    frame_since: Option<(Instant, Cause)>,
    frames: Frames,
    /// A write returned Pending and nothing was written since.
    write_blocked: Option<Instant>,
    /// What the watchdog sleeps until (it need not be woken for later).
    watch_at: Option<Instant>,
    /// Told to close to make room (`Conn::evict`).
    evicted: bool,
}

/// One connection's timer state, shared by its IO, its service and its
/// watchdog.
#[derive(Debug)]
pub struct Conn {
    t: Timeouts,
    state: Mutex<State>,
    wake: Notify,
}

impl Conn {
    /// A connection accepted now.
    pub fn new(t: Timeouts) -> Arc<Conn> {
        let now = Instant::now();
        Arc::new(Conn {
            t,
            state: Mutex::new(State {
                phase: Phase::Detect { matched: 0 },
                accepted: now,
                inflight: 0,
                idle_since: now,
                head_since: None,
                frame_since: None,
                frames: Frames::default(),
                write_blocked: None,
                watch_at: None,
                evicted: false,
            }),
            wake: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the watchdog if the deadline moved before what it sleeps to.
    fn rearm(&self, s: &mut State) {
        if let Some((at, _)) = self.deadline_of(s)
            && s.watch_at.is_none_or(|w| at < w)
        {
            s.watch_at = Some(at);
            self.wake.notify_one();
        }
    }

    /// Bytes read from the client.
    pub fn read(&self, mut b: &[u8]) {
        let now = Instant::now();
        let mut s = self.lock();
        if let Phase::Detect { matched } = s.phase {
            let n = b.len().min(H2_PREFACE.len() - matched);
            if b[..n] != H2_PREFACE[matched..matched + n] {
                // Not HTTP/2: an HTTP/1 request head has begun.
                s.phase = Phase::H1;
            } else if matched + n == H2_PREFACE.len() {
                s.phase = Phase::H2Settings;
                b = &b[n..];
            } else {
                s.phase = Phase::Detect {
                    matched: matched + n,
                };
                return;
            }
        }
        match s.phase {
            Phase::H1 => {
                if s.inflight == 0 && s.head_since.is_none() {
                    s.head_since = Some(now);
                    self.rearm(&mut s);
                }
            }
            Phase::H2Settings | Phase::H2 => {
                self.frames(&mut s, b, now);
                self.rearm(&mut s);
            }
            Phase::Detect { .. } => {}
        }
    }

    /// Follows HTTP/2 frame boundaries through `b`.
    fn frames(&self, s: &mut State, mut b: &[u8], now: Instant) {
        while !b.is_empty() {
            let f = &mut s.frames;
            if f.payload_left > 0 {
                let n = b.len().min(f.payload_left);
                f.payload_left -= n;
                b = &b[n..];
                if f.payload_left == 0 {
                    Self::frame_done(s, now);
                }
                continue;
            }
            f.head[f.head_got] = b[0];
            f.head_got += 1;
            b = &b[1..];
            if f.head_got == 1 && s.frame_since.is_none() {
                // A DATA frame's timer becomes Body once its type is read.
                s.frame_since = Some((now, Cause::Header));
            }
            let f = &mut s.frames;
            if f.head_got < 9 {
                continue;
            }
            f.head_got = 0;
            f.kind = f.head[3];
            let flags = f.head[4];
            f.payload_left = (usize::from(f.head[0]) << 16)
                | (usize::from(f.head[1]) << 8)
                | usize::from(f.head[2]);
            match f.kind {
                FRAME_HEADERS => f.header_block = flags & FLAG_END_HEADERS == 0,
                FRAME_CONTINUATION if flags & FLAG_END_HEADERS != 0 => f.header_block = false,
                _ => {}
            }
            let data = f.kind == FRAME_DATA;
            if let Some((at, _)) = s.frame_since
                && data
                && !s.frames.header_block
            {
                s.frame_since = Some((at, Cause::Body));
            }
            if s.frames.payload_left == 0 {
                Self::frame_done(s, now);
            }
        }
    }

    fn frame_done(s: &mut State, now: Instant) {
        if s.phase == Phase::H2Settings {
            if s.frames.kind != FRAME_SETTINGS {
                // h2 refuses this connection itself; keep the handshake
                // deadline until it does.
                return;
            }
            s.phase = Phase::H2;
            s.idle_since = now;
        }
        if !s.frames.header_block {
            s.frame_since = None;
        }
    }

    /// A write returned Pending.
    pub fn write_blocked(&self) {
        let mut s = self.lock();
        if s.write_blocked.is_none() {
            s.write_blocked = Some(Instant::now());
            self.rearm(&mut s);
        }
    }

    /// A write made progress.
    pub fn wrote(&self) {
        let mut s = self.lock();
        s.write_blocked = None;
    }

    /// A request started; the guard ends it (when its response is done or
    /// dropped).
    pub fn request(self: &Arc<Conn>) -> InFlight {
        let mut s = self.lock();
        s.inflight += 1;
        s.head_since = None;
        if let Phase::Detect { .. } = s.phase {
            s.phase = Phase::H1;
        }
        InFlight(Arc::clone(self))
    }

    /// Since when the connection has had no request in flight (from
    /// accept, for one that never sent a request), or None while one is in
    /// flight or after it was evicted: what eviction picks by.
    pub fn evictable_since(&self) -> Option<Instant> {
        let s = self.lock();
        (s.inflight == 0 && !s.evicted).then_some(s.idle_since)
    }

    /// Tells the connection to close now (its watchdog returns
    /// [`Cause::Evicted`]).
    pub fn evict(&self) {
        let mut s = self.lock();
        s.evicted = true;
        self.wake.notify_one();
    }

    /// The earliest deadline and its cause.
    fn deadline_of(&self, s: &State) -> Option<(Instant, Cause)> {
        if s.evicted {
            return Some((s.accepted, Cause::Evicted));
        }
        let t = &self.t;
        let mut best: Option<(Instant, Cause)> = None;
        let mut consider = |at: Instant, c: Cause| {
            if best.is_none_or(|(b, _)| at < b) {
                best = Some((at, c));
            }
        };
        match s.phase {
            Phase::Detect { .. } | Phase::H2Settings => {
                consider(s.accepted + t.handshake, Cause::Handshake);
            }
            Phase::H1 => {
                if s.inflight == 0 {
                    match s.head_since {
                        Some(h) => consider(h + t.header, Cause::Header),
                        None => consider(s.idle_since + t.idle, Cause::Idle),
                    }
                }
            }
            Phase::H2 => {
                if s.inflight == 0 {
                    consider(s.idle_since + t.idle, Cause::Idle);
                }
                if let Some((at, c)) = s.frame_since {
                    consider(at + t.of_cause(c), c);
                }
            }
        }
        if let Some(w) = s.write_blocked {
            consider(w + t.write, Cause::Write);
        }
        best
    }

    /// Returns when a deadline passes, with its cause.
    pub async fn watchdog(&self) -> Cause {
        loop {
            let next = {
                let mut s = self.lock();
                let d = self.deadline_of(&s);
                if let Some((at, c)) = d
                    && at <= Instant::now()
                {
                    return c;
                }
                s.watch_at = d.map(|(at, _)| at);
                d
            };
            match next {
                Some((at, _)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.wake.notified() => {}
                    }
                }
                None => self.wake.notified().await,
            }
        }
    }
}

/// A request in flight on a connection; dropping it ends the request.
#[derive(Debug)]
pub struct InFlight(Arc<Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let c = &self.0;
        let mut s = c.lock();
        s.inflight = s.inflight.saturating_sub(1);
        if s.inflight == 0 {
            s.idle_since = Instant::now();
            c.rearm(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> Timeouts {
        let ms = Duration::from_millis;
        Timeouts {
            handshake: ms(100),
            idle: ms(1000),
            header: ms(200),
            body: ms(300),
            write: ms(400),
        }
    }

    fn cause(c: &Conn) -> Option<Cause> {
        c.deadline_of(&c.lock()).map(|(_, c)| c)
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn phases() {
        let c = Conn::new(t());
        assert_eq!(cause(&c), Some(Cause::Handshake));
        c.read(b"PRI * HTTP/2.0\r\n");
        assert_eq!(cause(&c), Some(Cause::Handshake));
        c.read(b"\r\nSM\r\n\r\n\x00\x00\x06\x04\x00\x00\x00\x00\x00");
        assert_eq!(
            cause(&c),
            Some(Cause::Handshake),
            "SETTINGS payload missing"
        );
        c.read(b"\x00\x03\x00\x00\x00\x64");
        assert_eq!(cause(&c), Some(Cause::Idle));
        // A DATA frame begun and not ended.
        c.read(b"\x00\x00\x10\x00\x00\x00\x00\x00\x01abc");
        let g = c.request();
        assert_eq!(cause(&c), Some(Cause::Body));
        c.read(&[0u8; 13]);
        assert_eq!(cause(&c), None);
        // A header block left open by a HEADERS without END_HEADERS.
        c.read(b"\x00\x00\x01\x01\x00\x00\x00\x00\x03x");
        assert_eq!(cause(&c), Some(Cause::Header));
        c.read(b"\x00\x00\x01\x09\x04\x00\x00\x00\x03x");
        assert_eq!(cause(&c), None);
        drop(g);
        assert_eq!(cause(&c), Some(Cause::Idle));
        c.write_blocked();
        assert_eq!(cause(&c), Some(Cause::Write), "write 400 ms < idle 1000 ms");
        c.wrote();
        assert_eq!(cause(&c), Some(Cause::Idle));

        let h = Conn::new(t());
        h.read(b"GE");
        assert_eq!(cause(&h), Some(Cause::Header));
        let g = h.request();
        assert_eq!(cause(&h), None);
        drop(g);
        assert_eq!(cause(&h), Some(Cause::Idle));
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn watchdog_fires_at_the_deadline() {
        let c = Conn::new(t());
        let t0 = Instant::now();
        assert_eq!(c.watchdog().await, Cause::Handshake);
        assert!(t0.elapsed() >= Duration::from_millis(100));
    }
}
