//! LoRA adapters in the thousands per model: every configured adapter is
//! known (id and file), but only up to [`ADAPTER_CACHE_MAX`] are loaded per
//! session at once, least recently used evicted first.
//!
//! A hit costs a scan of at most `ADAPTER_CACHE_MAX` ids and allocates
//! nothing. A miss loads the adapter file on the worker that needs it
//! (file read, ORT's `CreateLoraAdapter` and a `RunOptions`: allocations
//! and blocking I/O on that request's path, as S-LoRA and vLLM pay on a
//! miss), and is counted; so is each eviction, per model and process-wide.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use ort::session::{Adapter, RunOptions};
use sluice_wire::ErrorCode;

use crate::Reject;

/// Most adapters loaded at once per model per worker (the rest are loaded
/// on demand). Each entry costs its adapter's parameters (about the
/// adapter file's size) plus a `RunOptions` (about 1 KiB).
pub const ADAPTER_CACHE_MAX: usize = 64;

static LOADS_TOTAL: AtomicU64 = AtomicU64::new(0);
static EVICTIONS_TOTAL: AtomicU64 = AtomicU64::new(0);
static LOAD_FAILURES_TOTAL: AtomicU64 = AtomicU64::new(0);

/// Process-wide adapter cache counters (all models, all workers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdapterCacheTotals {
    /// Adapters loaded on demand (misses that loaded).
    pub loads: u64,
    /// Adapters evicted to make room.
    pub evictions: u64,
    /// Misses whose adapter file could not be loaded.
    pub load_failures: u64,
}

/// The process-wide counters.
pub fn adapter_cache_totals() -> AdapterCacheTotals {
    AdapterCacheTotals {
        loads: LOADS_TOTAL.load(Ordering::Relaxed),
        evictions: EVICTIONS_TOTAL.load(Ordering::Relaxed),
        load_failures: LOAD_FAILURES_TOTAL.load(Ordering::Relaxed),
    }
}

pub(crate) struct LoadedAdapter {
    pub(crate) id: String,
    pub(crate) options: RunOptions,
    last_used: u64,
}

/// One session's adapters: all known ones, the loaded few.
pub(crate) struct AdapterCache {
    /// Configured adapters by id, in configuration order.
    known: HashMap<String, PathBuf>,
    order: Vec<String>,
    pub(crate) loaded: Vec<LoadedAdapter>,
    capacity: usize,
    tick: u64,
    pub(crate) loads: u64,
    pub(crate) evictions: u64,
}

pub(crate) const LOAD_FAILED: &str = "LoRA adapter file could not be loaded";

impl AdapterCache {
    pub(crate) fn new(capacity: usize) -> AdapterCache {
        AdapterCache {
            known: HashMap::new(),
            order: Vec::new(),
            loaded: Vec::with_capacity(capacity),
            capacity: capacity.max(1),
            tick: 0,
            loads: 0,
            evictions: 0,
        }
    }

    /// Records an adapter (checked by the caller: unique id, file exists).
    pub(crate) fn know(&mut self, id: &str, path: PathBuf) {
        self.order.push(id.to_string());
        self.known.insert(id.to_string(), path);
    }

    pub(crate) fn is_known(&self, id: &str) -> bool {
        self.known.contains_key(id)
    }

    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.order.iter().map(String::as_str)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Adapters loaded now.
    pub(crate) fn loaded_count(&self) -> usize {
        self.loaded.len()
    }

    /// Index of `id`'s loaded options, loading it (and evicting the least
    /// recently used) on a miss.
    pub(crate) fn select(&mut self, id: &str) -> Result<usize, Reject> {
        self.tick += 1;
        if let Some(i) = self.loaded.iter().position(|a| a.id == id) {
            self.loaded[i].last_used = self.tick;
            return Ok(i);
        }
        let Some(path) = self.known.get(id) else {
            return Err(Reject::new(
                ErrorCode::UnknownAdapter,
                crate::run::msg::UNKNOWN_ADAPTER,
            ));
        };
        let options = match open(path) {
            Ok(o) => o,
            Err(_) => {
                LOAD_FAILURES_TOTAL.fetch_add(1, Ordering::Relaxed);
                return Err(Reject::new(ErrorCode::InferenceFailed, LOAD_FAILED));
            }
        };
        self.loads += 1;
        LOADS_TOTAL.fetch_add(1, Ordering::Relaxed);
        let entry = LoadedAdapter {
            id: id.to_string(),
            options,
            last_used: self.tick,
        };
        if self.loaded.len() < self.capacity {
            self.loaded.push(entry);
            return Ok(self.loaded.len() - 1);
        }
        let lru = self
            .loaded
            .iter()
            .enumerate()
            .min_by_key(|(_, a)| a.last_used)
            .map_or(0, |(i, _)| i);
        self.loaded[lru] = entry;
        self.evictions += 1;
        EVICTIONS_TOTAL.fetch_add(1, Ordering::Relaxed);
        Ok(lru)
    }

    /// Loads `id` at load time (no counters): errors carry ORT's text.
    pub(crate) fn preload(&mut self, id: &str) -> Result<(), String> {
        if self.loaded.len() >= self.capacity || self.loaded.iter().any(|a| a.id == id) {
            return Ok(());
        }
        let path = self.known.get(id).ok_or("not configured")?;
        let options = open(path)?;
        self.loaded.push(LoadedAdapter {
            id: id.to_string(),
            options,
            last_used: 0,
        });
        Ok(())
    }
}

/// An adapter file as run options with it active.
fn open(path: &std::path::Path) -> Result<RunOptions, String> {
    let adapter = Adapter::from_file(path, None).map_err(|e| e.to_string())?;
    let mut options = crate::model::run_options()?;
    // The options keep the adapter alive; it is activated on every run
    // that uses these options.
    options.add_adapter(&adapter).map_err(|e| e.to_string())?;
    Ok(options)
}
