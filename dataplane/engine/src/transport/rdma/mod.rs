//! RDMA verbs transport (feature `rdma`): reliable-connected queue pairs set
//! up through rdma_cm.
//!
//! - Small frames travel by SEND into receive buffers each worker posts on
//!   its own shared receive queue (SRQ).
//! - Large frames travel by one-sided RDMA WRITE WITH IMM into request slots
//!   the appliance grants each connection at accept time (address, rkey,
//!   count and size in the accept's private data). The immediate value names
//!   the slot; the worker parses the frame where it landed and ONNX Runtime
//!   reads the tensors there. Slots are 2 MiB aligned and 2 MiB multiples.
//! - Replies that fit the client's receive buffers go back by SEND; larger
//!   ones by RDMA WRITE WITH IMM into the reply slot of the same index that
//!   the client granted in its connect private data.
//! - Each worker owns a completion queue that it polls; connection
//!   management (listen, accept, close, list) runs on one control thread
//!   per process, which hands connections to workers through lock-free
//!   queues read at burst boundaries.
//!
//! `docs/rdma.md` describes deployment, the wire protocol and benchmarks.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::config::{Config, ConfigError};

pub mod client;
mod server;
mod verbs;

pub use client::{ClientError, ClientOpts, RdmaClient};
pub use server::{
    ConnStatus, ConnTotals, RdmaError, RdmaTransport, close_connection, connection_totals,
    connections,
};

/// Limits of the `[rdma]` table.
pub mod limits {
    /// Most receive or transmit buffers per worker.
    pub const BUFFER_COUNT_MAX: u32 = 16384;
    /// Smallest small-frame buffer, bytes.
    pub const BUFFER_SIZE_MIN: u32 = 4096;
    /// Largest small-frame buffer, bytes.
    pub const BUFFER_SIZE_MAX: u32 = 1 << 20;
    /// Most connections per worker.
    pub const CONNECTIONS_MAX: u32 = 1024;
    /// Most request slots granted per connection.
    pub const SLOTS_PER_CONNECTION_MAX: u32 = 64;
    /// Slot sizes are multiples of this (RDMA registration granularity).
    pub const SLOT_ALIGN_BYTES: u32 = 2 << 20;
    /// Largest slot: the largest frame the wire allows.
    pub const SLOT_SIZE_MAX: u32 = sluice_wire::limits::FRAME_LEN_MAX as u32;
    /// Most large transmit buffers per worker.
    pub const LARGE_TX_BUFFERS_MAX: u32 = 64;
    /// Most memory one worker's pools may take, bytes.
    pub const POOL_BYTES_MAX: u64 = 64 << 30;
    /// Longest listen backlog.
    pub const BACKLOG_MAX: u32 = 4096;
}

fn d_rx() -> u32 {
    256
}
fn d_tx() -> u32 {
    256
}
fn d_buf() -> u32 {
    65536
}
fn d_conns() -> u32 {
    16
}
fn d_slots() -> u32 {
    2
}
fn d_slot_size() -> u32 {
    18 << 20
}
fn d_large_tx() -> u32 {
    2
}
fn d_backlog() -> u32 {
    64
}

/// The `[rdma]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RdmaCfg {
    /// IP:port to listen on; the IP must belong to an RDMA device's netdev
    /// (that picks the device).
    pub listen: String,
    /// Small-frame receive buffers per worker, posted on its SRQ.
    #[serde(default = "d_rx")]
    pub rx_buffers: u32,
    /// Small transmit buffers per worker.
    #[serde(default = "d_tx")]
    pub tx_buffers: u32,
    /// Size of every small buffer, bytes: frames up to this go by SEND.
    #[serde(default = "d_buf")]
    pub buffer_size: u32,
    /// Connections one worker serves at once.
    #[serde(default = "d_conns")]
    pub connections_max: u32,
    /// Request slots granted to each connection for RDMA WRITE (0: none).
    #[serde(default = "d_slots")]
    pub slots_per_connection: u32,
    /// Size of a request slot and of a large transmit buffer, bytes.
    #[serde(default = "d_slot_size")]
    pub slot_size: u32,
    /// Transmit buffers of `slot_size` per worker, for large replies.
    #[serde(default = "d_large_tx")]
    pub large_tx_buffers: u32,
    /// Connect requests waiting for accept.
    #[serde(default = "d_backlog")]
    pub backlog: u32,
}

impl RdmaCfg {
    /// Parses and checks the `[rdma]` table of a config.
    pub fn from_config(cfg: &Config) -> Result<RdmaCfg, ConfigError> {
        let t = cfg.rdma.as_ref().ok_or_else(|| {
            ConfigError::at(
                "rdma",
                "transport \"rdma\" needs an [rdma] table with `listen`",
            )
        })?;
        let c: RdmaCfg = toml::Value::Table(t.clone())
            .try_into()
            .map_err(|e: toml::de::Error| ConfigError::at("rdma", e.message().to_string()))?;
        c.check()?;
        Ok(c)
    }

    /// The listen address.
    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        let a: SocketAddr = self
            .listen
            .parse()
            .map_err(|_| ConfigError::at("rdma.listen", "not an IP:port address"))?;
        if a.ip().is_unspecified() {
            return Err(ConfigError::at(
                "rdma.listen",
                "give the IP of the RDMA device's netdev (a wildcard address does not pick a device)",
            ));
        }
        Ok(a)
    }

    fn check(&self) -> Result<(), ConfigError> {
        use limits::*;
        self.listen_addr()?;
        let range = |key: &str, v: u32, lo: u32, hi: u32| {
            if v < lo || v > hi {
                Err(ConfigError::at(
                    format!("rdma.{key}"),
                    format!("{v} is out of range {lo}..={hi}"),
                ))
            } else {
                Ok(())
            }
        };
        range("rx_buffers", self.rx_buffers, 1, BUFFER_COUNT_MAX)?;
        range("tx_buffers", self.tx_buffers, 1, BUFFER_COUNT_MAX)?;
        range(
            "buffer_size",
            self.buffer_size,
            BUFFER_SIZE_MIN,
            BUFFER_SIZE_MAX,
        )?;
        if !self
            .buffer_size
            .is_multiple_of(sluice_wire::TENSOR_ALIGN as u32)
        {
            return Err(ConfigError::at(
                "rdma.buffer_size",
                "must be a multiple of 64 (tensor alignment)",
            ));
        }
        range("connections_max", self.connections_max, 1, CONNECTIONS_MAX)?;
        range(
            "slots_per_connection",
            self.slots_per_connection,
            0,
            SLOTS_PER_CONNECTION_MAX,
        )?;
        range("slot_size", self.slot_size, SLOT_ALIGN_BYTES, SLOT_SIZE_MAX)?;
        if !self.slot_size.is_multiple_of(SLOT_ALIGN_BYTES) {
            return Err(ConfigError::at(
                "rdma.slot_size",
                "must be a multiple of 2 MiB (2097152)",
            ));
        }
        range(
            "large_tx_buffers",
            self.large_tx_buffers,
            0,
            LARGE_TX_BUFFERS_MAX,
        )?;
        range("backlog", self.backlog, 1, BACKLOG_MAX)?;
        if self.pool_bytes() > POOL_BYTES_MAX {
            return Err(ConfigError::at(
                "rdma",
                format!(
                    "pools need {} bytes per worker, more than {POOL_BYTES_MAX}",
                    self.pool_bytes()
                ),
            ));
        }
        Ok(())
    }

    /// Bytes of the small buffers (receive then transmit).
    fn small_bytes(&self) -> u64 {
        (self.rx_buffers as u64 + self.tx_buffers as u64) * self.buffer_size as u64
    }

    /// Request slots of one worker.
    fn slot_count(&self) -> u64 {
        self.connections_max as u64 * self.slots_per_connection as u64
    }

    /// One worker's pool: small buffers, rounded up to 2 MiB, then request
    /// slots, then large transmit buffers (both 2 MiB aligned).
    pub fn pool_bytes(&self) -> u64 {
        let a = limits::SLOT_ALIGN_BYTES as u64;
        self.small_bytes().div_ceil(a) * a
            + (self.slot_count() + self.large_tx_buffers as u64) * self.slot_size as u64
    }
}

/// Private data formats exchanged in rdma_cm connect and accept. Both fit
/// the RC limits (56 bytes for connect, 196 for accept). Little-endian.
pub mod proto {
    /// Protocol version both hellos carry.
    pub const VERSION: u16 = 1;
    /// Set in the immediate of a WRITE WITH IMM; the low 16 bits name the slot.
    pub const IMM_SLOT: u32 = 0x8000_0000;
    const SERVER_MAGIC: [u8; 4] = *b"SLRS";
    const CLIENT_MAGIC: [u8; 4] = *b"SLRC";

    /// What the appliance grants in its accept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ServerHello {
        /// Connection id (for `connections()` and `close_connection`).
        pub conn_id: u64,
        /// Address of request slot 0; slot k is at `slot_base + k * slot_size`.
        pub slot_base: u64,
        /// Remote key covering exactly this connection's slots.
        pub slot_rkey: u32,
        /// Request slots granted.
        pub slot_count: u32,
        /// Bytes per slot.
        pub slot_size: u32,
        /// Largest frame the appliance takes by SEND.
        pub buffer_size: u32,
        /// Requests the client may have outstanding by SEND.
        pub credits: u32,
    }

    /// Length of an encoded [`ServerHello`].
    pub const SERVER_HELLO_LEN: usize = 40;

    impl ServerHello {
        /// Encodes.
        pub fn encode(&self) -> [u8; SERVER_HELLO_LEN] {
            let mut b = [0u8; SERVER_HELLO_LEN];
            b[0..4].copy_from_slice(&SERVER_MAGIC);
            b[4..6].copy_from_slice(&VERSION.to_le_bytes());
            b[8..16].copy_from_slice(&self.conn_id.to_le_bytes());
            b[16..24].copy_from_slice(&self.slot_base.to_le_bytes());
            b[24..28].copy_from_slice(&self.slot_rkey.to_le_bytes());
            b[28..32].copy_from_slice(&self.slot_count.to_le_bytes());
            b[32..36].copy_from_slice(&self.slot_size.to_le_bytes());
            b[36..38]
                .copy_from_slice(&(self.buffer_size >> 6).min(u16::MAX as u32).to_le_bytes()[..2]);
            b[38..40].copy_from_slice(&self.credits.min(u16::MAX as u32).to_le_bytes()[..2]);
            b
        }

        /// Decodes; `None` for a foreign or other-version hello.
        pub fn decode(b: &[u8]) -> Option<ServerHello> {
            if b.len() < SERVER_HELLO_LEN
                || b[0..4] != SERVER_MAGIC
                || u16::from_le_bytes([b[4], b[5]]) != VERSION
            {
                return None;
            }
            let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
            Some(ServerHello {
                conn_id: u64_at(8),
                slot_base: u64_at(16),
                slot_rkey: u32_at(24),
                slot_count: u32_at(28),
                slot_size: u32_at(32),
                buffer_size: (u16::from_le_bytes([b[36], b[37]]) as u32) << 6,
                credits: u16::from_le_bytes([b[38], b[39]]) as u32,
            })
        }
    }

    /// What the client grants in its connect.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ClientHello {
        /// Address of reply slot 0.
        pub reply_base: u64,
        /// Remote key of the reply slots.
        pub reply_rkey: u32,
        /// Reply slots granted (reply slot k answers request slot k).
        pub reply_count: u32,
        /// Bytes per reply slot.
        pub reply_size: u32,
        /// Largest reply the client takes by SEND.
        pub buffer_size: u32,
    }

    /// Length of an encoded [`ClientHello`].
    pub const CLIENT_HELLO_LEN: usize = 32;

    impl ClientHello {
        /// Encodes.
        pub fn encode(&self) -> [u8; CLIENT_HELLO_LEN] {
            let mut b = [0u8; CLIENT_HELLO_LEN];
            b[0..4].copy_from_slice(&CLIENT_MAGIC);
            b[4..6].copy_from_slice(&VERSION.to_le_bytes());
            b[8..16].copy_from_slice(&self.reply_base.to_le_bytes());
            b[16..20].copy_from_slice(&self.reply_rkey.to_le_bytes());
            b[20..24].copy_from_slice(&self.reply_count.to_le_bytes());
            b[24..28].copy_from_slice(&self.reply_size.to_le_bytes());
            b[28..32].copy_from_slice(&self.buffer_size.to_le_bytes());
            b
        }

        /// Decodes; `None` for a foreign or other-version hello.
        pub fn decode(b: &[u8]) -> Option<ClientHello> {
            if b.len() < CLIENT_HELLO_LEN
                || b[0..4] != CLIENT_MAGIC
                || u16::from_le_bytes([b[4], b[5]]) != VERSION
            {
                return None;
            }
            let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
            Some(ClientHello {
                reply_base: u64::from_le_bytes(b[8..16].try_into().unwrap_or([0; 8])),
                reply_rkey: u32_at(16),
                reply_count: u32_at(20),
                reply_size: u32_at(24),
                buffer_size: u32_at(28),
            })
        }
    }
}

/// Whether this host has an RDMA device, and if not, why, in words.
pub fn device_check() -> Result<usize, String> {
    match verbs::device_count() {
        Ok(0) => Err("no RDMA device found: ibv_get_device_list lists none".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!(
            "no RDMA device found: ibv_get_device_list failed ({e})"
        )),
    }
}

/// Advice printed with a missing device.
pub const NO_DEVICE_HINT: &str = "load the NIC's RDMA driver (mlx5_ib for ConnectX) or create a Soft-RoCE \
     device (`modprobe rdma_rxe; rdma link add rxe0 type rxe netdev eth0`); `ibv_devices` must list it";

#[cfg(test)]
mod tests;
