//! Starting the front door (crate `sluice-frontdoor`, which depends on this
//! one): the engine builds the ingress rings and slot pools, hands each
//! worker its side when it starts, and passes the front door's side to the
//! start function given in [`EngineOptions::frontdoor`].

use std::net::SocketAddr;
use std::sync::Arc;

use super::*;
use crate::config::FrontdoorCfg;
use crate::transport::ingress::{self, IngressPort};
use crate::worker::Shared;

/// What the front door gets from the engine.
pub struct FrontdoorCtx {
    /// `[frontdoor]`.
    pub cfg: FrontdoorCfg,
    /// One port per front-door thread: its slot pool and rings to every
    /// worker.
    pub ports: Vec<IngressPort>,
    /// The tables workers read (routes, tenants, models) and the run state.
    pub shared: Arc<Shared>,
    /// Model metadata of the loaded sessions (`GET /v2/models/{m}`,
    /// Triton's config, gRPC ModelMetadata/ModelConfig).
    pub meta: crate::meta::MetaFn,
    /// `[[backends]]`: the pools OpenAI requests dispatch to.
    pub backends: Vec<crate::config::BackendCfg>,
    /// `[openai]`.
    pub openai: crate::config::OpenaiCfg,
    /// Where backend-hop span records go (drained with the workers').
    pub spans: Arc<crate::trace::SpanRing>,
    /// `tracing.sample_ratio`.
    pub sample_ratio: f64,
    /// `tls_cert` and `tls_key`, resolved against the config file's
    /// directory; `None`: cleartext.
    pub tls: Option<(std::path::PathBuf, std::path::PathBuf)>,
}

/// A running front door.
pub trait FrontdoorHandle: Send + Sync {
    /// Closes the listeners and ends the front-door threads.
    fn stop(&mut self);
    /// The bound HTTP address.
    fn http_addr(&self) -> Option<SocketAddr>;
    /// The bound gRPC address.
    fn grpc_addr(&self) -> Option<SocketAddr>;
    /// Its counters, for the engine's status.
    fn stats_json(&self) -> serde_json::Value;
    /// Its backend pools' state and counters (`null` without any).
    fn backends_json(&self) -> serde_json::Value {
        serde_json::Value::Null
    }
    /// Adds, drains, undrains or removes a pool's endpoint.
    fn backend_endpoint(
        &self,
        op: &crate::config::backends::EndpointOp,
    ) -> Result<(), EngineError> {
        Err(EngineError::NotFound(format!(
            "no backend pool {:?}",
            op.pool
        )))
    }
}

/// Starts a front door.
pub type FrontdoorStart = fn(FrontdoorCtx) -> Result<Box<dyn FrontdoorHandle>, String>;

impl Engine {
    /// Builds the ingress rings when `[frontdoor]` is on; each worker takes
    /// its side as it starts.
    pub(super) fn prepare_ingress(&mut self) -> Result<(), EngineError> {
        self.ingress_ports.clear();
        self.ingress_workers.clear();
        if !self.cfg.frontdoor.enabled() {
            return Ok(());
        }
        if self.opts.frontdoor.is_none() {
            return Err(EngineError::Unsupported(
                "[frontdoor] is configured but this binary has no front door \
                 (it is started by sluiced and by sluice-frontdoor)"
                    .into(),
            ));
        }
        let (ws, ports) = ingress::build(&self.cfg.frontdoor, self.cfg.engine.workers.len())
            .map_err(|e| EngineError::Start(format!("front-door rings: {e}")))?;
        self.ingress_workers = ws.into_iter().map(Some).collect();
        self.ingress_ports = ports;
        Ok(())
    }

    /// Starts the front door on the ports built by `prepare_ingress`.
    pub(super) fn start_frontdoor(&mut self) -> Result<(), EngineError> {
        let Some(start) = self.opts.frontdoor else {
            return Ok(());
        };
        if self.ingress_ports.is_empty() {
            return Ok(());
        }
        let ctx = FrontdoorCtx {
            cfg: self.cfg.frontdoor.clone(),
            ports: std::mem::take(&mut self.ingress_ports),
            shared: Arc::clone(&self.shared),
            meta: self.meta_fn(),
            backends: self.cfg.backends.clone(),
            openai: self.cfg.openai.clone(),
            spans: Arc::clone(&self.frontdoor_spans),
            sample_ratio: self.cfg.tracing.sample_ratio,
            tls: (!self.cfg.frontdoor.tls_cert.is_empty()).then(|| {
                (
                    self.cfg
                        .resolve(std::path::Path::new(&self.cfg.frontdoor.tls_cert)),
                    self.cfg
                        .resolve(std::path::Path::new(&self.cfg.frontdoor.tls_key)),
                )
            }),
        };
        let h = start(ctx).map_err(|e| EngineError::Start(format!("front door: {e}")))?;
        self.frontdoor = Some(h);
        Ok(())
    }

    /// Stops the front door, if running.
    pub(super) fn stop_frontdoor(&mut self) {
        if let Some(mut h) = self.frontdoor.take() {
            h.stop();
        }
    }

    /// Adds, drains, undrains or removes a backend pool's endpoint
    /// (docs/backends.md, "Endpoints at run time").
    pub fn backend_endpoint(
        &self,
        op: &crate::config::backends::EndpointOp,
    ) -> Result<(), EngineError> {
        match &self.frontdoor {
            Some(h) => h.backend_endpoint(op),
            None => Err(EngineError::NotRunning),
        }
    }

    /// The backend pools' state and counters (`null` without any).
    pub fn backends_stats(&self) -> serde_json::Value {
        self.frontdoor
            .as_ref()
            .map_or(serde_json::Value::Null, |h| h.backends_json())
    }

    /// The front door's counters (`null` when it is not running).
    pub fn frontdoor_stats(&self) -> serde_json::Value {
        self.frontdoor
            .as_ref()
            .map_or(serde_json::Value::Null, |h| h.stats_json())
    }

    /// The front door's bound HTTP and gRPC addresses.
    pub fn frontdoor_addrs(&self) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.frontdoor
            .as_ref()
            .map_or((None, None), |h| (h.http_addr(), h.grpc_addr()))
    }
}
