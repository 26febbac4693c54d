//! The HTTP client: one per thread (each front-door thread runs its own
//! runtime, and a pooled connection's task lives on the runtime that made
//! it), HTTP/1.1 with keep-alive, `TCP_NODELAY`, a connect timeout.
//! Connections are reused across requests to the same endpoint.

use std::cell::RefCell;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// The client type.
pub type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Idle connections kept per endpoint, per thread.
pub const IDLE_PER_ENDPOINT_MAX: usize = 64;
/// How long an idle connection is kept.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

thread_local! {
    /// One client per connect timeout in use (pools may differ).
    static CLIENTS: RefCell<Vec<(u32, HttpClient)>> = const { RefCell::new(Vec::new()) };
}

/// This thread's client for `connect_timeout_ms` (made on first use).
pub fn client(connect_timeout_ms: u32) -> HttpClient {
    CLIENTS.with(|c| {
        let mut c = c.borrow_mut();
        if let Some((_, cl)) = c.iter().find(|(ms, _)| *ms == connect_timeout_ms) {
            return cl.clone();
        }
        let cl = make(connect_timeout_ms);
        c.push((connect_timeout_ms, cl.clone()));
        cl
    })
}

fn make(connect_timeout_ms: u32) -> HttpClient {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    conn.set_connect_timeout(Some(Duration::from_millis(u64::from(connect_timeout_ms))));
    conn.set_keepalive(Some(Duration::from_secs(30)));
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(IDLE_PER_ENDPOINT_MAX)
        .pool_idle_timeout(IDLE_TIMEOUT)
        .build(conn)
}
