//! Live changes: tables validated whole, new model versions loaded off the
//! hot path and installed on every worker, tables published by RCU, and
//! the waits for workers to pick them up.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::*;
use crate::config::{ConfigError, ModelCfg};
use crate::handler::Handler;
use crate::schema::{SchemaCfg, SchemaTable};
use crate::tables::{HostView, LiveConfig, Tables};
use crate::worker::WorkerMsg;

impl Engine {
    /// The oldest epoch a serving worker runs on. A worker down after a
    /// panic is left out: it catches up before it serves again, and the
    /// snapshot it holds stays alive through its own reference.
    fn min_epoch(&self) -> u64 {
        self.workers
            .iter()
            .filter(|w| w.counters.alive.load(Ordering::Acquire))
            .map(|w| w.counters.epoch.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Wakes every worker that sleeps (adaptive mode, idle) so it reaches a
    /// burst boundary and sees the new epoch or control message now, not at
    /// the end of its sleep. One eventfd write per sleeping worker; a busy
    /// worker is not written to.
    fn poke(&self) {
        if self.opts.no_wake {
            return;
        }
        // Pairs with the fence in the worker's sleep: either the worker sees
        // the change before it sleeps, or this sees its `sleeping` flag.
        std::sync::atomic::fence(Ordering::SeqCst);
        for w in &self.workers {
            if let Some(k) = &w.wake {
                k.notify();
            }
        }
    }

    /// Waits until every worker runs on `epoch` or later, then frees
    /// snapshots nobody holds. Sleeping adaptive workers are poked; those
    /// whose transport polls no eventfd wake within their sleep bound.
    pub(super) fn wait_epoch(&self, epoch: u64) -> Result<(), EngineError> {
        self.poke();
        let deadline = Instant::now() + SLOT_WAIT;
        let t0 = Instant::now();
        while self.is_running() && self.min_epoch() < epoch {
            if Instant::now() > deadline {
                return Err(EngineError::Timeout(
                    "a worker did not pick up the change in time".into(),
                ));
            }
            // Busy workers see the epoch within a burst: yield briefly first;
            // sleeping adaptive workers need up to their sleep bound.
            if t0.elapsed() < Duration::from_micros(500) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        self.shared.tables.reclaim(self.min_epoch());
        self.drain_returned();
        Ok(())
    }

    pub(super) fn drain_returned(&self) {
        for w in &self.workers {
            while let Ok(h) = w.returned.try_recv() {
                drop(h);
            }
        }
    }

    pub(super) fn wait_applied(&self, targets: &[u64]) -> Result<(), EngineError> {
        self.poke();
        let deadline = Instant::now() + SLOT_WAIT;
        for (w, &t) in self.workers.iter().zip(targets) {
            // A worker down after a panic is not waited for: the messages
            // wait in its channel and are applied before it serves again.
            while w.counters.alive.load(Ordering::Acquire)
                && w.counters.control_applied.load(Ordering::Acquire) < t
            {
                if Instant::now() > deadline {
                    return Err(EngineError::Timeout(
                        "a worker did not apply a control message in time".into(),
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }

    /// Replaces the live tables. Validated whole first: a bad set changes
    /// nothing. New model versions are loaded off the hot path and installed
    /// on every worker before the tables that name them are published;
    /// versions no longer named are removed after every worker has moved on.
    pub fn apply(&self, live: LiveConfig) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        self.apply_locked(&mut ctl, live, None)
    }

    pub(super) fn lock_control(&self) -> Result<std::sync::MutexGuard<'_, Control>, EngineError> {
        // A panic while holding the lock left no half-applied tables (they
        // are published in one swap), so the state is still usable.
        Ok(self.control.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Replaces any of the sections `shards`, `routes`, `models`, `tenants`,
    /// `peers` and `schemas` given in a JSON object, atomically: the merged
    /// set is validated whole and applied in one publication.
    pub fn apply_json(&self, doc: &[u8]) -> Result<u64, EngineError> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Sections {
            shards: Option<Vec<crate::config::ShardCfg>>,
            routes: Option<Vec<crate::config::RouteCfg>>,
            models: Option<Vec<ModelCfg>>,
            tenants: Option<Vec<crate::config::TenantCfg>>,
            peers: Option<Vec<crate::config::PeerCfg>>,
            schemas: Option<Vec<SchemaCfg>>,
        }
        let s: Sections = serde_json::from_slice(doc)
            .map_err(|e| EngineError::InvalidArgument(format!("sections: {e}")))?;
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if let Some(v) = s.shards {
            live.shards = v;
        }
        if let Some(v) = s.routes {
            live.routes = v;
        }
        if let Some(v) = s.models {
            live.models = v;
        }
        if let Some(v) = s.tenants {
            live.tenants = v;
        }
        if let Some(v) = s.peers {
            live.peers = v;
        }
        self.apply_locked(&mut ctl, live, s.schemas)
    }

    pub(super) fn apply_locked(
        &self,
        ctl: &mut Control,
        live: LiveConfig,
        new_schemas: Option<Vec<SchemaCfg>>,
    ) -> Result<u64, EngineError> {
        crate::config::validate_tables(
            &live.shards,
            &live.routes,
            &live.models,
            &live.tenants,
            &live.peers,
            self.cfg.engine.workers.len(),
        )?;
        crate::config::auth_allows_tenants(self.cfg.auth.mode, &live.tenants)?;
        let schema_list = new_schemas.as_ref().unwrap_or(&ctl.schemas);
        let (_, current) = self.shared.tables.load();
        let schemas = SchemaTable::build_reusing(
            schema_list,
            ctl.schema_ttl_ms,
            &current.schemas,
            self.cfg.engine.json_schema_format,
        )
        .map_err(|m| ConfigError::at("schemas", m))?;
        let (slots, fresh) = assign_slots(&ctl.slots, &live.models)?;
        let slot_list: Vec<usize> = live
            .models
            .iter()
            .map(|m| slots[&(m.name.clone(), m.version.clone())])
            .collect();
        // Validated above, before any model was loaded.
        let mut tables = Tables::compile(&live, &HostView::of(&self.cfg), &slot_list, schemas)?;
        tables.transforms = crate::transform::TransformTable::build(
            &live.routes,
            &live.models,
            &slot_list,
            &tables.schemas,
            &ctl.transforms.registered(),
        );

        // 1. Load new versions for every worker (off the hot path) and install.
        if self.is_running() && !fresh.is_empty() {
            self.install(&fresh)?;
        }
        // 2. Publish the tables and wait for every worker to run on them.
        let epoch = self.shared.tables.publish(tables);
        if self.is_running() {
            self.wait_epoch(epoch)?;
        }
        // 3. Remove versions nobody names any more.
        let gone: Vec<usize> = ctl
            .slots
            .iter()
            .filter(|(k, _)| !slots.contains_key(*k))
            .map(|(_, &s)| s)
            .collect();
        if self.is_running() && !gone.is_empty() {
            for w in &self.workers {
                for &slot in &gone {
                    let _ = w.ctrl.send(WorkerMsg::Remove { slot });
                }
            }
            self.poke();
        }
        ctl.slots = slots;
        ctl.live = live;
        if let Some(v) = new_schemas {
            ctl.schemas = v;
        }
        Ok(epoch)
    }

    /// Loads `fresh` versions for every worker and installs them in their
    /// slots; returns once every worker has applied them.
    fn install(&self, fresh: &[(usize, ModelCfg)]) -> Result<(), EngineError> {
        let mut per_worker: Vec<Vec<(usize, Box<dyn Handler>)>> = Vec::new();
        for _ in &self.workers {
            let mut v = Vec::new();
            for (slot, m) in fresh {
                let h = (self.factory)(m, &self.cfg)
                    .map_err(|e| EngineError::Model(format!("{} {}: {e}", m.name, m.version)))?;
                v.push((*slot, h));
            }
            per_worker.push(v);
        }
        let targets: Vec<u64> = self
            .workers
            .iter()
            .map(|w| w.counters.control_applied.load(Ordering::Acquire) + fresh.len() as u64)
            .collect();
        for (w, hs) in self.workers.iter().zip(per_worker) {
            for (slot, handler) in hs {
                // A worker down after a panic gets it too (applied before it
                // serves again); one given up on has dropped its channel.
                if w.ctrl.send(WorkerMsg::Install { slot, handler }).is_err() {
                    break;
                }
            }
        }
        self.wait_applied(&targets)
    }

    /// Replaces the schemas the data plane validates and negotiates with.
    pub fn set_schemas(&self, schemas: Vec<SchemaCfg>, ttl_ms: u32) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        ctl.schema_ttl_ms = ttl_ms;
        let live = ctl.live.clone();
        self.apply_locked(&mut ctl, live, Some(schemas))
    }

    /// The live tables now in force.
    pub fn live(&self) -> LiveConfig {
        self.lock_control()
            .map(|c| c.live.clone())
            .unwrap_or_default()
    }

    /// Points an alias of a model at another loaded version.
    pub fn set_alias(&self, model: &str, alias: &str, version: &str) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if !live
            .models
            .iter()
            .any(|m| m.name == model && m.version == version)
        {
            return Err(EngineError::NotFound(format!(
                "model {model} version {version} is not loaded"
            )));
        }
        for m in &mut live.models {
            if m.name == model {
                m.aliases.retain(|a| a != alias);
                if m.version == version {
                    m.aliases.push(alias.to_string());
                }
            }
        }
        self.apply_locked(&mut ctl, live, None)
    }

    /// Loads one more model version (off the hot path) and publishes it.
    pub fn load_model(&self, m: ModelCfg) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if live
            .models
            .iter()
            .any(|o| o.name == m.name && o.version == m.version)
        {
            return Err(EngineError::AlreadyExists(format!(
                "model {} version {} is loaded",
                m.name, m.version
            )));
        }
        live.models.push(m);
        self.apply_locked(&mut ctl, live, None)
    }

    /// Adds a peer.
    pub fn add_peer(&self, p: crate::config::PeerCfg) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        if live.peers.iter().any(|o| o.name == p.name) {
            return Err(EngineError::AlreadyExists(format!("peer {}", p.name)));
        }
        live.peers.push(p);
        self.apply_locked(&mut ctl, live, None)
    }

    /// Removes a peer.
    pub fn remove_peer(&self, name: &str) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let mut live = ctl.live.clone();
        let before = live.peers.len();
        live.peers.retain(|p| p.name != name);
        if live.peers.len() == before {
            return Err(EngineError::NotFound(format!("peer {name}")));
        }
        self.apply_locked(&mut ctl, live, None)
    }
}

/// Keeps the slots of loaded versions; new versions take free slots.
/// Returns every version's slot and the new (slot, version) pairs.
#[allow(clippy::type_complexity)]
fn assign_slots(
    current: &HashMap<(String, String), usize>,
    models: &[ModelCfg],
) -> Result<(HashMap<(String, String), usize>, Vec<(usize, ModelCfg)>), EngineError> {
    let mut slots = HashMap::new();
    let mut fresh = Vec::new();
    // A slot is free when no loaded version holds it (versions being
    // removed keep theirs until every worker has moved on).
    let mut free = (0..crate::config::limits::MODEL_SLOT_COUNT_MAX)
        .filter(|s| !current.values().any(|v| v == s));
    for m in models {
        let key = (m.name.clone(), m.version.clone());
        let slot = match current.get(&key) {
            Some(&s) => s,
            None => {
                let s = free
                    .next()
                    .ok_or_else(|| EngineError::Model("no free model slot".into()))?;
                fresh.push((s, m.clone()));
                s
            }
        };
        slots.insert(key, slot);
    }
    Ok((slots, fresh))
}
