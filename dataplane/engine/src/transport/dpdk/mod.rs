//! DPDK transport (cargo feature `dpdk`): poll-mode drivers over physical
//! NICs (vfio-pci) or virtual devices (AF_XDP, AF_PACKET) on any interface.
//!
//! One process-wide [`DpdkRuntime`] initializes EAL from `[dpdk]`, creates
//! one mbuf pool per worker in hugepages, configures the port with one
//! RX/TX queue pair per worker (RSS when there are several) and starts it.
//! Each worker then builds its own [`DpdkTransport`] on its pinned thread.
//! The runtime's `Drop` stops and closes the port, checks that every mbuf
//! came back, frees the pools and runs `rte_eal_cleanup`, which returns the
//! hugepages. DPDK allows EAL to be initialized once per process, so an
//! engine using DPDK can start once per process.
//!
//! `net` is the safe packet layer (Ethernet, ARP, IPv4, UDP); `port` holds
//! all the unsafe DPDK calls. See `docs/dpdk.md`.

use std::net::Ipv4Addr;

use serde::Deserialize;

use crate::config::{Config, ConfigError};

mod frag;
#[doc(hidden)]
pub mod fuzzing;
mod large;
pub mod net;
mod runtime;
mod slots;
mod stats;
mod transport;

// dpdk-sys builds empty on hosts without DPDK; say so plainly.
const _: () = assert!(
    dpdk_sys::DPDK_FOUND,
    "the `dpdk` feature needs DPDK: apt-get install libdpdk-dev pkg-config, then rebuild"
);

pub use runtime::{DpdkError, DpdkRuntime, StopReport, last_stop_report};
pub use stats::{DpdkStats, QueueStats, stats};
pub use transport::DpdkTransport;

/// Largest mbuf pool per worker.
pub const MBUFS_PER_WORKER_MAX: u32 = 1 << 20;
/// Largest per-lcore mempool cache (DPDK's RTE_MEMPOOL_CACHE_MAX_SIZE).
pub const MBUF_CACHE_MAX: u32 = 512;
/// Largest descriptor ring.
pub const DESC_MAX: u16 = 16_384;
/// Largest mbuf data room after the headroom (fits DPDK's u16 buf_len).
pub const MBUF_DATA_BYTES_MAX: u32 = 65_535 - 128;
/// Smallest mbuf data room: one full 1500-byte Ethernet frame.
pub const MBUF_DATA_BYTES_MIN: u32 = 1536;

/// Smallest MTU: IPv4's minimum reassembly size (RFC 791).
pub const MTU_MIN: u16 = 576;
/// Largest MTU: jumbo frames as most NICs take them.
pub const MTU_MAX: u16 = 9216;
/// Largest slot count per worker (each slot is [`slots::SLOT_BYTES`]).
pub const SLOTS_MAX: u32 = 4096;
/// Largest reassembly table, datagrams in reassembly per worker.
pub const FRAG_ENTRIES_MAX: u32 = 65_536;
/// Longest reassembly timeout.
pub const FRAG_TIMEOUT_MS_MAX: u32 = 30_000;
/// EAL's own memory besides pools and slots, MiB (an estimate for the
/// `memory_mb` check; EAL says so itself when it is short).
const EAL_OVERHEAD_MB: u64 = 32;

/// How replies get their checksums.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxChecksumCfg {
    /// Offload when the port can, else software.
    #[default]
    Auto,
    /// Always in software.
    Software,
    /// Require the port's offload; refuse to start without it.
    Offload,
}

/// Whether large answers may leave as multi-segment mbufs (chains).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TxMultiSegCfg {
    /// When the port advertises multi-segment transmit.
    #[default]
    Auto,
    /// Always: for PMDs that send chains without advertising it (net_pcap
    /// linearizes them itself).
    On,
    /// Never: large answers leave as fragments of one mbuf each (copied).
    Off,
}

/// `[dpdk]`, parsed from the opaque table in [`Config`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DpdkCfg {
    /// Core of EAL's main lcore. It only runs EAL set-up: the workers are
    /// the engine's own pinned threads, registered with EAL.
    pub main_core: usize,
    /// Pools in hugepages (false: `--no-huge`, for hosts without them).
    pub hugepages: bool,
    /// Most memory EAL may take, MiB (`--socket-limit`; `-m` without hugepages).
    pub memory_mb: u32,
    /// `--file-prefix`: unique per DPDK process on the host.
    pub file_prefix: String,
    /// Virtual devices (`--vdev`), e.g. `net_af_xdp0,iface=veth0`.
    pub vdevs: Vec<String>,
    /// PCI addresses to use (`-a`); empty means `--no-pci`.
    pub pci: Vec<String>,
    /// Which of the probed ports carries Sluice.
    pub port: u16,
    /// The appliance's IPv4 address (answered in ARP).
    pub ip: String,
    /// Sluice UDP port.
    pub udp_port: u16,
    /// Mbufs in each worker's pool.
    pub mbufs_per_worker: u32,
    /// Per-lcore mempool cache.
    pub mbuf_cache: u32,
    /// Data room per mbuf after DPDK's 128-byte headroom, bytes.
    pub mbuf_data_bytes: u32,
    /// RX descriptors per queue.
    pub rx_desc: u16,
    /// TX descriptors per queue.
    pub tx_desc: u16,
    /// Checksum policy for replies.
    pub tx_checksum: TxChecksumCfg,
    /// Whether answers larger than one mbuf leave as chains (and zero-copy
    /// fragments) or as fragments copied into one mbuf each.
    pub tx_multi_seg: TxMultiSegCfg,
    /// Move a received frame that is not 64-byte aligned to an aligned spot
    /// in its own mbuf (one memmove of the frame), so tensors can be read in
    /// place. Off: misaligned tensors are rejected with `bad_tensor`.
    pub rx_realign: bool,
    /// Neighbour (IPv4 to MAC) cache entries per worker.
    pub neighbours_max: u32,
    /// IPv4 MTU of the port (set on it at start): replies larger than
    /// `mtu - 28` bytes leave as IPv4 fragments.
    pub mtu: u16,
    /// Receive slots per worker: 64-byte aligned buffers of 64 KiB where a
    /// frame larger than one mbuf (scattered jumbo frame, reassembled
    /// datagram) is made contiguous, once. 0: such frames are answered
    /// frame_too_large and fragments are not reassembled.
    pub rx_slots: u32,
    /// Transmit slots per worker: 64 KiB buffers an answer larger than one
    /// mbuf is written into in place, then sent as a chain or as fragments.
    /// 0: answers must fit one mbuf (else response_too_large).
    pub tx_slots: u32,
    /// Datagrams in reassembly at once per worker (librte_ip_frag table).
    pub frag_entries_max: u32,
    /// Mbufs the reassembly table may hold per worker; fragments beyond
    /// are dropped (counted `frag_table_full`), so fragments can never
    /// drain the pool the receive ring needs.
    pub frag_mbufs_max: u32,
    /// A datagram whose fragments have not all arrived within this time is
    /// dropped and its mbufs freed, ms.
    pub frag_timeout_ms: u32,
    /// How long start waits for the link to come up, ms.
    pub link_wait_ms: u32,
    /// Longest sleep of an idle worker in adaptive poll mode, us.
    pub idle_sleep_us: u32,
    /// EAL log level (`--log-level`).
    pub log_level: String,
    /// Extra EAL arguments, appended verbatim.
    pub eal_args: Vec<String>,
}

impl Default for DpdkCfg {
    fn default() -> Self {
        DpdkCfg {
            main_core: 0,
            hugepages: true,
            memory_mb: 256,
            file_prefix: "sluice".into(),
            vdevs: Vec::new(),
            pci: Vec::new(),
            port: 0,
            ip: "10.99.0.1".into(),
            udp_port: 7070,
            mbufs_per_worker: 8191,
            mbuf_cache: 256,
            mbuf_data_bytes: 2048,
            rx_desc: 1024,
            tx_desc: 1024,
            tx_checksum: TxChecksumCfg::Auto,
            tx_multi_seg: TxMultiSegCfg::Auto,
            rx_realign: true,
            neighbours_max: 1024,
            mtu: 1500,
            rx_slots: 64,
            tx_slots: 64,
            frag_entries_max: 256,
            frag_mbufs_max: 1024,
            frag_timeout_ms: 500,
            link_wait_ms: 5000,
            idle_sleep_us: 20,
            log_level: "notice".into(),
            eal_args: Vec::new(),
        }
    }
}

fn range<T: PartialOrd + std::fmt::Display + Copy>(
    key: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError::at(
            format!("dpdk.{key}"),
            format!("{v} is out of range {lo}..={hi}"),
        ));
    }
    Ok(())
}

fn printable(key: &str, s: &str, allow_empty: bool) -> Result<(), ConfigError> {
    if (!allow_empty && s.is_empty()) || s.len() > 256 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(ConfigError::at(
            format!("dpdk.{key}"),
            "1 to 256 printable ASCII characters, no spaces",
        ));
    }
    Ok(())
}

impl DpdkCfg {
    /// Parses and checks `[dpdk]` of a config whose transport is DPDK.
    pub fn from_config(cfg: &Config) -> Result<DpdkCfg, ConfigError> {
        let table = cfg.dpdk.clone().ok_or_else(|| {
            ConfigError::at(
                "dpdk",
                "engine.transport is \"dpdk\" but there is no [dpdk] table",
            )
        })?;
        let d: DpdkCfg = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| {
                ConfigError::at("dpdk", e.message().trim().to_string())
            })?;
        d.validate(cfg)?;
        Ok(d)
    }

    /// Range and consistency checks.
    pub fn validate(&self, cfg: &Config) -> Result<(), ConfigError> {
        let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
        if self.main_core >= ncpu {
            return Err(ConfigError::at(
                "dpdk.main_core",
                format!(
                    "core {} does not exist (this host has {ncpu})",
                    self.main_core
                ),
            ));
        }
        range("memory_mb", self.memory_mb, 16, 1 << 20)?;
        printable("file_prefix", &self.file_prefix, false)?;
        if self.vdevs.is_empty() && self.pci.is_empty() {
            return Err(ConfigError::at(
                "dpdk.vdevs",
                "no device: list vdevs or pci addresses",
            ));
        }
        for (i, v) in self.vdevs.iter().enumerate() {
            printable(&format!("vdevs[{i}]"), v, false)?;
        }
        for (i, p) in self.pci.iter().enumerate() {
            printable(&format!("pci[{i}]"), p, false)?;
        }
        range("port", self.port, 0, 31)?;
        let ip: Ipv4Addr = self
            .ip
            .parse()
            .map_err(|_| ConfigError::at("dpdk.ip", "not an IPv4 address"))?;
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(ConfigError::at("dpdk.ip", "must be a unicast address"));
        }
        range("udp_port", self.udp_port, 1, u16::MAX)?;
        range("mbuf_cache", self.mbuf_cache, 0, MBUF_CACHE_MAX)?;
        range("rx_desc", self.rx_desc, 64, DESC_MAX)?;
        range("tx_desc", self.tx_desc, 64, DESC_MAX)?;
        range(
            "mbuf_data_bytes",
            self.mbuf_data_bytes,
            MBUF_DATA_BYTES_MIN,
            MBUF_DATA_BYTES_MAX,
        )?;
        // Descriptors, a burst in flight each way, and the caches must fit.
        let burst = cfg.engine.rx_burst_max;
        let need = self.rx_desc as u32 + self.tx_desc as u32 + 2 * burst + self.mbuf_cache * 3 / 2;
        range("mbufs_per_worker", self.mbufs_per_worker, need, MBUFS_PER_WORKER_MAX).map_err(|_| {
            ConfigError::at(
                "dpdk.mbufs_per_worker",
                format!(
                    "{} is too few: rx_desc + tx_desc + 2 * engine.rx_burst_max + 1.5 * mbuf_cache = {need} (max {MBUFS_PER_WORKER_MAX})",
                    self.mbufs_per_worker
                ),
            )
        })?;
        range("neighbours_max", self.neighbours_max, 8, 1 << 20)?;
        range("mtu", self.mtu, MTU_MIN, MTU_MAX)?;
        range("rx_slots", self.rx_slots, 0, SLOTS_MAX)?;
        range("tx_slots", self.tx_slots, 0, SLOTS_MAX)?;
        range(
            "frag_entries_max",
            self.frag_entries_max,
            16,
            FRAG_ENTRIES_MAX,
        )?;
        range(
            "frag_timeout_ms",
            self.frag_timeout_ms,
            1,
            FRAG_TIMEOUT_MS_MAX,
        )?;
        let frag_room = self.mbufs_per_worker.saturating_sub(need);
        if self.frag_mbufs_max < 64 || self.frag_mbufs_max > frag_room {
            return Err(ConfigError::at(
                "dpdk.frag_mbufs_max",
                format!(
                    "{} is out of range 64..={frag_room}: the pool keeps rx_desc + tx_desc + 2 * engine.rx_burst_max + 1.5 * mbuf_cache = {need} of its {} mbufs for the rings",
                    self.frag_mbufs_max, self.mbufs_per_worker
                ),
            ));
        }
        let need_mb = self.memory_estimate_mb(cfg.engine.workers.len() as u64);
        if need_mb > self.memory_mb as u64 {
            return Err(ConfigError::at(
                "dpdk.memory_mb",
                format!(
                    "{} MiB is too little: {} worker(s) need about {need_mb} MiB (mbuf pools, rx_slots and tx_slots of 64 KiB, reassembly tables, EAL)",
                    self.memory_mb,
                    cfg.engine.workers.len()
                ),
            ));
        }
        range("link_wait_ms", self.link_wait_ms, 0, 60_000)?;
        range("idle_sleep_us", self.idle_sleep_us, 0, 10_000)?;
        if !matches!(
            self.log_level.as_str(),
            "emerg" | "alert" | "crit" | "error" | "warning" | "notice" | "info" | "debug"
        ) {
            return Err(ConfigError::at(
                "dpdk.log_level",
                "one of emerg, alert, crit, error, warning, notice, info, debug",
            ));
        }
        for (i, a) in self.eal_args.iter().enumerate() {
            printable(&format!("eal_args[{i}]"), a, false)?;
        }
        Ok(())
    }

    /// Hugepage memory EAL needs for `workers`, MiB (an estimate).
    pub fn memory_estimate_mb(&self, workers: u64) -> u64 {
        // An mbuf: its data room, DPDK's headroom, the struct and the
        // mempool's object header.
        let mbuf = self.mbuf_data_bytes as u64 + 128 + 256;
        let slots = (self.rx_slots + self.tx_slots) as u64 * slots::SLOT_BYTES as u64;
        // A table entry holds 64 fragment records; the table has twice the entries.
        let table = self.frag_entries_max as u64 * 2 * 1152;
        let per_worker = self.mbufs_per_worker as u64 * mbuf + slots + table;
        (workers * per_worker).div_ceil(1 << 20) + EAL_OVERHEAD_MB
    }

    /// The appliance address (validated).
    pub fn ipv4(&self) -> Ipv4Addr {
        self.ip.parse().unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// EAL's argument vector (argv[0] included).
    pub fn eal_argv(&self) -> Vec<String> {
        let mut a = vec![
            "sluice".to_string(),
            "-l".into(),
            self.main_core.to_string(),
            "--file-prefix".into(),
            self.file_prefix.clone(),
            // No shared runtime files; hugepage files are unlinked once
            // mapped, so nothing outlives the process and unmapping a page
            // returns it (`--in-memory` keeps fds open until exit).
            "--no-shconf".into(),
            "--log-level".into(),
            self.log_level.clone(),
            "--no-telemetry".into(),
        ];
        if self.hugepages {
            // Hugepages are mapped on demand and returned when freed (no
            // `-m` preallocation, which EAL cleanup would not give back).
            // (EAL refuses --huge-unlink together with --no-huge.)
            a.push("--huge-unlink".into());
            a.push("--socket-limit".into());
            a.push(self.memory_mb.to_string());
        } else {
            a.push("--no-huge".into());
            a.push("-m".into());
            a.push(self.memory_mb.to_string());
        }
        if self.pci.is_empty() {
            // Without it EAL probes every PCI device of the host.
            a.push("--no-pci".into());
        }
        for p in &self.pci {
            a.push("-a".into());
            a.push(p.clone());
        }
        for v in &self.vdevs {
            a.push("--vdev".into());
            a.push(v.clone());
        }
        a.extend(self.eal_args.iter().cloned());
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_text(dpdk: &str) -> String {
        format!("[engine]\nworkers = [0]\ntransport = \"dpdk\"\n[dpdk]\n{dpdk}\n")
    }

    fn cfg(dpdk: &str) -> Config {
        Config::parse(&config_text(dpdk), std::env::temp_dir()).expect("base config parses")
    }

    /// Parses a whole config (where [dpdk] is checked, with its line) and
    /// its [dpdk] table.
    fn check(dpdk: &str) -> Result<DpdkCfg, ConfigError> {
        Config::parse(&config_text(dpdk), std::env::temp_dir())
            .and_then(|c| DpdkCfg::from_config(&c))
    }

    #[test]
    fn defaults_with_a_vdev_parse_and_make_eal_args() {
        let c = cfg("vdevs = [\"net_af_xdp0,iface=veth0\"]\nfile_prefix = \"t1\"");
        let d = DpdkCfg::from_config(&c).unwrap();
        assert_eq!(d.ipv4(), Ipv4Addr::new(10, 99, 0, 1));
        let argv = d.eal_argv();
        let joined = argv.join(" ");
        assert!(joined.contains("--file-prefix t1"), "{joined}");
        assert!(joined.contains("--no-pci"), "{joined}");
        assert!(
            joined.contains("--vdev net_af_xdp0,iface=veth0"),
            "{joined}"
        );
        assert!(!joined.contains("--no-huge"), "{joined}");
    }

    #[test]
    fn pci_replaces_no_pci_and_no_huge_is_passed() {
        let c = cfg("pci = [\"0000:03:00.0\"]\nhugepages = false");
        let argv = DpdkCfg::from_config(&c).unwrap().eal_argv().join(" ");
        assert!(
            argv.contains("-a 0000:03:00.0")
                && !argv.contains("--no-pci")
                && argv.contains("--no-huge")
                && !argv.contains("--huge-unlink"),
            "{argv}"
        );
    }

    #[test]
    fn bad_values_name_their_key() {
        let cases = [
            ("vdevs = [\"x\"]\nbogus = 1", "dpdk"),
            ("", "dpdk.vdevs"),
            ("vdevs = [\"x\"]\nip = \"10.99.0\"", "dpdk.ip"),
            ("vdevs = [\"x\"]\nip = \"224.0.0.1\"", "dpdk.ip"),
            ("vdevs = [\"x\"]\nrx_desc = 8", "dpdk.rx_desc"),
            (
                "vdevs = [\"x\"]\nmbufs_per_worker = 1000",
                "dpdk.mbufs_per_worker",
            ),
            (
                "vdevs = [\"x\"]\nmbuf_data_bytes = 100",
                "dpdk.mbuf_data_bytes",
            ),
            ("vdevs = [\"x\"]\nmain_core = 4096", "dpdk.main_core"),
            ("vdevs = [\"with space\"]", "dpdk.vdevs[0]"),
            ("vdevs = [\"x\"]\nlog_level = \"loud\"", "dpdk.log_level"),
            ("vdevs = [\"x\"]\nmbuf_cache = 4096", "dpdk.mbuf_cache"),
            ("vdevs = [\"x\"]\nmtu = 100", "dpdk.mtu"),
            ("vdevs = [\"x\"]\nmtu = 65000", "dpdk.mtu"),
            ("vdevs = [\"x\"]\nrx_slots = 100000", "dpdk.rx_slots"),
            ("vdevs = [\"x\"]\ntx_slots = 5000", "dpdk.tx_slots"),
            (
                "vdevs = [\"x\"]\nfrag_entries_max = 1",
                "dpdk.frag_entries_max",
            ),
            (
                "vdevs = [\"x\"]\nfrag_timeout_ms = 0",
                "dpdk.frag_timeout_ms",
            ),
            (
                "vdevs = [\"x\"]\nfrag_mbufs_max = 8000",
                "dpdk.frag_mbufs_max",
            ),
            (
                "vdevs = [\"x\"]\nrx_slots = 4096\ntx_slots = 4096",
                "dpdk.memory_mb",
            ),
        ];
        for (text, key) in cases {
            let e = check(text).expect_err(text);
            assert_eq!(e.key, key, "{text}: {e}");
            // The line of the key (or of [dpdk] for table-wide errors).
            let line = e.line.expect("located");
            let at = config_text(text)
                .lines()
                .nth(line - 1)
                .unwrap_or("")
                .to_string();
            let leaf = key.rsplit('.').next().unwrap_or(key);
            let leaf = leaf.split('[').next().unwrap_or(leaf);
            assert!(
                at.starts_with(leaf) || at == "[dpdk]",
                "{text}: line {line} is {at:?}, key {key}"
            );
        }
    }

    #[test]
    fn shipped_dpdk_config_is_valid() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../cfg/dpdk.toml");
        let c = Config::load(&path).expect("cfg/dpdk.toml loads");
        assert_eq!(c.engine.transport, crate::config::TransportKind::Dpdk);
        let d = DpdkCfg::from_config(&c).expect("[dpdk] validates");
        assert_eq!(d.vdevs, vec!["net_af_xdp0,iface=sldpdk0".to_string()]);
        assert!(d.eal_argv().iter().any(|a| a == "--huge-unlink"));
    }

    #[test]
    fn missing_table_is_an_error() {
        let e = Config::parse(
            "[engine]\nworkers = [0]\ntransport = \"dpdk\"\n",
            std::env::temp_dir(),
        )
        .unwrap_err();
        assert_eq!(e.key, "dpdk");
    }

    #[test]
    fn large_frame_keys_default_and_parse() {
        let d = check("vdevs = [\"x\"]").unwrap();
        assert_eq!((d.mtu, d.rx_slots, d.tx_slots), (1500, 64, 64));
        let d = check("vdevs = [\"x\"]\nmtu = 9000\nrx_slots = 0\nfrag_timeout_ms = 2000\ntx_multi_seg = \"on\"").unwrap();
        assert_eq!((d.mtu, d.rx_slots, d.frag_timeout_ms), (9000, 0, 2000));
        assert_eq!(d.tx_multi_seg, TxMultiSegCfg::On);
        let e = check("vdevs = [\"x\"]\ntx_multi_seg = \"maybe\"").unwrap_err();
        assert_eq!(e.key, "dpdk");
        // The estimate counts every worker's pools and slots.
        assert!(d.memory_estimate_mb(2) > d.memory_estimate_mb(1));
    }
}
