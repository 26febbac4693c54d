//! `[io_uring]`: the UDP socket and the TCP listener beside it.

use serde::{Deserialize, Serialize};

/// `[io_uring]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UringCfg {
    /// Address every worker binds with SO_REUSEPORT.
    pub listen: String,
    /// Submission queue entries.
    pub ring_entries: u32,
    /// Receive buffers per worker (a power of two).
    pub rx_buffers: u32,
    /// Transmit buffers per worker.
    pub tx_buffers: u32,
    /// Bytes per buffer.
    pub buffer_size: u32,
    /// TCP address every worker listens on with SO_REUSEPORT, beside the
    /// UDP socket; "" serves no TCP.
    pub tcp_listen: String,
    /// Connections per worker; more are accepted and closed at once.
    pub tcp_connections_max: u32,
    /// A connection that receives no byte for this long while the
    /// appliance waits for one is closed: between frames with nothing
    /// owed to it (idle), or in the middle of a frame (stalled).
    pub tcp_idle_timeout_ms: u32,
    /// A frame must arrive whole within this long of its first byte,
    /// however steadily it trickles in (time spent waiting for a slot
    /// included); otherwise its connection is closed.
    pub tcp_frame_timeout_ms: u32,
    /// An answer the client does not take (zero window) for this long
    /// closes the connection, freeing its slots.
    pub tcp_send_timeout_ms: u32,
    /// Connections from one source address per worker; more are closed at
    /// accept. Capped by `tcp_connections_max`.
    pub tcp_connections_per_source_max: u32,
    /// Share of each large slot class (every class but the smallest) one
    /// source address may hold at once, in percent (at least one pair).
    pub tcp_large_slots_per_source_pct: u32,
    /// Share of each large slot class one tenant's verified frames may
    /// hold at once, in percent (at least one pair).
    pub tcp_large_slots_per_tenant_pct: u32,
    /// With `auth.mode = "tenants"`: share of the smallest class kept for
    /// frames whose header tag verified, in percent (larger classes are
    /// only ever taken by verified frames).
    pub tcp_verified_reserve_pct: u32,
    /// Largest frame accepted over TCP (`header_len + payload_len`); a
    /// larger declared length gets `frame_too_large` and the connection is
    /// closed. 0: the largest slot.
    pub tcp_frame_len_max: u32,
    /// Requests in flight on one connection (received, not yet answered);
    /// at the limit the connection is not read.
    pub tcp_pipeline_max: u32,
    /// Slot classes, smallest first: a frame lands whole in a slot of the
    /// smallest class that holds it, and its answer is written into a
    /// reply slot of the same size.
    pub tcp_slots: Vec<TcpSlotCfg>,
    /// Zero-copy sends (`SEND_ZC`) for large answers: "auto" tries them and
    /// falls back per connection when the kernel reports it copied (always
    /// on loopback), "on" keeps them, "off" never uses them.
    pub tcp_send_zc: ZcMode,
}

impl Default for UringCfg {
    fn default() -> Self {
        UringCfg {
            listen: "127.0.0.1:7070".into(),
            ring_entries: 512,
            rx_buffers: 256,
            tx_buffers: 256,
            buffer_size: 65536,
            tcp_listen: String::new(),
            tcp_connections_max: 256,
            tcp_idle_timeout_ms: 60_000,
            tcp_frame_timeout_ms: 30_000,
            tcp_send_timeout_ms: 30_000,
            tcp_connections_per_source_max: 64,
            tcp_large_slots_per_source_pct: 50,
            tcp_large_slots_per_tenant_pct: 100,
            tcp_verified_reserve_pct: 25,
            tcp_frame_len_max: 0,
            tcp_pipeline_max: 64,
            tcp_slots: vec![
                TcpSlotCfg {
                    size: 64 << 10,
                    count: 128,
                },
                TcpSlotCfg {
                    size: 2 << 20,
                    count: 16,
                },
                // A 16 MiB tensor and its header: 16 MiB + 64 KiB.
                TcpSlotCfg {
                    size: (16 << 20) + (64 << 10),
                    count: 2,
                },
            ],
            tcp_send_zc: ZcMode::Auto,
        }
    }
}

impl UringCfg {
    /// Whether TCP is served.
    pub fn tcp_enabled(&self) -> bool {
        !self.tcp_listen.is_empty()
    }

    /// The largest frame accepted over TCP.
    pub fn tcp_frame_len_limit(&self) -> u32 {
        match self.tcp_frame_len_max {
            0 => self.tcp_slots.iter().map(|c| c.size).max().unwrap_or(0),
            n => n,
        }
    }

    /// Bytes of TCP slot memory per worker (receive and reply slots).
    pub fn tcp_pool_bytes(&self) -> u64 {
        self.tcp_slots
            .iter()
            .map(|c| 2 * u64::from(c.size) * u64::from(c.count))
            .sum()
    }
}

/// One class of TCP slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TcpSlotCfg {
    /// Bytes per slot (a multiple of 4096).
    pub size: u32,
    /// Slots of this size per worker (each with a reply slot).
    pub count: u32,
}

/// Zero-copy send policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ZcMode {
    /// Try, and fall back per connection when the kernel copies.
    #[default]
    Auto,
    /// Always, for answers of at least 64 KiB.
    On,
    /// Never.
    Off,
}
