//! An in-memory transport for unit tests: frames go in and out through
//! channels; buffers live in ordinary memory with the same pool rules.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::{RxPacket, Transport, TransportCounters, TxPacket};
use crate::pool::{FreeList, PoolCounters};

/// The test's end of a [`MemTransport`].
#[derive(Debug, Clone)]
pub struct MemPort {
    /// Frames into the engine, with their sender.
    pub tx: Sender<(SocketAddr, Vec<u8>)>,
    /// Frames out of the engine, with their destination.
    pub rx: Receiver<(SocketAddr, Vec<u8>)>,
}

/// In-memory transport.
#[derive(Debug)]
pub struct MemTransport {
    inbox: Receiver<(SocketAddr, Vec<u8>)>,
    outbox: Sender<(SocketAddr, Vec<u8>)>,
    pending: VecDeque<(SocketAddr, Vec<u8>)>,
    rx_mem: Vec<u8>,
    tx_mem: Vec<u8>,
    rx_free: FreeList,
    tx_free: FreeList,
    buf_size: usize,
    counters: TransportCounters,
}

/// Buffers start 64-byte aligned inside the backing vectors.
const ALIGN: usize = 64;

impl MemTransport {
    /// A transport with `rx_n` and `tx_n` buffers of `buf_size` bytes.
    pub fn new(rx_n: u32, tx_n: u32, buf_size: usize) -> (MemTransport, MemPort) {
        let (to_engine, inbox) = crossbeam_channel::unbounded();
        let (outbox, from_engine) = crossbeam_channel::unbounded();
        let t = MemTransport {
            inbox,
            outbox,
            pending: VecDeque::new(),
            rx_mem: vec![0; rx_n as usize * buf_size + ALIGN],
            tx_mem: vec![0; tx_n as usize * buf_size + ALIGN],
            rx_free: FreeList::new(rx_n),
            tx_free: FreeList::new(tx_n),
            buf_size,
            counters: TransportCounters {
                rx_capacity: rx_n,
                tx_capacity: tx_n,
                ..TransportCounters::default()
            },
        };
        (
            t,
            MemPort {
                tx: to_engine,
                rx: from_engine,
            },
        )
    }

    fn base(mem: &[u8]) -> usize {
        mem.as_ptr().align_offset(ALIGN)
    }
}

impl Transport for MemTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        while let Ok(m) = self.inbox.try_recv() {
            self.pending.push_back(m);
        }
        let mut n = 0;
        while n < out.len() {
            let Some((peer, bytes)) = self.pending.pop_front() else {
                break;
            };
            let Some(buf) = self.rx_free.alloc() else {
                self.counters.rx_no_buffers += 1;
                continue;
            };
            let base = Self::base(&self.rx_mem) + buf as usize * self.buf_size;
            let len = bytes.len().min(self.buf_size);
            self.rx_mem[base..base + len].copy_from_slice(&bytes[..len]);
            out[n] = RxPacket {
                buf,
                off: 0,
                len: len as u32,
                peer,
                truncated: bytes.len() > self.buf_size,
                port: super::PORT_SERVICE,
                conn: super::CONN_DATAGRAM,
            };
            self.counters.rx_frames += 1;
            n += 1;
        }
        n
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        self.tx_free.alloc()
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        let rb = Self::base(&self.rx_mem) + rx.buf as usize * self.buf_size + rx.off as usize;
        let tb = Self::base(&self.tx_mem) + tx as usize * self.buf_size;
        (
            &self.rx_mem[rb..rb + rx.len as usize],
            &mut self.tx_mem[tb..tb + self.buf_size],
        )
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let rb = Self::base(&self.rx_mem) + rx.buf as usize * self.buf_size + rx.off as usize;
        &self.rx_mem[rb..rb + rx.len as usize]
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        self.rx_free.free(rx.buf);
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        for p in pkts {
            let tb = Self::base(&self.tx_mem) + p.buf as usize * self.buf_size;
            let bytes = self.tx_mem[tb..tb + p.len as usize].to_vec();
            if self.outbox.send((p.peer, bytes)).is_err() {
                self.counters.tx_errors += 1;
            } else {
                self.counters.tx_frames += 1;
            }
            self.tx_free.free(p.buf);
        }
    }

    fn tx_free(&mut self, tx: u32) {
        self.tx_free.free(tx);
    }

    fn wait(&mut self, timeout: Duration) {
        if self.pending.is_empty()
            && let Ok(m) = self.inbox.recv_timeout(timeout)
        {
            self.pending.push_back(m);
        }
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            rx_in_use: self.rx_free.in_use(),
            tx_in_use: self.tx_free.in_use(),
            buffer_reuses: self.rx_free.reuses + self.tx_free.reuses,
            pools: [
                self.rx_free
                    .counters((self.rx_mem.len() - ALIGN) as u64, false),
                self.tx_free
                    .counters((self.tx_mem.len() - ALIGN) as u64, false),
                PoolCounters::default(),
            ],
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 0))
    }

    fn rx_bytes_mut(&mut self, rx: &RxPacket) -> &mut [u8] {
        let rb = Self::base(&self.rx_mem) + rx.buf as usize * self.buf_size + rx.off as usize;
        &mut self.rx_mem[rb..rb + rx.len as usize]
    }

    fn tx_bytes(&mut self, tx: u32) -> &mut [u8] {
        let tb = Self::base(&self.tx_mem) + tx as usize * self.buf_size;
        &mut self.tx_mem[tb..tb + self.buf_size]
    }
}
