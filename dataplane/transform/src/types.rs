//! What a call reads, writes and counts: the types a host sees whether or
//! not the WebAssembly runtime is built in (the engine's `wasm` feature).

use std::sync::atomic::AtomicU64;
#[cfg(feature = "runtime")]
use std::sync::atomic::Ordering;

use crate::abi::ErrorCode;

/// What a transform reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The structured section (`$section`).
    Section,
    /// The model input tensors.
    Tensors,
}

/// The version a request is rebuilt at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// Schema id of the target version.
    pub schema_id: u32,
    /// Its version within the subject.
    pub schema_version: u32,
}

/// Why a call produced no request. Each has a static message for the
/// error frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The module refused the input (its answer, not a fault of the module).
    Refused(ErrorCode),
    /// The request has no input of the kind the transform reads.
    NoInput,
    /// The output does not fit the output limit or the frame buffer.
    OutputTooLarge,
    /// The module trapped.
    Trap,
    /// The call ran past its deadline.
    Timeout,
    /// The module grew its memory past the limit.
    OutOfMemory,
    /// The module broke the world's protocol (returned ok without output,
    /// emitted twice, emitted tensors the wire format refuses).
    BadOutput(&'static str),
    /// The instance is quarantined after repeated faults.
    Quarantined,
    /// The instance could not be recycled after a fault.
    Unavailable,
}

impl Fault {
    /// Whether the module is to blame (counts towards quarantine).
    pub fn is_module_fault(self) -> bool {
        matches!(
            self,
            Fault::Trap | Fault::Timeout | Fault::OutOfMemory | Fault::BadOutput(_)
        )
    }

    /// Whether the request itself was refused (schema_mismatch), rather
    /// than failed by the transform (internal).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            Fault::Refused(_) | Fault::NoInput | Fault::OutputTooLarge
        )
    }

    /// The error frame's message.
    pub fn message(self) -> &'static str {
        match self {
            Fault::Refused(ErrorCode::InvalidInput) => {
                "the schema transform refused the input as invalid for its version"
            }
            Fault::Refused(ErrorCode::UnsupportedVersions) => {
                "the schema transform does not transform between these versions"
            }
            Fault::Refused(ErrorCode::OutputTooLarge) | Fault::OutputTooLarge => {
                "the schema transform's output exceeds its limit"
            }
            Fault::Refused(ErrorCode::Internal) => "the schema transform failed on this input",
            Fault::NoInput => "the request has nothing for the schema transform to read",
            Fault::Trap => "the schema transform trapped; the request was not run",
            Fault::Timeout => "the schema transform ran past its deadline; the request was not run",
            Fault::OutOfMemory => "the schema transform ran out of memory; the request was not run",
            Fault::BadOutput(_) => {
                "the schema transform broke the sluice:transform protocol; the request was not run"
            }
            Fault::Quarantined => "the schema transform is quarantined after repeated faults",
            Fault::Unavailable => "the schema transform is unavailable on this worker",
        }
    }

    #[cfg(feature = "runtime")]
    pub(crate) fn code(self) -> u64 {
        match self {
            Fault::Refused(_) => 1,
            Fault::NoInput => 2,
            Fault::OutputTooLarge => 3,
            Fault::Trap => 4,
            Fault::Timeout => 5,
            Fault::OutOfMemory => 6,
            Fault::BadOutput(_) => 7,
            Fault::Quarantined => 8,
            Fault::Unavailable => 9,
        }
    }

    /// Name of a code kept in [`Stats::last_fault`].
    pub fn name_of(code: u64) -> &'static str {
        match code {
            1 => "refused",
            2 => "no_input",
            3 => "output_too_large",
            4 => "trap",
            5 => "timeout",
            6 => "out_of_memory",
            7 => "bad_output",
            8 => "quarantined",
            9 => "unavailable",
            _ => "",
        }
    }
}

/// Counters of one instance, written by its worker only (load and store,
/// no locked instruction), read by status.
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls made.
    pub calls: AtomicU64,
    /// Requests rebuilt.
    pub ok: AtomicU64,
    /// Refused by the module or the limits (schema_mismatch).
    pub refused: AtomicU64,
    /// Traps (other than timeouts and out of memory).
    pub traps: AtomicU64,
    /// Deadline interruptions.
    pub timeouts: AtomicU64,
    /// Memory limit hits.
    pub out_of_memory: AtomicU64,
    /// Protocol breaches.
    pub bad_outputs: AtomicU64,
    /// Requests answered while quarantined or unavailable.
    pub rejected_quarantined: AtomicU64,
    /// Times quarantined.
    pub quarantines: AtomicU64,
    /// Times the instance was recycled after a fault.
    pub recycles: AtomicU64,
    /// 1 while quarantined.
    pub quarantined: AtomicU64,
    /// Last fault (see [`Fault::name_of`]).
    pub last_fault: AtomicU64,
    /// Bytes lowered into the module.
    pub bytes_in: AtomicU64,
    /// Bytes copied out of the module into rebuilt requests.
    pub bytes_out: AtomicU64,
    /// Log lines the rate limit dropped.
    pub log_dropped: AtomicU64,
}

#[cfg(feature = "runtime")]
pub(crate) fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

#[cfg(feature = "runtime")]
pub(crate) fn set(a: &AtomicU64, v: u64) {
    a.store(v, Ordering::Relaxed);
}

/// What a call copied, for the worker's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cost {
    /// Bytes lowered into the module's memory.
    pub bytes_in: u64,
    /// Bytes copied out of it, plus the request's other tensors copied into
    /// the rebuilt frame.
    pub bytes_copied: u64,
}

/// FNV-1a, 64 bits.
pub fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
