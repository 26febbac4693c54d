//! Starting and stopping: pinned workers, their transports, and the
//! process-wide transport state (DPDK runtime).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::*;
use crate::config::TransportKind;
use crate::handler::Handler;
use crate::stats::{HistExchange, WorkerCounters};
use crate::transport::Transport;
use crate::worker::{Worker, WorkerLinks, WorkerParams, state};

impl Engine {
    /// Starts the workers: pins each, builds its transport and pools, and
    /// returns once all are serving.
    pub fn start(&mut self) -> Result<(), EngineError> {
        if !self.workers.is_empty() {
            // A stopped engine keeps its workers' counters for reading;
            // starting again takes a new engine.
            return Err(EngineError::AlreadyRunning);
        }
        match self.cfg.engine.transport {
            TransportKind::IoUring => {}
            #[cfg(feature = "dpdk")]
            TransportKind::Dpdk => {}
            #[cfg(not(feature = "dpdk"))]
            TransportKind::Dpdk => {
                return Err(EngineError::Unsupported(
                    "transport \"dpdk\" is not built into this binary (cargo feature `dpdk`)"
                        .into(),
                ));
            }
            #[cfg(feature = "rdma")]
            TransportKind::Rdma => {}
            #[cfg(not(feature = "rdma"))]
            TransportKind::Rdma => {
                return Err(EngineError::Unsupported(
                    "transport \"rdma\" is not built into this binary (cargo feature `rdma`)"
                        .into(),
                ));
            }
        }
        self.prepare_ingress()?;
        self.shared.state.store(state::RUNNING, Ordering::Release);
        let mut listen = self.cfg.listen_addr()?;
        let models = self.lock_control()?.live.models.clone();
        #[cfg(feature = "dpdk")]
        if self.cfg.engine.transport == TransportKind::Dpdk {
            use crate::transport::dpdk::{DpdkError, DpdkRuntime};
            match DpdkRuntime::start(&self.cfg) {
                Ok(rt) => self.dpdk = Some(rt),
                Err(e) => {
                    self.shared.state.store(state::STOPPED, Ordering::Release);
                    return Err(match e {
                        DpdkError::Config(c) => EngineError::Config(c),
                        e => EngineError::Start(e.to_string()),
                    });
                }
            }
        }
        for (index, &core) in self.cfg.engine.workers.clone().iter().enumerate() {
            let mut handlers: Vec<Option<Box<dyn Handler>>> = Vec::with_capacity(models.len());
            for m in &models {
                let h = (self.factory)(m, &self.cfg)
                    .map_err(|e| EngineError::Model(format!("{} {}: {e}", m.name, m.version)));
                match h {
                    Ok(h) => handlers.push(Some(h)),
                    Err(e) => {
                        self.abort_start();
                        return Err(e);
                    }
                }
            }
            #[cfg(feature = "rdma")]
            if self.cfg.engine.transport == TransportKind::Rdma {
                // Transports are built on the worker thread; the first one
                // starts the process's rdma_cm listener, the others join it.
                let (cfg, workers) = (self.cfg.clone(), self.cfg.engine.workers.len());
                let made = self.spawn_worker(index, core, handlers, move || {
                    crate::transport::rdma::RdmaTransport::new(index, workers, &cfg)
                        .map_err(|e| e.to_string())
                });
                match made {
                    Ok((addr, huge)) => {
                        self.listen = Some(addr);
                        self.hugepages = huge;
                    }
                    Err(e) => {
                        self.abort_start();
                        return Err(e);
                    }
                }
                continue;
            }
            #[cfg(feature = "dpdk")]
            let dpdk_queue = self.dpdk.as_ref().and_then(|rt| rt.queue(index));
            #[cfg(feature = "dpdk")]
            let made = if let Some(q) = dpdk_queue {
                self.spawn_worker(index, core, handlers, move || {
                    crate::transport::dpdk::DpdkTransport::new(q).map_err(|e| e.to_string())
                })
            } else {
                self.spawn_uring(index, core, handlers, listen)
            };
            #[cfg(not(feature = "dpdk"))]
            let made = self.spawn_uring(index, core, handlers, listen);
            match made {
                Ok((addr, huge)) => {
                    // Port 0 binds an ephemeral port; the other workers join it.
                    listen = addr;
                    self.listen = Some(addr);
                    self.hugepages = huge;
                }
                Err(e) => {
                    self.abort_start();
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.start_frontdoor() {
            self.abort_start();
            return Err(e);
        }
        self.running = true;
        if let Some(why) = self.cfg.unauthenticated_exposure() {
            log::warn!("{why}");
        }
        if self.cfg.auth.mode == crate::config::AuthMode::Tenants
            && self.lock_control()?.live.tenants.is_empty()
        {
            log::warn!(
                "auth.mode = \"tenants\" and no tenant is configured: every request and negotiation is refused (unauthenticated) until tenants are added"
            );
        }
        if let Err(e) = self.install_transforms_at_start() {
            log::error!("schema transforms were not installed on the workers: {e}");
        }
        if !self.hugepages {
            log::warn!(
                "buffer pools use normal pages: no 2 MiB hugepages were free (HugePages_Free={:?})",
                crate::sys::hugepages_free()
            );
        }
        Ok(())
    }

    fn spawn_uring(
        &mut self,
        index: usize,
        core: usize,
        handlers: Vec<Option<Box<dyn Handler>>>,
        listen: SocketAddr,
    ) -> Result<(SocketAddr, bool), EngineError> {
        let mut uring_cfg = self.cfg.io_uring.clone();
        let huge_mode = self.cfg.engine.hugepages;
        let tcp = uring_cfg.tcp_enabled().then(|| {
            Arc::new(crate::transport::tcp::TcpShared::for_config(
                index, &uring_cfg,
            ))
        });
        // Port 0 binds an ephemeral port on the first worker; the others
        // join the port it got.
        if let Some(first) = self.tcp.first().and_then(|t| t.listen()) {
            uring_cfg.tcp_listen = first.to_string();
        }
        // With authentication and several workers, every copy of a signed
        // datagram goes to one worker (the replay guarantee is per
        // appliance). TCP frames meet the replay table of the worker that
        // accepted their connection only (a limitation, docs/wire.md).
        // With several workers, every frame of a stream goes to the worker
        // its stream id picks (the one that holds its state), whatever
        // socket it comes from.
        let workers = self.cfg.engine.workers.len();
        let by_tag = self.cfg.auth.mode == crate::config::AuthMode::Tenants;
        let steer = (workers > 1).then_some(workers as u32);
        let shared = tcp.clone();
        let made = self.spawn_worker(index, core, handlers, move || {
            let t = crate::transport::uring::UringTransport::with_tcp(
                listen, &uring_cfg, huge_mode, shared,
            )
            .map_err(|e| e.to_string())?;
            if let Some(group) = steer {
                t.steer(group, by_tag).map_err(|e| {
                    format!("udp socket: steering stream frames by id and signed ones by tag: {e}")
                })?;
            }
            Ok(t)
        });
        if let Some(t) = tcp {
            self.tcp.push(t);
        }
        made
    }

    fn abort_start(&mut self) {
        self.stop_frontdoor();
        self.ingress_ports.clear();
        self.ingress_workers.clear();
        self.shared.state.store(state::STOPPED, Ordering::Release);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
        }
        self.workers.clear();
        self.tcp.clear();
        #[cfg(feature = "dpdk")]
        {
            self.dpdk = None;
        }
    }

    /// Spawns one pinned worker whose transport `make` builds on the worker
    /// thread itself (rings and queues belong to the thread that uses them).
    fn spawn_worker<T, F>(
        &mut self,
        index: usize,
        core: usize,
        handlers: Vec<Option<Box<dyn Handler>>>,
        make: F,
    ) -> Result<(SocketAddr, bool), EngineError>
    where
        T: Transport + 'static,
        F: FnOnce() -> Result<T, String> + Send + 'static,
    {
        let (ctrl_tx, ctrl_rx) = crossbeam_channel::bounded(256);
        let (ret_tx, ret_rx) = crossbeam_channel::bounded(256);
        let counters = Arc::new(WorkerCounters::default());
        let hist = Arc::new(HistExchange::new());
        let spans = Arc::new(crate::trace::SpanRing::new(self.cfg.tracing.ring_spans));
        let load = Arc::new(crate::load::LoadRing::new());
        let (ready_tx, ready_rx) = crossbeam_channel::bounded(1);
        let params = WorkerParams {
            index,
            rx_burst_max: self.cfg.engine.rx_burst_max as usize,
            poll: self.cfg.engine.poll,
            spin: Duration::from_micros(self.cfg.engine.spin_us as u64),
            forward_timeout: Duration::from_millis(self.cfg.engine.forward_timeout_ms as u64),
            // Without authentication the tables are never read: one bucket.
            replay_entries: match self.cfg.auth.mode {
                crate::config::AuthMode::Tenants => self.cfg.auth.replay_entries as usize,
                crate::config::AuthMode::None => crate::auth::REPLAY_WAYS,
            },
            replay_senders: match self.cfg.auth.mode {
                crate::config::AuthMode::Tenants => self.cfg.auth.replay_senders as usize,
                crate::config::AuthMode::None => crate::auth::WINDOW_WAYS,
            },
            replay_window_ids: self.cfg.auth.replay_window_ids as usize,
            sampler: crate::trace::Sampler::new(self.cfg.tracing.sample_ratio),
        };
        let shared = Arc::clone(&self.shared);
        let ingress = self.ingress_workers.get_mut(index).and_then(Option::take);
        // The control side's poke: the front door's eventfd when it runs,
        // else one of the worker's own (none if eventfd fails: the worker
        // then wakes within its sleep bound).
        let wake = match &ingress {
            Some(w) => Some(Arc::clone(w.wake())),
            None => crate::transport::ingress::Wake::new().ok().map(Arc::new),
        };
        let wake2 = wake.clone();
        let (c2, h2, s2) = (Arc::clone(&counters), Arc::clone(&hist), Arc::clone(&spans));
        let l2 = Arc::clone(&load);
        let opts = self.opts;
        let thread = std::thread::Builder::new()
            .name(format!("sluice-w{index}"))
            .spawn(move || {
                if !opts.no_pin
                    && let Err(e) = crate::sys::pin_to_core(core)
                {
                    let _ = ready_tx.send(Err(format!(
                        "worker {index}: cannot pin to core {core}: {e}"
                    )));
                    return;
                }
                if let Some(init) = opts.worker_init {
                    init(index);
                }
                let transport = match make() {
                    Ok(t) => crate::transport::ingress::Sources::new(t, ingress, wake2),
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("worker {index}: {e}")));
                        return;
                    }
                };
                let control_wake = transport.control_wake();
                let c = transport.counters();
                c2.alive.store(true, Ordering::Release);
                let _ = ready_tx.send(Ok((transport.local_addr(), c.hugepages)));
                let mut w = Worker::new(
                    params,
                    transport,
                    shared,
                    handlers,
                    WorkerLinks {
                        ctrl: ctrl_rx,
                        returned: ret_tx,
                        counters: c2,
                        hist_out: h2,
                        spans: s2,
                        load: l2,
                        wake: control_wake,
                    },
                );
                w.run_supervised();
            })
            .map_err(|e| EngineError::Start(format!("spawn worker {index}: {e}")))?;
        let res = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .map_err(|_| EngineError::Timeout(format!("worker {index} did not start in 10 s")))?;
        self.workers.push(WorkerHandle {
            core,
            thread: Some(thread),
            ctrl: ctrl_tx,
            returned: ret_rx,
            counters,
            hist,
            spans,
            load,
            wake,
        });
        res.map_err(EngineError::Start)
    }

    /// Moves up to `out.len()` span records of traced requests out of the
    /// workers' rings (control side; never blocks a worker).
    pub fn drain_spans(&self, out: &mut [crate::trace::SpanRecord]) -> usize {
        let mut n = 0;
        for w in &self.workers {
            n += w.spans.drain(&mut out[n..]);
        }
        n += self.frontdoor_spans.drain(&mut out[n..]);
        n
    }

    /// Token load of seconds `from..=to` (since the Unix epoch) keyed by
    /// `dim`, merged over every worker's ring: sums, and the highest queue
    /// depth. Rows in (second, key) order, zero cells left out.
    pub fn load(&self, from: u64, to: u64, dim: crate::load::Dim) -> Vec<crate::load::LoadRow> {
        let mut acc = std::collections::BTreeMap::new();
        for w in &self.workers {
            w.load.read_into(from, to, dim, &mut acc);
        }
        acc.into_values().collect()
    }

    /// (slot, model name, version) of every model slot in use.
    pub fn model_slots(&self) -> Vec<(usize, String, String)> {
        let ctl = self.control.lock().unwrap_or_else(|p| p.into_inner());
        ctl.slots
            .iter()
            .map(|((n, v), &s)| (s, n.clone(), v.clone()))
            .collect()
    }

    /// Number of workers started (running or stopped).
    pub fn status_workers(&self) -> usize {
        self.workers.len()
    }

    /// Whether workers run.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// The data-plane address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listen
    }

    /// Stops: new requests are answered `shutting_down` for `drain`, then the
    /// workers finish their burst and exit. Every frame received is answered.
    pub fn stop(&mut self, drain: Duration) {
        if !self.running {
            return;
        }
        self.running = false;
        self.shared.state.store(state::DRAINING, Ordering::Release);
        std::thread::sleep(drain);
        // Front-door requests are answered shutting_down while draining,
        // like every other request; then its listeners close.
        self.stop_frontdoor();
        self.shared.state.store(state::STOPPED, Ordering::Release);
        for w in &mut self.workers {
            if let Some(t) = w.thread.take() {
                let _ = t.join();
            }
            while w.returned.try_recv().is_ok() {}
        }
        self.workers.clear();
        // Workers are gone: close the port, free the pools, clean EAL up.
        #[cfg(feature = "dpdk")]
        {
            self.dpdk = None;
        }
    }
}
