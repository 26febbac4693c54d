//! Schema transforms as the workers see them: for every route and model
//! that declares `accepts = {subject, version}`, what to do with a request
//! of each registered version of that subject: nothing (it is the accepted
//! version), run the transform in a given slot, or refuse naming both
//! versions. Built on the control side with the other tables and published
//! with them (RCU), so a request runs entirely on one transform version.

use std::collections::{BTreeMap, HashSet};
use std::sync::Mutex;

use sluice_transform::{Input, Target};
use sluice_wire::{ErrorCode, Reject, SchemaType};

use crate::config::{AcceptsCfg, ModelCfg, RouteCfg};
use crate::schema::SchemaTable;

/// Limits.
pub mod limits {
    /// Transform slots on every worker (a swap holds two for a moment).
    pub const TRANSFORM_SLOT_COUNT_MAX: usize = 128;
    /// Transforms registered at once.
    pub const TRANSFORM_COUNT_MAX: usize = 64;
    /// Distinct refusal messages kept (each names a subject and two
    /// versions); past this, refusals use a generic message.
    pub const MESSAGE_COUNT_MAX: usize = 4096;
}

/// A transform a request goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransformRef {
    /// Slot of the instance on every worker.
    pub slot: u16,
    /// Section or tensors.
    pub input: Input,
    /// The request's version.
    pub from: u32,
    /// The accepted version.
    pub to: u32,
    /// Id and version the request is rebuilt at.
    pub target: Target,
}

#[derive(Debug, Clone, Copy)]
enum Step {
    Run(TransformRef),
    Refuse(&'static str),
}

/// What one `accepts` resolves to.
#[derive(Debug, Clone)]
struct Accepts {
    subject: String,
    version: u32,
    /// Request version -> step; the accepted version is absent.
    steps: Vec<(u32, Step)>,
    /// Set when the accepted version is not registered.
    missing: Option<&'static str>,
}

/// Every `accepts`, indexed by route and by model slot.
#[derive(Debug, Clone, Default)]
pub struct TransformTable {
    accepts: Vec<Accepts>,
    by_route: Vec<Option<u32>>,
    by_slot: BTreeMap<usize, u32>,
}

/// The registered transforms: (subject, from, to) -> slot.
pub type Registered = BTreeMap<(String, u32, u32), usize>;

static MESSAGES: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);

/// A refusal message with a subject and versions in it, kept for the life
/// of the process (error frames carry static messages). Bounded: past
/// `MESSAGE_COUNT_MAX` distinct ones, `fallback`.
fn intern(msg: String, fallback: &'static str) -> &'static str {
    let mut g = MESSAGES.lock().unwrap_or_else(|p| p.into_inner());
    let set = g.get_or_insert_with(HashSet::new);
    if let Some(&m) = set.get(msg.as_str()) {
        return m;
    }
    if set.len() >= limits::MESSAGE_COUNT_MAX {
        return fallback;
    }
    let m: &'static str = Box::leak(msg.into_boxed_str());
    set.insert(m);
    m
}

const NO_TRANSFORM: &str =
    "no transform from the request's schema version to the one its route accepts";

fn resolve(a: &AcceptsCfg, schemas: &SchemaTable, registered: &Registered) -> Accepts {
    let versions = schemas.versions(&a.subject);
    let target = versions.iter().find(|e| e.0 == a.version).copied();
    let missing = target.is_none().then(|| {
        intern(
            format!(
                "the route accepts {} version {}, which is not registered",
                a.subject, a.version
            ),
            NO_TRANSFORM,
        )
    });
    let steps = versions
        .iter()
        .filter(|(v, _, _)| *v != a.version)
        .map(|&(v, _, ty)| {
            let found = registered.get(&(a.subject.clone(), v, a.version));
            let step = match (found, target) {
                (Some(&slot), Some((_, id, _))) => Step::Run(TransformRef {
                    slot: slot as u16,
                    input: if ty == SchemaType::Tensor {
                        Input::Tensors
                    } else {
                        Input::Section
                    },
                    from: v,
                    to: a.version,
                    target: Target {
                        schema_id: id,
                        schema_version: a.version,
                    },
                }),
                _ => Step::Refuse(intern(
                    format!(
                        "no transform registered for {} from version {v} to version {}",
                        a.subject, a.version
                    ),
                    NO_TRANSFORM,
                )),
            };
            (v, step)
        })
        .collect();
    Accepts {
        subject: a.subject.clone(),
        version: a.version,
        steps,
        missing,
    }
}

impl TransformTable {
    /// Resolves every route's and model's `accepts` against the schemas and
    /// the registered transforms. `slots[i]` is model i's handler slot.
    pub fn build(
        routes: &[RouteCfg],
        models: &[ModelCfg],
        slots: &[usize],
        schemas: &SchemaTable,
        registered: &Registered,
    ) -> TransformTable {
        let mut t = TransformTable::default();
        for r in routes {
            let idx = r.accepts.as_ref().map(|a| {
                t.accepts.push(resolve(a, schemas, registered));
                (t.accepts.len() - 1) as u32
            });
            t.by_route.push(idx);
        }
        for (m, &slot) in models.iter().zip(slots) {
            if let Some(a) = &m.accepts {
                t.accepts.push(resolve(a, schemas, registered));
                t.by_slot.insert(slot, (t.accepts.len() - 1) as u32);
            }
        }
        t
    }

    /// What to do with a request routed by `route` to the model in `slot`
    /// (if local), whose validated schema is `schema` (subject, version).
    /// `Ok(None)`: serve it as it is. Allocates nothing.
    pub fn decide(
        &self,
        route: usize,
        slot: Option<usize>,
        schema: Option<(&str, u32)>,
    ) -> Result<Option<TransformRef>, Reject> {
        let idx = self
            .by_route
            .get(route)
            .copied()
            .flatten()
            .or_else(|| slot.and_then(|s| self.by_slot.get(&s).copied()));
        let Some(a) = idx.and_then(|i| self.accepts.get(i as usize)) else {
            return Ok(None);
        };
        let mismatch = |m| Err(Reject::new(ErrorCode::SchemaMismatch, m));
        let Some((subject, version)) = schema else {
            return mismatch("this route accepts one schema subject; the request names no schema");
        };
        if subject != a.subject {
            return mismatch("the request's schema subject is not the one its route accepts");
        }
        if let Some(m) = a.missing {
            return mismatch(m);
        }
        if version == a.version {
            return Ok(None);
        }
        match a.steps.iter().find(|(v, _)| *v == version) {
            Some((_, Step::Run(r))) => Ok(Some(*r)),
            Some((_, Step::Refuse(m))) => mismatch(m),
            None => mismatch(NO_TRANSFORM),
        }
    }

    /// Whether any route or model declares `accepts`.
    pub fn is_empty(&self) -> bool {
        self.accepts.is_empty()
    }
}
