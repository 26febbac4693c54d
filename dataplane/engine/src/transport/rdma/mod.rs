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
        if self.buffer_size % sluice_wire::TENSOR_ALIGN as u32 != 0 {
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
        if self.slot_size % SLOT_ALIGN_BYTES != 0 {
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
mod tests {
    use super::proto::*;
    use super::*;

    fn cfg_with(rdma: &str) -> Result<RdmaCfg, ConfigError> {
        let text = format!("[engine]\nworkers = [0]\ntransport = \"rdma\"\n[rdma]\n{rdma}\n");
        let cfg = Config::parse(&text, std::path::PathBuf::new())?;
        RdmaCfg::from_config(&cfg)
    }

    #[test]
    fn defaults_fill_in_and_pool_is_2mib_granular() {
        let c = cfg_with("listen = \"10.0.2.15:7471\"").unwrap();
        assert_eq!(c.rx_buffers, 256);
        assert_eq!(c.slot_size, 18 << 20);
        assert_eq!(c.pool_bytes() % (2 << 20), 0);
        // 32 MiB small + 16*2 slots + 2 large tx, 18 MiB each.
        assert_eq!(c.pool_bytes(), (32 << 20) + 34 * (18 << 20));
    }

    #[test]
    fn bad_tables_name_the_key() {
        let e = cfg_with("listen = \"10.0.2.15:7471\"\nbogus = 1").unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        let e = cfg_with("listen = \"10.0.2.15:7471\"\nslot_size = 3145728").unwrap_err();
        assert_eq!(e.key, "rdma.slot_size");
        let e = cfg_with("listen = \"10.0.2.15:7471\"\nrx_buffers = 0").unwrap_err();
        assert_eq!(e.key, "rdma.rx_buffers");
        let e = cfg_with("listen = \"10.0.2.15:7471\"\nbuffer_size = 5000").unwrap_err();
        assert_eq!(e.key, "rdma.buffer_size");
        let e = cfg_with("listen = \"0.0.0.0:7471\"").unwrap_err();
        assert_eq!(e.key, "rdma.listen");
        let e = cfg_with("listen = \"nope\"").unwrap_err();
        assert_eq!(e.key, "rdma.listen");
        let e = cfg_with("listen = \"10.0.2.15:1\"\nconnections_max = 1024\nslots_per_connection = 64\nslot_size = 268435456")
            .unwrap_err();
        assert_eq!(e.key, "rdma");
        let cfg = Config::parse(
            "[engine]\nworkers = [0]\ntransport = \"rdma\"\n",
            std::path::PathBuf::new(),
        )
        .unwrap();
        assert_eq!(RdmaCfg::from_config(&cfg).unwrap_err().key, "rdma");
    }

    #[test]
    fn hellos_round_trip_and_reject_foreign_bytes() {
        let s = ServerHello {
            conn_id: 0x1122_3344_5566_7788,
            slot_base: 0x7f00_0020_0000,
            slot_rkey: 0xabcd,
            slot_count: 2,
            slot_size: 18 << 20,
            buffer_size: 65536,
            credits: 64,
        };
        assert_eq!(ServerHello::decode(&s.encode()), Some(s));
        let c = ClientHello {
            reply_base: 1 << 40,
            reply_rkey: 7,
            reply_count: 2,
            reply_size: 18 << 20,
            buffer_size: 65536,
        };
        assert_eq!(ClientHello::decode(&c.encode()), Some(c));
        assert!(ServerHello::decode(&c.encode()).is_none());
        assert!(ClientHello::decode(&[0u8; 10]).is_none());
        let mut other = c.encode();
        other[4] = 9;
        assert!(ClientHello::decode(&other).is_none());
    }

    /// Start-up on a host without an RDMA device fails with a clear error
    /// and leaves nothing running; with a device (the Soft-RoCE guest), a
    /// listen address on no RDMA device is refused just as clearly.
    #[test]
    fn engine_start_says_why_rdma_is_unavailable() {
        let text = "[engine]\nworkers = [0]\ntransport = \"rdma\"\n[rdma]\nlisten = \"127.0.0.1:7471\"\n\
                    slot_size = 2097152\nconnections_max = 1\n";
        let cfg = Config::parse(text, std::path::PathBuf::new()).unwrap();
        let opts = crate::EngineOptions {
            no_pin: true,
            ..Default::default()
        };
        let mut e = crate::Engine::new(cfg, opts).unwrap();
        let err = e.start().unwrap_err().to_string();
        match device_check() {
            Err(_) => {
                assert!(err.contains("no RDMA device found"), "{err}");
                assert!(
                    err.contains("rdma link add"),
                    "the error says how to get a device: {err}"
                );
            }
            Ok(_) => assert!(err.contains("rdma.listen 127.0.0.1:7471"), "{err}"),
        }
        assert!(!e.is_running());
        assert!(connections().is_empty());
        assert!(connection_totals().is_empty());
    }

    /// With a device: a request for a shard only a UDP peer carries cannot
    /// be forwarded by an rdma appliance; the client gets a retryable
    /// `peer_down` at once, never silence.
    #[test]
    fn requests_for_peer_shards_fail_with_peer_down() {
        let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
            return; // needs the Soft-RoCE guest (scripts/rdma-e2e.sh)
        };
        let text = format!(
            "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\nforward_timeout_ms = 50\n\
             [rdma]\nlisten = \"{ip}:7474\"\nconnections_max = 1\nslots_per_connection = 0\nslot_size = 2097152\n\
             large_tx_buffers = 0\nrx_buffers = 16\ntx_buffers = 16\n\
             [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
             [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
             [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n\
             [[peers]]\nname = \"p\"\naddress = \"127.0.0.1:9\"\nlabels = {{ gpu = \"x\" }}\n"
        );
        let cfg = Config::parse(&text, std::path::PathBuf::new()).unwrap();
        let mut e = crate::Engine::new(
            cfg,
            crate::EngineOptions {
                no_pin: true,
                ..Default::default()
            },
        )
        .unwrap();
        e.start().unwrap();
        let opts = ClientOpts {
            slots: 0,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        };
        let mut c = RdmaClient::connect(format!("{ip}:7474").parse().unwrap(), opts).unwrap();
        for id in [41u64, 42] {
            c.send(echo_request(id)).unwrap();
            let (rid, code) = c
                .recv(std::time::Duration::from_secs(30), |b, _| {
                    let f = sluice_wire::Frame::new_checked(b).unwrap();
                    (f.request_id(), f.error_body().and_then(|e| e.code()))
                })
                .unwrap();
            assert_eq!(rid, id);
            let code = code.expect("an error frame");
            assert_eq!(code, sluice_wire::ErrorCode::PeerDown);
            assert!(code.retryable());
        }
        drop(c);
        e.stop(std::time::Duration::from_millis(10));
    }

    fn echo_request(id: u64) -> impl FnOnce(&mut [u8]) -> usize {
        move |b: &mut [u8]| {
            let dims = [4u64];
            let data = [id as u8, 2, 3, 4];
            let t = [sluice_wire::TensorRepr {
                name: "x",
                dtype: sluice_wire::DType::U8,
                dims: &dims,
                data: Some(&data),
            }];
            sluice_wire::FrameRepr {
                request_id: id,
                model: "echo",
                model_version: "1",
                tensors: &t,
                ..sluice_wire::FrameRepr::default()
            }
            .emit(b)
            .map(|l| l.frame_len)
            .unwrap_or(usize::MAX)
        }
    }

    /// (request id, error code or None, first tensor's bytes or the error
    /// message) of an answer.
    fn answer(c: &mut RdmaClient) -> (u64, Option<sluice_wire::ErrorCode>, Vec<u8>) {
        c.recv(std::time::Duration::from_secs(30), |b, _| {
            let f = sluice_wire::Frame::new_checked(b).unwrap();
            match f.error_body() {
                Some(e) => (f.request_id(), e.code(), e.message.as_bytes().to_vec()),
                None => {
                    let data = f
                        .tensors()
                        .next()
                        .map(|t| f.tensor_data(&t).to_vec())
                        .unwrap_or_default();
                    (f.request_id(), None, data)
                }
            }
        })
        .unwrap()
    }

    /// With a device: appliance A lacks the shard's labels and forwards to
    /// B over an RC connection it opened; the client gets B's answer
    /// through A. A lists the connection as a peer connection with
    /// counters; closing it fails nothing that is not in flight and A
    /// reconnects; with B gone, requests get a retryable `peer_down` at
    /// once.
    #[test]
    fn forwards_to_an_rdma_peer_and_relays_its_answer() {
        let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
            return; // needs the Soft-RoCE guest (scripts/rdma-e2e.sh)
        };
        let common = "[rdma]\nconnections_max = 2\nslots_per_connection = 0\nslot_size = 2097152\n\
                      large_tx_buffers = 0\nrx_buffers = 16\ntx_buffers = 16\n";
        let b_text = format!(
            "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\n\
             [host]\nlabels = {{ gpu = \"x\" }}\n{common}listen = \"{ip}:7476\"\n\
             [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
             [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
             [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n"
        );
        let a_text = format!(
            "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\nforward_timeout_ms = 60000\n\
             {common}listen = \"{ip}:7475\"\n\
             [[shards]]\nname = \"far\"\nlabels = {{ gpu = \"x\" }}\n\
             [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"far\"\n\
             [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n\
             [[peers]]\nname = \"b\"\naddress = \"{ip}:7476\"\ntransport = \"rdma\"\nlabels = {{ gpu = \"x\" }}\n"
        );
        let start = |text: &str| {
            let cfg = Config::parse(text, std::path::PathBuf::new()).unwrap();
            let mut e = crate::Engine::new(
                cfg,
                crate::EngineOptions {
                    no_pin: true,
                    ..Default::default()
                },
            )
            .unwrap();
            e.start().unwrap();
            e
        };
        let b_addr: SocketAddr = format!("{ip}:7476").parse().unwrap();
        let mut b = start(&b_text);
        let mut a = start(&a_text);
        let peer_up = |since: Option<u64>| {
            let t = std::time::Instant::now();
            loop {
                let up = connections().into_iter().find(|s| {
                    s.role == "peer"
                        && s.state == "up"
                        && s.peer == Some(b_addr)
                        && Some(s.id) != since
                });
                if up.is_some() || t.elapsed() > std::time::Duration::from_secs(30) {
                    return up;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        };
        let first = peer_up(None).expect("A connects to B");
        let opts = ClientOpts {
            slots: 0,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        };
        let mut c = RdmaClient::connect(format!("{ip}:7475").parse().unwrap(), opts).unwrap();
        for id in [7u64, 8, 9] {
            c.send(echo_request(id)).unwrap();
            let (rid, code, data) = answer(&mut c);
            assert_eq!((rid, code), (id, None), "B's answer, relayed by A");
            assert_eq!(data, [id as u8, 2, 3, 4], "the echo model's output");
        }
        let listed = connections();
        let p = listed.iter().find(|s| s.id == first.id).expect("listed");
        assert_eq!((p.role, p.transport, p.worker), ("peer", "rdma", 0));
        assert!(p.tx_frames >= 3 && p.rx_frames >= 3, "{p:?}");
        // B lists A's connection as one of its clients.
        assert!(
            listed
                .iter()
                .any(|s| s.role == "client" && s.listen == b_addr && s.rx_frames >= 3),
            "{listed:?}"
        );
        // Closed from the control plane: A reconnects by itself.
        close_connection(first.id).unwrap();
        let second = peer_up(Some(first.id)).expect("A reconnects to B");
        assert_ne!(second.id, first.id);
        c.send(echo_request(10)).unwrap();
        assert_eq!(answer(&mut c).1, None, "served over the new connection");
        // B stops: A's connection is lost, requests fail at once.
        b.stop(std::time::Duration::from_millis(10));
        drop(b);
        let t = std::time::Instant::now();
        while connections()
            .iter()
            .any(|s| s.role == "peer" && s.state == "up")
            && t.elapsed() < std::time::Duration::from_secs(30)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // forward_timeout_ms is 60 s and `answer` waits 30 s: the answer
        // comes from the lost connection, not from a timeout.
        c.send(echo_request(11)).unwrap();
        let (rid, code, message) = answer(&mut c);
        assert_eq!(rid, 11);
        let code = code.expect("an error frame");
        assert_eq!(code, sluice_wire::ErrorCode::PeerDown);
        assert!(code.retryable());
        let message = String::from_utf8_lossy(&message).into_owned();
        assert!(message.contains("no connection to the peer"), "{message}");
        drop(c);
        a.stop(std::time::Duration::from_millis(10));
    }

    #[test]
    fn client_without_device_says_so() {
        if device_check().is_ok() {
            // The guest run covers connecting for real.
            return;
        }
        let err = RdmaClient::connect("127.0.0.1:7471".parse().unwrap(), ClientOpts::default())
            .err()
            .unwrap();
        assert!(matches!(err, ClientError::NoDevice(_)), "{err}");
        assert!(!err.retryable());
        assert!(err.to_string().contains("no RDMA device found"), "{err}");
    }

    #[test]
    fn only_transient_client_errors_are_retryable() {
        assert!(ClientError::ConnectionLost { outstanding: 3 }.retryable());
        assert!(ClientError::Timeout.retryable());
        assert!(!ClientError::TooLarge { len: 2, max: 1 }.retryable());
        assert!(!ClientError::Refused("x".into()).retryable());
        assert!(
            ClientError::ConnectionLost { outstanding: 3 }
                .to_string()
                .contains("3 request(s) in flight failed")
        );
    }

    /// With a device (the Soft-RoCE guest sets SLUICE_RDMA_TEST_IP): a real
    /// appliance in this process, a real client; the connection is listed
    /// with counters, closed from the control side, and the client's
    /// request in flight fails with a retryable connection loss.
    #[test]
    fn connections_are_listed_counted_and_closed() {
        let Ok(ip) = std::env::var("SLUICE_RDMA_TEST_IP") else {
            // No device here: the start-up error is what there is to test.
            assert!(
                device_check().is_err()
                    || RdmaClient::connect("127.0.0.1:1".parse().unwrap(), ClientOpts::default())
                        .is_err()
            );
            return;
        };
        let text = format!(
            "[engine]\nworkers = [0]\ntransport = \"rdma\"\npoll = \"adaptive\"\n\
             [rdma]\nlisten = \"{ip}:7472\"\nconnections_max = 2\nslots_per_connection = 1\nslot_size = 2097152\n\
             large_tx_buffers = 1\nrx_buffers = 32\ntx_buffers = 32\n\
             [[shards]]\nname = \"s\"\nmax_concurrency = 4\nqueue_depth = 16\n\
             [[routes]]\nname = \"echo\"\nmodel = \"echo\"\nshard = \"s\"\n\
             [[models]]\nname = \"echo\"\nversion = \"1\"\nkind = \"echo\"\n"
        );
        let cfg = Config::parse(&text, std::path::PathBuf::new()).unwrap();
        let mut e = crate::Engine::new(
            cfg,
            crate::EngineOptions {
                no_pin: true,
                ..Default::default()
            },
        )
        .unwrap();
        e.start().unwrap();
        let server: SocketAddr = format!("{ip}:7472").parse().unwrap();
        let opts = ClientOpts {
            slots: 1,
            slot_size: 2 << 20,
            connect_timeout_ms: 30_000,
            ..ClientOpts::default()
        };
        let mut c = RdmaClient::connect(server, opts).unwrap();
        let request = |buf: &mut [u8], id: u64| {
            let dims = [8u64];
            let data = [7u8; 8];
            let t = [sluice_wire::TensorRepr {
                name: "x",
                dtype: sluice_wire::DType::U8,
                dims: &dims,
                data: Some(&data),
            }];
            let repr = sluice_wire::FrameRepr {
                request_id: id,
                model: "echo",
                model_version: "1",
                tensors: &t,
                ..sluice_wire::FrameRepr::default()
            };
            repr.emit(buf).map(|l| l.frame_len).unwrap_or(usize::MAX)
        };
        c.send(|b| request(b, 1)).unwrap();
        let kind = c
            .recv(std::time::Duration::from_secs(30), |b, _| {
                sluice_wire::Frame::new_checked(b).map(|f| f.kind())
            })
            .unwrap();
        assert_eq!(kind, Ok(sluice_wire::Kind::Response));
        let conn_id = c.server().conn_id;
        let list = connections();
        let mine = list
            .iter()
            .find(|s| s.id == conn_id)
            .expect("the connection is listed");
        assert_eq!(mine.state, "up");
        assert_eq!(mine.device, "rxe0");
        assert!(mine.rx_frames >= 1 && mine.tx_frames >= 1, "{mine:?}");
        assert!(mine.rx_bytes > 0 && mine.tx_bytes > 0, "{mine:?}");
        assert!(matches!(
            close_connection(u64::MAX),
            Err(RdmaError::UnknownConnection(_))
        ));
        // A request in flight when the control plane closes the connection.
        c.send(|b| request(b, 2)).ok();
        close_connection(conn_id).unwrap();
        let mut lost = None;
        for _ in 0..4 {
            match c.recv(std::time::Duration::from_secs(10), |_, _| ()) {
                Ok(()) => continue,
                Err(err) => {
                    lost = Some(err);
                    break;
                }
            }
        }
        let err = lost.expect("the close reached the client");
        assert!(matches!(err, ClientError::ConnectionLost { .. }), "{err}");
        assert!(err.retryable());
        let t = std::time::Instant::now();
        while connections().iter().any(|s| s.id == conn_id)
            && t.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(
            !connections().iter().any(|s| s.id == conn_id),
            "closed connections leave the list"
        );
        // Their counts stay in the worker's totals: counters only grow.
        let listen: SocketAddr = format!("{ip}:7472").parse().unwrap();
        let t = connection_totals()
            .into_iter()
            .find(|t| t.listen == listen && t.worker == 0)
            .expect("worker 0 has totals");
        assert_eq!((t.accepted, t.closed, t.open), (1, 1, 0), "{t:?}");
        assert!(
            t.rx_frames >= mine.rx_frames && t.tx_bytes >= mine.tx_bytes,
            "{t:?}"
        );
        // The slot is free again: a new client connects.
        let c2 = RdmaClient::connect(server, opts).unwrap();
        assert_ne!(c2.server().conn_id, conn_id);
        drop(c2);
        drop(c);
        e.stop(std::time::Duration::from_millis(10));
    }
}
