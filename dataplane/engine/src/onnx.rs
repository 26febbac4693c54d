//! ONNX Runtime models as handlers (feature `onnx`): one session per worker
//! per model version, inputs read in place from the receive buffer, outputs
//! written in place into the transmit buffer.

use crate::config::{Config, ModelCfg};
use crate::handler::Handler;

/// Makes an ONNX Runtime handler for one worker. Loads the runtime library
/// on first use; a missing or incompatible library is an error, not a panic.
#[cfg(feature = "onnx")]
pub fn make(m: &ModelCfg, cfg: &Config) -> Result<Box<dyn Handler>, String> {
    use sluice_infer::{AdapterSpec, ModelSpec, OrtModel};
    let configured = cfg.onnxruntime.library.as_deref().map(|p| cfg.resolve(p));
    let lib = sluice_infer::library_path(configured.as_deref()).ok_or_else(|| {
        format!(
            "no ONNX Runtime library: set [onnxruntime] library or {}",
            sluice_infer::LIBRARY_ENV
        )
    })?;
    sluice_infer::init(&lib).map_err(|e| e.to_string())?;
    // Workers share one copy of each model version's large initializers
    // (and of their pre-packed forms). That copy and the packed one both
    // stay, so with one worker sharing costs more than it saves: it is on
    // from two workers.
    sluice_infer::set_weight_sharing(cfg.engine.workers.len() > 1);
    let path = m.path.as_deref().ok_or("an onnx model needs a path")?;
    let spec = ModelSpec {
        name: m.name.clone(),
        version: m.version.clone(),
        path: cfg.resolve(path),
        adapters: m
            .adapters
            .iter()
            .map(|a| AdapterSpec {
                id: a.id.clone(),
                path: cfg.resolve(&a.path),
            })
            .collect(),
    };
    let model = OrtModel::load(&spec).map_err(|e| e.to_string())?;
    if m.batch_max.is_some_and(|b| b > 1) {
        model
            .batchable()
            .map_err(|why| format!("batch_max is set but the model cannot batch: {why}"))?;
    }
    // A stream model's state slots are made here, on the control side, so
    // the worker that installs the handler allocates nothing.
    let streams = match &m.stream {
        None => None,
        Some(st) => {
            let pairs: Vec<sluice_infer::StatePair> = st
                .state
                .iter()
                .map(|p| sluice_infer::StatePair {
                    input: p.input.clone(),
                    output: p.output.clone(),
                    dims: p.shape.clone(),
                })
                .collect();
            let spec = model.state_spec(&pairs)?;
            let table = crate::streams::StreamTable::new(cfg.streams.limits(), spec.half_len);
            Some((spec, table))
        }
    };
    let stream_sig = streams
        .as_ref()
        .map_or(0, |(spec, _)| spec.signature(&model));
    let mut token_batch = None;
    let generator = match (&m.stream, &streams) {
        (Some(st), Some((spec, _))) => match &st.generate {
            None => None,
            Some(g) => {
                let tok = model.token_spec(spec, &g.token_input, &g.token_output)?;
                let limits = crate::streams::GenLimits {
                    eos: g.eos,
                    max_tokens: g.max_tokens,
                    prompt_max: g.prompt_max,
                };
                let slots = cfg.streams.limits().per_worker as usize;
                // Decode steps batched across streams where the model takes
                // a batch dimension (else one stream per call, stated in
                // the log).
                let rows = (g.step_batch_max as usize).min(slots);
                if rows > 1 {
                    match model.token_batch(spec, tok, rows) {
                        Ok(b) => token_batch = Some(b),
                        Err(why) => log::warn!(
                            "model {} {}: decode steps run one stream at a time: {why}",
                            m.name,
                            m.version
                        ),
                    }
                }
                Some((
                    tok,
                    crate::streams::Generator::new(
                        limits,
                        slots,
                        &m.name,
                        &m.version,
                        &g.token_input,
                    ),
                ))
            }
        },
        _ => None,
    };
    Ok(Box::new(OrtHandler {
        model,
        stats: sluice_infer::RunStats::default(),
        streams,
        stream_sig,
        generator,
        token_batch,
    }))
}

/// The adapter caches' process-wide counters.
#[cfg(feature = "onnx")]
pub fn adapter_cache_stats() -> crate::stats::AdapterCacheStats {
    let t = sluice_infer::adapter_cache_totals();
    crate::stats::AdapterCacheStats {
        loads: t.loads,
        evictions: t.evictions,
        load_failures: t.load_failures,
    }
}

/// Without the `onnx` feature there are no adapters.
#[cfg(not(feature = "onnx"))]
pub fn adapter_cache_stats() -> crate::stats::AdapterCacheStats {
    crate::stats::AdapterCacheStats::default()
}

/// Without the `onnx` feature, onnx models are refused at load.
#[cfg(not(feature = "onnx"))]
pub fn make(m: &ModelCfg, _cfg: &Config) -> Result<Box<dyn Handler>, String> {
    Err(format!(
        "model {} {}: this binary was built without the `onnx` feature",
        m.name, m.version
    ))
}

#[cfg(feature = "onnx")]
struct OrtHandler {
    model: sluice_infer::OrtModel,
    stats: sluice_infer::RunStats,
    /// A stateful stream model: where its state lies and its streams.
    streams: Option<(sluice_infer::StateSpec, crate::streams::StreamTable)>,
    /// The state's signature (an alias switch keeps streams across equal ones).
    stream_sig: u64,
    /// A generative model: its token streams (server-driven).
    generator: Option<(sluice_infer::TokenSpec, crate::streams::Generator)>,
    /// Its batch buffers, when its decode steps run batched.
    token_batch: Option<sluice_infer::TokenBatch>,
}

/// A generative model's decode steps for one iteration: batched through
/// `batch` when there is one, else one stream per call.
#[cfg(feature = "onnx")]
struct OrtDecode<'a> {
    model: &'a mut sluice_infer::OrtModel,
    stats: &'a mut sluice_infer::RunStats,
    spec: &'a sluice_infer::StateSpec,
    tok: sluice_infer::TokenSpec,
    batch: Option<&'a mut sluice_infer::TokenBatch>,
}

#[cfg(feature = "onnx")]
impl crate::streams::DecodeStep for OrtDecode<'_> {
    fn rows_max(&self) -> usize {
        self.batch.as_ref().map_or(1, |b| b.rows_max())
    }

    fn step(
        &mut self,
        token: i64,
        cur: &[u8],
        next: &mut [u8],
    ) -> Result<i64, crate::vocab::Reject> {
        self.model
            .run_token_step(self.spec, self.tok, token, cur, next, self.stats)
    }

    fn gather(&mut self, row: usize, token: i64, cur: &[u8]) -> u64 {
        self.batch.as_mut().map_or(0, |b| b.gather(row, token, cur))
    }

    fn run(&mut self, rows: usize) -> Result<(), crate::vocab::Reject> {
        match self.batch.as_mut() {
            Some(b) => self
                .model
                .run_token_batch(self.spec, self.tok, b, rows, self.stats),
            None => Err(crate::vocab::Reject::new(
                sluice_wire::ErrorCode::Internal,
                "a batched decode step without batch buffers",
            )),
        }
    }

    fn scatter(&mut self, row: usize, next: &mut [u8]) -> (i64, u64) {
        self.batch.as_ref().map_or((0, 0), |b| b.scatter(row, next))
    }
}

/// Idle slots a tick looks at per stream model (a bounded scan).
#[cfg(feature = "onnx")]
const RECLAIM_SCAN_MAX: usize = 256;

// The engine's batch limit is the inference stage's.
#[cfg(feature = "onnx")]
const _: () = assert!(crate::config::limits::BATCH_MAX as usize == sluice_infer::BATCH_ROWS_MAX);

#[cfg(feature = "onnx")]
impl Handler for OrtHandler {
    fn handle(
        &mut self,
        req: &sluice_wire::Frame<&[u8]>,
        adapter: Option<&str>,
        tx: &mut [u8],
        acct: &mut crate::handler::RunAccount,
    ) -> Result<usize, crate::vocab::Reject> {
        let before = self.stats.payload_bytes_copied;
        let r = self.model.run_into(req, adapter, tx, &mut self.stats);
        acct.payload_bytes_copied += self.stats.payload_bytes_copied - before;
        r
    }

    fn handle_stream(
        &mut self,
        req: &sluice_wire::Frame<&[u8]>,
        h: sluice_wire::StreamHeader,
        adapter: Option<&str>,
        now_us: u64,
        tx: &mut [u8],
        acct: &mut crate::handler::RunAccount,
    ) -> Result<usize, crate::streams::StreamRefusal> {
        let Some((spec, table)) = self.streams.as_mut() else {
            return Err(crate::streams::StreamRefusal {
                reject: crate::handler::NO_STREAMS,
                seq: h.seq,
                ended: false,
            });
        };
        if let Some((_, g)) = self.generator.as_mut() {
            // A token stream: CANCEL ends it (answered at once), a
            // CONTINUE without tensors keeps it alive (answered by nothing:
            // length 0). Its OPEN went to `token_open`.
            use sluice_wire::stream_flags::{CANCEL, OPEN};
            return if h.has(CANCEL) {
                g.cancel(table, req, h, tx)
            } else if h.has(OPEN) {
                Err(crate::streams::StreamRefusal {
                    reject: crate::vocab::Reject::new(
                        sluice_wire::ErrorCode::Internal,
                        "token stream OPEN reached the step path",
                    ),
                    seq: h.seq,
                    ended: false,
                })
            } else {
                g.continue_frame(table, req, h, now_us).map(|()| 0)
            };
        }
        let (model, stats) = (&mut self.model, &mut self.stats);
        let before = stats.payload_bytes_copied;
        let r = crate::streams::run_frame(table, req, h, now_us, tx, |cur, next, ext, tx| {
            model.run_step(req, adapter, spec, cur, next, ext, tx, stats)
        });
        acct.payload_bytes_copied += stats.payload_bytes_copied - before;
        r
    }

    fn token_open(
        &mut self,
        req: &sluice_wire::Frame<&[u8]>,
        h: sluice_wire::StreamHeader,
        route: &crate::transport::RxPacket,
        pushable: bool,
        shard: usize,
        now_us: u64,
        acct: &mut crate::handler::RunAccount,
    ) -> Option<Result<(), crate::streams::StreamRefusal>> {
        let (_, g) = self.generator.as_mut()?;
        let (_, table) = self.streams.as_mut()?;
        // The prompt is copied once into the slot's buffer, and counted.
        Some(
            g.open(table, req, h, *route, pushable, shard, now_us)
                .map(|copied| {
                    acct.payload_bytes_copied += copied;
                    acct.copy_path = crate::vocab::CopyPath::ModelInput;
                }),
        )
    }

    fn token_active(&self) -> usize {
        self.generator.as_ref().map_or(0, |(_, g)| g.active())
    }

    fn token_ended(&mut self, all: bool, f: &mut dyn FnMut(&crate::transport::RxPacket)) {
        if let Some((_, g)) = self.generator.as_mut() {
            if all {
                g.clear();
            }
            g.take_ended(f);
        }
    }

    fn fail_token_streams(
        &mut self,
        sink: &mut dyn crate::streams::TokenSink,
    ) -> Option<crate::streams::GenTally> {
        let (_, g) = self.generator.as_mut()?;
        let (_, table) = self.streams.as_mut()?;
        Some(g.fail_all(table, sink))
    }

    fn end_streams(&mut self, f: &mut dyn FnMut(&crate::transport::RxPacket)) {
        self.token_ended(true, f);
        if let Some((_, t)) = self.streams.as_mut() {
            t.clear();
        }
    }

    fn token_iteration(
        &mut self,
        now_us: u64,
        sink: &mut dyn crate::streams::TokenSink,
    ) -> Option<crate::streams::GenTally> {
        let (tok, g) = self.generator.as_mut()?;
        let (spec, table) = self.streams.as_mut()?;
        let mut dec = OrtDecode {
            model: &mut self.model,
            stats: &mut self.stats,
            spec,
            tok: *tok,
            batch: self.token_batch.as_mut(),
        };
        Some(g.iteration(table, now_us, sink, &mut dec))
    }

    fn stream_identity(&self) -> Option<(&str, u64)> {
        // Token streams do not move across an alias switch (their
        // generation is this handler's); they end with their version.
        if self.generator.is_some() {
            return None;
        }
        self.streams
            .as_ref()
            .map(|_| (self.model.name(), self.stream_sig))
    }

    fn holds_stream(&self, tenant: u32, stream_id: u64) -> bool {
        self.streams
            .as_ref()
            .is_some_and(|(_, t)| t.contains(tenant, stream_id))
    }

    fn take_stream(&mut self, tenant: u32, stream_id: u64) -> Option<(u32, &[u8])> {
        let (_, t) = self.streams.as_mut()?;
        t.take(tenant, stream_id)
    }

    fn adopt_stream(
        &mut self,
        tenant: u32,
        stream_id: u64,
        next_seq: u32,
        state: &[u8],
        now_us: u64,
    ) -> bool {
        self.streams
            .as_mut()
            .is_some_and(|(_, t)| t.adopt(tenant, stream_id, next_seq, state, now_us))
    }

    fn stream_tick(&mut self, now_us: u64) -> Option<(crate::streams::TableCounts, usize)> {
        let (_, table) = self.streams.as_mut()?;
        table.reclaim_idle(now_us, RECLAIM_SCAN_MAX);
        Some((table.take_counts(), table.open()))
    }

    fn batch_key(
        &self,
        req: &sluice_wire::Frame<&[u8]>,
        adapter: Option<&str>,
    ) -> Option<crate::handler::BatchKey> {
        // A stream frame runs on its stream's state, never in a batch.
        if self.streams.is_some() || req.stream().is_some() {
            return None;
        }
        self.model.batch_key(req, adapter)
    }

    fn run_batch(
        &mut self,
        reqs: &[&[u8]],
        adapter: Option<&str>,
        input: &mut [u8],
        output: &mut [u8],
        slots: &mut [crate::handler::BatchSlot],
        acct: &mut crate::handler::RunAccount,
    ) -> Result<usize, crate::vocab::Reject> {
        let n = reqs
            .len()
            .min(slots.len())
            .min(sluice_infer::BATCH_ROWS_MAX);
        let before = self.stats.payload_bytes_copied;
        let r = self.model.run_batch(
            &reqs[..n],
            adapter,
            input,
            output,
            &mut slots[..n],
            &mut self.stats,
        );
        acct.payload_bytes_copied += self.stats.payload_bytes_copied - before;
        r
    }

    fn batch_reply(
        &mut self,
        req: &sluice_wire::Frame<&[u8]>,
        adapter: Option<&str>,
        slot: crate::handler::BatchSlot,
        output: &[u8],
        tx: &mut [u8],
        acct: &mut crate::handler::RunAccount,
    ) -> Result<usize, crate::vocab::Reject> {
        let before = self.stats.payload_bytes_copied;
        let r = self
            .model
            .batch_reply(req, adapter, slot, output, tx, &mut self.stats);
        acct.payload_bytes_copied += self.stats.payload_bytes_copied - before;
        r
    }
}
