//! How the per-request cost grows with the configuration (issue 22), in one
//! run. Every figure is `worker::classify_frame` (parse, HMAC check,
//! validate, route, admit) on one signed request, the fastest of several
//! rounds (the least disturbed on a shared machine), as a
//! ratio against the smallest configuration of the same curve:
//!
//! 1. routes 1 / 10 / 100 / 1,000 / 10,000 by matcher kind, the match last;
//!    beside each, the routing step alone through the index and through the
//!    reference linear matcher (`RouteTable::first_allowed_linear`);
//! 2. a tenant's `models` list of 1 to 16,384 exact names or `name*`
//!    prefixes, the request's model last;
//! 3. aliases of the model 1 to 1,024, the request naming the last;
//! 4. tenants 1 to 4,096, the request from the last;
//! 5. control-side compile of a table (`Tables::build`: validation and the
//!    index) for 1,000 and 10,000 routes;
//! 7. apply time to busy and idle workers (`apply.rs`);
//! 8. the engine's ceiling: one worker's loop over an in-memory transport
//!    (`ceiling.rs`).
//!
//! cargo run --release -p sluice-scaling-bench [-- --quick] [--compile (part 5 only)] [--memory (part 6 only)] [--apply (part 7 only)] [--ceiling (part 8 only)] [--models (parts 4b, 4c only)]
#![deny(unsafe_code)]

mod apply;
mod ceiling;

use std::hint::black_box;
use std::time::Instant;

use sluice_engine::config::{Config, RouteCfg, TenantCfg};
use sluice_engine::route::{RouteFound, RouteKey};
use sluice_engine::schema::{SchemaCfg, SchemaTable};
use sluice_engine::tables::{HostView, LiveConfig, Tables};
use sluice_engine::worker::{Verdict, classify_frame};
use sluice_wire::{DType, Frame, FrameRepr, Kind, SECTION_TENSOR_NAME, TenantKey, TensorRepr};

pub(crate) type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

pub(crate) const KEY: [u8; 32] = [7; 32];
pub(crate) const TENANT: u32 = 7;
const SIZES: [usize; 5] = [1, 10, 100, 1_000, 10_000];

const BASE: &str = r#"
[engine]
workers = [0]

[io_uring]
listen = "127.0.0.1:0"

[[shards]]
name = "main"
max_concurrency = 64
queue_depth = 256

[[shards]]
name = "other"
max_concurrency = 64
queue_depth = 256

[[models]]
name = "null"
version = "1.0.0"
kind = "null"
"#;

const JSON_SCHEMA: &str = r#"{"type": "object", "properties": {"text": {"type": "string"},
  "priority": {"type": "integer"}, "intent": {"type": "string"}}, "required": ["intent"]}"#;

fn key_hex() -> String {
    KEY.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn tenant(name: &str, id: u32) -> TenantCfg {
    TenantCfg {
        name: name.into(),
        id,
        key: format!("hex:{}", key_hex()),
        models: vec!["*".into()],
        adapters: vec!["*".into()],
        routes: vec!["*".into()],
        subjects: vec!["*".into()],
        tokens: vec![],
    }
}

/// A 1 KiB JSON section whose `intent` member comes last.
fn section() -> Vec<u8> {
    let doc = |n: usize| {
        format!(
            r#"{{"text":"{}","priority":3,"intent":"chat"}}"#,
            "x".repeat(n)
        )
    };
    let short = doc(0).len();
    doc(1024 - short).into_bytes()
}

struct Req {
    model: &'static str,
    version: &'static str,
    intent: &'static str,
    tenant_id: u32,
    json: bool,
    /// Schema of the JSON section (with `json`).
    schema_id: u32,
}

impl Default for Req {
    fn default() -> Self {
        Req {
            model: "null",
            version: "1.0.0",
            intent: "chat",
            tenant_id: TENANT,
            json: false,
            schema_id: 1,
        }
    }
}

fn frame(r: &Req) -> Result<Vec<u8>> {
    let x: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    let dx = [1u64, 4];
    let s = section();
    let ds = [s.len() as u64];
    let mut t = vec![TensorRepr {
        name: "x",
        dtype: DType::F32,
        dims: &dx,
        data: Some(&x),
    }];
    if r.json {
        t.push(TensorRepr {
            name: SECTION_TENSOR_NAME,
            dtype: DType::U8,
            dims: &ds,
            data: Some(&s),
        });
    }
    let repr = FrameRepr {
        kind: Kind::Request,
        request_id: 1,
        tenant_id: r.tenant_id,
        model: r.model,
        model_version: r.version,
        intent: r.intent,
        schema_id: if r.json { r.schema_id } else { 0 },
        tensors: &t,
        ..FrameRepr::default()
    };
    let mut buf = vec![0u8; 8192];
    let n = repr.emit(&mut buf)?.frame_len;
    buf.truncate(n);
    TenantKey::new(&KEY).sign(&mut Frame::new_unchecked(&mut buf[..]));
    Ok(buf)
}

/// Schema `id` of subject `req-<id>`: the JSON schema every request's
/// section is checked against.
fn schema_cfg(id: u32) -> SchemaCfg {
    SchemaCfg {
        id,
        subject: format!("req-{id}"),
        version: 1,
        schema_type: "JSON".into(),
        schema: JSON_SCHEMA.into(),
        retired: false,
        references: Vec::new(),
    }
}

pub(crate) fn build(live: &LiveConfig, cfg: &Config) -> Result<Tables> {
    build_with(live, cfg, &[schema_cfg(1)])
}

fn build_with(live: &LiveConfig, cfg: &Config, schemas: &[SchemaCfg]) -> Result<Tables> {
    let slots: Vec<usize> = (0..live.models.len()).collect();
    let schemas = SchemaTable::build(schemas, 30_000)?;
    Ok(Tables::build(live, &HostView::of(cfg), &slots, schemas)?)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// ns per call of `f`: the fastest of `rounds` rounds of about `round_ms`
/// each. On a shared VM the fastest round is the one least disturbed by
/// other processes; the median drifts with their load.
pub(crate) fn time(rounds: usize, round_ms: f64, mut f: impl FnMut()) -> f64 {
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed().as_secs_f64() * 1e3 < round_ms / 4.0 {
        f();
        n += 1;
    }
    let per = t0.elapsed().as_secs_f64() / n as f64;
    let iters = ((round_ms / 1e3 / per) as u64).max(1);
    let mut v = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..iters {
            f();
        }
        v.push(t.elapsed().as_nanos() as f64 / iters as f64);
    }
    v.into_iter().fold(f64::INFINITY, f64::min)
}

struct Bench {
    rounds: usize,
    round_ms: f64,
}

/// Classification ns of each (tables, frame, shard), timed in interleaved
/// rounds (every configuration once per round, so a burst of load on the
/// machine hits all alike); the fastest round of each.
fn interleaved(b: &Bench, cases: &[(Tables, Vec<u8>, usize)]) -> Result<Vec<f64>> {
    let mut iters = Vec::new();
    for (t, bytes, shard) in cases {
        match classify_frame(bytes, false, t, false, 0, None) {
            Verdict::Admit { shard: s, .. } if s == *shard => {}
            v => return Err(format!("not admitted on shard {shard}: {v:?}").into()),
        }
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed().as_secs_f64() * 1e3 < b.round_ms / 8.0 {
            black_box(classify_frame(black_box(bytes), false, t, false, 0, None));
            n += 1;
        }
        let per = t0.elapsed().as_secs_f64() / n as f64;
        iters.push(((b.round_ms / 2.0 / 1e3 / per) as u64).max(1));
    }
    let mut best = vec![f64::INFINITY; cases.len()];
    for _ in 0..b.rounds {
        for (i, (t, bytes, _)) in cases.iter().enumerate() {
            let t0 = Instant::now();
            for _ in 0..iters[i] {
                black_box(classify_frame(black_box(bytes), false, t, false, 0, None));
            }
            best[i] = best[i].min(t0.elapsed().as_nanos() as f64 / iters[i] as f64);
        }
    }
    Ok(best)
}

#[derive(Clone, Copy)]
enum Kind2 {
    ExactModel,
    ExactIntent,
    SemverModels,
    SemverOneModel,
    Content,
    GlobModel,
}

impl Kind2 {
    fn name(self) -> &'static str {
        match self {
            Kind2::ExactModel => "exact model (distinct models)",
            Kind2::ExactIntent => "exact intent (one model)",
            Kind2::SemverModels => "semver range (distinct models)",
            Kind2::SemverOneModel => "semver range only (one model)",
            Kind2::Content => "content `$.intent == \"…\"` (one model)",
            Kind2::GlobModel => "model glob `m<i>-*`",
        }
    }

    /// Route i of n (the last one matches the request).
    fn route(self, i: usize, n: usize) -> RouteCfg {
        let last = i + 1 == n;
        let mut r = RouteCfg {
            name: format!("r{i}"),
            shard: if last { "main" } else { "other" }.into(),
            ..RouteCfg::default()
        };
        match self {
            Kind2::ExactModel => {
                r.model = Some(if last { "null".into() } else { format!("m{i}") });
            }
            Kind2::ExactIntent => {
                r.model = Some("null".into());
                r.intent = Some(if last { "chat".into() } else { format!("i{i}") });
            }
            Kind2::SemverModels => {
                r.model = Some(if last { "null".into() } else { format!("m{i}") });
                r.version = Some("^1".into());
            }
            Kind2::SemverOneModel => {
                r.model = Some("null".into());
                r.version = Some(if last {
                    "^1".into()
                } else {
                    format!(">={}.0.0, <{}.0.0", i + 2, i + 3)
                });
            }
            Kind2::Content => {
                r.model = Some("null".into());
                r.content = vec![if last {
                    r#"$.intent == "chat""#.into()
                } else {
                    format!(r#"$.intent == "c{i}""#)
                }];
            }
            Kind2::GlobModel => {
                r.model = Some(if last {
                    "nul*".into()
                } else {
                    format!("m{i}-*")
                });
            }
        }
        r
    }
}

fn routes(b: &Bench, cfg: &Config) -> Result<()> {
    println!(
        "## 1. Routes, the match last (classify ns, ratio to 1 route; routing step alone: index and linear scan, ns)\n"
    );
    println!(
        "| matcher | routes | classify ns | ratio | route step, index ns | route step, linear ns |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for kind in [
        Kind2::ExactModel,
        Kind2::ExactIntent,
        Kind2::SemverModels,
        Kind2::SemverOneModel,
        Kind2::Content,
        Kind2::GlobModel,
    ] {
        let req = Req {
            json: matches!(kind, Kind2::Content),
            ..Req::default()
        };
        let bytes = frame(&req)?;
        let s = section();
        let k = RouteKey {
            model: "null",
            version: "1.0.0",
            adapter: "",
            intent: "chat",
            tenant: "t",
            json: req.json.then_some(&s[..]),
        };
        let mut cases = Vec::new();
        for n in SIZES {
            let mut live = LiveConfig::of(cfg);
            live.routes = (0..n).map(|i| kind.route(i, n)).collect();
            cases.push((build(&live, cfg)?, bytes.clone(), 0));
        }
        let ns = interleaved(b, &cases)?;
        for (j, (n, (t, _, _))) in SIZES.iter().zip(&cases).enumerate() {
            let idx = time(b.rounds, b.round_ms / 4.0, || {
                black_box(matches!(
                    t.routes.first_allowed(black_box(&k), |_| true),
                    RouteFound::Route(_)
                ));
            });
            let lin = time(b.rounds.min(5), b.round_ms / 4.0, || {
                black_box(matches!(
                    t.routes.first_allowed_linear(black_box(&k), |_| true),
                    RouteFound::Route(_)
                ));
            });
            println!(
                "| {} | {n} | {:.0} | {:.2}× | {idx:.0} | {lin:.0} |",
                kind.name(),
                ns[j],
                ns[j] / ns[0]
            );
        }
    }
    println!();
    Ok(())
}

fn allow_lists(b: &Bench, cfg: &Config) -> Result<()> {
    println!("## 2. A tenant's `models` list, the request's model last\n");
    println!("| entries | form | classify ns | ratio |");
    println!("| --- | --- | ---: | ---: |");
    let bytes = frame(&Req::default())?;
    for prefix in [false, true] {
        let sizes = [1usize, 100, 1_000, 16_384];
        let mut cases = Vec::new();
        for n in sizes {
            let mut live = LiveConfig::of(cfg);
            live.routes = vec![Kind2::ExactModel.route(0, 1)];
            let mut models: Vec<String> = (0..n - 1)
                .map(|i| {
                    if prefix {
                        format!("m{i}-*")
                    } else {
                        format!("m{i}")
                    }
                })
                .collect();
            models.push(if prefix { "nu*".into() } else { "null".into() });
            live.tenants[0].models = models;
            cases.push((build(&live, cfg)?, bytes.clone(), 0));
        }
        let ns = interleaved(b, &cases)?;
        let form = if prefix { "`name*`" } else { "exact" };
        for (j, n) in sizes.iter().enumerate() {
            println!("| {n} | {form} | {:.0} | {:.2}× |", ns[j], ns[j] / ns[0]);
        }
    }
    println!();
    Ok(())
}

fn aliases(b: &Bench, cfg: &Config) -> Result<()> {
    println!("## 3. Aliases of the model, the request naming the last\n");
    println!("| aliases | classify ns | ratio |");
    println!("| ---: | ---: | ---: |");
    let sizes = [1usize, 10, 100, 1_024];
    let mut cases = Vec::new();
    for n in sizes {
        let mut live = LiveConfig::of(cfg);
        live.routes = vec![Kind2::ExactModel.route(0, 1)];
        live.models[0].aliases = (0..n).map(|i| format!("a{i}")).collect();
        let t = build(&live, cfg)?;
        let last: &'static str = Box::leak(format!("a{}", n - 1).into_boxed_str());
        let bytes = frame(&Req {
            version: last,
            ..Req::default()
        })?;
        cases.push((t, bytes, 0));
    }
    let ns = interleaved(b, &cases)?;
    for (j, n) in sizes.iter().enumerate() {
        println!("| {n} | {:.0} | {:.2}× |", ns[j], ns[j] / ns[0]);
    }
    println!();
    Ok(())
}

fn tenants(b: &Bench, cfg: &Config) -> Result<()> {
    println!("## 4. Tenants, the request from the last\n");
    println!("| tenants | classify ns | ratio |");
    println!("| ---: | ---: | ---: |");
    let sizes = [1usize, 100, 1_000, 4_096];
    let mut cases = Vec::new();
    for n in sizes {
        let mut live = LiveConfig::of(cfg);
        live.routes = vec![Kind2::ExactModel.route(0, 1)];
        live.tenants = (0..n)
            .map(|i| tenant(&format!("t{i}"), 1000 + i as u32))
            .collect();
        let t = build(&live, cfg)?;
        let bytes = frame(&Req {
            tenant_id: 1000 + n as u32 - 1,
            ..Req::default()
        })?;
        cases.push((t, bytes, 0));
    }
    let ns = interleaved(b, &cases)?;
    for (j, n) in sizes.iter().enumerate() {
        println!("| {n} | {:.0} | {:.2}× |", ns[j], ns[j] / ns[0]);
    }
    println!();
    Ok(())
}

fn models(b: &Bench, cfg: &Config) -> Result<()> {
    println!("## 4b. Loaded model versions, the request naming the last\n");
    println!(
        "| versions | other models, classify ns | ratio | versions of one model, classify ns | ratio |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: |");
    let sizes = [1usize, 10, 100, 1_000, 4_096];
    let base = cfg.models[0].clone();
    let (mut others, mut versions) = (Vec::new(), Vec::new());
    for n in sizes {
        // n - 1 other models, then the one the request names.
        let mut live = LiveConfig::of(cfg);
        live.routes = vec![Kind2::ExactModel.route(0, 1)];
        live.models = (0..n - 1)
            .map(|i| {
                let mut m = base.clone();
                m.name = format!("m{i}");
                m
            })
            .chain(std::iter::once(base.clone()))
            .collect();
        others.push((build(&live, cfg)?, frame(&Req::default())?, 0));
        // n versions of the one model, the request naming the last.
        let mut live = LiveConfig::of(cfg);
        live.routes = vec![Kind2::ExactModel.route(0, 1)];
        live.models = (0..n)
            .map(|i| {
                let mut m = base.clone();
                m.version = format!("1.{i}.0");
                m
            })
            .collect();
        let last: &'static str = Box::leak(format!("1.{}.0", n - 1).into_boxed_str());
        let bytes = frame(&Req {
            version: last,
            ..Req::default()
        })?;
        versions.push((build(&live, cfg)?, bytes, 0));
    }
    let (a, v) = (interleaved(b, &others)?, interleaved(b, &versions)?);
    for (j, n) in sizes.iter().enumerate() {
        println!(
            "| {n} | {:.0} | {:.2}× | {:.0} | {:.2}× |",
            a[j],
            a[j] / a[0],
            v[j],
            v[j] / v[0]
        );
    }
    println!();
    Ok(())
}

fn schemas(b: &Bench, cfg: &Config) -> Result<()> {
    println!("## 4c. Registered schemas, a 1 KiB JSON section checked against the last\n");
    println!("| schemas | classify ns | ratio |");
    println!("| ---: | ---: | ---: |");
    let sizes = [1usize, 10, 100, 1_000, 4_096];
    let mut cases = Vec::new();
    for n in sizes {
        let mut live = LiveConfig::of(cfg);
        live.routes = vec![Kind2::ExactModel.route(0, 1)];
        let list: Vec<SchemaCfg> = (1..=n as u32).map(schema_cfg).collect();
        let bytes = frame(&Req {
            json: true,
            schema_id: n as u32,
            ..Req::default()
        })?;
        cases.push((build_with(&live, cfg, &list)?, bytes, 0));
    }
    let ns = interleaved(b, &cases)?;
    for (j, n) in sizes.iter().enumerate() {
        println!("| {n} | {:.0} | {:.2}× |", ns[j], ns[j] / ns[0]);
    }
    println!();
    Ok(())
}

fn compile(cfg: &Config) -> Result<()> {
    println!("## 5. Control side: `Tables::build` (validation + index), median of 5\n");
    println!("| routes | matcher | ms | ratio to 1,000 |");
    println!("| ---: | --- | ---: | ---: |");
    for kind in [Kind2::ExactModel, Kind2::SemverOneModel, Kind2::Content] {
        let mut base = 0.0;
        for n in [1_000usize, 3_000, 10_000] {
            let mut live = LiveConfig::of(cfg);
            live.routes = (0..n).map(|i| kind.route(i, n)).collect();
            let mut v = Vec::new();
            for _ in 0..5 {
                let t0 = Instant::now();
                black_box(build(&live, cfg)?);
                v.push(t0.elapsed().as_secs_f64() * 1e3);
            }
            let ms = median(v);
            if n == 1_000 {
                base = ms;
            }
            println!("| {n} | {} | {ms:.2} | {:.2}× |", kind.name(), ms / base);
        }
    }
    println!();
    Ok(())
}

/// Memory per entry: resident growth while four copies of 10,000-entry
/// tables are held, first thing in a fresh process (`--memory`) so that no
/// freed memory is reused.
fn memory(cfg: &Config) -> Result<()> {
    println!("## 6. Memory per entry (resident growth, 4 copies held)\n");
    // Memory per entry: resident growth while 10,000-entry tables are held.
    println!("| table | entries | resident bytes per entry |");
    println!("| --- | ---: | ---: |");
    for kind in [Kind2::ExactModel, Kind2::SemverOneModel, Kind2::Content] {
        let n = 10_000;
        let mut live = LiveConfig::of(cfg);
        live.routes = (0..n).map(|i| kind.route(i, n)).collect();
        let before = rss_bytes();
        let held: Vec<Tables> = (0..4).map(|_| build(&live, cfg)).collect::<Result<_>>()?;
        let per = (rss_bytes().saturating_sub(before)) as f64 / (4 * n) as f64;
        black_box(&held);
        println!("| routes, {} | {n} | {per:.0} |", kind.name());
    }
    {
        let n = 16_384;
        let mut live = LiveConfig::of(cfg);
        live.tenants[0].models = (0..n).map(|i| format!("model-{i}")).collect();
        let before = rss_bytes();
        let held: Vec<Tables> = (0..4).map(|_| build(&live, cfg)).collect::<Result<_>>()?;
        let per = (rss_bytes().saturating_sub(before)) as f64 / (4 * n) as f64;
        black_box(&held);
        println!("| a tenant's `models`, exact | {n} | {per:.0} |");
    }
    println!();
    Ok(())
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn main() -> Result<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let b = Bench {
        rounds: if quick { 5 } else { 21 },
        round_ms: if quick { 10.0 } else { 20.0 },
    };
    let mut cfg = Config::parse(BASE, std::env::temp_dir())?;
    cfg.tenants = vec![tenant("t", TENANT)];
    println!(
        "# Scaling: classify_frame on a signed request as the configuration grows (fastest of {} rounds)\n",
        b.rounds
    );
    if std::env::args().any(|a| a == "--memory") {
        return memory(&cfg);
    }
    if std::env::args().any(|a| a == "--compile") {
        return compile(&cfg);
    }
    if std::env::args().any(|a| a == "--apply") {
        return apply::apply(&cfg);
    }
    if std::env::args().any(|a| a == "--ceiling") {
        return ceiling::ceiling(&cfg);
    }
    if std::env::args().any(|a| a == "--models") {
        models(&b, &cfg)?;
        return schemas(&b, &cfg);
    }
    routes(&b, &cfg)?;
    allow_lists(&b, &cfg)?;
    aliases(&b, &cfg)?;
    tenants(&b, &cfg)?;
    models(&b, &cfg)?;
    schemas(&b, &cfg)?;
    compile(&cfg)?;
    apply::apply(&cfg)?;
    ceiling::ceiling(&cfg)?;
    Ok(())
}
