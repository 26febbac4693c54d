//! The DPDK end-to-end tests' topology and helpers: the veth pair of
//! `scripts/netns-setup.sh`, kernel UDP clients in the peer namespace, one
//! child process per scenario (one EAL per process).
#![allow(dead_code)]
// setns through libc to bind sockets in the peer namespace.
#![allow(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::{Duration, Instant};

use sluice_engine::Config;
use sluice_engine::transport::dpdk;

pub const CHILD_ENV: &str = "SLUICE_DPDK_CHILD";

pub fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

pub fn enabled() -> bool {
    if std::env::var("SLUICE_DPDK_E2E").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("SKIPPED: DPDK end-to-end tests need root and a veth pair: run scripts/dpdk-e2e.sh");
    false
}

/// Runs `scenario` in a fresh child process (one EAL per process).
pub fn isolated(name: &str, scenario: fn()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        scenario();
        return;
    }
    if !enabled() {
        return;
    }
    let huge_before = hugepages_free();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .output()
        .expect("spawn test child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("---- child {name} ----\n{text}");
    assert!(
        out.status.success(),
        "scenario {name} failed in its child process"
    );
    assert!(text.contains("1 passed"), "scenario {name} did not run");
    // Whatever the PMD kept, nothing outlives the process. (On a shared
    // host other processes may take or return pages meanwhile: more free
    // pages than before is fine, fewer is not.)
    let after = wait_hugepages(huge_before);
    assert!(
        after >= huge_before,
        "hugepages left behind by {name}: {after} free, {huge_before} before"
    );
}

/// Hugepage memory mapped by this process (kB), from /proc/self/status:
/// exact, whatever other processes do with the host's pool.
pub fn own_hugetlb_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("HugetlbPages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("HugetlbPages in /proc/self/status")
}

/// HugePages_Free once it is back to `want`, or after 30 s (the kernel
/// unpins an AF_XDP umem in deferred work after the socket closes, which a
/// loaded host may run seconds later).
pub fn wait_hugepages(want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    while hugepages_free() < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    hugepages_free()
}

pub fn hugepages_free() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A UDP socket bound inside the peer namespace: `setns` applies to the
/// calling thread only, so a helper thread enters the namespace, binds and
/// hands the socket back.
pub fn peer_socket() -> UdpSocket {
    let ns = env("SLUICE_NETNS", "sluice-dpdk");
    let ip = env("SLUICE_PEER_IP", "10.99.0.2");
    std::thread::spawn(move || {
        let f = std::fs::File::open(format!("/run/netns/{ns}")).expect("peer namespace exists");
        // SAFETY: setns with a valid namespace fd, affecting this thread only.
        let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
        let s = UdpSocket::bind(format!("{ip}:0")).expect("bind in peer namespace");
        s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        s
    })
    .join()
    .unwrap()
}

pub fn config(vdev: &str, prefix: &str) -> Config {
    config_for("dpdk", vdev, prefix)
}

/// The test config with either transport (io_uring on loopback gives the
/// reference answers).
pub fn config_for(transport: &str, vdev: &str, prefix: &str) -> Config {
    Config::parse(&config_text(transport, vdev, prefix), std::env::temp_dir())
        .expect("dpdk test config parses")
}

/// Whether the scenarios run without hugepages (`scripts/dpdk-e2e.sh` found
/// too few free): pools in normal pages, hugepage accounting not checked.
pub fn no_huge() -> bool {
    std::env::var("SLUICE_DPDK_NO_HUGE").as_deref() == Ok("1")
}

pub fn config_text(transport: &str, vdev: &str, prefix: &str) -> String {
    let root = super::repo_root();
    let text = format!(
        r#"
[engine]
workers = [1]
transport = "{transport}"
poll = "busy"
rx_burst_max = 32

[io_uring]
listen = "127.0.0.1:0"
rx_buffers = 64
tx_buffers = 64

[onnxruntime]
library = "{lib}"

[dpdk]
main_core = 0
memory_mb = 128
file_prefix = "{prefix}"
vdevs = ["{vdev}"]
ip = "{ip}"
udp_port = 7070
mbufs_per_worker = 4095
rx_desc = 1024
tx_desc = 1024
link_wait_ms = 5000

[host]
labels = {{ "hardware.gpu.memory" = "hbm2" }}

[[shards]]
name = "hbm2"
labels = {{ "hardware.gpu.memory" = "hbm2" }}
max_concurrency = 32
queue_depth = 64

[[routes]]
name = "echo"
model = "echo"
shard = "hbm2"

[[routes]]
name = "null"
model = "null"
shard = "hbm2"

[[routes]]
name = "mlp"
model = "mlp"
shard = "hbm2"

[[models]]
name = "mlp"
version = "1.0.0"
kind = "onnx"
path = "{root}/models/mlp.onnx"

[[models]]
name = "echo"
version = "1"
kind = "echo"

[[models]]
name = "null"
version = "1"
kind = "null"

[[tenants]]
name = "acme"
id = 7
key = "hex:{key}"
models = ["*"]
adapters = ["*"]
"#,
        ip = env("SLUICE_APP_IP", "10.99.0.1"),
        key = super::KEY_HEX,
        lib = super::ort_lib().display(),
        root = root.display(),
    );
    if no_huge() {
        return text.replace("memory_mb = 128", "memory_mb = 128\nhugepages = false");
    }
    text
}

/// Mbufs a PMD may still hold for completed sends.
pub const TX_RECLAIM_SLACK: u64 = 64;

/// Stats once `ok` holds (counters are published per burst), or after 2 s.
pub fn wait_stats(ok: impl Fn(&dpdk::QueueStats) -> bool) -> dpdk::QueueStats {
    wait_stats_for(Duration::from_secs(2), ok)
}

/// Stats once `ok` holds, or after `limit`.
pub fn wait_stats_for(limit: Duration, ok: impl Fn(&dpdk::QueueStats) -> bool) -> dpdk::QueueStats {
    let deadline = Instant::now() + limit;
    loop {
        let s = dpdk::stats().total();
        if ok(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn roundtrip(s: &UdpSocket, to: SocketAddr, frame: &[u8]) -> Vec<u8> {
    s.send_to(frame, to).unwrap();
    let mut buf = vec![0u8; 70_000];
    let (n, from) = s.recv_from(&mut buf).unwrap_or_else(|e| {
        let st = dpdk::stats();
        panic!(
            "no answer over DPDK ({e}) to {} bytes: {:?}, port {:?}",
            frame.len(),
            st.total(),
            st.port
        )
    });
    assert_eq!(from, to, "answer comes from the appliance address");
    buf.truncate(n);
    buf
}

/// The f32 values of an answer's first tensor.
pub fn tensor_f32(bytes: &[u8]) -> Vec<f32> {
    let f = sluice_wire::Frame::new_checked(bytes).expect("answer parses");
    let t = f.tensors().next().expect("a tensor");
    f.tensor_data(&t)
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// An error answer's code and message.
pub fn error_of(bytes: &[u8]) -> (Option<sluice_wire::ErrorCode>, String) {
    let f = sluice_wire::Frame::new_checked(bytes).expect("answer parses");
    let b = f.error_body().expect("an error body");
    (b.code(), b.message.to_string())
}

/// Runs `ip netns exec <peer namespace> ARGS...`; panics unless it succeeds.
pub fn in_peer(args: &[&str]) {
    let ns = env("SLUICE_NETNS", "sluice-dpdk");
    let out = Command::new("ip")
        .args(["netns", "exec", &ns])
        .args(args)
        .output()
        .expect("run ip netns exec");
    assert!(
        out.status.success(),
        "{args:?} in {ns}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Forgets the peer's neighbour entries, so it resolves the appliance
/// through its ARP reply afresh.
pub fn flush_peer_neighbours() {
    in_peer(&["ip", "neigh", "flush", "all"]);
}

/// Sets the MTU of both veth ends; restores 1500 on drop.
pub struct VethMtu;

impl VethMtu {
    pub fn set(mtu: u32) -> VethMtu {
        set_mtu(mtu);
        VethMtu
    }
}

fn set_mtu(mtu: u32) {
    let m = mtu.to_string();
    let if0 = env("SLUICE_IF0", "sldpdk0");
    let if1 = env("SLUICE_IF1", "sldpdk1");
    let ok = Command::new("ip")
        .args(["link", "set", &if0, "mtu", &m])
        .status()
        .expect("run ip")
        .success();
    assert!(ok, "mtu {mtu} on {if0}");
    in_peer(&["ip", "link", "set", &if1, "mtu", &m]);
}

impl Drop for VethMtu {
    fn drop(&mut self) {
        set_mtu(1500);
    }
}
