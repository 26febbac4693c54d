//! The two things the load generator drives: a Sluice server through
//! `sluice-client` (over UDP, TCP or both), and a raw echo server with the
//! same bytes (datagrams, or a TCP stream).

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use sluice_client::{
    Client, ClientConfig, ClientError, Endpoints, PollMode, Request, TransportMode,
};

use crate::driver::{Outcome, Transport};
use crate::mix::Mix;

/// Sluice requests through the client library.
pub struct SluiceTransport<'m> {
    client: Client,
    requests: Vec<Request<'m>>,
}

impl<'m> SluiceTransport<'m> {
    /// Connects to `addr`. Each mix entry carries its own tenant and key.
    pub fn connect(
        addr: SocketAddr,
        mix: &'m Mix,
        timeout: Duration,
        spin: bool,
    ) -> Result<Self, ClientError> {
        let ep = Endpoints {
            udp: Some(addr),
            tcp: None,
        };
        SluiceTransport::connect_endpoints(ep, TransportMode::Udp, mix, timeout, spin)
    }

    /// Connects to the given addresses; `mode` picks the transport per
    /// request (`Auto`: TCP for frames a datagram cannot carry).
    pub fn connect_endpoints(
        ep: Endpoints,
        mode: TransportMode,
        mix: &'m Mix,
        timeout: Duration,
        spin: bool,
    ) -> Result<Self, ClientError> {
        let cfg = ClientConfig {
            timeout,
            poll: if spin {
                PollMode::Spin
            } else {
                PollMode::Block
            },
            // The driver bounds what is in flight (--closed / --outstanding-max).
            outstanding_max: usize::MAX,
            transport: mode,
            ..ClientConfig::default()
        };
        Ok(SluiceTransport {
            client: Client::connect_endpoints(ep, cfg)?,
            requests: mix.entries.iter().map(|e| e.request()).collect(),
        })
    }

    /// Sizes the socket buffers; see [`crate::uring::set_socket_buffers`].
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<usize> {
        crate::uring::set_socket_buffers(self.client.socket(), bytes)
    }

    /// The TCP connection's buffers, when there is one.
    pub fn set_tcp_buffers(&self, bytes: usize) -> std::io::Result<()> {
        match self.client.tcp_stream() {
            Some(s) => crate::uring::set_stream_buffers(s, bytes),
            None => Ok(()),
        }
    }

    /// The client's counters (stale, malformed, bad tags).
    pub fn client_stats(&self) -> sluice_client::ClientStats {
        self.client.stats()
    }
}

fn io(e: ClientError) -> std::io::Error {
    match e {
        ClientError::Io(e) => e,
        other => std::io::Error::other(other.to_string()),
    }
}

impl Transport for SluiceTransport<'_> {
    fn send(&mut self, entry: usize) -> std::io::Result<u64> {
        self.client.send(&self.requests[entry]).map_err(io)
    }

    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>> {
        let got = match wait {
            None => self.client.try_recv(),
            Some(w) => self.client.recv_timeout(w),
        }
        .map_err(io)?;
        Ok(got.map(|(id, res)| {
            let outcome = match res {
                Ok(r) => {
                    // A large TCP answer's memory serves the next one (a
                    // client that keeps its buffers; no page faults).
                    self.client.recycle(r.into_frame().into_inner());
                    Outcome::Ok
                }
                Err(ClientError::Server { code, .. }) => Outcome::Server(code as u16),
                Err(ClientError::ServerUnknownCode { code_raw, .. }) => Outcome::Server(code_raw),
                Err(ClientError::Timeout) => Outcome::Timeout,
                Err(_) => Outcome::Malformed,
            };
            (id, outcome)
        }))
    }

    fn outstanding(&self) -> usize {
        self.client.outstanding()
    }
}

/// Offset of the request id in a Sluice frame; the echo transport stamps
/// its sequence number there so the datagrams are byte-for-byte requests.
const ID_OFFSET: usize = 16;

/// Raw datagrams, each a copy of a Sluice request frame, to an echo server.
pub struct EchoTransport {
    sock: UdpSocket,
    templates: Vec<Vec<u8>>,
    recv_buf: Vec<u8>,
    next_id: u64,
    pending: HashMap<u64, usize>,
    expiry: VecDeque<(u64, Instant)>,
    timeout: Duration,
    nonblocking: bool,
}

impl EchoTransport {
    /// Connects to the echo server at `addr`; the datagrams are the mix's
    /// requests, encoded as the Sluice transport would send them.
    pub fn connect(
        addr: SocketAddr,
        mix: &Mix,
        timeout: Duration,
    ) -> std::io::Result<EchoTransport> {
        let local: SocketAddr = if addr.is_ipv4() {
            (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let sock = UdpSocket::bind(local)?;
        sock.connect(addr)?;
        let mut buf = vec![0u8; sluice_client::DATAGRAM_LEN_MAX];
        let mut templates = Vec::new();
        for e in &mix.entries {
            let len = e
                .request()
                .encode(&mut buf, 0, 0, None)
                .map_err(|err| std::io::Error::new(ErrorKind::InvalidInput, err.to_string()))?;
            templates.push(buf[..len].to_vec());
        }
        Ok(EchoTransport {
            sock,
            templates,
            recv_buf: vec![0u8; 1 << 16],
            next_id: 1,
            pending: HashMap::new(),
            expiry: VecDeque::new(),
            timeout,
            nonblocking: false,
        })
    }

    /// Sizes the socket buffers; see [`crate::uring::set_socket_buffers`].
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<usize> {
        crate::uring::set_socket_buffers(&self.sock, bytes)
    }

    /// Size of the datagram sent for mix entry `entry`.
    pub fn datagram_len(&self, entry: usize) -> usize {
        self.templates[entry].len()
    }

    fn set_nonblocking(&mut self, on: bool) -> std::io::Result<()> {
        if self.nonblocking != on {
            self.sock.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }
}

impl Transport for EchoTransport {
    fn send(&mut self, entry: usize) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let t = &mut self.templates[entry];
        t[ID_OFFSET..ID_OFFSET + 8].copy_from_slice(&id.to_le_bytes());
        self.sock.send(t)?;
        self.pending.insert(id, t.len());
        self.expiry.push_back((id, Instant::now() + self.timeout));
        Ok(id)
    }

    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>> {
        let now = Instant::now();
        while let Some(&(id, at)) = self.expiry.front() {
            if !self.pending.contains_key(&id) {
                self.expiry.pop_front();
                continue;
            }
            if at <= now {
                self.expiry.pop_front();
                self.pending.remove(&id);
                return Ok(Some((id, Outcome::Timeout)));
            }
            break;
        }
        match wait {
            None => self.set_nonblocking(true)?,
            Some(w) => {
                self.set_nonblocking(false)?;
                self.sock
                    .set_read_timeout(Some(w.max(Duration::from_micros(1))))?;
            }
        }
        let n = match self.sock.recv(&mut self.recv_buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(e),
        };
        let Some(idb) = self.recv_buf[..n].get(ID_OFFSET..ID_OFFSET + 8) else {
            return Ok(None);
        };
        let mut id = [0u8; 8];
        id.copy_from_slice(idb);
        let id = u64::from_le_bytes(id);
        // Unknown ids (late echoes after a timeout) are ignored.
        Ok(self.pending.remove(&id).map(|len| {
            let outcome = if len == n {
                Outcome::Ok
            } else {
                Outcome::Malformed
            };
            (id, outcome)
        }))
    }

    fn outstanding(&self) -> usize {
        self.pending.len()
    }
}

/// The same request bytes over one TCP connection to an echo server: each
/// request completes when as many bytes came back (in order: TCP echoes
/// the stream). While a write is pushed back, what came back is read, as
/// the Sluice client does.
pub struct EchoTcpTransport {
    sock: TcpStream,
    templates: Vec<Vec<u8>>,
    recv_buf: Vec<u8>,
    next_id: u64,
    /// Requests in send order: (id, bytes still to come back, deadline).
    pending: VecDeque<(u64, usize, Instant)>,
    done: VecDeque<(u64, Outcome)>,
    timeout: Duration,
    spin: bool,
}

impl EchoTcpTransport {
    /// Connects to the TCP echo server at `addr`.
    pub fn connect(
        addr: SocketAddr,
        mix: &Mix,
        timeout: Duration,
        spin: bool,
    ) -> std::io::Result<Self> {
        let sock = TcpStream::connect_timeout(&addr, timeout)?;
        sock.set_nodelay(true)?;
        sock.set_nonblocking(true)?;
        let mut templates = Vec::new();
        for e in &mix.entries {
            let r = e.request();
            let len = r
                .encoded_len()
                .map_err(|err| std::io::Error::new(ErrorKind::InvalidInput, err.to_string()))?;
            let mut buf = vec![0u8; len];
            r.encode(&mut buf, 0, 0, None)
                .map_err(|err| std::io::Error::new(ErrorKind::InvalidInput, err.to_string()))?;
            templates.push(buf);
        }
        Ok(EchoTcpTransport {
            sock,
            templates,
            recv_buf: vec![0u8; 4 << 20],
            next_id: 1,
            pending: VecDeque::new(),
            done: VecDeque::new(),
            timeout,
            spin,
        })
    }

    /// Size of the frame sent for mix entry `entry`.
    pub fn frame_len(&self, entry: usize) -> usize {
        self.templates[entry].len()
    }

    /// Sizes the socket buffers.
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<()> {
        crate::uring::set_stream_buffers(&self.sock, bytes)
    }

    /// Reads what is there and completes requests; false when nothing came.
    fn drain(&mut self) -> std::io::Result<bool> {
        let n = match self.sock.read(&mut self.recv_buf) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                return Ok(false);
            }
            Err(e) => return Err(e),
        };
        let mut left = n;
        while left > 0 {
            let Some(front) = self.pending.front_mut() else {
                // Bytes nobody sent: not an echo.
                return Err(ErrorKind::InvalidData.into());
            };
            let k = left.min(front.1);
            front.1 -= k;
            left -= k;
            if front.1 == 0 {
                let id = front.0;
                self.pending.pop_front();
                self.done.push_back((id, Outcome::Ok));
            }
        }
        Ok(true)
    }
}

impl Transport for EchoTcpTransport {
    fn send(&mut self, entry: usize) -> std::io::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let len = {
            let t = &mut self.templates[entry];
            t[ID_OFFSET..ID_OFFSET + 8].copy_from_slice(&id.to_le_bytes());
            t.len()
        };
        self.pending
            .push_back((id, len, Instant::now() + self.timeout));
        let mut off = 0;
        while off < len {
            match self.sock.write(&self.templates[entry][off..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => off += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if !self.drain()? && !self.spin {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(id)
    }

    fn poll(&mut self, wait: Option<Duration>) -> std::io::Result<Option<(u64, Outcome)>> {
        let until = wait.map(|w| Instant::now() + w);
        loop {
            if let Some(d) = self.done.pop_front() {
                return Ok(Some(d));
            }
            if let Some(&(id, _, at)) = self.pending.front()
                && at <= Instant::now()
            {
                // The stream cannot tell a late echo from the next one: a
                // timeout ends the run's use of this connection's order.
                self.pending.pop_front();
                return Ok(Some((id, Outcome::Timeout)));
            }
            if self.drain()? {
                continue;
            }
            match until {
                Some(u) if Instant::now() < u => {
                    if !self.spin {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
                _ => return Ok(None),
            }
        }
    }

    fn outstanding(&self) -> usize {
        self.pending.len() + self.done.len()
    }
}
