//! Active health checks and model discovery, on a thread of their own
//! (never a worker or front-door thread): every `health_interval_ms`, each
//! endpoint's ready endpoint (`GET /v1/models` for OpenAI servers, which
//! also lists what they serve; `GET /v2/health/ready` for KServe v2). A
//! pool that lists no models takes each endpoint's from the answer.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use sluice_engine::config::BackendProtocol;

use crate::endpoint::Endpoint;
use crate::pool::{Backends, Pool};

/// Largest health or model-list answer read, bytes.
pub const HEALTH_ANSWER_BYTES_MAX: usize = 1 << 20;

/// The running checker; stopped when dropped.
#[derive(Debug)]
pub struct Checker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts checking every endpoint; the first round runs before this
/// returns, so endpoints that are up are usable at once.
pub fn start(b: Arc<Backends>) -> Result<Checker, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let s = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("sluice-backends".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    log::error!("backends: health-check runtime: {e}");
                    return;
                }
            };
            rt.block_on(run(b, s, ready_tx));
        })
        .map_err(|e| format!("backends: health-check thread: {e}"))?;
    // Bounded: a round's checks each end by their pool's connect timeout
    // and a second for the answer.
    let _ = ready_rx.recv_timeout(Duration::from_secs(70));
    Ok(Checker {
        stop,
        thread: Some(thread),
    })
}

async fn run(b: Arc<Backends>, stop: Arc<AtomicBool>, ready: std::sync::mpsc::Sender<()>) {
    let tick_ms = b
        .pools
        .iter()
        .map(|p| p.cfg.health_interval_ms)
        .min()
        .unwrap_or(1000)
        .min(1000);
    let mut next_ms: Vec<u64> = vec![0; b.pools.len()];
    let mut first = true;
    while !stop.load(Ordering::Acquire) {
        let now = b.now_ms();
        // Every due endpoint at once: a dead one costs the round its
        // connect timeout, not each endpoint after it.
        let mut round = tokio::task::JoinSet::new();
        for (i, p) in b.pools.iter().enumerate() {
            if now >= next_ms[i] {
                next_ms[i] = now + u64::from(p.cfg.health_interval_ms);
                for e in p.endpoints().iter() {
                    let b = Arc::clone(&b);
                    let e = Arc::clone(e);
                    round.spawn(async move {
                        check(&b.pools[i], &e).await;
                    });
                }
            }
        }
        while round.join_next().await.is_some() {}
        if first {
            first = false;
            let _ = ready.send(());
        }
        tokio::time::sleep(Duration::from_millis(u64::from(tick_ms))).await;
    }
}

async fn check(p: &Pool, e: &Endpoint) {
    let path = match p.cfg.protocol {
        BackendProtocol::Openai => "/v1/models",
        BackendProtocol::KserveHttp => "/v2/health/ready",
    };
    let answer = get(p, e, path).await;
    // A check that times out while the endpoint serves requests says it
    // is busy (llama.cpp's Python server answers /v1/models only between
    // generations), not that it is gone: its state stays. A refused
    // connection or an error status takes it out at once, and requests
    // that fail eject it (passive checks).
    if matches!(answer, Err(Check::Timeout)) && e.in_flight() > 0 {
        return;
    }
    let answer = answer.ok();
    let ok = answer.is_some();
    if ok != e.healthy() {
        log::info!(
            "backend {} endpoint {}: {}",
            p.cfg.name,
            e.url,
            if ok { "ready" } else { "not ready" }
        );
    }
    e.set_healthy(ok);
    if !ok || !p.cfg.models.is_empty() {
        return;
    }
    let list = match p.cfg.protocol {
        BackendProtocol::Openai => answer,
        BackendProtocol::KserveHttp => get(p, e, "/v2/models").await.ok(),
    };
    if let Some(body) = list
        && let Some(models) = model_ids(&body)
    {
        e.set_models(models);
    }
}

/// Why a check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// No answer within the connect timeout and a second.
    Timeout,
    /// Refused, an error status, or an unreadable answer.
    Failed,
}

/// The body of a 2xx answer to `GET path`, within a bounded time.
async fn get(p: &Pool, e: &Endpoint, path: &str) -> Result<Bytes, Check> {
    if e.parsed.https {
        return Err(Check::Failed);
    }
    let uri = http::Uri::builder()
        .scheme("http")
        .authority(e.authority.clone())
        .path_and_query(path)
        .build()
        .map_err(|_| Check::Failed)?;
    let req = http::Request::get(uri)
        .body(Full::new(Bytes::new()))
        .map_err(|_| Check::Failed)?;
    let client = crate::client::client(p.cfg.connect_timeout_ms);
    let limit = Duration::from_millis(u64::from(p.cfg.connect_timeout_ms) + 1000);
    let fetch = async {
        let resp = client.request(req).await.map_err(|_| Check::Failed)?;
        if !resp.status().is_success() {
            return Err(Check::Failed);
        }
        let body = http_body_util::Limited::new(resp.into_body(), HEALTH_ANSWER_BYTES_MAX);
        body.collect()
            .await
            .map(|c| c.to_bytes())
            .map_err(|_| Check::Failed)
    };
    match tokio::time::timeout(limit, fetch).await {
        Ok(r) => r,
        Err(_) => Err(Check::Timeout),
    }
}

/// Model names from an OpenAI list (`{"data":[{"id":..}]}`) or a KServe
/// one (`{"models":[..]}`, names or objects with `name`).
pub fn model_ids(body: &[u8]) -> Option<Vec<String>> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let max = sluice_engine::config::backends::limits::MODELS_PER_POOL_MAX;
    let mut out = Vec::new();
    if let Some(d) = v.get("data").and_then(|d| d.as_array()) {
        out.extend(
            d.iter()
                .filter_map(|m| m.get("id")?.as_str().map(str::to_owned)),
        );
    } else if let Some(d) = v.get("models").and_then(|d| d.as_array()) {
        out.extend(d.iter().filter_map(|m| {
            m.as_str()
                .or_else(|| m.get("name")?.as_str())
                .map(str::to_owned)
        }));
    } else {
        return None;
    }
    out.truncate(max);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists() {
        assert_eq!(
            model_ids(br#"{"object":"list","data":[{"id":"a","object":"model"},{"id":"b"}]}"#),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(
            model_ids(br#"{"models":["tiny",{"name":"big"}]}"#),
            Some(vec!["tiny".to_string(), "big".to_string()])
        );
        assert_eq!(model_ids(b"not json"), None);
        assert_eq!(model_ids(b"{}"), None);
    }
}
