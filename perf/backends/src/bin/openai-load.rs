//! HTTP load for OpenAI-shaped endpoints: a fixed rate (open loop, each
//! latency counted from the request's intended send time, so a stall
//! counts against every request it delays: no coordinated omission) or a
//! closed loop of `--concurrency` requests in flight. Reports latency
//! (whole answer), and for streams the time to the first event and between
//! events, as one JSON line (µs). HTTP/1.1 keep-alive connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Parser;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Mutex;

#[derive(Parser)]
struct Args {
    /// Base URL, e.g. http://127.0.0.1:8000.
    #[arg(long)]
    url: String,
    /// Path.
    #[arg(long, default_value = "/v1/chat/completions")]
    path: String,
    /// Model name in the body.
    #[arg(long)]
    model: String,
    /// More headers, "Name: value".
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Requests per second (open loop); 0: closed loop.
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// Requests in flight (closed loop), or the most in flight (open loop).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5)]
    duration_s: u64,
    /// Unmeasured seconds first.
    #[arg(long, default_value_t = 1)]
    warmup_s: u64,
    /// Ask for an event stream.
    #[arg(long)]
    stream: bool,
    /// max_tokens in the body.
    #[arg(long, default_value_t = 4)]
    max_tokens: u32,
    /// A label printed with the result.
    #[arg(long, default_value = "")]
    label: String,
}

#[derive(Default)]
struct Hists {
    latency: Option<Histogram<u64>>,
    ttft: Option<Histogram<u64>>,
    itl: Option<Histogram<u64>>,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

struct Shared {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: http::Uri,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    body: Bytes,
    stream: bool,
    measure_from: Instant,
    hists: Mutex<Hists>,
    ok: AtomicU64,
    errors: AtomicU64,
}

impl Shared {
    /// One request; `intended` is when it should have been sent.
    async fn one(&self, intended: Instant) {
        let mut req = http::Request::new(Full::new(self.body.clone()));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = self.uri.clone();
        for (k, v) in &self.headers {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        let resp = match self.client.request(req).await {
            Ok(r) if r.status().is_success() => r,
            _ => {
                self.count_error(intended);
                return;
            }
        };
        let mut body = resp.into_body();
        let mut first: Option<Instant> = None;
        let mut last: Option<Instant> = None;
        let mut gaps: Vec<u64> = Vec::new();
        while let Some(f) = body.frame().await {
            let Ok(f) = f else {
                self.count_error(intended);
                return;
            };
            if f.is_data() {
                let now = Instant::now();
                if first.is_none() {
                    first = Some(now);
                } else if let Some(l) = last {
                    gaps.push(now.duration_since(l).as_micros() as u64);
                }
                last = Some(now);
            }
        }
        let done = Instant::now();
        if intended < self.measure_from {
            return;
        }
        self.ok.fetch_add(1, Ordering::Relaxed);
        let mut h = self.hists.lock().await;
        let us = |t: Instant| t.duration_since(intended).as_micros() as u64;
        let _ = h.latency.get_or_insert_with(hist).record(us(done).max(1));
        if self.stream {
            if let Some(f) = first {
                let _ = h.ttft.get_or_insert_with(hist).record(us(f).max(1));
            }
            let itl = h.itl.get_or_insert_with(hist);
            for g in gaps {
                let _ = itl.record(g.max(1));
            }
        }
    }

    fn count_error(&self, intended: Instant) {
        if intended >= self.measure_from {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn q(h: &Option<Histogram<u64>>, p: f64) -> u64 {
    h.as_ref().map_or(0, |h| h.value_at_quantile(p))
}

fn main() -> Result<(), String> {
    let a = Args::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(run(a))
}

async fn run(a: Args) -> Result<(), String> {
    let mut conn = HttpConnector::new();
    conn.set_nodelay(true);
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(a.concurrency.max(64))
        .build(conn);
    let uri: http::Uri = format!("{}{}", a.url.trim_end_matches('/'), a.path)
        .parse()
        .map_err(|e| format!("url: {e}"))?;
    let mut headers = vec![(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    )];
    for h in &a.headers {
        let (k, v) = h.split_once(':').ok_or("--header takes Name: value")?;
        headers.push((
            k.trim().parse().map_err(|e| format!("{k}: {e}"))?,
            v.trim().parse().map_err(|e| format!("{v}: {e}"))?,
        ));
    }
    let body = if a.path.contains("chat") {
        serde_json::json!({"model": a.model, "messages": [{"role":"user","content":"Say ok."}],
            "max_tokens": a.max_tokens, "temperature": 0.0, "stream": a.stream})
    } else {
        serde_json::json!({"model": a.model, "prompt": "Say ok.", "max_tokens": a.max_tokens,
            "temperature": 0.0, "stream": a.stream})
    };
    let start = Instant::now();
    let s = Arc::new(Shared {
        client,
        uri,
        headers,
        body: Bytes::from(body.to_string()),
        stream: a.stream,
        measure_from: start + Duration::from_secs(a.warmup_s),
        hists: Mutex::new(Hists::default()),
        ok: AtomicU64::new(0),
        errors: AtomicU64::new(0),
    });
    let end = s.measure_from + Duration::from_secs(a.duration_s);
    let mut tasks = tokio::task::JoinSet::new();
    if a.rate > 0 {
        // Open loop: request i is due at start + i / rate.
        let limit = Arc::new(tokio::sync::Semaphore::new(a.concurrency.max(1)));
        let gap = Duration::from_secs_f64(1.0 / a.rate as f64);
        let mut due = start;
        while due < end {
            // Tokio's timer ticks in milliseconds: sleep to a millisecond
            // before, then yield (other tasks run) until the due time.
            if let Some(early) = due.checked_sub(Duration::from_millis(1)) {
                tokio::time::sleep_until(early.into()).await;
            }
            while Instant::now() < due {
                tokio::task::yield_now().await;
            }
            let permit = Arc::clone(&limit)
                .acquire_owned()
                .await
                .map_err(|e| e.to_string())?;
            let s = Arc::clone(&s);
            let intended = due;
            tasks.spawn(async move {
                s.one(intended).await;
                drop(permit);
            });
            due += gap;
            while tasks.try_join_next().is_some() {}
        }
    } else {
        for _ in 0..a.concurrency.max(1) {
            let s = Arc::clone(&s);
            tasks.spawn(async move {
                while Instant::now() < end {
                    s.one(Instant::now()).await;
                }
            });
        }
    }
    while tasks.join_next().await.is_some() {}
    let secs = a.duration_s as f64;
    let h = s.hists.lock().await;
    let out = serde_json::json!({
        "label": a.label,
        "ok": s.ok.load(Ordering::Relaxed),
        "errors": s.errors.load(Ordering::Relaxed),
        "req_s": (s.ok.load(Ordering::Relaxed) as f64 / secs).round(),
        "p50_us": q(&h.latency, 0.5),
        "p99_us": q(&h.latency, 0.99),
        "max_us": q(&h.latency, 1.0),
        "ttft_p50_us": q(&h.ttft, 0.5),
        "ttft_p99_us": q(&h.ttft, 0.99),
        "itl_p50_us": q(&h.itl, 0.5),
        "itl_p99_us": q(&h.itl, 0.99),
    });
    println!("{out}");
    Ok(())
}
