//! One TCP connection of the client. Frames are written whole with one
//! vectored write: the header from the client's buffer, raw tensor bytes
//! straight from the caller's memory. Answers are read through a buffer:
//! a small frame is taken out of it, a large one is read by the kernel
//! straight into its own allocation: a buffer the caller gave back
//! ([`TcpLink::recycle`]) when it is large enough, so a stream of large
//! answers lands in memory already mapped instead of faulting in fresh
//! pages for every answer.

use std::io::{ErrorKind, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use sluice_wire::{FIXED_HEADER_LEN, Frame};

/// Read buffer: frames up to this size are read through it.
const READ_BUF_BYTES: usize = 64 << 10;

/// Sleep between reads of a large frame's body in blocking mode.
const BODY_POLL_SLEEP: Duration = Duration::from_micros(20);

/// A frame length the stream declares, or why it cannot be one.
fn declared_len(hdr: &[u8]) -> std::io::Result<usize> {
    let f = Frame::new_unchecked(hdr);
    let len = f.header_len() + f.payload_len();
    if !f.has_magic()
        || f.header_len() < FIXED_HEADER_LEN
        || len > sluice_wire::limits::FRAME_LEN_MAX
    {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "the server's stream is not Sluice frames",
        ));
    }
    Ok(len)
}

pub(crate) struct TcpLink {
    addr: SocketAddr,
    stream: Option<TcpStream>,
    nonblocking: bool,
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    /// A large frame being read into its own buffer (what is in), and its
    /// length.
    big: Option<(Vec<u8>, usize)>,
    /// One large buffer given back by the caller, for the next large frame
    /// (at most one is kept: the memory held stays bounded by the largest
    /// answer).
    spare: Option<Vec<u8>>,
    /// Large frames read into a recycled buffer.
    pub recycled_frames: u64,
    /// Frames copied whole out of `rbuf` (small ones), and every byte
    /// copied out of it (with the start of large frames that was there).
    pub copied_frames: u64,
    pub copied_bytes: u64,
}

impl TcpLink {
    pub fn new(addr: SocketAddr) -> TcpLink {
        TcpLink {
            addr,
            stream: None,
            nonblocking: false,
            rbuf: vec![0u8; READ_BUF_BYTES].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            big: None,
            spare: None,
            recycled_frames: 0,
            copied_frames: 0,
            copied_bytes: 0,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn is_connected(&self) -> bool {
        self.stream.is_some()
    }

    pub fn stream(&self) -> Option<&TcpStream> {
        self.stream.as_ref()
    }

    /// Connects (again), within `timeout`.
    pub fn connect(&mut self, timeout: Duration) -> std::io::Result<()> {
        self.close();
        let s = TcpStream::connect_timeout(&self.addr, timeout.max(Duration::from_millis(1)))?;
        s.set_nodelay(true)?;
        self.nonblocking = false;
        self.stream = Some(s);
        Ok(())
    }

    /// Drops the connection and whatever was half read.
    pub fn close(&mut self) {
        self.stream = None;
        self.rstart = 0;
        self.rend = 0;
        self.big = None;
    }

    fn set_nonblocking(&mut self, on: bool) -> std::io::Result<()> {
        if let Some(s) = &self.stream
            && self.nonblocking != on
        {
            s.set_nonblocking(on)?;
            self.nonblocking = on;
        }
        Ok(())
    }

    /// Writes what the socket takes now of `parts` (non-blocking); 0 when
    /// it takes nothing (its buffer is full: the server pushes back).
    pub fn write_some(&mut self, parts: &[IoSlice<'_>]) -> std::io::Result<usize> {
        self.set_nonblocking(true)?;
        let Some(s) = self.stream.as_mut() else {
            return Err(ErrorKind::NotConnected.into());
        };
        loop {
            return match s.write_vectored(parts) {
                Ok(0) => Err(ErrorKind::WriteZero.into()),
                Ok(n) => Ok(n),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(0),
                Err(e) => Err(e),
            };
        }
    }

    /// The next whole frame; `None` when none came in time. `spin` polls a
    /// non-blocking socket until `wait` passes; otherwise the read blocks
    /// for at most `wait` (`None` with `block` false: do not wait at all).
    /// An error means the connection is gone (closed, reset, or not frames).
    pub fn read_frame(
        &mut self,
        block: bool,
        spin: bool,
        wait: Option<Duration>,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let until = wait.map(|w| Instant::now() + w);
        loop {
            if let Some(f) = self.take_frame()? {
                return Ok(Some(f));
            }
            // The body of a large frame is read without blocking, with short
            // sleeps while nothing is there: it arrives in many segments,
            // and a blocking read would sleep and wake once per segment
            // (each wake-up 20-50 µs on a VM, far more on a loaded host).
            let polled = block && !spin && self.big.is_some();
            let nonblocking = spin || !block || polled;
            self.set_nonblocking(nonblocking)?;
            let Some(s) = self.stream.as_mut() else {
                return Err(ErrorKind::NotConnected.into());
            };
            if !nonblocking {
                let w = wait
                    .unwrap_or(Duration::from_secs(1))
                    .max(Duration::from_micros(1));
                s.set_read_timeout(Some(w))?;
            }
            let r = match &mut self.big {
                // Into the spare capacity: the kernel's copy is the only
                // write to it (no zeroing first).
                Some((v, want)) => {
                    let left = (*want - v.len()) as u64;
                    match s.take(left).read_to_end(v) {
                        Ok(_) if v.len() < *want => Err(ErrorKind::UnexpectedEof.into()),
                        r => r,
                    }
                }
                None => s.read(&mut self.rbuf[self.rend..]),
            };
            match r {
                Ok(0) if self.big.is_none() => return Err(ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    if self.big.is_none() {
                        self.rend += n;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    let expired = until.is_some_and(|u| Instant::now() >= u);
                    if polled && !expired {
                        std::thread::sleep(BODY_POLL_SLEEP);
                        continue;
                    }
                    if !block || !spin || expired {
                        return Ok(None);
                    }
                    std::hint::spin_loop();
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Keeps `buf` (a large answer's memory the caller is done with) for
    /// the next large frame, if it is larger than the one kept already.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if buf.capacity() > self.rbuf.len()
            && self
                .spare
                .as_ref()
                .is_none_or(|s| s.capacity() < buf.capacity())
        {
            self.spare = Some(buf);
        }
    }

    /// A frame that is in already, if any; prepares the buffers for the
    /// next read otherwise.
    fn take_frame(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        if let Some((v, want)) = &self.big {
            if v.len() == *want {
                return Ok(self.big.take().map(|(v, _)| v));
            }
            return Ok(None);
        }
        let avail = self.rend - self.rstart;
        if avail >= FIXED_HEADER_LEN {
            let len = declared_len(&self.rbuf[self.rstart..self.rend])?;
            if avail >= len {
                let f = self.rbuf[self.rstart..self.rstart + len].to_vec();
                self.rstart += len;
                self.copied_frames += 1;
                self.copied_bytes += len as u64;
                return Ok(Some(f));
            }
            if len > self.rbuf.len() {
                // Large: the rest goes straight into the frame's own memory.
                let mut v = match self.spare.take() {
                    Some(mut v) if v.capacity() >= len => {
                        v.clear();
                        self.recycled_frames += 1;
                        v
                    }
                    other => {
                        self.spare = other;
                        Vec::with_capacity(len)
                    }
                };
                v.extend_from_slice(&self.rbuf[self.rstart..self.rend]);
                self.copied_bytes += avail as u64;
                self.rstart = 0;
                self.rend = 0;
                self.big = Some((v, len));
                return Ok(None);
            }
        }
        if self.rstart > 0 && (self.rend == self.rbuf.len() || avail < FIXED_HEADER_LEN) {
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.rend = avail;
            self.rstart = 0;
        }
        Ok(None)
    }
}
