//! One worker's instance of one module: its own store, memory limit,
//! epoch deadline and output buffer. A call lowers the request's section or
//! tensors into the module, runs it, and rebuilds the request at the target
//! schema version in the instance's 64-byte aligned buffer. A trap, a
//! timeout or running out of memory ends that request, and the instance is
//! recycled from the pool; faults in a row quarantine it, with backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_wire::limits::{EXT_COUNT_MAX, TENSOR_COUNT_MAX};
use sluice_wire::{DType, Frame, Kind, SECTION_TENSOR_NAME, TensorDesc, TensorRepr, flags};
use wasmtime::component::Func;
use wasmtime::{Store, Trap};

use crate::abi::{self, ErrorCode, PayloadIn, TensorIn};
use crate::check::LoadError;
use crate::host::{Emitted, HostState, NO_EXT, Plan};
use crate::runtime::Module;
use crate::types::{Cost, Fault, Input, Stats, Target, bump, set};

/// Good calls in a row after which the quarantine backoff starts again
/// from `Limits::quarantine_us`.
pub const BACKOFF_RESET_OK_CALLS: u32 = 64;

struct Live {
    store: Store<HostState>,
    func: Func,
}

/// One worker's instance of a module.
pub struct Instance {
    // Dropped before `module`: the store's instance returns to the pool
    // that the module's engine owns.
    live: Option<Live>,
    module: Arc<Module>,
    stats: Arc<Stats>,
    faults_in_row: u32,
    ok_in_row: u32,
    backoff: Duration,
    quarantined_until: Option<Instant>,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("module", &self.module)
            .field("live", &self.live.is_some())
            .finish()
    }
}

fn instantiate(module: &Module) -> Result<Live, LoadError> {
    let (pre, func_idx, engine, limits) = module.parts();
    let mut store = Store::new(engine, HostState::new(limits));
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(limits.deadline_ticks());
    store.epoch_deadline_trap();
    let inst = pre
        .instantiate(&mut store)
        .map_err(|e| LoadError::Instantiate(format!("{e:#}")))?;
    let func = inst
        .get_func(&mut store, func_idx)
        .ok_or_else(|| LoadError::WrongSignature("transform is not a function".into()))?;
    func.typed::<abi::Params<'_>, abi::Results>(&store)
        .map_err(|e| LoadError::WrongSignature(format!("transform: {e:#}")))?;
    Ok(Live { store, func })
}

impl Instance {
    pub(crate) fn new(module: Arc<Module>) -> Result<Instance, LoadError> {
        let live = instantiate(&module)?;
        let backoff = Duration::from_micros(module.limits().quarantine_us);
        Ok(Instance {
            live: Some(live),
            module,
            stats: Arc::new(Stats::default()),
            faults_in_row: 0,
            ok_in_row: 0,
            backoff,
            quarantined_until: None,
        })
    }

    /// The module this is an instance of.
    pub fn module(&self) -> &Arc<Module> {
        &self.module
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// Transforms `req` (a checked request frame whose `input` is valid at
    /// `from`) to `to`, rebuilt as a whole request frame at `target` in this
    /// instance's aligned buffer. Allocates nothing unless it recycles the
    /// instance after a fault.
    pub fn run(
        &mut self,
        req: &Frame<&[u8]>,
        input: Input,
        from: u32,
        to: u32,
        target: Target,
        now: Instant,
    ) -> Result<(&[u8], Cost), Fault> {
        if let Some(until) = self.quarantined_until {
            if now < until {
                bump(&self.stats.rejected_quarantined, 1);
                return Err(Fault::Quarantined);
            }
            // On probation: the next fault quarantines again, longer.
            self.quarantined_until = None;
            set(&self.stats.quarantined, 0);
        }
        if self.live.is_none() {
            match instantiate(&self.module) {
                Ok(l) => self.live = Some(l),
                Err(_) => {
                    bump(&self.stats.rejected_quarantined, 1);
                    self.quarantine(now);
                    return Err(Fault::Unavailable);
                }
            }
        }
        bump(&self.stats.calls, 1);
        let r = self.call(req, input, from, to, target);
        match r {
            Ok(cost) => {
                self.faults_in_row = 0;
                // The backoff falls back only after a run of good calls: a
                // module that fails every few requests keeps doubling it.
                self.ok_in_row = self.ok_in_row.saturating_add(1);
                if self.ok_in_row >= BACKOFF_RESET_OK_CALLS {
                    self.backoff = Duration::from_micros(self.module.limits().quarantine_us);
                }
                bump(&self.stats.ok, 1);
                bump(&self.stats.bytes_in, cost.bytes_in);
                bump(&self.stats.bytes_out, cost.bytes_copied);
                let len = Frame::new_unchecked(self.frame()).frame_len();
                Ok((&self.frame()[..len], cost))
            }
            Err(f) => {
                set(&self.stats.last_fault, f.code());
                match f {
                    Fault::Trap => bump(&self.stats.traps, 1),
                    Fault::Timeout => bump(&self.stats.timeouts, 1),
                    Fault::OutOfMemory => bump(&self.stats.out_of_memory, 1),
                    Fault::BadOutput(_) => bump(&self.stats.bad_outputs, 1),
                    _ => bump(&self.stats.refused, 1),
                }
                if f.is_module_fault() {
                    self.recycle(now);
                }
                Err(f)
            }
        }
    }

    fn frame(&self) -> &[u8] {
        self.live
            .as_ref()
            .map_or(&[][..], |l| l.store.data().frame.as_slice())
    }

    /// Drops the faulted instance and takes a fresh one from the pool; a
    /// fault in a row past the limit quarantines.
    fn recycle(&mut self, now: Instant) {
        self.live = None;
        self.ok_in_row = 0;
        bump(&self.stats.recycles, 1);
        self.faults_in_row += 1;
        if self.faults_in_row >= self.module.limits().faults_before_quarantine {
            self.quarantine(now);
        }
        if let Ok(l) = instantiate(&self.module) {
            self.live = Some(l);
        }
    }

    fn quarantine(&mut self, now: Instant) {
        let lim = self.module.limits();
        self.quarantined_until = Some(now + self.backoff);
        log::warn!(
            "schema transform {:016x} quarantined for {:?} after {} faults in a row",
            self.module.digest,
            self.backoff,
            self.faults_in_row
        );
        self.backoff = (self.backoff * 2).min(Duration::from_micros(lim.quarantine_max_us));
        self.faults_in_row = 0;
        bump(&self.stats.quarantines, 1);
        set(&self.stats.quarantined, 1);
    }

    fn call(
        &mut self,
        req: &Frame<&[u8]>,
        input: Input,
        from: u32,
        to: u32,
        target: Target,
    ) -> Result<Cost, Fault> {
        let Some(live) = self.live.as_mut() else {
            return Err(Fault::Unavailable);
        };
        let ticks = self.module.limits().deadline_ticks();
        let st = live.store.data_mut();
        st.header.set(req);
        st.emitted = Emitted::Nothing;
        st.limiter.oom = false;
        st.copied = 0;
        let section = req.tensor(SECTION_TENSOR_NAME);
        let empty_in = TensorIn {
            name: "",
            dtype: 0,
            shape: &[],
            data: &[],
        };
        // The descriptors hold the shapes the inputs borrow.
        let mut descs: [Option<TensorDesc<'_>>; TENSOR_COUNT_MAX] = [None; TENSOR_COUNT_MAX];
        for (slot, d) in descs
            .iter_mut()
            .zip(req.tensors().filter(|d| d.name != SECTION_TENSOR_NAME))
        {
            *slot = Some(d);
        }
        let mut ins = [empty_in; TENSOR_COUNT_MAX];
        let mut n_in = 0;
        let bytes_in;
        for d in descs.iter().flatten() {
            let data = req.tensor_data(d);
            ins[n_in] = TensorIn {
                name: d.name,
                dtype: d.dtype as u8,
                shape: d.dims(),
                data,
            };
            n_in += 1;
        }
        let payload = match input {
            Input::Section => {
                let s = section.as_ref().ok_or(Fault::NoInput)?;
                let data = req.tensor_data(s);
                bytes_in = data.len() as u64;
                // Lay out the rebuilt frame with the section last: its
                // offset does not depend on its length.
                let zero = [0u64];
                let reprs = carried_then_section(&ins[..n_in], &zero);
                let mut exts = [NO_EXT; EXT_COUNT_MAX];
                let ext_n = st.header.exts(&mut exts);
                let layout = st
                    .header
                    .repr(&exts[..ext_n], &reprs.0[..reprs.1])
                    .layout()
                    .map_err(|_| Fault::OutputTooLarge)?;
                let off = layout.tensor_offsets[n_in];
                let cap = st
                    .frame
                    .len()
                    .checked_sub(off)
                    .ok_or(Fault::OutputTooLarge)?;
                st.plan = Plan::Section { off, cap };
                PayloadIn::Section(data)
            }
            Input::Tensors => {
                if n_in == 0 {
                    return Err(Fault::NoInput);
                }
                bytes_in = ins[..n_in].iter().map(|t| t.data.len() as u64).sum();
                st.plan = Plan::Tensors {
                    section_len: section.as_ref().map(|s| s.data_len as u64),
                };
                PayloadIn::Tensors(&ins[..n_in])
            }
        };
        live.store.set_epoch_deadline(ticks);
        let typed = live
            .func
            .typed::<abi::Params<'_>, abi::Results>(&live.store)
            .map_err(|_| Fault::BadOutput("transform changed type"))?;
        let r = typed.call(&mut live.store, (payload, from, to));
        let st = live.store.data_mut();
        st.plan = Plan::Idle;
        let dropped = std::mem::take(&mut st.log_dropped);
        bump(&self.stats.log_dropped, dropped);
        match r {
            Ok((Ok(()),)) => {}
            Ok((Err(code),)) => {
                return Err(match st.emitted {
                    Emitted::Bad(why) => Fault::BadOutput(why),
                    _ if code == ErrorCode::OutputTooLarge => Fault::OutputTooLarge,
                    _ => Fault::Refused(code),
                });
            }
            Err(e) => {
                return Err(if st.limiter.oom {
                    Fault::OutOfMemory
                } else if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    Fault::Timeout
                } else {
                    Fault::Trap
                });
            }
        }
        let copied = st.copied;
        // Write the header (and the request's other tensors) around what
        // the module emitted, which stays where it was written.
        let mut frame = std::mem::take(&mut st.frame);
        let mut exts = [NO_EXT; EXT_COUNT_MAX];
        let ext_n = st.header.exts(&mut exts);
        let mut carried = 0u64;
        let emitted = st.emitted;
        let written = match (input, emitted) {
            (Input::Section, Emitted::Section { len }) => {
                let dims = [len as u64];
                let reprs = carried_then_section(&ins[..n_in], &dims);
                carried = ins[..n_in].iter().map(|t| t.data.len() as u64).sum();
                let repr = rebuilt(
                    st.header.repr(&exts[..ext_n], &reprs.0[..reprs.1]),
                    req,
                    target,
                );
                repr.emit(frame.as_mut_slice()).map(|_| ())
            }
            (Input::Tensors, Emitted::Tensors { n }) => {
                let mut reprs = [EMPTY_REPR; TENSOR_COUNT_MAX];
                for (r, o) in reprs.iter_mut().zip(&st.outs[..n]) {
                    *r = TensorRepr {
                        name: o.name(),
                        dtype: o.dtype,
                        dims: o.dims(),
                        data: None,
                    };
                }
                let mut count = n;
                if let Some(s) = &section {
                    reprs[n] = TensorRepr {
                        name: SECTION_TENSOR_NAME,
                        dtype: DType::U8,
                        dims: s.dims(),
                        data: Some(req.tensor_data(s)),
                    };
                    carried = s.data_len as u64;
                    count += 1;
                }
                let repr = rebuilt(st.header.repr(&exts[..ext_n], &reprs[..count]), req, target);
                repr.emit(frame.as_mut_slice()).map(|_| ())
            }
            (_, Emitted::Bad(why)) => {
                st.frame = frame;
                return Err(Fault::BadOutput(why));
            }
            _ => {
                st.frame = frame;
                return Err(Fault::BadOutput("returned ok without emitting its output"));
            }
        };
        st.frame = frame;
        written.map_err(|_| Fault::OutputTooLarge)?;
        Ok(Cost {
            bytes_in,
            bytes_copied: copied + carried,
        })
    }
}

const EMPTY_REPR: TensorRepr<'static> = TensorRepr {
    name: "_",
    dtype: DType::U8,
    dims: &[],
    data: None,
};

/// The request's other tensors (copied into the rebuilt frame), then the
/// section of shape `section_dims` (left where the module's output was
/// written).
fn carried_then_section<'a>(
    ins: &[TensorIn<'a>],
    section_dims: &'a [u64],
) -> ([TensorRepr<'a>; TENSOR_COUNT_MAX], usize) {
    let mut reprs = [EMPTY_REPR; TENSOR_COUNT_MAX];
    for (r, t) in reprs.iter_mut().zip(ins) {
        *r = TensorRepr {
            name: t.name,
            dtype: DType::from_u8(t.dtype).unwrap_or(DType::U8),
            dims: t.shape,
            data: Some(t.data),
        };
    }
    reprs[ins.len()] = TensorRepr {
        name: SECTION_TENSOR_NAME,
        dtype: DType::U8,
        dims: section_dims,
        data: None,
    };
    (reprs, ins.len() + 1)
}

/// The rebuilt request: the original's fields, at the target version. It is
/// not authenticated again (the original was checked before the transform).
fn rebuilt<'a>(
    base: sluice_wire::FrameRepr<'a>,
    req: &Frame<&[u8]>,
    target: Target,
) -> sluice_wire::FrameRepr<'a> {
    sluice_wire::FrameRepr {
        kind: Kind::Request,
        flags: req.flags() & !flags::AUTHENTICATED,
        request_id: req.request_id(),
        tenant_id: req.tenant_id(),
        deadline_us: req.deadline_us(),
        schema_id: target.schema_id,
        schema_version: target.schema_version,
        token_count: req.token_count(),
        trace: req.trace(),
        ..base
    }
}
