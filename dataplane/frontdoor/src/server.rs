//! Front-door threads: each runs a current-thread tokio runtime with its
//! own listeners (SO_REUSEPORT, so the kernel spreads connections), its
//! own slot pool and rings, and a drainer for answers. None runs on a
//! worker core.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use sluice_engine::engine::{FrontdoorCtx, FrontdoorHandle};
use sluice_engine::transport::ingress::IngressPort;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::conn::body::Tracked;
use crate::conn::io::TimedIo;
use crate::conn::timers::{Cause, Conn, Timeouts};
use crate::ctx::{Ctx, Stats};

/// Which protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    Http,
    Grpc,
}

/// The running front door.
pub struct Running {
    stop: watch::Sender<bool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    http: Option<SocketAddr>,
    grpc: Option<SocketAddr>,
    ctx: Arc<Ctx>,
    /// The backends' health checks; stopped after the threads.
    checker: Option<sluice_backends::health::Checker>,
    /// Reloads the TLS certificate when its files change.
    reloader: Option<crate::conn::tls::Reloader>,
}

impl FrontdoorHandle for Running {
    fn stop(&mut self) {
        let _ = self.stop.send(true);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.checker.take();
        self.reloader.take();
    }

    fn http_addr(&self) -> Option<SocketAddr> {
        self.http
    }

    fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc
    }

    fn stats_json(&self) -> serde_json::Value {
        let mut v = self.ctx.stats.to_json();
        if let (Some(t), Some(m)) = (&self.ctx.tls, v.as_object_mut())
            && let serde_json::Value::Object(tls) = t.to_json()
        {
            m.extend(tls);
        }
        v
    }

    fn backend_endpoint(
        &self,
        op: &sluice_engine::config::backends::EndpointOp,
    ) -> Result<(), sluice_engine::EngineError> {
        use sluice_backends::EndpointError as E;
        use sluice_engine::EngineError as EE;
        let Some(b) = &self.ctx.backends else {
            return Err(EE::NotFound("no [[backends]] configured".into()));
        };
        b.endpoint_op(op).map_err(|e| match e {
            E::NotFound(m) => EE::NotFound(m),
            E::Exists(m) => EE::AlreadyExists(m),
            E::Invalid(m) => EE::InvalidArgument(m),
        })
    }

    fn backends_json(&self) -> serde_json::Value {
        self.ctx
            .backends
            .as_ref()
            .map_or(serde_json::Value::Null, |b| b.to_json())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        FrontdoorHandle::stop(self);
    }
}

fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let domain = if addr.is_ipv4() {
        socket2::Domain::IPV4
    } else {
        socket2::Domain::IPV6
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, Some(socket2::Protocol::TCP))?;
    s.set_reuse_address(true)?;
    s.set_reuse_port(true)?;
    s.set_nodelay(true)?;
    s.bind(&addr.into())?;
    s.listen(1024)?;
    s.set_nonblocking(true)?;
    Ok(s.into())
}

/// Binds one listener per thread for `addr` (port 0: the first picks a
/// port, the rest join it).
fn bind_all(
    addr: &str,
    threads: usize,
) -> Result<(Vec<std::net::TcpListener>, Option<SocketAddr>), String> {
    if addr.is_empty() {
        return Ok((Vec::new(), None));
    }
    let mut a: SocketAddr = addr
        .parse()
        .map_err(|_| format!("{addr}: not an IP:port"))?;
    let mut out = Vec::with_capacity(threads);
    for _ in 0..threads {
        let l = bind(a).map_err(|e| format!("listen on {a}: {e}"))?;
        a = l.local_addr().map_err(|e| e.to_string())?;
        out.push(l);
    }
    Ok((out, Some(a)))
}

/// Starts the front door: the engine calls this (`EngineOptions::frontdoor`).
pub fn start(c: FrontdoorCtx) -> Result<Box<dyn FrontdoorHandle>, String> {
    let threads = c.cfg.threads as usize;
    if c.ports.len() != threads {
        return Err("one ingress port per front-door thread".into());
    }
    let workers = c.ports.first().map_or(0, IngressPort::workers);
    let (mut http, http_addr) = bind_all(&c.cfg.http_listen, threads)?;
    let (mut grpc, grpc_addr) = bind_all(&c.cfg.grpc_listen, threads)?;
    let sources = crate::conn::Sources::new(c.cfg.connections_per_source_max, c.cfg.sources_max);
    let signer = crate::signing::Signer::new(c.cfg.hmac_skew_ms, c.cfg.hmac_nonces_max);
    let backends = if c.backends.is_empty() {
        None
    } else {
        let upstream: Vec<String> = c
            .shared
            .tables
            .load()
            .1
            .models
            .entries()
            .iter()
            .filter(|m| m.kind == sluice_engine::config::ModelKind::Backend)
            .map(|m| m.upstream.clone())
            .collect();
        Some(sluice_backends::Backends::new(&c.backends, &upstream)?)
    };
    let tls = match &c.tls {
        Some((cert, key)) => Some(crate::conn::tls::Certs::new(cert.clone(), key.clone())?),
        None => None,
    };
    let reloader = match &tls {
        Some(t) => Some(crate::conn::tls::Reloader::start(
            Arc::clone(t),
            Duration::from_millis(u64::from(c.cfg.tls_reload_ms)),
        )?),
        None => None,
    };
    // The first round of checks runs before the doors open: endpoints
    // that are up serve the first request.
    let checker = match &backends {
        Some(b) => Some(sluice_backends::health::start(Arc::clone(b))?),
        None => None,
    };
    let ctx = Arc::new(Ctx {
        cfg: c.cfg,
        shared: c.shared,
        meta: crate::models::Meta::new(c.meta),
        workers,
        rr: AtomicUsize::new(0),
        stats: Stats::default(),
        sources,
        signer,
        backends,
        openai: c.openai,
        spans: c.spans,
        sampler: sluice_engine::trace::Sampler::new(c.sample_ratio),
        tls,
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut handles = Vec::with_capacity(threads);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    for port in c.ports.into_iter().rev() {
        let t = port.thread();
        let h = http.pop();
        let g = grpc.pop();
        let ctx = Arc::clone(&ctx);
        let stop = stop_rx.clone();
        let ready = ready_tx.clone();
        let core = ctx.cfg.cores.get(t).copied();
        let th = std::thread::Builder::new()
            .name(format!("sluice-fd{t}"))
            .spawn(move || {
                if let Some(core) = core
                    && let Err(e) = sluice_engine::sys::pin_to_core(core)
                {
                    let _ = ready.send(Err(format!(
                        "front-door thread {t}: pin to core {core}: {e}"
                    )));
                    return;
                }
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready.send(Err(format!("front-door thread {t}: runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(thread_main(ctx, port, h, g, stop, ready));
            })
            .map_err(|e| format!("spawn front-door thread: {e}"))?;
        handles.push(th);
    }
    drop(ready_tx);
    let mut running = Running {
        stop: stop_tx,
        threads: handles,
        http: http_addr,
        grpc: grpc_addr,
        ctx,
        checker,
        reloader,
    };
    for _ in 0..threads {
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                FrontdoorHandle::stop(&mut running);
                return Err(e);
            }
            Err(_) => {
                FrontdoorHandle::stop(&mut running);
                return Err("front-door thread did not start".into());
            }
        }
    }
    log::info!(
        "front door: http {:?}, grpc {:?}, {threads} thread(s)",
        http_addr,
        grpc_addr
    );
    Ok(Box::new(running))
}

async fn thread_main(
    ctx: Arc<Ctx>,
    port: IngressPort,
    http: Option<std::net::TcpListener>,
    grpc: Option<std::net::TcpListener>,
    mut stop: watch::Receiver<bool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) {
    let wake = Arc::clone(port.wake());
    crate::dispatch::install(port);
    let drainer = tokio::spawn(crate::dispatch::drain(wake));
    let conns = Arc::new(AtomicUsize::new(0));
    let live = Arc::new(crate::conn::Live::new(ctx.cfg.connections_max));
    let mut tasks = Vec::new();
    for (l, proto) in [(http, Proto::Http), (grpc, Proto::Grpc)] {
        let Some(l) = l else { continue };
        match TcpListener::from_std(l) {
            Ok(l) => tasks.push(tokio::spawn(accept(
                Arc::clone(&ctx),
                l,
                proto,
                Arc::clone(&conns),
                Arc::clone(&live),
                stop.clone(),
            ))),
            Err(e) => {
                let _ = ready.send(Err(format!("listener: {e}")));
                return;
            }
        }
    }
    let _ = ready.send(Ok(()));
    let _ = stop.wait_for(|s| *s).await;
    for t in &tasks {
        t.abort();
    }
    drainer.abort();
    crate::dispatch::uninstall();
}

async fn accept(
    ctx: Arc<Ctx>,
    l: TcpListener,
    proto: Proto,
    conns: Arc<AtomicUsize>,
    live: Arc<crate::conn::Live>,
    stop: watch::Receiver<bool>,
) {
    let gate = crate::grpc_gate::gate(Arc::clone(&ctx), crate::grpc::service(Arc::clone(&ctx)));
    let timeouts = Timeouts::of(&ctx.cfg);
    let acceptor = match &ctx.tls {
        Some(t) => match t.acceptor(proto == Proto::Grpc) {
            Ok(a) => Some(a),
            Err(e) => {
                log::error!("front door: {e}");
                return;
            }
        },
        None => None,
    };
    loop {
        let Ok((stream, peer)) = l.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // Refused: closed at once (counted by crate::conn::admit).
        let Ok(admitted) = crate::conn::admit(&ctx, &conns, &live, peer.ip()) else {
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let ctx = Arc::clone(&ctx);
        let stop = stop.clone();
        let gate = gate.clone();
        let conn = Conn::new(timeouts);
        live.add(&conn);
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            // Dropped however this task ends (done, cancelled, panicked):
            // the connection's places are given back.
            let _admitted = admitted;
            let served = match (acceptor, &ctx.tls) {
                (Some(a), Some(certs)) => {
                    // The handshake within handshake_timeout_ms; the
                    // connection's timers then see the plaintext.
                    let limit = Duration::from_millis(u64::from(ctx.cfg.handshake_timeout_ms));
                    match tokio::time::timeout(limit, a.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            Stats::add(&certs.stats.handshakes, 1);
                            let io = TokioIo::new(TimedIo::new(tls, Arc::clone(&conn)));
                            serve(&ctx, proto, io, &conn, gate, stop).await
                        }
                        Ok(Err(e)) => {
                            Stats::add(&certs.stats.handshake_failures, 1);
                            Served::Done(Err(Box::new(e)))
                        }
                        Err(_) => {
                            Stats::add(&certs.stats.handshake_failures, 1);
                            Served::TimedOut(Cause::Handshake)
                        }
                    }
                }
                _ => {
                    let io = TokioIo::new(TimedIo::new(stream, Arc::clone(&conn)));
                    serve(&ctx, proto, io, &conn, gate, stop).await
                }
            };
            match served {
                Served::Done(Err(e)) => log::debug!("front door connection: {e}"),
                Served::Done(Ok(())) => {}
                Served::TimedOut(c) => {
                    log::debug!("front door connection from {peer} closed: {c:?} timeout");
                    ctx.stats.closed(c);
                }
            }
        });
    }
}

/// How a connection ended.
enum Served {
    Done(Result<(), Box<dyn std::error::Error + Send + Sync>>),
    TimedOut(Cause),
}

async fn serve<S>(
    ctx: &Arc<Ctx>,
    proto: Proto,
    io: TokioIo<TimedIo<S>>,
    conn: &Arc<Conn>,
    gate: crate::grpc_gate::Gate,
    mut stop: watch::Receiver<bool>,
) -> Served
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut b = auto::Builder::new(TokioExecutor::new());
    let t = Timeouts::of(&ctx.cfg);
    // crate::conn::timers times headers, idle time and writes; hyper's
    // own header timer would also count keep-alive idle time.
    b.http1().timer(TokioTimer::new()).header_read_timeout(None);
    b.http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(t.header)
        .keep_alive_timeout(t.write)
        .max_concurrent_streams(ctx.cfg.slots);
    // The connection's token streams, bounded together.
    let streams = crate::tokens::ConnStreams::default();
    let c = Arc::clone(conn);
    let watchdog = conn.watchdog();
    match proto {
        Proto::Http => {
            let ctx = Arc::clone(ctx);
            let svc = hyper::service::service_fn(move |req| {
                let inflight = c.request();
                let r = crate::http::handle(Arc::clone(&ctx), req, streams.clone());
                async move { r.await.map(|r| r.map(|b| Tracked::new(b, inflight))) }
            });
            let conn = b.serve_connection(io, svc);
            tokio::select! {
                r = conn => Served::Done(r),
                c = watchdog => Served::TimedOut(c),
                _ = stop.wait_for(|s| *s) => Served::Done(Ok(())),
            }
        }
        Proto::Grpc => {
            let svc =
                hyper::service::service_fn(move |mut req: http::Request<hyper::body::Incoming>| {
                    req.extensions_mut().insert(streams.clone());
                    let inflight = c.request();
                    let gate = gate.clone();
                    async move {
                        let r = gate.call(req).await;
                        r.map(|r| r.map(|b| Tracked::new(b, inflight)))
                    }
                });
            let b = b.http2_only();
            let conn = b.serve_connection(io, svc);
            tokio::select! {
                r = conn => Served::Done(r),
                c = watchdog => Served::TimedOut(c),
                _ = stop.wait_for(|s| *s) => Served::Done(Ok(())),
            }
        }
    }
}
