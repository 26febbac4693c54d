//! The TCP half of the client: choosing the transport per frame, writing
//! frames whole on the connection (reading answers while the server pushes
//! back), receiving from whichever transport has requests outstanding, and
//! failing what a lost connection carried.

use std::io::{ErrorKind, IoSlice};
use std::time::{Duration, Instant};

use super::*;
use crate::TensorData;

impl Client {
    /// The transport for a frame of `len` bytes.
    pub(super) fn choose(&self, len: usize) -> Result<Via, ClientError> {
        let fits = len <= DATAGRAM_LEN_MAX;
        let (udp, tcp) = (self.udp_server.is_some(), self.tcp.is_some());
        let none = |what: &str| -> ClientError {
            std::io::Error::new(
                ErrorKind::InvalidInput,
                format!("transport {what} asked for, but the client has no {what} address"),
            )
            .into()
        };
        match self.cfg.transport {
            TransportMode::Udp if !udp => Err(none("udp")),
            TransportMode::Udp if !fits => {
                Err(ClientError::InvalidRequest(sluice_wire::Error::TooLarge))
            }
            TransportMode::Udp => Ok(Via::Udp),
            TransportMode::Tcp if !tcp => Err(none("tcp")),
            TransportMode::Tcp => Ok(Via::Tcp),
            TransportMode::Auto if udp && fits => Ok(Via::Udp),
            TransportMode::Auto if tcp => Ok(Via::Tcp),
            TransportMode::Auto => Err(ClientError::InvalidRequest(sluice_wire::Error::TooLarge)),
        }
    }

    /// Writes a request over TCP: the header from `tcp_buf`, raw tensor
    /// bytes straight from the request's memory.
    pub(super) fn transmit_tcp(
        &mut self,
        req: &Request<'_>,
        id: u64,
        len: usize,
    ) -> Result<(), ClientError> {
        self.tcp_ready()?;
        // Taken out for the write, which may read answers meanwhile.
        let mut buf = std::mem::take(&mut self.tcp_buf);
        if buf.len() < len {
            buf.resize(len, 0);
        }
        let r = req
            .encode_header_only(
                &mut buf[..len],
                (id, self.cfg.tenant_id, self.sender_id),
                self.key.as_ref(),
                self.cfg.signed_deadline,
            )
            .map_err(ClientError::InvalidRequest)
            .and_then(|layout| {
                let mut parts = [IoSlice::new(&[]); 2 * sluice_wire::limits::TENSOR_COUNT_MAX + 1];
                let (mut n, mut pos) = (0, 0);
                for (t, &off) in req.tensors().iter().zip(layout.tensor_offsets.iter()) {
                    if let TensorData::Raw(_, bytes) = t.data {
                        parts[n] = IoSlice::new(&buf[pos..off]);
                        parts[n + 1] = IoSlice::new(bytes);
                        n += 2;
                        pos = off + bytes.len();
                    }
                }
                parts[n] = IoSlice::new(&buf[pos..layout.frame_len]);
                self.write_tcp(&mut parts[..n + 1])
            });
        self.tcp_buf = buf;
        r
    }

    /// Opens the TCP connection again if it was lost.
    pub(super) fn tcp_ready(&mut self) -> Result<(), ClientError> {
        let timeout = self.cfg.timeout;
        let Some(l) = self.tcp.as_mut() else {
            return Err(std::io::Error::from(ErrorKind::NotConnected).into());
        };
        if !l.is_connected() {
            l.connect(timeout)?;
            self.stats.tcp_reconnects += 1;
        }
        Ok(())
    }

    /// Writes one whole frame. While the server pushes back (the socket
    /// takes nothing), answers that arrived are read into the ready queue,
    /// so a client that pipelines more than the server holds never
    /// deadlocks against its own unread answers. Bounded by the timeout.
    pub(super) fn write_tcp(&mut self, mut parts: &mut [IoSlice<'_>]) -> Result<(), ClientError> {
        let deadline = Instant::now() + self.cfg.timeout;
        let spin = self.cfg.poll == PollMode::Spin;
        let mut started = false;
        while !parts.is_empty() {
            let Some(l) = self.tcp.as_mut() else {
                return Err(std::io::Error::from(ErrorKind::NotConnected).into());
            };
            match l.write_some(parts) {
                Ok(0) => {}
                Ok(n) => {
                    IoSlice::advance_slices(&mut parts, n);
                    started = true;
                    continue;
                }
                Err(_) => {
                    // A frame cut short leaves the stream unusable.
                    self.lose_tcp();
                    return Err(ClientError::ConnectionLost);
                }
            }
            if Instant::now() >= deadline {
                if started {
                    // The frame is half written: the stream cannot go on.
                    self.lose_tcp();
                }
                return Err(ClientError::Timeout);
            }
            let Some(l) = self.tcp.as_mut() else {
                return Err(std::io::Error::from(ErrorKind::NotConnected).into());
            };
            match l.read_frame(false, false, None) {
                Ok(Some(f)) => {
                    if let Some(ev) = self.classify(Incoming::Tcp(f)) {
                        self.ready.push_back(ev);
                    }
                }
                Ok(None) if spin => std::hint::spin_loop(),
                Ok(None) => std::thread::sleep(Duration::from_micros(50)),
                Err(_) => {
                    self.lose_tcp();
                    return Err(ClientError::ConnectionLost);
                }
            }
        }
        self.stats.tcp_sent += 1;
        Ok(())
    }

    /// The connection is gone: every request outstanding on it fails with
    /// `ConnectionLost`; the next TCP send connects again.
    pub(super) fn lose_tcp(&mut self) {
        if let Some(l) = self.tcp.as_mut() {
            l.close();
        }
        self.stats.connection_losses += 1;
        let lost: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.via == Via::Tcp)
            .map(|(id, _)| *id)
            .collect();
        for id in lost {
            self.forget(id);
            self.failed
                .push_back((id, Err(ClientError::ConnectionLost)));
        }
    }

    pub(super) fn forget(&mut self, id: u64) -> Option<Pending> {
        let p = self.pending.remove(&id)?;
        if p.via == Via::Tcp {
            self.pending_tcp -= 1;
        }
        Some(p)
    }

    /// Receives one frame from whichever transport has requests
    /// outstanding; `None` when none came in time (or the TCP connection
    /// was lost: its requests are then in `failed`).
    pub(super) fn receive(
        &mut self,
        block: bool,
        wait: Option<Duration>,
    ) -> Result<Option<Incoming>, ClientError> {
        let on_udp = self.pending.len() > self.pending_tcp && self.udp_server.is_some();
        let on_tcp = self.pending_tcp > 0 && self.tcp.as_ref().is_some_and(TcpLink::is_connected);
        match (on_udp, on_tcp) {
            (false, true) => self.receive_tcp(block, wait),
            (true, true) => {
                // Both: take turns in short slices (std has no poll over
                // two sockets), never longer than `wait` in total.
                const SLICE: Duration = Duration::from_micros(500);
                let until = wait.map(|w| Instant::now() + w);
                loop {
                    let left = until.map(|u| u.saturating_duration_since(Instant::now()));
                    let step = Some(left.map_or(SLICE, |l| l.min(SLICE)));
                    if let Some(n) = self.receive_udp(block, step)? {
                        return Ok(Some(Incoming::Udp(n)));
                    }
                    if let Some(f) = self.receive_tcp(block, step)? {
                        return Ok(Some(f));
                    }
                    if !block || !self.failed.is_empty() || left.is_some_and(|l| l.is_zero()) {
                        return Ok(None);
                    }
                }
            }
            _ => Ok(self.receive_udp(block, wait)?.map(Incoming::Udp)),
        }
    }

    pub(super) fn receive_tcp(
        &mut self,
        block: bool,
        wait: Option<Duration>,
    ) -> Result<Option<Incoming>, ClientError> {
        let spin = self.cfg.poll == PollMode::Spin;
        let Some(l) = self.tcp.as_mut() else {
            return Ok(None);
        };
        match l.read_frame(block, spin, wait) {
            Ok(f) => Ok(f.map(Incoming::Tcp)),
            Err(_) => {
                self.lose_tcp();
                Ok(None)
            }
        }
    }
}
