//! The streaming mix (`loadgen --stream-rate`): token streams opened on an
//! open-loop schedule, mixed with plain requests on a schedule of their
//! own, all on one UDP socket.
//!
//! Coordinated omission: every latency is measured from the INTENDED send
//! time of its schedule (as wrk2 and HdrHistogram's corrected mode do), not
//! from when the generator got round to sending. A plain request's latency
//! runs from its slot on the plain schedule to its answer; a stream's time
//! to first token (TTFT) from its slot on the stream schedule to its first
//! token frame, so an open that waits for a free stream (`streams_max`) or
//! for a stalled generator carries that wait. Inter-token latency (ITL) is
//! paced by the server, not by a schedule: it is the gap between a stream's
//! consecutive token frames, divided by the tokens in the later frame.
//!
//! Over UDP a lost token frame shows as a gap in `seq`: the stream is
//! counted under `frame_lost` and cancelled (a CANCEL frame frees its slot).

use std::collections::{BTreeMap, HashMap};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use sluice_client::{DATAGRAM_LEN_MAX, Request, TenantKey};
use sluice_wire::{EndReason, Frame, Kind, STREAM_EXT_KEY, StreamHeader, flags, stream_flags};

use crate::driver::{LATENCY_NS_MAX, PLOT_QUANTILES, SplitMix64, code_name};
use crate::mix::Mix;

/// The token streams the mix opens.
#[derive(Debug, Clone)]
pub struct TokenOpen {
    /// A model with `[models.stream.generate]`.
    pub model: String,
    /// Its version.
    pub version: String,
    /// The tenant that opens the streams.
    pub tenant_id: u32,
    /// That tenant's key (frames are signed with it), if any.
    pub key: Option<TenantKey>,
    /// The model's token input.
    pub token_input: String,
    /// The prompt, as tokens.
    pub prompt: Vec<i64>,
    /// Tokens a frame carries at most (1 = one frame per token).
    pub tokens_per_frame: u16,
    /// Tokens a stream generates at most (0 = the model's limit).
    pub max_tokens: u32,
}

/// One streaming-mix run's settings.
#[derive(Debug, Clone, Copy)]
pub struct StreamMixConfig {
    /// Plain requests per second (0 = none: streams only).
    pub plain_rate_per_sec: f64,
    /// Streams opened per second.
    pub stream_rate_per_sec: f64,
    /// Most streams running at once; later opens wait (their wait counts in
    /// their TTFT).
    pub streams_max: usize,
    /// Most plain requests in flight; later sends wait (and their wait
    /// counts in their latency).
    pub plain_outstanding_max: usize,
    /// Unmeasured traffic first.
    pub warmup: Duration,
    /// Sending stops this long after warm-up; running streams end then.
    pub duration: Duration,
    /// A plain request without an answer, or a stream without a frame, for
    /// this long counts as a timeout (the stream is cancelled).
    pub timeout: Duration,
    /// Spin on the socket rather than sleep in the kernel.
    pub spin: bool,
    /// Seed of the mix picker.
    pub seed: u64,
}

/// What a streaming-mix run measured.
#[derive(Debug, Clone)]
pub struct StreamMixReport {
    /// Plain requests: latency of successes, ns, from the intended send time.
    pub plain_latency_ns: Histogram<u64>,
    /// Plain requests sent, answered, errors by code, timeouts.
    pub plain_sent: u64,
    /// See `plain_sent`.
    pub plain_ok: u64,
    /// See `plain_sent`.
    pub plain_errors: BTreeMap<String, u64>,
    /// See `plain_sent`.
    pub plain_timeouts: u64,
    /// Time to first token, ns, from the stream's intended open time.
    pub ttft_ns: Histogram<u64>,
    /// Inter-token latency, ns.
    pub itl_ns: Histogram<u64>,
    /// Streams opened in the measured window.
    pub streams_opened: u64,
    /// Most streams running at once (measured or not).
    pub streams_running_max: usize,
    /// Streams that reached END, by end reason.
    pub streams_ended: BTreeMap<String, u64>,
    /// Streams refused or ended by an error frame, by code; `frame_lost`
    /// and `timeout` for the generator's own reasons.
    pub stream_errors: BTreeMap<String, u64>,
    /// Tokens received by measured streams.
    pub tokens: u64,
    /// Frames that matched no request (late, after a timeout or cancel),
    /// or failed their tag.
    pub ignored: u64,
    /// Socket errors.
    pub io_errors: u64,
    /// From the end of warm-up to the last measured event.
    pub elapsed: Duration,
}

fn histogram() -> Histogram<u64> {
    #[allow(
        clippy::expect_used,
        reason = "constant bounds, valid by hdrhistogram's rules; the streammix test builds one"
    )]
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, 3).expect("constant bounds are valid")
}

fn us(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

fn summary(h: &Histogram<u64>) -> serde_json::Value {
    serde_json::json!({
        "p50": us(h, 0.5), "p90": us(h, 0.9), "p99": us(h, 0.99),
        "max": h.max() as f64 / 1000.0, "mean": h.mean() / 1000.0, "count": h.len(),
    })
}

impl StreamMixReport {
    fn new() -> StreamMixReport {
        StreamMixReport {
            plain_latency_ns: histogram(),
            plain_sent: 0,
            plain_ok: 0,
            plain_errors: BTreeMap::new(),
            plain_timeouts: 0,
            ttft_ns: histogram(),
            itl_ns: histogram(),
            streams_opened: 0,
            streams_running_max: 0,
            streams_ended: BTreeMap::new(),
            stream_errors: BTreeMap::new(),
            tokens: 0,
            ignored: 0,
            io_errors: 0,
            elapsed: Duration::ZERO,
        }
    }

    fn per_sec(&self, n: u64) -> f64 {
        if self.elapsed.is_zero() {
            0.0
        } else {
            n as f64 / self.elapsed.as_secs_f64()
        }
    }

    /// Tokens received per second.
    pub fn tokens_per_sec(&self) -> f64 {
        self.per_sec(self.tokens)
    }

    /// Streams that reached END per second.
    pub fn streams_per_sec(&self) -> f64 {
        self.per_sec(self.streams_ended.values().sum())
    }

    /// Human-readable summary.
    pub fn human(&self) -> String {
        let line = |name: &str, h: &Histogram<u64>| {
            format!(
                "{name} µs: p50 {:.1} p90 {:.1} p99 {:.1} max {:.1} (n {})\n",
                us(h, 0.5),
                us(h, 0.9),
                us(h, 0.99),
                h.max() as f64 / 1000.0,
                h.len()
            )
        };
        let mut s =
            String::from("latency from the intended send time (coordinated omission corrected)\n");
        s.push_str(&format!(
            "streams opened {} (at most {} at once) ended {:?} errors {:?} in {:.3} s: {:.1} streams/s, {:.0} tokens/s ({} tokens)\n",
            self.streams_opened,
            self.streams_running_max,
            self.streams_ended,
            self.stream_errors,
            self.elapsed.as_secs_f64(),
            self.streams_per_sec(),
            self.tokens_per_sec(),
            self.tokens,
        ));
        s.push_str(&line("TTFT", &self.ttft_ns));
        s.push_str(&line("ITL ", &self.itl_ns));
        s.push_str(&format!(
            "plain sent {} ok {} timeouts {} errors {:?}\n",
            self.plain_sent, self.plain_ok, self.plain_timeouts, self.plain_errors
        ));
        s.push_str(&line("plain", &self.plain_latency_ns));
        s.push_str(&format!(
            "ignored {} io_errors {}\n",
            self.ignored, self.io_errors
        ));
        s
    }

    /// Machine-readable summary.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "latency_from": "intended send time (coordinated omission corrected)",
            "elapsed_s": self.elapsed.as_secs_f64(),
            "streams": {
                "opened": self.streams_opened,
                "running_max": self.streams_running_max,
                "ended": self.streams_ended,
                "errors": self.stream_errors,
                "per_sec": self.streams_per_sec(),
                "tokens": self.tokens,
                "tokens_per_sec": self.tokens_per_sec(),
                "ttft_us": summary(&self.ttft_ns),
                "itl_us": summary(&self.itl_ns),
                "ttft_percentiles_us": PLOT_QUANTILES.iter().map(|&q| [q, us(&self.ttft_ns, q)]).collect::<Vec<_>>(),
            },
            "plain": {
                "sent": self.plain_sent,
                "ok": self.plain_ok,
                "timeouts": self.plain_timeouts,
                "errors": self.plain_errors,
                "latency_us": summary(&self.plain_latency_ns),
            },
            "ignored": self.ignored,
            "io_errors": self.io_errors,
        })
    }
}

/// A running stream.
struct Live {
    intended: Instant,
    measured: bool,
    next_seq: u32,
    last: Option<Instant>,
    heard: Instant,
}

enum Pending {
    Plain {
        intended: Instant,
        measured: bool,
        entry: usize,
        sent: Instant,
    },
    Stream(Live),
    /// The answer to a CANCEL the generator sent; nothing is measured.
    Cancel {
        sent: Instant,
    },
}

/// The streaming-mix generator over one connected UDP socket.
pub struct StreamMix<'m> {
    sock: UdpSocket,
    mix: Option<&'m Mix>,
    open: TokenOpen,
    open_key: Option<TenantKey>,
    keys: Vec<Option<TenantKey>>,
    tx: Vec<u8>,
    rx: Vec<u8>,
    next_id: u64,
    /// Names this generator in its signed frames; `next_id` is its counter.
    sender_id: u64,
    pending: HashMap<u64, Pending>,
    streams_live: usize,
    plain_live: usize,
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(ErrorKind::InvalidInput, e.to_string())
}

impl<'m> StreamMix<'m> {
    /// Connects to `addr`. `mix` (the plain requests) may be `None` when
    /// the plain rate is 0.
    pub fn connect(
        addr: SocketAddr,
        mix: Option<&'m Mix>,
        open: TokenOpen,
    ) -> std::io::Result<StreamMix<'m>> {
        let local: SocketAddr = if addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(local)?;
        sock.connect(addr)?;
        if open.prompt.is_empty() {
            return Err(invalid("the prompt is empty"));
        }
        let keys = mix.map_or_else(Vec::new, |m| {
            m.entries.iter().map(|e| e.key.clone()).collect()
        });
        // Random start, so a rerun's stream ids do not meet the last run's
        // streams still being reclaimed.
        let next_id = (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
            & 0x0000_FFFF_FFFF_FFFF)
            .max(1)
            << 8;
        Ok(StreamMix {
            sock,
            mix,
            open_key: open.key.clone(),
            open,
            keys,
            tx: vec![0u8; DATAGRAM_LEN_MAX],
            rx: vec![0u8; DATAGRAM_LEN_MAX],
            next_id,
            sender_id: sluice_client::random_sender_id(),
            pending: HashMap::new(),
            streams_live: 0,
            plain_live: 0,
        })
    }

    /// Sizes the socket buffers; see [`crate::uring::set_socket_buffers`].
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<usize> {
        crate::uring::set_socket_buffers(&self.sock, bytes)
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    fn send_plain(&mut self, entry: usize) -> std::io::Result<u64> {
        let mix = self.mix.ok_or_else(|| invalid("no mix"))?;
        let id = self.take_id();
        let len = mix.entries[entry]
            .request()
            .sender(self.sender_id)
            .encode(&mut self.tx, id, 0, None)
            .map_err(invalid)?;
        self.sock.send(&self.tx[..len])?;
        Ok(id)
    }

    fn send_open(&mut self) -> std::io::Result<u64> {
        let id = self.take_id();
        let h = StreamHeader {
            stream_id: id,
            seq: 0,
            flags: stream_flags::OPEN,
            tokens_per_frame: self.open.tokens_per_frame,
            max_tokens: self.open.max_tokens,
            ..StreamHeader::default()
        }
        .to_bytes();
        let o = &self.open;
        let len = Request::new(&o.model, &o.version)
            .tensor_i64(&o.token_input, &[o.prompt.len() as u64], &o.prompt)
            .extension(STREAM_EXT_KEY, &h)
            .sender(self.sender_id)
            .encode(&mut self.tx, id, o.tenant_id, o.key.as_ref())
            .map_err(invalid)?;
        self.sock.send(&self.tx[..len])?;
        Ok(id)
    }

    /// Sends a CANCEL for stream `stream_id` (its answer is ignored).
    fn send_cancel(&mut self, stream_id: u64) {
        let id = self.take_id();
        let h = StreamHeader {
            stream_id,
            seq: 1,
            flags: stream_flags::CANCEL,
            ..StreamHeader::default()
        }
        .to_bytes();
        let o = &self.open;
        let r = Request::new(&o.model, &o.version)
            .extension(STREAM_EXT_KEY, &h)
            .sender(self.sender_id)
            .encode(&mut self.tx, id, o.tenant_id, o.key.as_ref());
        if let Ok(len) = r
            && self.sock.send(&self.tx[..len]).is_ok()
        {
            self.pending.insert(
                id,
                Pending::Cancel {
                    sent: Instant::now(),
                },
            );
        }
    }

    /// Handles one received datagram of `n` bytes.
    fn receive(&mut self, n: usize, now: Instant, r: &mut StreamMixReport) -> bool {
        let Ok(f) = Frame::new_checked(&self.rx[..n]) else {
            r.ignored += 1;
            return false;
        };
        let id = f.request_id();
        let kind = f.kind();
        let Some(p) = self.pending.get_mut(&id) else {
            r.ignored += 1;
            return false;
        };
        let key = match p {
            Pending::Plain { entry, .. } => self.keys.get(*entry).and_then(Option::as_ref),
            _ => self.open_key.as_ref(),
        };
        if f.flags() & flags::AUTHENTICATED != 0
            && kind != Kind::Error
            && key.is_some_and(|k| !k.verify(&f))
        {
            r.ignored += 1;
            return false;
        }
        let error = (kind == Kind::Error).then(|| {
            f.error_body()
                .map_or_else(|| "malformed".to_string(), |b| code_name(b.code_raw))
        });
        match p {
            Pending::Cancel { .. } => {
                self.pending.remove(&id);
                false
            }
            Pending::Plain {
                intended, measured, ..
            } => {
                let (intended, measured) = (*intended, *measured);
                self.pending.remove(&id);
                self.plain_live -= 1;
                if measured {
                    match error {
                        None if kind == Kind::Response => {
                            r.plain_ok += 1;
                            let ns = now.saturating_duration_since(intended).as_nanos() as u64;
                            let _ = r.plain_latency_ns.record(ns.clamp(1, LATENCY_NS_MAX));
                        }
                        None => *r.plain_errors.entry("malformed".into()).or_default() += 1,
                        Some(code) => *r.plain_errors.entry(code).or_default() += 1,
                    }
                }
                measured
            }
            Pending::Stream(s) => {
                let measured = s.measured;
                s.heard = now;
                let outcome = match (error, f.stream()) {
                    (Some(code), _) => Err(code),
                    (None, None) => Err("malformed".into()),
                    (None, Some(h)) if h.seq != s.next_seq => Err("frame_lost".into()),
                    (None, Some(h)) => {
                        s.next_seq += 1;
                        let toks = f
                            .tensors()
                            .next()
                            .map_or(0, |t| t.dims().first().copied().unwrap_or(0));
                        if measured && toks > 0 {
                            r.tokens += toks;
                            match s.last {
                                None => {
                                    let ns =
                                        now.saturating_duration_since(s.intended).as_nanos() as u64;
                                    let _ = r.ttft_ns.record(ns.clamp(1, LATENCY_NS_MAX));
                                }
                                Some(p) => {
                                    let per =
                                        now.saturating_duration_since(p).as_nanos() as u64 / toks;
                                    let _ = r.itl_ns.record_n(per.clamp(1, LATENCY_NS_MAX), toks);
                                }
                            }
                        }
                        if toks > 0 {
                            s.last = Some(now);
                        }
                        Ok(h.has(stream_flags::END).then_some(h.end_reason))
                    }
                };
                match outcome {
                    Ok(None) => {}
                    Ok(Some(reason)) => {
                        self.pending.remove(&id);
                        self.streams_live -= 1;
                        if measured {
                            *r.streams_ended.entry(end_name(reason)).or_default() += 1;
                        }
                    }
                    Err(code) => {
                        self.pending.remove(&id);
                        self.streams_live -= 1;
                        if code == "frame_lost" {
                            self.send_cancel(id);
                        }
                        if measured {
                            *r.stream_errors.entry(code).or_default() += 1;
                        }
                    }
                }
                measured
            }
        }
    }

    /// Expires plain requests and silent streams past `timeout`.
    fn expire(&mut self, now: Instant, timeout: Duration, r: &mut StreamMixReport) {
        let mut gone: Vec<(u64, bool, bool)> = Vec::new();
        for (&id, p) in &self.pending {
            match p {
                Pending::Plain { sent, measured, .. } if now.duration_since(*sent) > timeout => {
                    gone.push((id, false, *measured));
                }
                Pending::Stream(s) if now.duration_since(s.heard) > timeout => {
                    gone.push((id, true, s.measured));
                }
                Pending::Cancel { sent } if now.duration_since(*sent) > timeout => {
                    gone.push((id, false, false));
                }
                _ => {}
            }
        }
        for (id, stream, measured) in gone {
            match self.pending.remove(&id) {
                Some(Pending::Plain { .. }) => {
                    self.plain_live -= 1;
                    if measured {
                        r.plain_timeouts += 1;
                    }
                }
                Some(Pending::Stream(_)) if stream => {
                    self.streams_live -= 1;
                    self.send_cancel(id);
                    if measured {
                        *r.stream_errors.entry("timeout".into()).or_default() += 1;
                    }
                }
                _ => {}
            }
        }
    }

    /// Runs the mix.
    pub fn run(&mut self, cfg: &StreamMixConfig) -> StreamMixReport {
        let mut r = StreamMixReport::new();
        let mut rng = SplitMix64::new(cfg.seed);
        let begin = Instant::now();
        let measure_from = begin + cfg.warmup;
        let send_until = measure_from + cfg.duration;
        let (mut plain_k, mut stream_k) = (0u64, 0u64);
        let slot = |k: u64, rate: f64| begin + Duration::from_secs_f64(k as f64 / rate);
        let mut last_event = measure_from;
        let mut last_expiry = begin;
        let plain_on = cfg.plain_rate_per_sec > 0.0 && self.mix.is_some();
        let _ = self.sock.set_nonblocking(cfg.spin);
        loop {
            let now = Instant::now();
            // Every slot before `send_until` is sent, late if need be (a
            // slot skipped at the end would be an omission too).
            let plain_left = plain_on && slot(plain_k, cfg.plain_rate_per_sec) < send_until;
            let streams_left = slot(stream_k, cfg.stream_rate_per_sec) < send_until;
            let sending = plain_left || streams_left;
            // Plain requests due now.
            while plain_on && self.plain_live < cfg.plain_outstanding_max.max(1) {
                let intended = slot(plain_k, cfg.plain_rate_per_sec);
                if intended > now || intended >= send_until {
                    break;
                }
                plain_k += 1;
                let measured = intended >= measure_from;
                let entry = self.mix.map_or(0, |m| m.pick(rng.next_u64()));
                match self.send_plain(entry) {
                    Ok(id) => {
                        self.pending.insert(
                            id,
                            Pending::Plain {
                                intended,
                                measured,
                                entry,
                                sent: now,
                            },
                        );
                        self.plain_live += 1;
                    }
                    Err(_) => r.io_errors += 1,
                }
                if measured {
                    r.plain_sent += 1;
                }
            }
            // Streams due now.
            while self.streams_live < cfg.streams_max.max(1) {
                let intended = slot(stream_k, cfg.stream_rate_per_sec);
                if intended > now || intended >= send_until {
                    break;
                }
                stream_k += 1;
                let measured = intended >= measure_from;
                match self.send_open() {
                    Ok(id) => {
                        self.pending.insert(
                            id,
                            Pending::Stream(Live {
                                intended,
                                measured,
                                next_seq: 0,
                                last: None,
                                heard: now,
                            }),
                        );
                        self.streams_live += 1;
                        r.streams_running_max = r.streams_running_max.max(self.streams_live);
                    }
                    Err(_) => r.io_errors += 1,
                }
                if measured {
                    r.streams_opened += 1;
                }
            }
            if !sending && self.pending.is_empty() {
                break;
            }
            if now.duration_since(last_expiry) > Duration::from_millis(10) {
                self.expire(now, cfg.timeout, &mut r);
                last_expiry = now;
            }
            // Read what came; wait (blocking mode) until the next slot.
            if !cfg.spin {
                // A full window waits for answers, not for the clock.
                let plain_open = plain_left && self.plain_live < cfg.plain_outstanding_max.max(1);
                let streams_open = streams_left && self.streams_live < cfg.streams_max.max(1);
                let next = [
                    plain_open.then(|| slot(plain_k, cfg.plain_rate_per_sec)),
                    streams_open.then(|| slot(stream_k, cfg.stream_rate_per_sec)),
                ]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(now + Duration::from_millis(10));
                let wait = next
                    .saturating_duration_since(Instant::now())
                    .clamp(Duration::from_micros(20), Duration::from_millis(10));
                let _ = self.sock.set_read_timeout(Some(wait));
            }
            let mut first = true;
            loop {
                match self.sock.recv(&mut self.rx) {
                    Ok(n) => {
                        let at = Instant::now();
                        if self.receive(n, at, &mut r) {
                            last_event = at;
                        }
                        if first && !cfg.spin {
                            first = false;
                            let _ = self.sock.set_nonblocking(true);
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) =>
                    {
                        break;
                    }
                    Err(_) => {
                        r.io_errors += 1;
                        break;
                    }
                }
            }
            if !cfg.spin && !first {
                let _ = self.sock.set_nonblocking(false);
            }
            if cfg.spin {
                std::hint::spin_loop();
            }
        }
        r.elapsed = last_event.saturating_duration_since(measure_from);
        r
    }
}

/// The stable name of a stream end reason.
pub fn end_name(reason: u8) -> String {
    EndReason::from_u8(reason).map_or_else(|| format!("reason_{reason}"), |e| e.as_str().into())
}
