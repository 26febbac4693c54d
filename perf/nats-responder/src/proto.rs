//! A minimal synchronous client of the NATS text protocol (INFO, CONNECT,
//! PING/PONG, SUB, PUB, MSG): enough for request-reply, with no async
//! runtime, so neither end pays a thread wake-up the broker does not force.
//! The broker is the real nats-server.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Range;
use std::time::{Duration, Instant};

/// Largest message payload accepted, in bytes (nats-server's own default
/// max_payload is 1 MiB; 8 MiB leaves room for a raised limit).
pub const PAYLOAD_BYTES_MAX: usize = 8 << 20;
/// Longest protocol line accepted (MSG header, INFO), in bytes.
pub const LINE_BYTES_MAX: usize = 64 << 10;
/// Bound of the connect handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of the NATS connection.
#[derive(Debug)]
pub enum NatsError {
    /// Socket error.
    Io(io::Error),
    /// The server sent something this client does not understand.
    Protocol(String),
    /// The server sent -ERR.
    Server(String),
}

impl std::fmt::Display for NatsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsError::Io(e) => write!(f, "nats: {e}"),
            NatsError::Protocol(m) => write!(f, "nats protocol: {m}"),
            NatsError::Server(m) => write!(f, "nats server: {m}"),
        }
    }
}

impl std::error::Error for NatsError {}

impl From<io::Error> for NatsError {
    fn from(e: io::Error) -> Self {
        NatsError::Io(e)
    }
}

/// One received message, as ranges into [`Conn::buf`]; valid until the
/// next call that reads.
#[derive(Debug, Clone)]
pub struct Msg {
    /// Subscription id.
    pub sid: u64,
    /// Reply subject, empty when none.
    pub reply: Range<usize>,
    /// Payload.
    pub payload: Range<usize>,
}

/// A connection to nats-server.
pub struct Conn {
    sock: TcpStream,
    rbuf: Vec<u8>,
    start: usize,
    end: usize,
    wbuf: Vec<u8>,
    nonblocking: bool,
}

/// Byte ranges of the space-separated tokens of a protocol line.
fn tokens(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut from = None;
    for (i, c) in text.char_indices() {
        match (c.is_ascii_whitespace(), from) {
            (true, Some(f)) => {
                out.push(f..i);
                from = None;
            }
            (false, None) => from = Some(i),
            _ => {}
        }
    }
    if let Some(f) = from {
        out.push(f..text.len());
    }
    out
}

fn find_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

impl Conn {
    /// Connects, reads INFO, sends CONNECT and waits for the PONG that
    /// confirms the server took it.
    pub fn connect(addr: SocketAddr, name: &str) -> Result<Conn, NatsError> {
        let sock = TcpStream::connect_timeout(&addr, HANDSHAKE_TIMEOUT)?;
        sock.set_nodelay(true)?;
        let mut c = Conn {
            sock,
            rbuf: vec![0; 256 << 10],
            start: 0,
            end: 0,
            wbuf: Vec::with_capacity(64 << 10),
            nonblocking: false,
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let info = c.read_line(deadline)?;
        if !c.rbuf[info].starts_with(b"INFO ") {
            return Err(NatsError::Protocol("expected INFO".into()));
        }
        let connect = serde_json::json!({
            "verbose": false, "pedantic": false, "lang": "rust", "version": env!("CARGO_PKG_VERSION"),
            "protocol": 1, "echo": false, "name": name, "headers": false,
        });
        c.write_raw(format!("CONNECT {connect}\r\nPING\r\n").as_bytes())?;
        loop {
            let line = c.read_line(deadline)?;
            let l = &c.rbuf[line];
            if l == b"PONG" {
                return Ok(c);
            }
            if let Some(m) = l.strip_prefix(b"-ERR") {
                return Err(NatsError::Server(
                    String::from_utf8_lossy(m).trim().to_string(),
                ));
            }
            // +OK, INFO updates and PING are fine here.
            if l == b"PING" {
                c.write_raw(b"PONG\r\n")?;
            }
        }
    }

    /// The read buffer that [`Msg`] ranges point into.
    pub fn buf(&self) -> &[u8] {
        &self.rbuf
    }

    /// Subscribes `sid` to `subject`, in queue group `queue` if not empty.
    pub fn subscribe(&mut self, subject: &str, queue: &str, sid: u64) -> Result<(), NatsError> {
        let line = if queue.is_empty() {
            format!("SUB {subject} {sid}\r\n")
        } else {
            format!("SUB {subject} {queue} {sid}\r\n")
        };
        self.write_raw(line.as_bytes())?;
        Ok(())
    }

    /// Publishes `payload` to `subject`, asking for answers on `reply`
    /// (empty: none). One write per message.
    pub fn publish(&mut self, subject: &str, reply: &str, payload: &[u8]) -> Result<(), NatsError> {
        if payload.len() > PAYLOAD_BYTES_MAX {
            return Err(NatsError::Protocol(format!(
                "payload of {} bytes is over {PAYLOAD_BYTES_MAX}",
                payload.len()
            )));
        }
        let mut w = std::mem::take(&mut self.wbuf);
        w.clear();
        if reply.is_empty() {
            let _ = write!(w, "PUB {subject} {}\r\n", payload.len());
        } else {
            let _ = write!(w, "PUB {subject} {reply} {}\r\n", payload.len());
        }
        w.extend_from_slice(payload);
        w.extend_from_slice(b"\r\n");
        let r = self.write_raw(&w);
        self.wbuf = w;
        r.map_err(NatsError::Io)
    }

    /// Publishes `payload` to the reply subject of a received message
    /// (`reply`, a range of [`Conn::buf`]), allocating nothing.
    pub fn respond(&mut self, reply: Range<usize>, payload: &[u8]) -> Result<(), NatsError> {
        if reply.is_empty() {
            return Ok(()); // nobody asked for an answer
        }
        let mut w = std::mem::take(&mut self.wbuf);
        w.clear();
        w.extend_from_slice(b"PUB ");
        w.extend_from_slice(&self.rbuf[reply]);
        let _ = write!(w, " {}\r\n", payload.len());
        w.extend_from_slice(payload);
        w.extend_from_slice(b"\r\n");
        let r = self.write_raw(&w);
        self.wbuf = w;
        r.map_err(NatsError::Io)
    }

    fn write_raw(&mut self, mut b: &[u8]) -> io::Result<()> {
        // The socket may be non-blocking (spinning reads); a full send
        // buffer is waited out here.
        while !b.is_empty() {
            match self.sock.write(b) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => b = &b[n..],
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    std::hint::spin_loop()
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn set_nonblocking(&mut self, on: bool) -> io::Result<()> {
        if self.nonblocking != on {
            self.sock.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }

    /// Reads more bytes. `wait` None: only what is there now. Returns
    /// false when nothing came.
    fn fill(&mut self, wait: Option<Duration>) -> Result<bool, NatsError> {
        if self.start > 0 && (self.end == self.rbuf.len() || self.start == self.end) {
            self.rbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.rbuf.len() {
            let grown = (self.rbuf.len() * 2).min(PAYLOAD_BYTES_MAX + LINE_BYTES_MAX + 2);
            if grown == self.rbuf.len() {
                return Err(NatsError::Protocol(
                    "message larger than the read limit".into(),
                ));
            }
            self.rbuf.resize(grown, 0);
        }
        match wait {
            None => self.set_nonblocking(true)?,
            Some(w) => {
                self.set_nonblocking(false)?;
                self.sock
                    .set_read_timeout(Some(w.max(Duration::from_micros(1))))?;
            }
        }
        match self.sock.read(&mut self.rbuf[self.end..]) {
            Ok(0) => Err(NatsError::Io(ErrorKind::UnexpectedEof.into())),
            Ok(n) => {
                self.end += n;
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn read_line(&mut self, deadline: Instant) -> Result<Range<usize>, NatsError> {
        loop {
            if let Some(i) = find_crlf(&self.rbuf[self.start..self.end]) {
                let r = self.start..self.start + i;
                self.start += i + 2;
                return Ok(r);
            }
            if self.end - self.start > LINE_BYTES_MAX {
                return Err(NatsError::Protocol("protocol line too long".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NatsError::Io(ErrorKind::TimedOut.into()));
            }
            self.fill(Some(left))?;
        }
    }

    /// The next message. `wait` None polls once without blocking; Some(d)
    /// waits up to about d. Server PINGs are answered on the way.
    pub fn next_msg(&mut self, wait: Option<Duration>) -> Result<Option<Msg>, NatsError> {
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            if let Some(m) = self.parse_one()? {
                return Ok(Some(m));
            }
            let w = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(None);
                    }
                    Some(left)
                }
            };
            if !self.fill(w)? && wait.is_none() {
                return Ok(None);
            }
        }
    }

    /// Parses one complete MSG from the buffer, handling control lines.
    fn parse_one(&mut self) -> Result<Option<Msg>, NatsError> {
        loop {
            let avail = &self.rbuf[self.start..self.end];
            let Some(i) = find_crlf(avail) else {
                if avail.len() > LINE_BYTES_MAX {
                    return Err(NatsError::Protocol("protocol line too long".into()));
                }
                return Ok(None);
            };
            let line = &avail[..i];
            if let Some(rest) = line.strip_prefix(b"MSG ") {
                let text = std::str::from_utf8(rest)
                    .map_err(|_| NatsError::Protocol("MSG line".into()))?;
                let toks = tokens(text);
                let tok = |r: &Range<usize>| &text[r.clone()];
                let (sid, reply, len) = match toks.as_slice() {
                    [_, sid, len] => (tok(sid), None, tok(len)),
                    [_, sid, reply, len] => (tok(sid), Some(reply.clone()), tok(len)),
                    _ => return Err(NatsError::Protocol(format!("MSG line {text:?}"))),
                };
                let sid: u64 = sid
                    .parse()
                    .map_err(|_| NatsError::Protocol("MSG sid".into()))?;
                let len: usize = len
                    .parse()
                    .map_err(|_| NatsError::Protocol("MSG size".into()))?;
                if len > PAYLOAD_BYTES_MAX {
                    return Err(NatsError::Protocol(format!(
                        "MSG of {len} bytes is over {PAYLOAD_BYTES_MAX}"
                    )));
                }
                let body = self.start + i + 2;
                if self.end < body + len + 2 {
                    return Ok(None); // the rest is still on its way
                }
                // "MSG " is 4 bytes before the tokens.
                let reply =
                    reply.map_or(0..0, |r| self.start + 4 + r.start..self.start + 4 + r.end);
                self.start = body + len + 2;
                return Ok(Some(Msg {
                    sid,
                    reply,
                    payload: body..body + len,
                }));
            }
            let kind: Vec<u8> = line.iter().take(4).copied().collect();
            let err = line
                .strip_prefix(b"-ERR")
                .map(|m| String::from_utf8_lossy(m).trim().to_string());
            self.start += i + 2;
            match kind.as_slice() {
                b"PING" => self.write_raw(b"PONG\r\n")?,
                b"PONG" | b"+OK" | b"INFO" => {}
                _ if err.is_some() => return Err(NatsError::Server(err.unwrap_or_default())),
                _ => {}
            }
        }
    }
}
