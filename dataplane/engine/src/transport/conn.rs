//! One connection in a listing, for every connected transport (TCP on
//! io_uring, RDMA): one shape, so `/v1/connections`, the C ABI and
//! `sluicectl connections` list one type whatever carried the frames.

use std::net::SocketAddr;

use serde::Serialize;

/// One connection in a listing.
#[derive(Debug, Clone, Serialize)]
pub struct ConnStatus {
    /// Id for closing it (unique within its transport).
    pub id: u64,
    /// "tcp" or "rdma": lists from several transports stay self-describing.
    pub transport: &'static str,
    /// "client" (accepted here) or "peer" (opened by this appliance to a
    /// peer appliance it forwards to).
    pub role: &'static str,
    /// The listen address (this appliance's side) of the transport.
    pub listen: SocketAddr,
    /// Worker serving it.
    pub worker: usize,
    /// Remote address.
    pub peer: Option<SocketAddr>,
    /// RDMA device; empty for TCP.
    pub device: String,
    /// "accepting" (RDMA), "connecting" (TCP peer), "up", "half_closed"
    /// (TCP: the client shut its side; accepted requests are still
    /// answered) or "closing".
    pub state: &'static str,
    /// Frames received.
    pub rx_frames: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames received that a datagram could not carry (TCP), or received
    /// by RDMA WRITE into a slot (RDMA).
    pub rx_large: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Frames sent that a datagram could not carry (TCP), or by RDMA WRITE
    /// into a reply slot (RDMA).
    pub tx_large: u64,
    /// Failed or refused operations.
    pub errors: u64,
}
