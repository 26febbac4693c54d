//! Every DPDK call of the engine: EAL, port, mempools, and the per-worker
//! transport over one RX/TX queue pair.
//!
//! Mbuf ownership: an mbuf is in exactly one place at a time: a PMD ring,
//! an RX slot (handed to the worker), a TX slot (being filled by the
//! worker), the outgoing burst array, or back in its pool. Every path
//! (garbage, ARP, TX ring full, unknown neighbour, transport drop) ends in
//! `rte_pktmbuf_free` or a successful `rte_eth_tx_burst`, once. The runtime
//! checks the pools are full again at stop ([`StopReport`]).
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int};
use std::net::{SocketAddr, SocketAddrV4};
use std::ptr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dpdk_sys as sys;

use super::net::{self, Drop as Garbage, HDRS_LEN, Local, Neighbours, Packet, TxChecksum};
use super::{DpdkCfg, TxChecksumCfg};
use crate::config::limits::{RX_BURST_MAX, WORKER_COUNT_MAX};
use crate::config::{Config, ConfigError};
use crate::pool::FreeList;
use crate::transport::{RxPacket, Transport, TransportCounters, TxPacket};

/// Frame alignment the wire format assumes for in-place tensors.
const FRAME_ALIGN: usize = 64;
/// TX slots per worker: one reply per received frame, with room to spare.
const TX_SLOTS: usize = 2 * RX_BURST_MAX;
/// Extra room in the outgoing array for ARP replies of one burst.
const TX_ARRAY_LEN: usize = TX_SLOTS + RX_BURST_MAX;
/// Attempts to push a burst into a full TX ring before dropping the rest.
const TX_RETRY_MAX: u32 = 64;
/// IPv4 and UDP header bytes a reply adds inside the MTU.
const IP_UDP_LEN: usize = net::IPV4_HDR_LEN + net::UDP_HDR_LEN;

/// Why DPDK could not start.
#[derive(Debug)]
pub enum DpdkError {
    /// Bad `[dpdk]` section.
    Config(ConfigError),
    /// EAL initialization, or EAL already used in this process.
    Eal(String),
    /// Port probing, configuration, queues or start.
    Port(String),
    /// Mbuf pool creation (hugepage memory).
    Pool(String),
    /// Link did not come up.
    Link(String),
}

impl std::fmt::Display for DpdkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DpdkError::Config(e) => write!(f, "{e}"),
            DpdkError::Eal(m) => write!(f, "dpdk eal: {m}"),
            DpdkError::Port(m) => write!(f, "dpdk port: {m}"),
            DpdkError::Pool(m) => write!(f, "dpdk mbuf pool: {m}"),
            DpdkError::Link(m) => write!(f, "dpdk link: {m}"),
        }
    }
}

impl std::error::Error for DpdkError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EalState {
    Fresh,
    Running,
    /// Cleaned up (or failed): DPDK cannot initialize EAL again.
    Done,
}

/// EAL life cycle, and the running port and pools for `stats()`.
struct EalGlobal {
    state: EalState,
    port: Option<u16>,
    /// Pool addresses (pointers kept as integers: statics must be Sync).
    pools: Vec<usize>,
}

static EAL: Mutex<EalGlobal> = Mutex::new(EalGlobal {
    state: EalState::Fresh,
    port: None,
    pools: Vec::new(),
});
static LAST_STOP: Mutex<Option<StopReport>> = Mutex::new(None);

fn errno_text(e: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string for any errno value.
    let s = unsafe { CStr::from_ptr(sys::rte_strerror(e)) };
    format!("{} (errno {e})", s.to_string_lossy())
}

fn rte_errno() -> c_int {
    // SAFETY: reads the calling thread's rte_errno.
    unsafe { sys::sl_errno() }
}

/// What stop found; kept for tests and logs.
#[derive(Debug, Clone, Copy, Default)]
pub struct StopReport {
    /// Mbufs in all pools.
    pub mbufs_total: u64,
    /// Mbufs that did not come back to their pool (must be 0).
    pub mbufs_missing: u64,
    /// Mbufs the PMD held right after the port started (its RX rings;
    /// AF_XDP's fill ring), before any traffic.
    pub pmd_held_at_start: u64,
    /// Whether `rte_eal_cleanup` succeeded.
    pub eal_cleaned: bool,
}

/// The report of the last DPDK stop in this process.
pub fn last_stop_report() -> Option<StopReport> {
    *LAST_STOP.lock().unwrap_or_else(|p| p.into_inner())
}

/// Per-queue counters of one worker, published every burst.
#[derive(Debug, Clone, Copy, Default)]
pub struct QueueStats {
    /// Packets taken from the RX queue.
    pub rx_packets: u64,
    /// Sluice frames handed to the worker.
    pub rx_sluice: u64,
    /// Of those, first parts of larger datagrams (answered frame_too_large).
    pub rx_truncated: u64,
    /// Frames moved in their mbuf to a 64-byte boundary.
    pub rx_realigned: u64,
    /// Garbage dropped, by [`net::Drop`] reason.
    pub drops: [u64; Garbage::COUNT],
    /// ARP requests answered.
    pub arp_replies: u64,
    /// ARP packets learned from.
    pub arp_learned: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Replies dropped: no MAC known for the peer.
    pub tx_no_neighbour: u64,
    /// Replies dropped: TX ring full after retries.
    pub tx_ring_full: u64,
    /// Replies dropped for other reasons (IPv6 peer, oversize).
    pub tx_invalid: u64,
}

impl QueueStats {
    /// All garbage dropped.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }
}

struct AtomicQueueStats {
    v: [AtomicU64; 10 + Garbage::COUNT],
}

impl AtomicQueueStats {
    const fn new() -> Self {
        AtomicQueueStats {
            v: [const { AtomicU64::new(0) }; 10 + Garbage::COUNT],
        }
    }

    fn store(&self, s: &QueueStats) {
        let vals = [
            s.rx_packets,
            s.rx_sluice,
            s.rx_truncated,
            s.rx_realigned,
            s.arp_replies,
            s.arp_learned,
            s.tx_packets,
            s.tx_no_neighbour,
            s.tx_ring_full,
            s.tx_invalid,
        ];
        for (a, v) in self.v.iter().zip(vals.iter().chain(s.drops.iter())) {
            a.store(*v, Ordering::Relaxed);
        }
    }

    fn load(&self) -> QueueStats {
        let l = |i: usize| self.v[i].load(Ordering::Relaxed);
        let mut drops = [0; Garbage::COUNT];
        for (i, d) in drops.iter_mut().enumerate() {
            *d = l(10 + i);
        }
        QueueStats {
            rx_packets: l(0),
            rx_sluice: l(1),
            rx_truncated: l(2),
            rx_realigned: l(3),
            arp_replies: l(4),
            arp_learned: l(5),
            tx_packets: l(6),
            tx_no_neighbour: l(7),
            tx_ring_full: l(8),
            tx_invalid: l(9),
            drops,
        }
    }
}

static QUEUE_STATS: [AtomicQueueStats; WORKER_COUNT_MAX] =
    [const { AtomicQueueStats::new() }; WORKER_COUNT_MAX];

/// Port counters from the PMD.
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Packets the NIC dropped: RX queue full.
    pub imissed: u64,
    /// Erroneous packets received.
    pub ierrors: u64,
    /// Failed sends.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// Everything the DPDK transport counts.
#[derive(Debug, Clone, Default)]
pub struct DpdkStats {
    /// Per worker queue.
    pub queues: Vec<QueueStats>,
    /// The port, while running.
    pub port: Option<PortStats>,
    /// Mbufs out of the pools right now (worker slots, PMD rings, caches
    /// excluded), while running.
    pub pool_in_use: Option<u64>,
}

impl DpdkStats {
    /// Sum over queues.
    pub fn total(&self) -> QueueStats {
        let mut t = QueueStats::default();
        for q in &self.queues {
            t.rx_packets += q.rx_packets;
            t.rx_sluice += q.rx_sluice;
            t.rx_truncated += q.rx_truncated;
            t.rx_realigned += q.rx_realigned;
            t.arp_replies += q.arp_replies;
            t.arp_learned += q.arp_learned;
            t.tx_packets += q.tx_packets;
            t.tx_no_neighbour += q.tx_no_neighbour;
            t.tx_ring_full += q.tx_ring_full;
            t.tx_invalid += q.tx_invalid;
            for (a, b) in t.drops.iter_mut().zip(q.drops) {
                *a += b;
            }
        }
        t
    }
}

static QUEUES_USED: AtomicU64 = AtomicU64::new(0);

/// Counters of the current (or last) DPDK run in this process.
pub fn stats() -> DpdkStats {
    let n = QUEUES_USED.load(Ordering::Relaxed) as usize;
    let queues = QUEUE_STATS[..n.min(WORKER_COUNT_MAX)]
        .iter()
        .map(AtomicQueueStats::load)
        .collect();
    let g = EAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = match (g.state, g.port) {
        (EalState::Running, Some(p)) => {
            let mut s = sys::rte_eth_stats::default();
            // SAFETY: the port is started (EAL lock held, so it cannot be
            // closed meanwhile); `s` is a valid out-parameter.
            let r = unsafe { sys::rte_eth_stats_get(p, &mut s) };
            (r == 0).then_some(PortStats {
                ipackets: s.ipackets,
                opackets: s.opackets,
                imissed: s.imissed,
                ierrors: s.ierrors,
                oerrors: s.oerrors,
                rx_nombuf: s.rx_nombuf,
            })
        }
        _ => None,
    };
    let pool_in_use = port.map(|_| {
        g.pools
            .iter()
            // SAFETY: pools listed here are alive until the runtime's Drop
            // removes them under this lock.
            .map(|&p| unsafe { sys::rte_mempool_in_use_count(p as *const sys::rte_mempool) } as u64)
            .sum()
    });
    DpdkStats {
        queues,
        port,
        pool_in_use,
    }
}

/// What one worker needs to drive its queue pair.
#[derive(Clone, Copy)]
pub struct QueueParams {
    port: u16,
    queue: u16,
    pool: *mut sys::rte_mempool,
    local: Local,
    tx_mode: TxChecksum,
    /// Largest Sluice frame in one reply: MTU and mbuf room.
    tx_frame_max: usize,
    neighbours_max: usize,
    rx_realign: bool,
    idle_sleep: Duration,
    hugepages: bool,
}

// SAFETY: the pool pointer refers to a DPDK mempool that lives until the
// runtime is dropped, which happens after every worker has exited; mempool
// operations are thread-safe.
unsafe impl Send for QueueParams {}

/// The process-wide DPDK state an engine holds while it runs. Dropping it
/// (after the workers have exited) stops and closes the port, frees the
/// pools and cleans EAL up, releasing every hugepage.
pub struct DpdkRuntime {
    cfg: DpdkCfg,
    port: u16,
    configured: bool,
    started: bool,
    pools: Vec<*mut sys::rte_mempool>,
    params: Vec<QueueParams>,
    pmd_held_at_start: u64,
}

// SAFETY: the runtime is only touched by the control thread that owns the
// engine; the pool pointers are DPDK objects usable from any thread.
unsafe impl Send for DpdkRuntime {}
// SAFETY: no method mutates through &self.
unsafe impl Sync for DpdkRuntime {}

impl DpdkRuntime {
    /// Initializes EAL and starts the port with one queue pair per worker.
    pub fn start(cfg: &Config) -> Result<DpdkRuntime, DpdkError> {
        let d = DpdkCfg::from_config(cfg).map_err(DpdkError::Config)?;
        let workers = cfg.engine.workers.len();
        eal_init(&d)?;
        let mut rt = DpdkRuntime {
            port: d.port,
            cfg: d,
            configured: false,
            started: false,
            pools: Vec::new(),
            params: Vec::new(),
            pmd_held_at_start: 0,
        };
        // On error `rt` drops here and undoes whatever was done.
        rt.bring_up(workers, cfg.engine.rx_burst_max)?;
        Ok(rt)
    }

    fn bring_up(&mut self, workers: usize, rx_burst_max: u32) -> Result<(), DpdkError> {
        let d = self.cfg.clone();
        let port = d.port;
        // SAFETY: EAL is initialized.
        let avail = unsafe { sys::rte_eth_dev_count_avail() };
        if port >= avail {
            return Err(DpdkError::Port(format!(
                "port {port} does not exist: EAL found {avail} port(s) from vdevs {:?} and pci {:?}",
                d.vdevs, d.pci
            )));
        }
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: valid port id and out-parameter.
        let r = unsafe { sys::rte_eth_dev_info_get(port, &mut info) };
        if r != 0 {
            return Err(DpdkError::Port(format!("dev_info_get: {}", errno_text(-r))));
        }
        let nq = workers as u16;
        if info.max_rx_queues < nq || info.max_tx_queues < nq {
            return Err(DpdkError::Port(format!(
                "port {port} has {} RX / {} TX queues but engine.workers asks for {nq} (for AF_XDP set queue_count= in the vdev)",
                info.max_rx_queues, info.max_tx_queues
            )));
        }
        let mut conf = sys::rte_eth_conf::default();
        if nq > 1 {
            conf.rxmode.mq_mode = sys::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            // SAFETY: pure function.
            conf.rx_adv_conf.rss_conf.rss_hf =
                unsafe { sys::sl_rss_hf_ip_udp() } & info.flow_type_rss_offloads;
        }
        // SAFETY: pure function.
        let csum = unsafe { sys::sl_tx_offload_ipv4_udp_cksum() };
        let can_offload = info.tx_offload_capa & csum == csum;
        let tx_mode = match (d.tx_checksum, can_offload) {
            (TxChecksumCfg::Software, _) | (TxChecksumCfg::Auto, false) => TxChecksum::Software,
            (_, true) => TxChecksum::Offload,
            (TxChecksumCfg::Offload, false) => {
                return Err(DpdkError::Port(format!(
                    "dpdk.tx_checksum = \"offload\" but port {port} cannot offload IPv4 and UDP checksums"
                )));
            }
        };
        if tx_mode == TxChecksum::Offload {
            conf.txmode.offloads |= csum;
        }
        // SAFETY: valid port, queue counts checked against dev_info, conf valid.
        let r = unsafe { sys::rte_eth_dev_configure(port, nq, nq, &conf) };
        if r != 0 {
            return Err(DpdkError::Port(format!(
                "configure {nq} queue pair(s): {}",
                errno_text(-r)
            )));
        }
        self.configured = true;
        let (mut rx_desc, mut tx_desc) = (d.rx_desc, d.tx_desc);
        // SAFETY: valid port, out-parameters are plain u16s.
        unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut rx_desc, &mut tx_desc) };
        let mut mtu: u16 = 1500;
        // SAFETY: valid port and out-parameter.
        unsafe { sys::rte_eth_dev_get_mtu(port, &mut mtu) };
        // SAFETY: valid port.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port) };
        let data_room = (sys::RTE_PKTMBUF_HEADROOM + d.mbuf_data_bytes) as u16;
        let tx_frame_max = (mtu as usize - IP_UDP_LEN)
            .min(d.mbuf_data_bytes as usize + 64 - HDRS_LEN - FRAME_ALIGN);
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: valid port and out-parameter.
        unsafe { sys::rte_eth_macaddr_get(port, &mut mac) };
        let local = Local {
            mac: mac.addr_bytes,
            ip: d.ipv4(),
            udp_port: d.udp_port,
        };
        for q in 0..nq {
            let name = CString::new(format!("sl_p{port}_q{q}")).expect("no NUL in pool name");
            // SAFETY: EAL is up; name is a valid C string copied by DPDK.
            let pool = unsafe {
                sys::rte_pktmbuf_pool_create(
                    name.as_ptr(),
                    d.mbufs_per_worker,
                    d.mbuf_cache,
                    0,
                    data_room,
                    socket,
                )
            };
            if pool.is_null() {
                let e = rte_errno();
                return Err(DpdkError::Pool(format!(
                    "{} mbufs of {data_room} B for worker {q}: {}; raise dpdk.memory_mb or reserve more hugepages (scripts/hugepages.sh)",
                    d.mbufs_per_worker,
                    errno_text(e)
                )));
            }
            self.pools.push(pool);
            // SAFETY: configured port, queue < nq, default rxconf (NULL),
            // pool outlives the queue (freed after close in Drop).
            let r = unsafe {
                sys::rte_eth_rx_queue_setup(port, q, rx_desc, socket as u32, ptr::null(), pool)
            };
            if r != 0 {
                return Err(DpdkError::Port(format!("rx queue {q}: {}", errno_text(-r))));
            }
            // SAFETY: as above, default txconf.
            let r = unsafe {
                sys::rte_eth_tx_queue_setup(port, q, tx_desc, socket as u32, ptr::null())
            };
            if r != 0 {
                return Err(DpdkError::Port(format!("tx queue {q}: {}", errno_text(-r))));
            }
            self.params.push(QueueParams {
                port,
                queue: q,
                pool,
                local,
                tx_mode,
                tx_frame_max,
                neighbours_max: d.neighbours_max as usize,
                rx_realign: d.rx_realign,
                idle_sleep: Duration::from_micros(d.idle_sleep_us as u64),
                hugepages: d.hugepages,
            });
        }
        let _ = rx_burst_max;
        // SAFETY: configured port with all queues set up.
        let r = unsafe { sys::rte_eth_dev_start(port) };
        if r != 0 {
            return Err(DpdkError::Port(format!("start: {}", errno_text(-r))));
        }
        self.started = true;
        let deadline = Instant::now() + Duration::from_millis(d.link_wait_ms as u64);
        loop {
            let mut speed = 0u32;
            // SAFETY: started port, valid out-parameter.
            let up = unsafe { sys::sl_link_status(port, &mut speed) };
            if up == 1 {
                log::info!(
                    "dpdk: port {port} up at {speed} Mbit/s, mac {}, {nq} queue pair(s), mtu {mtu}, {:?} checksums, ip {}:{}",
                    mac_text(&local.mac),
                    tx_mode,
                    local.ip,
                    local.udp_port
                );
                break;
            }
            if Instant::now() >= deadline {
                return Err(DpdkError::Link(format!(
                    "port {port} link still down after {} ms",
                    d.link_wait_ms
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.pmd_held_at_start = self
            .pools
            .iter()
            // SAFETY: live pools.
            .map(|&p| unsafe { sys::rte_mempool_in_use_count(p) } as u64)
            .sum();
        for s in &QUEUE_STATS[..nq as usize] {
            s.store(&QueueStats::default());
        }
        QUEUES_USED.store(nq as u64, Ordering::Relaxed);
        let mut g = EAL.lock().unwrap_or_else(|p| p.into_inner());
        g.port = Some(port);
        g.pools = self.pools.iter().map(|&p| p as usize).collect();
        Ok(())
    }

    /// What worker `i` needs; built into a transport on the worker thread.
    pub fn queue(&self, i: usize) -> Option<QueueParams> {
        self.params.get(i).copied()
    }

    /// Address and port the appliance answers on.
    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.cfg.ipv4(), self.cfg.udp_port))
    }
}

fn mac_text(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn eal_init(d: &DpdkCfg) -> Result<(), DpdkError> {
    let mut g = EAL.lock().unwrap_or_else(|p| p.into_inner());
    match g.state {
        EalState::Fresh => {}
        EalState::Running => {
            return Err(DpdkError::Eal(
                "already running in this process (one DPDK engine per process)".into(),
            ));
        }
        EalState::Done => {
            return Err(DpdkError::Eal(
                "EAL was already initialized and cleaned up in this process; DPDK cannot initialize it twice: restart the process".into(),
            ));
        }
    }
    let args = d.eal_argv();
    log::info!("dpdk: rte_eal_init {}", args.join(" "));
    // EAL may keep pointers into argv (it is parsed once per process), so the
    // strings are leaked on purpose: a few hundred bytes, once.
    let cstrs: Vec<*mut c_char> = args
        .iter()
        .map(|a| CString::new(a.as_str()).map(CString::into_raw))
        .collect::<Result<_, _>>()
        .map_err(|_| DpdkError::Eal("argument contains NUL".into()))?;
    let argv: &'static mut [*mut c_char] = Box::leak(cstrs.into_boxed_slice());
    let argv_addr = argv.as_mut_ptr() as usize;
    let argc = argv.len() as c_int;
    // EAL pins the thread that initializes it to the main lcore; use a
    // short-lived thread so the caller (a control or Go runtime thread)
    // keeps its affinity.
    let res = std::thread::Builder::new()
        .name("sluice-eal".into())
        .spawn(move || {
            // SAFETY: argv points to argc leaked, NUL-terminated strings that
            // live for the rest of the process.
            let r = unsafe { sys::rte_eal_init(argc, argv_addr as *mut *mut c_char) };
            (r, rte_errno())
        })
        .map_err(|e| DpdkError::Eal(format!("spawn init thread: {e}")))?
        .join()
        .map_err(|_| DpdkError::Eal("init thread panicked".into()))?;
    if res.0 < 0 {
        // DPDK does not support a second rte_eal_init after a failed one.
        g.state = EalState::Done;
        return Err(DpdkError::Eal(format!(
            "rte_eal_init failed: {} (args: {}); see EAL messages above",
            errno_text(res.1),
            args.join(" ")
        )));
    }
    g.state = EalState::Running;
    Ok(())
}

impl Drop for DpdkRuntime {
    fn drop(&mut self) {
        // One line with everything counted, for scripts and operators.
        let st = stats();
        let t = st.total();
        let drops: Vec<String> = Garbage::ALL
            .iter()
            .map(|r| format!("{}={}", r.name(), t.drops[*r as usize]))
            .collect();
        let p = st.port.unwrap_or_default();
        log::info!(
            "dpdk: totals rx_packets={} rx_sluice={} rx_truncated={} rx_realigned={} dropped={} [{}] arp_replies={} tx_packets={} tx_no_neighbour={} tx_ring_full={} tx_invalid={} port_ipackets={} port_opackets={} port_imissed={} port_rx_nombuf={}",
            t.rx_packets,
            t.rx_sluice,
            t.rx_truncated,
            t.rx_realigned,
            t.dropped(),
            drops.join(" "),
            t.arp_replies,
            t.tx_packets,
            t.tx_no_neighbour,
            t.tx_ring_full,
            t.tx_invalid,
            p.ipackets,
            p.opackets,
            p.imissed,
            p.rx_nombuf
        );
        let mut g = EAL.lock().unwrap_or_else(|p| p.into_inner());
        g.port = None;
        g.pools.clear();
        if self.started {
            // SAFETY: started port; no worker polls it any more (the engine
            // joins its workers before dropping the runtime).
            let r = unsafe { sys::rte_eth_dev_stop(self.port) };
            if r != 0 {
                log::warn!("dpdk: stop port {}: {}", self.port, errno_text(-r));
            }
        }
        if self.configured {
            // SAFETY: stopped port; closing releases its queues and the
            // mbufs they held.
            let r = unsafe { sys::rte_eth_dev_close(self.port) };
            if r != 0 {
                log::warn!("dpdk: close port {}: {}", self.port, errno_text(-r));
            }
        }
        let mut report = StopReport {
            pmd_held_at_start: self.pmd_held_at_start,
            ..StopReport::default()
        };
        for &pool in &self.pools {
            // SAFETY: live pool; counts include per-lcore caches.
            let avail = unsafe { sys::rte_mempool_avail_count(pool) } as u64;
            let total = self.cfg.mbufs_per_worker as u64;
            report.mbufs_total += total;
            report.mbufs_missing += total.saturating_sub(avail);
            if avail > total {
                log::error!(
                    "dpdk: pool holds {avail} mbufs but has {total}: an mbuf was freed twice"
                );
                report.mbufs_missing += avail - total;
            }
            // SAFETY: no queue or worker references the pool any more.
            unsafe { sys::rte_mempool_free(pool) };
        }
        // A PMD that never returns its ring mbufs on close (AF_XDP in
        // zero-copy mode) accounts for up to what it held at start plus a
        // burst of sends it had not reclaimed; more than that is a leak.
        const TX_RECLAIM_SLACK: u64 = 64;
        if report.mbufs_missing > report.pmd_held_at_start + TX_RECLAIM_SLACK {
            log::error!(
                "dpdk: {} of {} mbufs did not return to their pools (the PMD held {} at start): leak",
                report.mbufs_missing,
                report.mbufs_total,
                report.pmd_held_at_start
            );
        } else if report.mbufs_missing > 0 {
            log::info!(
                "dpdk: the PMD kept {} mbufs of its rings at close (it held {} at start); freed with the pools",
                report.mbufs_missing,
                report.pmd_held_at_start
            );
        }
        if g.state == EalState::Running {
            // SAFETY: nothing uses DPDK any more; after this EAL is gone for
            // the process and the hugepages are returned.
            let r = unsafe { sys::rte_eal_cleanup() };
            report.eal_cleaned = r == 0;
            g.state = EalState::Done;
            // EAL leaves its (empty, with --no-shconf) runtime directory.
            let _ = std::fs::remove_dir(format!("/var/run/dpdk/{}", self.cfg.file_prefix));
        }
        *LAST_STOP.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
        log::info!("dpdk: stopped: {report:?}");
    }
}

/// The DPDK transport of one worker: one RX/TX queue pair of the port.
pub struct DpdkTransport {
    q: QueueParams,
    registered: bool,
    /// Scratch for `rte_eth_rx_burst`.
    rx_burst: Box<[*mut sys::rte_mbuf]>,
    /// RX slot -> mbuf handed to the worker (null when free).
    rx_slots: Box<[*mut sys::rte_mbuf]>,
    /// RX slot -> start of its Sluice frame.
    rx_frame: Box<[*const u8]>,
    rx_free: FreeList,
    /// TX slot -> mbuf being filled (null when free).
    tx_slots: Box<[*mut sys::rte_mbuf]>,
    /// TX slot -> start of its Sluice frame.
    tx_frame: Box<[*mut u8]>,
    /// TX slot -> data offset of the packet in the mbuf.
    tx_data_off: Box<[u16]>,
    tx_free: FreeList,
    /// Outgoing burst.
    tx_out: Box<[*mut sys::rte_mbuf]>,
    tx_out_len: usize,
    /// Garbage to free in bulk.
    garbage: Box<[*mut sys::rte_mbuf]>,
    neigh: Neighbours,
    ip_id: u16,
    /// Whether the first frame's placement was logged.
    placement_logged: bool,
    stats: QueueStats,
    counters: TransportCounters,
}

impl DpdkTransport {
    /// Takes over one queue pair; runs on the worker thread, which it
    /// registers with EAL (an lcore id gives it a mempool cache).
    pub fn new(q: QueueParams) -> Result<DpdkTransport, DpdkError> {
        // SAFETY: EAL is running (the runtime outlives every worker).
        let registered = unsafe { sys::rte_thread_register() } == 0;
        if !registered {
            log::warn!(
                "dpdk: worker thread not registered with EAL ({}): mempool cache off",
                errno_text(rte_errno())
            );
        }
        let null = ptr::null_mut::<sys::rte_mbuf>();
        Ok(DpdkTransport {
            q,
            registered,
            rx_burst: vec![null; RX_BURST_MAX].into_boxed_slice(),
            rx_slots: vec![null; RX_BURST_MAX].into_boxed_slice(),
            rx_frame: vec![ptr::null(); RX_BURST_MAX].into_boxed_slice(),
            rx_free: FreeList::new(RX_BURST_MAX as u32),
            tx_slots: vec![null; TX_SLOTS].into_boxed_slice(),
            tx_frame: vec![ptr::null_mut(); TX_SLOTS].into_boxed_slice(),
            tx_data_off: vec![0; TX_SLOTS].into_boxed_slice(),
            tx_free: FreeList::new(TX_SLOTS as u32),
            tx_out: vec![null; TX_ARRAY_LEN].into_boxed_slice(),
            tx_out_len: 0,
            garbage: vec![null; RX_BURST_MAX].into_boxed_slice(),
            neigh: Neighbours::new(q.neighbours_max),
            ip_id: 0,
            placement_logged: false,
            stats: QueueStats::default(),
            counters: TransportCounters {
                rx_capacity: RX_BURST_MAX as u32,
                tx_capacity: TX_SLOTS as u32,
                hugepages: q.hugepages,
                ..TransportCounters::default()
            },
        })
    }

    fn view(m: *mut sys::rte_mbuf) -> sys::sl_mbuf_view {
        let mut v = sys::sl_mbuf_view::default();
        // SAFETY: m is a live mbuf owned by this worker.
        unsafe { sys::sl_mbuf_view(m, &mut v) };
        v
    }

    /// Pushes the outgoing array to the TX queue; what the ring will not
    /// take after a bounded number of tries is freed and counted.
    fn flush_tx(&mut self) {
        let mut done = 0usize;
        let mut tries = 0;
        while done < self.tx_out_len && tries < TX_RETRY_MAX {
            // SAFETY: tx_out[done..len] are mbufs owned by us; the PMD takes
            // ownership of the first `sent` of them.
            let sent = unsafe {
                sys::sl_tx_burst(
                    self.q.port,
                    self.q.queue,
                    self.tx_out.as_mut_ptr().add(done),
                    (self.tx_out_len - done) as u16,
                )
            };
            done += sent as usize;
            tries += 1;
        }
        for &m in &self.tx_out[done..self.tx_out_len] {
            // SAFETY: not taken by the PMD, still ours, freed once here.
            unsafe { sys::sl_pktmbuf_free(m) };
        }
        let dropped = (self.tx_out_len - done) as u64;
        self.stats.tx_packets += done as u64;
        self.stats.tx_ring_full += dropped;
        self.counters.tx_errors += dropped;
        self.tx_out_len = 0;
    }

    fn publish(&self) {
        QUEUE_STATS[self.q.queue as usize].store(&self.stats);
    }

    /// Moves a frame to a 64-byte boundary inside its own mbuf; returns the
    /// new start, or None when there is no room either way.
    fn realign(v: &sys::sl_mbuf_view, frame: *mut u8, len: usize) -> Option<*mut u8> {
        let addr = frame as usize;
        let room_lo = v.buf_addr as usize;
        let room_hi = room_lo + v.buf_len as usize;
        let down = addr & !(FRAME_ALIGN - 1);
        let up = down + FRAME_ALIGN;
        let to = if down >= room_lo {
            down
        } else if up + len <= room_hi {
            up
        } else {
            return None;
        };
        // SAFETY: source and destination both lie in this mbuf's data room
        // (checked above); the headers in front were already parsed and may
        // be overwritten; `copy` handles the overlap.
        unsafe { ptr::copy(frame, to as *mut u8, len) };
        Some(to as *mut u8)
    }
}

impl Transport for DpdkTransport {
    fn rx_burst(&mut self, out: &mut [RxPacket]) -> usize {
        let free = (self.rx_free.capacity() - self.rx_free.in_use()) as usize;
        let want = out.len().min(free).min(RX_BURST_MAX);
        if want == 0 {
            return 0;
        }
        // SAFETY: rx_burst has RX_BURST_MAX >= want slots; the PMD hands us
        // ownership of `n` mbufs.
        let n = unsafe {
            sys::sl_rx_burst(
                self.q.port,
                self.q.queue,
                self.rx_burst.as_mut_ptr(),
                want as u16,
            )
        } as usize;
        if n == 0 {
            return 0;
        }
        self.stats.rx_packets += n as u64;
        let local = self.q.local;
        let mut k = 0;
        let mut ng = 0;
        for i in 0..n {
            let m = self.rx_burst[i];
            let v = Self::view(m);
            // SAFETY: data..data+data_len is the first segment's payload,
            // which we own until we free or hand on the mbuf.
            let bytes = unsafe { std::slice::from_raw_parts(v.data, v.data_len as usize) };
            let class = net::classify(bytes, &local);
            match class {
                Packet::Sluice {
                    src_mac,
                    src,
                    off,
                    len,
                    truncated,
                } => {
                    self.neigh.learn(*src.ip(), src_mac);
                    let truncated = truncated || v.nb_segs > 1;
                    // SAFETY: off + len <= data_len (classify checked it).
                    let mut frame = unsafe { v.data.add(off) };
                    if !self.placement_logged {
                        self.placement_logged = true;
                        log::info!(
                            "dpdk: queue {}: PMD put the first frame at data_off {} + {off}: {} mod 64 ({})",
                            self.q.queue,
                            v.data_off,
                            frame as usize % FRAME_ALIGN,
                            if self.q.rx_realign {
                                "realigned in its mbuf when not 0"
                            } else {
                                "rx_realign off"
                            }
                        );
                    }
                    if self.q.rx_realign
                        && !(frame as usize).is_multiple_of(FRAME_ALIGN)
                        && let Some(f) = Self::realign(&v, frame, len)
                    {
                        frame = f;
                        self.stats.rx_realigned += 1;
                    }
                    let slot = self.rx_free.alloc().expect("want <= free RX slots");
                    self.rx_slots[slot as usize] = m;
                    self.rx_frame[slot as usize] = frame;
                    out[k] = RxPacket {
                        buf: slot,
                        off: 0,
                        len: len as u32,
                        peer: SocketAddr::V4(src),
                        truncated,
                        port: crate::transport::PORT_SERVICE,
                    };
                    k += 1;
                    self.stats.rx_sluice += 1;
                    self.stats.rx_truncated += truncated as u64;
                }
                Packet::ArpRequest {
                    sender_mac,
                    sender_ip,
                } if v.nb_segs == 1 => {
                    self.neigh.learn(sender_ip, sender_mac);
                    let room = (v.buf_len - v.data_off) as usize;
                    // SAFETY: the whole data room after data_off is this mbuf's.
                    let pkt = unsafe { std::slice::from_raw_parts_mut(v.data, room) };
                    match net::arp_reply_in_place(pkt, &local, sender_mac, sender_ip) {
                        Some(len) if self.tx_out_len < TX_ARRAY_LEN => {
                            // SAFETY: single-segment mbuf we own; len fits its room.
                            unsafe { sys::sl_mbuf_set_data(m, v.data_off, len as u16) };
                            self.tx_out[self.tx_out_len] = m;
                            self.tx_out_len += 1;
                            self.stats.arp_replies += 1;
                        }
                        _ => {
                            self.stats.drops[Garbage::Arp as usize] += 1;
                            self.garbage[ng] = m;
                            ng += 1;
                        }
                    }
                }
                Packet::ArpLearn {
                    sender_mac,
                    sender_ip,
                } => {
                    self.neigh.learn(sender_ip, sender_mac);
                    self.stats.arp_learned += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
                Packet::ArpRequest { .. } => {
                    self.stats.drops[Garbage::MultiSegment as usize] += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
                Packet::Drop(r) => {
                    self.stats.drops[r as usize] += 1;
                    self.garbage[ng] = m;
                    ng += 1;
                }
            }
        }
        if ng > 0 {
            // SAFETY: ng garbage mbufs we own, each listed once; frees chains.
            unsafe { sys::rte_pktmbuf_free_bulk(self.garbage.as_mut_ptr(), ng as u32) };
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        self.counters.rx_frames += k as u64;
        self.publish();
        k
    }

    fn tx_alloc(&mut self) -> Option<u32> {
        let slot = self.tx_free.alloc()?;
        // SAFETY: live pool.
        let m = unsafe { sys::sl_pktmbuf_alloc(self.q.pool) };
        if m.is_null() {
            self.tx_free.free(slot);
            return None;
        }
        let v = Self::view(m);
        // Start the packet so that the frame after its 42 header bytes is
        // 64-byte aligned: ONNX Runtime writes outputs in place.
        let skip = net::tx_skip(v.buf_addr as usize, FRAME_ALIGN);
        self.tx_slots[slot as usize] = m;
        self.tx_data_off[slot as usize] = skip as u16;
        // SAFETY: skip + HDRS_LEN + tx_frame_max <= buf_len (tx_frame_max
        // leaves FRAME_ALIGN spare bytes of the data room).
        self.tx_frame[slot as usize] = unsafe { v.buf_addr.add(skip + HDRS_LEN) };
        Some(slot)
    }

    fn frames(&mut self, rx: &RxPacket, tx: u32) -> (&[u8], &mut [u8]) {
        let (r, t) = (rx.buf as usize, tx as usize);
        assert!(
            !self.rx_slots[r].is_null() && !self.tx_slots[t].is_null(),
            "frames of a free slot"
        );
        // SAFETY: the RX frame (len bytes, checked by classify) and the TX
        // frame area (tx_frame_max bytes) lie in two different mbufs we own
        // until rx_release / tx_burst; borrows are tied to &mut self.
        unsafe {
            (
                std::slice::from_raw_parts(self.rx_frame[r], rx.len as usize),
                std::slice::from_raw_parts_mut(self.tx_frame[t], self.q.tx_frame_max),
            )
        }
    }

    fn rx_bytes(&self, rx: &RxPacket) -> &[u8] {
        let r = rx.buf as usize;
        assert!(!self.rx_slots[r].is_null(), "rx_bytes of a free slot");
        // SAFETY: as in `frames`.
        unsafe { std::slice::from_raw_parts(self.rx_frame[r], rx.len as usize) }
    }

    fn rx_release(&mut self, rx: &RxPacket) {
        let r = rx.buf as usize;
        let m = std::mem::replace(&mut self.rx_slots[r], ptr::null_mut());
        assert!(!m.is_null(), "release of a free RX slot");
        // SAFETY: the worker is done with this mbuf; freed once (slot nulled).
        unsafe { sys::sl_pktmbuf_free(m) };
        self.rx_free.free(rx.buf);
    }

    fn tx_burst(&mut self, pkts: &[TxPacket]) {
        let local = self.q.local;
        for p in pkts {
            let t = p.buf as usize;
            let m = std::mem::replace(&mut self.tx_slots[t], ptr::null_mut());
            assert!(!m.is_null(), "send of a free TX slot");
            self.tx_free.free(p.buf);
            let mac = match p.peer {
                SocketAddr::V4(a) => self.neigh.lookup(*a.ip()).map(|mac| (a, mac)),
                SocketAddr::V6(_) => None,
            };
            let ok = match mac {
                None if p.peer.is_ipv4() => {
                    self.stats.tx_no_neighbour += 1;
                    false
                }
                None => {
                    self.stats.tx_invalid += 1;
                    false
                }
                Some(_) if p.len as usize > self.q.tx_frame_max => {
                    self.stats.tx_invalid += 1;
                    false
                }
                Some((dst, mac)) => {
                    let len = HDRS_LEN + p.len as usize;
                    // SAFETY: the packet area starts HDRS_LEN before the frame
                    // in this mbuf's data room and spans len bytes (checked
                    // against tx_frame_max above).
                    let pkt = unsafe {
                        std::slice::from_raw_parts_mut(self.tx_frame[t].sub(HDRS_LEN), len)
                    };
                    self.ip_id = self.ip_id.wrapping_add(1);
                    match net::build_udp(
                        pkt,
                        p.len as usize,
                        &local,
                        mac,
                        dst,
                        self.ip_id,
                        self.q.tx_mode,
                    ) {
                        Ok(len) => {
                            // SAFETY: fresh single-segment mbuf; fits its room.
                            unsafe {
                                sys::sl_mbuf_set_data(m, self.tx_data_off[t], len as u16);
                                if self.q.tx_mode == TxChecksum::Offload {
                                    sys::sl_mbuf_tx_offload_ipv4_udp(
                                        m,
                                        net::ETH_HDR_LEN as u8,
                                        net::IPV4_HDR_LEN as u8,
                                    );
                                }
                            }
                            true
                        }
                        Err(_) => {
                            self.stats.tx_invalid += 1;
                            false
                        }
                    }
                }
            };
            if ok {
                if self.tx_out_len == TX_ARRAY_LEN {
                    self.flush_tx();
                }
                self.tx_out[self.tx_out_len] = m;
                self.tx_out_len += 1;
            } else {
                self.counters.tx_errors += 1;
                // SAFETY: not sent; freed once here.
                unsafe { sys::sl_pktmbuf_free(m) };
            }
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        self.counters.tx_frames = self.stats.tx_packets;
        self.publish();
    }

    fn tx_free(&mut self, tx: u32) {
        let m = std::mem::replace(&mut self.tx_slots[tx as usize], ptr::null_mut());
        assert!(!m.is_null(), "free of a free TX slot");
        // SAFETY: never sent; freed once (slot nulled).
        unsafe { sys::sl_pktmbuf_free(m) };
        self.tx_free.free(tx);
    }

    fn wait(&mut self, timeout: Duration) {
        // Virtual devices have no RX interrupts here: nap briefly instead.
        let nap = timeout.min(self.q.idle_sleep);
        if nap.is_zero() {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
        }
    }

    fn counters(&self) -> TransportCounters {
        TransportCounters {
            rx_in_use: self.rx_free.in_use(),
            tx_in_use: self.tx_free.in_use(),
            buffer_reuses: self.rx_free.reuses + self.tx_free.reuses,
            ..self.counters
        }
    }

    fn local_addr(&self) -> SocketAddr {
        SocketAddr::V4(SocketAddrV4::new(self.q.local.ip, self.q.local.udp_port))
    }
}

impl std::ops::Drop for DpdkTransport {
    fn drop(&mut self) {
        // Frames still held (a worker that stopped mid-burst) go back.
        for slot in self.rx_slots.iter_mut().chain(self.tx_slots.iter_mut()) {
            let m = std::mem::replace(slot, ptr::null_mut());
            if !m.is_null() {
                // SAFETY: held by this transport only; freed once.
                unsafe { sys::sl_pktmbuf_free(m) };
            }
        }
        if self.tx_out_len > 0 {
            self.flush_tx();
        }
        self.publish();
        if self.registered {
            // SAFETY: this thread registered itself in `new`.
            unsafe { sys::rte_thread_unregister() };
        }
    }
}
