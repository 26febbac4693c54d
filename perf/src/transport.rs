//! The two things the load generator drives: a Sluice server through
//! `sluice-client`, and a raw echo server with datagrams of the same size.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use sluice_client::{Client, ClientConfig, ClientError, PollMode, Request};

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
        let cfg = ClientConfig {
            timeout,
            poll: if spin {
                PollMode::Spin
            } else {
                PollMode::Block
            },
            // The driver bounds what is in flight (--closed / --outstanding-max).
            outstanding_max: usize::MAX,
            ..ClientConfig::default()
        };
        Ok(SluiceTransport {
            client: Client::connect(addr, cfg)?,
            requests: mix.entries.iter().map(|e| e.request()).collect(),
        })
    }

    /// Sizes the socket buffers; see [`crate::uring::set_socket_buffers`].
    pub fn set_socket_buffers(&self, bytes: usize) -> std::io::Result<usize> {
        crate::uring::set_socket_buffers(self.client.socket(), bytes)
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
                Ok(_) => Outcome::Ok,
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
