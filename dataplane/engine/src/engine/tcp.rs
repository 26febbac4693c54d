//! The TCP side of the io_uring transport as the control side sees it:
//! its address, its connections and their totals, closing one.

use std::net::SocketAddr;

use super::*;
use crate::transport::ConnStatus;
use crate::transport::tcp::TcpTotals;

impl Engine {
    /// The TCP data-plane address (io_uring with `tcp_listen`), once started.
    pub fn tcp_local_addr(&self) -> Option<SocketAddr> {
        self.tcp.first().and_then(|t| t.listen())
    }

    /// Open TCP connections of every worker, with their counters.
    pub fn tcp_connections(&self) -> Vec<ConnStatus> {
        let mut v: Vec<ConnStatus> = self.tcp.iter().flat_map(|t| t.connections()).collect();
        v.sort_by_key(|c| (c.worker, c.id & 0xffff));
        v
    }

    /// Per-worker TCP totals since start (closed connections included).
    pub fn tcp_connection_totals(&self) -> Vec<TcpTotals> {
        self.tcp.iter().map(|t| t.totals()).collect()
    }

    /// Closes TCP connection `id` (from [`Engine::tcp_connections`]): its
    /// worker shuts it at the next burst; answers still queued for it are
    /// dropped and the client sees the connection end.
    pub fn close_tcp_connection(&self, id: u64) -> Result<(), EngineError> {
        if !self.running {
            return Err(EngineError::NotRunning);
        }
        if self.tcp.iter().any(|t| t.request_close(id)) {
            Ok(())
        } else {
            Err(EngineError::NotFound(format!("no tcp connection {id}")))
        }
    }
}
