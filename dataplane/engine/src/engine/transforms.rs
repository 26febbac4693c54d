//! Schema transforms on the control side: modules checked and compiled off
//! the hot path, one instance per worker installed in a free slot through
//! the worker's control ring, then named by a published table (RCU); the
//! slot of a replaced or removed module is emptied only after every worker
//! runs on a table that no longer names it, and its instances come back
//! here to be dropped. A request therefore runs entirely on one version.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sluice_transform::{Instance, Module, Runtime, Stats};

use super::*;
use crate::transform::Registered;
use crate::transform::limits::{TRANSFORM_COUNT_MAX, TRANSFORM_SLOT_COUNT_MAX};
use crate::worker::WorkerMsg;

/// (subject, from, to).
type Key = (String, u32, u32);

/// One registered transform.
pub(super) struct Entry {
    module: Arc<Module>,
    slot: usize,
    /// Each worker's instance counters (the instances live on the workers).
    stats: Vec<Arc<Stats>>,
    loaded_unix_ms: u64,
}

/// The control side's transforms.
#[derive(Default)]
pub(super) struct TransformControl {
    /// Made at the first transform (it reserves the instance pool).
    runtime: Option<Arc<Runtime>>,
    entries: BTreeMap<Key, Entry>,
    /// Where the search for a free slot starts: slots are taken round the
    /// ring, so a slot just emptied is the last to be reused (a request
    /// held in a queue across a swap finds its slot empty rather than
    /// holding another module).
    next_slot: usize,
}

impl TransformControl {
    /// (subject, from, to) -> slot, for the published table.
    pub(super) fn registered(&self) -> Registered {
        self.entries
            .iter()
            .map(|(k, e)| (k.clone(), e.slot))
            .collect()
    }
}

/// A transform as status shows it: identity, and its workers' counters
/// summed.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct TransformStatus {
    /// Schema subject.
    pub subject: String,
    /// Version it reads.
    pub from: u32,
    /// Version it writes.
    pub to: u32,
    /// FNV-1a of the module, hex: which build serves.
    pub digest: String,
    /// Module length in bytes.
    pub bytes: usize,
    /// When it was loaded (Unix ms).
    pub loaded_unix_ms: u64,
    /// Worker slot.
    pub slot: usize,
    /// Calls made.
    pub calls: u64,
    /// Requests rebuilt at the target version.
    pub ok: u64,
    /// Refused by the module or its limits (schema_mismatch).
    pub refused: u64,
    /// Traps.
    pub traps: u64,
    /// Deadline interruptions.
    pub timeouts: u64,
    /// Memory limit hits.
    pub out_of_memory: u64,
    /// Breaches of the world's protocol.
    pub bad_outputs: u64,
    /// Requests refused while an instance was quarantined.
    pub rejected_quarantined: u64,
    /// Quarantines, all workers.
    pub quarantines: u64,
    /// Instances recycled after faults.
    pub recycles: u64,
    /// Workers whose instance is quarantined now.
    pub quarantined_workers: u64,
    /// Bytes lowered into the module.
    pub bytes_in: u64,
    /// Bytes copied into rebuilt requests.
    pub bytes_out: u64,
    /// Last fault on any worker ("" if none).
    pub last_fault: String,
}

/// What a PUT did.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TransformPut {
    /// Epoch of the table that names the new module.
    pub epoch: u64,
    /// Whether it replaced a module for the same pair.
    pub replaced: bool,
    /// FNV-1a of the module, hex.
    pub digest: String,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn check_pair(subject: &str, from: u32, to: u32) -> Result<(), EngineError> {
    if subject.is_empty()
        || subject.len() > sluice_wire::limits::SUBJECT_LEN_MAX
        || !subject.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(EngineError::InvalidArgument(format!(
            "transform subject {subject:?}: 1 to {} printable ASCII bytes",
            sluice_wire::limits::SUBJECT_LEN_MAX
        )));
    }
    if from == 0 || to == 0 || from == to {
        return Err(EngineError::InvalidArgument(format!(
            "transform {subject} {from} -> {to}: versions are at least 1 and differ"
        )));
    }
    Ok(())
}

impl Engine {
    /// Loads (or replaces) the transform of `subject` from version `from`
    /// to `to`. The module is checked and compiled here; every worker gets
    /// its own instance before a table names it.
    pub fn put_transform(
        &self,
        subject: &str,
        from: u32,
        to: u32,
        wasm: &[u8],
    ) -> Result<TransformPut, EngineError> {
        if !sluice_transform::RUNTIME {
            return Err(EngineError::Unsupported(
                sluice_transform::UNAVAILABLE.to_owned(),
            ));
        }
        check_pair(subject, from, to)?;
        let mut ctl = self.lock_control()?;
        let key = (subject.to_string(), from, to);
        let kind = |v: u32| {
            ctl.schemas
                .iter()
                .find(|s| s.subject == subject && s.version == v && !s.retired)
                .map(|s| s.schema_type == "TENSOR")
        };
        let (Some(kf), Some(kt)) = (kind(from), kind(to)) else {
            return Err(EngineError::NotFound(format!(
                "transform {subject} {from} -> {to}: both versions must be registered schemas of the subject"
            )));
        };
        if kf != kt {
            return Err(EngineError::InvalidArgument(format!(
                "transform {subject} {from} -> {to}: one version is a tensor signature, the other a structured schema"
            )));
        }
        if !ctl.transforms.entries.contains_key(&key)
            && ctl.transforms.entries.len() >= TRANSFORM_COUNT_MAX
        {
            return Err(EngineError::InvalidArgument(format!(
                "at most {TRANSFORM_COUNT_MAX} transforms"
            )));
        }
        let rt = self.transform_runtime(&mut ctl)?;
        let module = rt.load(wasm).map_err(|e| {
            EngineError::InvalidArgument(format!("transform {subject} {from} -> {to}: {e}"))
        })?;
        let used: Vec<usize> = ctl.transforms.entries.values().map(|e| e.slot).collect();
        let start = ctl.transforms.next_slot;
        let slot = (0..TRANSFORM_SLOT_COUNT_MAX)
            .map(|i| (start + i) % TRANSFORM_SLOT_COUNT_MAX)
            .find(|s| !used.contains(s))
            .ok_or_else(|| EngineError::InvalidArgument("no free transform slot".into()))?;
        ctl.transforms.next_slot = (slot + 1) % TRANSFORM_SLOT_COUNT_MAX;
        let stats = self.install_transform(&module, slot)?;
        let digest = format!("{:016x}", module.digest);
        let old = ctl.transforms.entries.insert(
            key.clone(),
            Entry {
                module,
                slot,
                stats,
                loaded_unix_ms: unix_ms(),
            },
        );
        let live = ctl.live.clone();
        let epoch = match self.apply_locked(&mut ctl, live, None) {
            Ok(e) => e,
            Err(e) => {
                // Nothing names the new slot: take it back out.
                let new = ctl.transforms.entries.remove(&key);
                if let Some(o) = old {
                    ctl.transforms.entries.insert(key, o);
                }
                if let Some(n) = new {
                    self.retire_transform_slot(n.slot);
                }
                return Err(e);
            }
        };
        let replaced = old.is_some();
        if let Some(o) = old {
            self.retire_transform_slot(o.slot);
        }
        Ok(TransformPut {
            epoch,
            replaced,
            digest,
        })
    }

    /// Removes a transform: requests of `from` to routes accepting `to` are
    /// refused with schema_mismatch from the next burst on.
    pub fn remove_transform(&self, subject: &str, from: u32, to: u32) -> Result<u64, EngineError> {
        let mut ctl = self.lock_control()?;
        let key = (subject.to_string(), from, to);
        let Some(old) = ctl.transforms.entries.remove(&key) else {
            return Err(EngineError::NotFound(format!(
                "transform {subject} {from} -> {to}"
            )));
        };
        let live = ctl.live.clone();
        match self.apply_locked(&mut ctl, live, None) {
            Ok(epoch) => {
                self.retire_transform_slot(old.slot);
                Ok(epoch)
            }
            Err(e) => {
                ctl.transforms.entries.insert(key, old);
                Err(e)
            }
        }
    }

    /// Every transform with its counters.
    pub fn transforms(&self) -> Vec<TransformStatus> {
        let Ok(ctl) = self.lock_control() else {
            return Vec::new();
        };
        ctl.transforms
            .entries
            .iter()
            .map(|((subject, from, to), e)| {
                let mut s = TransformStatus {
                    subject: subject.clone(),
                    from: *from,
                    to: *to,
                    digest: format!("{:016x}", e.module.digest),
                    bytes: e.module.len,
                    loaded_unix_ms: e.loaded_unix_ms,
                    slot: e.slot,
                    ..TransformStatus::default()
                };
                let mut last = 0;
                for w in &e.stats {
                    let g = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
                    s.calls += g(&w.calls);
                    s.ok += g(&w.ok);
                    s.refused += g(&w.refused);
                    s.traps += g(&w.traps);
                    s.timeouts += g(&w.timeouts);
                    s.out_of_memory += g(&w.out_of_memory);
                    s.bad_outputs += g(&w.bad_outputs);
                    s.rejected_quarantined += g(&w.rejected_quarantined);
                    s.quarantines += g(&w.quarantines);
                    s.recycles += g(&w.recycles);
                    s.quarantined_workers += g(&w.quarantined);
                    s.bytes_in += g(&w.bytes_in);
                    s.bytes_out += g(&w.bytes_out);
                    last = last.max(g(&w.last_fault));
                }
                s.last_fault = sluice_transform::Fault::name_of(last).to_string();
                s
            })
            .collect()
    }

    fn transform_runtime(&self, ctl: &mut Control) -> Result<Arc<Runtime>, EngineError> {
        if let Some(rt) = &ctl.transforms.runtime {
            return Ok(rt.clone());
        }
        let limits = self
            .cfg
            .transforms
            .limits(self.cfg.io_uring.buffer_size as usize);
        let rt = Arc::new(
            Runtime::new(limits)
                .map_err(|e| EngineError::Start(format!("schema transforms: {e}")))?,
        );
        ctl.transforms.runtime = Some(rt.clone());
        Ok(rt)
    }

    /// One instance per serving worker, installed in `slot`; returns their
    /// counters. Waits until every worker has applied it.
    fn install_transform(
        &self,
        module: &Arc<Module>,
        slot: usize,
    ) -> Result<Vec<Arc<Stats>>, EngineError> {
        if !self.is_running() {
            return Ok(Vec::new());
        }
        let mut instances: Vec<Instance> = Vec::with_capacity(self.workers.len());
        for _ in &self.workers {
            instances.push(
                module.instantiate().map_err(|e| {
                    EngineError::InvalidArgument(format!("transform instance: {e}"))
                })?,
            );
        }
        let stats = instances.iter().map(|i| i.stats().clone()).collect();
        let targets: Vec<u64> = self
            .workers
            .iter()
            .map(|w| w.counters.control_applied.load(Ordering::Acquire) + 1)
            .collect();
        for (w, instance) in self.workers.iter().zip(instances) {
            // A worker down after a panic applies it before it serves again.
            let _ = w.ctrl.send(WorkerMsg::InstallTransform {
                slot,
                instance: Box::new(instance),
            });
        }
        self.wait_applied(&targets)?;
        Ok(stats)
    }

    /// Empties `slot` on every worker (called once no published table names
    /// it) and drops what comes back, here on the control side.
    fn retire_transform_slot(&self, slot: usize) {
        if !self.is_running() {
            return;
        }
        let targets: Vec<u64> = self
            .workers
            .iter()
            .map(|w| w.counters.control_applied.load(Ordering::Acquire) + 1)
            .collect();
        for w in &self.workers {
            let _ = w.ctrl.send(WorkerMsg::RemoveTransform { slot });
        }
        let _ = self.wait_applied(&targets);
        self.drain_returned();
    }

    /// At start: every registered transform gets its instances on the new
    /// workers.
    pub(super) fn install_transforms_at_start(&self) -> Result<(), EngineError> {
        let mut ctl = self.lock_control()?;
        let list: Vec<(Key, Arc<Module>, usize)> = ctl
            .transforms
            .entries
            .iter()
            .map(|(k, e)| (k.clone(), e.module.clone(), e.slot))
            .collect();
        for (k, module, slot) in list {
            let stats = self.install_transform(&module, slot)?;
            if let Some(e) = ctl.transforms.entries.get_mut(&k) {
                e.stats = stats;
            }
        }
        Ok(())
    }
}
