//! The process-wide DPDK state: EAL, the port, its queues and mempools,
//! brought up once per engine start and torn down (pools checked full
//! again) at stop.
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
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dpdk_sys as sys;

use super::frag::{FragHandle, FragTable};
use super::net::{self, Drop as Garbage, HDRS_LEN, Local, TxChecksum};
use super::slots::{SlotRegion, Slots};
use super::stats::{QUEUE_STATS, QUEUES_USED, QueueStats, stats};
use super::{DpdkCfg, TxChecksumCfg, TxMultiSegCfg};
use crate::config::{Config, ConfigError};

/// Frame alignment the wire format assumes for in-place tensors.
pub(super) const FRAME_ALIGN: usize = 64;
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
pub(super) enum EalState {
    Fresh,
    Running,
    /// Cleaned up (or failed): DPDK cannot initialize EAL again.
    Done,
}

/// EAL life cycle, and the running port and pools for `stats()`.
pub(super) struct EalGlobal {
    pub(super) state: EalState,
    pub(super) port: Option<u16>,
    /// Pool addresses (pointers kept as integers: statics must be Sync).
    pub(super) pools: Vec<usize>,
}

pub(super) static EAL: Mutex<EalGlobal> = Mutex::new(EalGlobal {
    state: EalState::Fresh,
    port: None,
    pools: Vec::new(),
});
static LAST_STOP: Mutex<Option<StopReport>> = Mutex::new(None);
/// EAL's argv: the strings and the pointer array (as addresses), kept for
/// the life of the process (EAL parses them once and may keep pointers).
static EAL_ARGV: Mutex<(Vec<CString>, Vec<usize>)> = Mutex::new((Vec::new(), Vec::new()));

pub(super) fn errno_text(e: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // NUL-terminated string for any errno value.
    let s = unsafe { CStr::from_ptr(sys::rte_strerror(e)) };
    format!("{} (errno {e})", s.to_string_lossy())
}

pub(super) fn rte_errno() -> c_int {
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

/// What one worker needs to drive its queue pair.
#[derive(Clone, Copy)]
pub struct QueueParams {
    pub(super) port: u16,
    pub(super) queue: u16,
    pub(super) pool: *mut sys::rte_mempool,
    pub(super) local: Local,
    pub(super) tx_mode: TxChecksum,
    /// Largest Sluice frame in one reply: MTU and mbuf room.
    pub(super) tx_frame_max: usize,
    pub(super) neighbours_max: usize,
    pub(super) rx_realign: bool,
    pub(super) idle_sleep: Duration,
    pub(super) hugepages: bool,
    /// The port's IPv4 MTU.
    pub(super) mtu: u16,
    /// The port takes multi-segment mbufs on transmit.
    pub(super) chains: bool,
    /// MTU of the fragments of a large answer: the port's, or (fragments
    /// made by copy, one mbuf each) what fits one mbuf.
    pub(super) tx_frag_mtu: u16,
    /// Receive and transmit slots (None: 0 configured).
    pub(super) rx_slots: Option<Slots>,
    pub(super) tx_slots: Option<Slots>,
    /// The reassembly table (None without receive slots).
    pub(super) frag: Option<FragHandle>,
    pub(super) frag_mbufs_max: u32,
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
    // Drop order (see `Drop`): port stop and close, then the fragment
    // tables (their mbufs go back), the pool check, the pools, the slots
    // (the PMD may free mbufs on a slot until the port is closed), EAL.
    frag_tables: Vec<FragTable>,
    pools: Vec<*mut sys::rte_mempool>,
    slot_regions: Vec<SlotRegion>,
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
            frag_tables: Vec::new(),
            pools: Vec::new(),
            slot_regions: Vec::new(),
            params: Vec::new(),
            pmd_held_at_start: 0,
        };
        // On error `rt` drops here and undoes whatever was done.
        rt.bring_up(workers)?;
        Ok(rt)
    }

    fn bring_up(&mut self, workers: usize) -> Result<(), DpdkError> {
        let d = self.cfg.clone();
        let nq = workers as u16;
        let info = port_info(&d, nq)?;
        let (tx_mode, chains) = self.configure(&d, &info, nq)?;
        let q = QueueLayout::of(&d, chains);
        self.setup_queues(&d, &q, nq, tx_mode)?;
        self.start_port(&d, &q, nq, tx_mode)?;
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
        g.port = Some(d.port);
        g.pools = self.pools.iter().map(|&p| p as usize).collect();
        Ok(())
    }

    /// Configures the port for `nq` queue pairs (RSS over them when more
    /// than one) and picks how TX checksums are made.
    fn configure(
        &mut self,
        d: &DpdkCfg,
        info: &sys::rte_eth_dev_info,
        nq: u16,
    ) -> Result<(TxChecksum, bool), DpdkError> {
        let port = d.port;
        let mut conf = sys::rte_eth_conf::default();
        check_mtu(d, info)?;
        conf.rxmode.mtu = d.mtu as u32;
        // SAFETY: pure functions (macros bindgen cannot evaluate).
        let (scatter, multi_segs) = unsafe {
            (
                sys::sl_rx_offload_scatter(),
                sys::sl_tx_offload_multi_segs(),
            )
        };
        // Frames larger than one mbuf arrive as chains where the port can
        // scatter them (others deliver them whole, or not at all).
        let frame = d.mtu as u32 + net::ETH_HDR_LEN as u32 + 4;
        if frame > d.mbuf_data_bytes && info.rx_offload_capa & scatter != 0 {
            conf.rxmode.offloads |= scatter;
        }
        let advertised = info.tx_offload_capa & multi_segs != 0;
        if advertised && d.tx_multi_seg != TxMultiSegCfg::Off {
            conf.txmode.offloads |= multi_segs;
        }
        let chains = match d.tx_multi_seg {
            TxMultiSegCfg::Auto => advertised,
            TxMultiSegCfg::On => true,
            TxMultiSegCfg::Off => false,
        };
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
        Ok((tx_mode, chains))
    }

    /// One mempool and one RX/TX queue pair per worker.
    fn setup_queues(
        &mut self,
        d: &DpdkCfg,
        q: &QueueLayout,
        nq: u16,
        tx_mode: TxChecksum,
    ) -> Result<(), DpdkError> {
        let port = d.port;
        let data_room = (sys::RTE_PKTMBUF_HEADROOM + d.mbuf_data_bytes) as u16;
        for i in 0..nq {
            let name = CString::new(format!("sl_p{port}_q{i}"))
                .map_err(|_| DpdkError::Pool("pool name".into()))?;
            // SAFETY: EAL is up; name is a valid C string copied by DPDK.
            let pool = unsafe {
                sys::rte_pktmbuf_pool_create(
                    name.as_ptr(),
                    d.mbufs_per_worker,
                    d.mbuf_cache,
                    0,
                    data_room,
                    q.socket,
                )
            };
            if pool.is_null() {
                let e = rte_errno();
                return Err(DpdkError::Pool(format!(
                    "{} mbufs of {data_room} B for worker {i}: {}; raise dpdk.memory_mb or reserve more hugepages (scripts/hugepages.sh)",
                    d.mbufs_per_worker,
                    errno_text(e)
                )));
            }
            self.pools.push(pool);
            // SAFETY: configured port, queue < nq, default rxconf (NULL),
            // pool outlives the queue (freed after close in Drop).
            let r = unsafe {
                sys::rte_eth_rx_queue_setup(port, i, q.rx_desc, q.socket as u32, ptr::null(), pool)
            };
            if r != 0 {
                return Err(DpdkError::Port(format!("rx queue {i}: {}", errno_text(-r))));
            }
            // SAFETY: as above, default txconf.
            let r = unsafe {
                sys::rte_eth_tx_queue_setup(port, i, q.tx_desc, q.socket as u32, ptr::null())
            };
            if r != 0 {
                return Err(DpdkError::Port(format!("tx queue {i}: {}", errno_text(-r))));
            }
            let (rx_slots, tx_slots, frag) = self.large_frames(d, q.socket, i)?;
            self.params.push(QueueParams {
                port,
                queue: i,
                pool,
                local: q.local,
                tx_mode,
                tx_frame_max: q.tx_frame_max,
                neighbours_max: d.neighbours_max as usize,
                rx_realign: d.rx_realign,
                idle_sleep: Duration::from_micros(d.idle_sleep_us as u64),
                hugepages: d.hugepages,
                mtu: q.mtu,
                chains: q.chains,
                tx_frag_mtu: q.tx_frag_mtu,
                rx_slots,
                tx_slots,
                frag,
                frag_mbufs_max: d.frag_mbufs_max,
            });
        }
        Ok(())
    }

    /// Slots and the reassembly table of queue `i`, reserved at start.
    fn large_frames(&mut self, d: &DpdkCfg, socket: i32, i: u16) -> Result<LargeFrames, DpdkError> {
        let port = d.port;
        let mut handle = |r: Option<SlotRegion>| {
            r.map(|r| {
                let h = r.handle();
                self.slot_regions.push(r);
                h
            })
        };
        let rx = handle(SlotRegion::create(
            &format!("sl_rxs_p{port}_q{i}"),
            d.rx_slots,
            socket,
        )?);
        let tx = handle(SlotRegion::create(
            &format!("sl_txs_p{port}_q{i}"),
            d.tx_slots,
            socket,
        )?);
        let frag = if rx.is_some() {
            let t = FragTable::create(d.frag_entries_max, d.frag_timeout_ms, socket)?;
            let h = t.handle();
            self.frag_tables.push(t);
            Some(h)
        } else {
            None
        };
        Ok((rx, tx, frag))
    }

    /// Starts the port and waits (bounded) for its link.
    fn start_port(
        &mut self,
        d: &DpdkCfg,
        q: &QueueLayout,
        nq: u16,
        tx_mode: TxChecksum,
    ) -> Result<(), DpdkError> {
        let port = d.port;
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
                // SAFETY: pure functions of the linked library.
                let (max_frag, built) =
                    unsafe { (sys::sl_ip_frag_max_frag(), sys::sl_ip_frag_built()) };
                log::info!(
                    "dpdk: port {port} up at {speed} Mbit/s, mac {}, {nq} queue pair(s), mtu {}, {:?} checksums, ip {}:{}, {} transmit, {} rx / {} tx slots, reassembly of up to {max_frag} fragments ({})",
                    mac_text(&q.local.mac),
                    q.mtu,
                    tx_mode,
                    q.local.ip,
                    q.local.udp_port,
                    if q.chains {
                        "multi-segment"
                    } else {
                        "single-segment"
                    },
                    d.rx_slots,
                    d.tx_slots,
                    if built == 1 {
                        "librte_ip_frag built from DPDK's sources"
                    } else {
                        "system librte_ip_frag"
                    }
                );
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(DpdkError::Link(format!(
                    "port {port} link still down after {} ms",
                    d.link_wait_ms
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
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

/// The port's device info, checked: it exists and has a queue pair per worker.
fn port_info(d: &DpdkCfg, nq: u16) -> Result<sys::rte_eth_dev_info, DpdkError> {
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
    if info.max_rx_queues < nq || info.max_tx_queues < nq {
        return Err(DpdkError::Port(format!(
            "port {port} has {} RX / {} TX queues but engine.workers asks for {nq} (for AF_XDP set queue_count= in the vdev)",
            info.max_rx_queues, info.max_tx_queues
        )));
    }
    Ok(info)
}

/// A queue's receive slots, transmit slots and reassembly table.
type LargeFrames = (Option<Slots>, Option<Slots>, Option<FragHandle>);

/// `dpdk.mtu` against what the port can take, as ethdev will check it, with
/// a message that says what the port's limits are.
fn check_mtu(d: &DpdkCfg, info: &sys::rte_eth_dev_info) -> Result<(), DpdkError> {
    let max_mtu = info.max_mtu as u32;
    let max_frame = info.max_rx_pktlen;
    // ethdev's own rule for the Ethernet overhead of a port.
    let overhead = if info.max_mtu != u16::MAX && max_frame > max_mtu {
        max_frame - max_mtu
    } else {
        net::ETH_HDR_LEN as u32 + 4
    };
    let mtu = d.mtu as u32;
    if mtu > max_mtu || mtu + overhead > max_frame || mtu < info.min_mtu as u32 {
        let driver = if info.driver_name.is_null() {
            "?".to_string()
        } else {
            // SAFETY: a NUL-terminated string owned by the PMD.
            unsafe { CStr::from_ptr(info.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(DpdkError::Port(format!(
            "dpdk.mtu = {mtu}: port {} ({driver}) takes an MTU of {}..={} (frames of at most {max_frame} bytes)",
            d.port,
            info.min_mtu,
            max_mtu.min(max_frame.saturating_sub(overhead)),
        )));
    }
    Ok(())
}

/// What every queue of a configured port shares: ring sizes, NUMA socket,
/// MTU and the addresses it answers on.
struct QueueLayout {
    rx_desc: u16,
    tx_desc: u16,
    socket: i32,
    mtu: u16,
    /// Largest Sluice frame in one reply: MTU and mbuf room.
    tx_frame_max: usize,
    /// The port takes chains on transmit.
    chains: bool,
    /// MTU of a large answer's fragments.
    tx_frag_mtu: u16,
    local: Local,
}

impl QueueLayout {
    /// Reads them from a configured port.
    fn of(d: &DpdkCfg, chains: bool) -> QueueLayout {
        let port = d.port;
        let (mut rx_desc, mut tx_desc) = (d.rx_desc, d.tx_desc);
        // SAFETY: valid port, out-parameters are plain u16s.
        unsafe { sys::rte_eth_dev_adjust_nb_rx_tx_desc(port, &mut rx_desc, &mut tx_desc) };
        let mut mtu: u16 = 1500;
        // SAFETY: valid port and out-parameter.
        unsafe { sys::rte_eth_dev_get_mtu(port, &mut mtu) };
        // SAFETY: valid port.
        let socket = unsafe { sys::rte_eth_dev_socket_id(port) };
        let tx_frame_max = (mtu as usize - IP_UDP_LEN)
            .min(d.mbuf_data_bytes as usize + 64 - HDRS_LEN - FRAME_ALIGN);
        let mut mac = sys::rte_ether_addr::default();
        // SAFETY: valid port and out-parameter.
        unsafe { sys::rte_eth_macaddr_get(port, &mut mac) };
        // Fragments made by copy fill one mbuf each: the library wants the
        // fragment's payload in the mbuf's tailroom.
        let copy_mtu =
            (d.mbuf_data_bytes as usize + net::IPV4_HDR_LEN).min(u16::MAX as usize) as u16;
        QueueLayout {
            rx_desc,
            tx_desc,
            socket,
            mtu,
            tx_frame_max,
            chains,
            tx_frag_mtu: if chains { mtu } else { mtu.min(copy_mtu) },
            local: Local {
                mac: mac.addr_bytes,
                ip: d.ipv4(),
                udp_port: d.udp_port,
            },
        }
    }
}

fn mac_text(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn eal_init(d: &DpdkCfg) -> Result<(), DpdkError> {
    eal_init_argv(d.eal_argv())
}

/// `rte_eal_init` with `args` (argv[0] included), once per process.
pub(super) fn eal_init_argv(args: Vec<String>) -> Result<(), DpdkError> {
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
    log::info!("dpdk: rte_eal_init {}", args.join(" "));
    // EAL may keep pointers into argv (it is parsed once per process), so the
    // strings and the array live in a static for the rest of the process: a
    // few hundred bytes, once (and reachable, so leak checkers agree).
    let cstrs: Vec<CString> = args
        .iter()
        .map(|a| CString::new(a.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|_| DpdkError::Eal("argument contains NUL".into()))?;
    let (argv_addr, argc) = {
        let mut keep = EAL_ARGV.lock().unwrap_or_else(|p| p.into_inner());
        let ptrs: Vec<usize> = cstrs.iter().map(|c| c.as_ptr() as usize).collect();
        keep.0 = cstrs;
        keep.1 = ptrs;
        (keep.1.as_mut_ptr() as usize, keep.1.len() as c_int)
    };
    // EAL pins the thread that initializes it to the main lcore; use a
    // short-lived thread so the caller (a control or Go runtime thread)
    // keeps its affinity.
    let res = std::thread::Builder::new()
        .name("sluice-eal".into())
        .spawn(move || {
            // SAFETY: argv points to argc pointers (usize-sized, in
            // EAL_ARGV) to NUL-terminated strings that live for the rest of
            // the process; EAL may permute the array, which is writable.
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
        let counters: Vec<String> = t.named().iter().map(|(k, v)| format!("{k}={v}")).collect();
        log::info!(
            "dpdk: totals {} dropped={} [{}] port_ipackets={} port_opackets={} port_imissed={} port_rx_nombuf={}",
            counters.join(" "),
            t.dropped(),
            drops.join(" "),
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
        // Fragments of incomplete datagrams go back before the count.
        self.frag_tables.clear();
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
        // No mbuf refers to a slot any more (the port is closed).
        self.slot_regions.clear();
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
