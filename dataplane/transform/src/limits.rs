//! Every limit a transform runs under, explicit and from config.

/// Limits for loading and running transforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Wall time one call may take before it is interrupted (epoch ticks of
    /// `EPOCH_TICK_US`, rounded up, plus one tick of slack).
    pub deadline_us: u64,
    /// Linear memory one instance may grow to.
    pub memory_bytes_max: usize,
    /// Output bytes a call may hand back (section length or sum of tensor
    /// data lengths); also bounded by the output buffer.
    pub output_bytes_max: u32,
    /// Size of the rebuilt request frame buffer, per instance.
    pub frame_bytes_max: usize,
    /// Largest module accepted.
    pub module_bytes_max: usize,
    /// Component instances the pool holds (every worker's instance of every
    /// module, plus those of modules being swapped in and the load check).
    pub instances_max: u32,
    /// Faults in a row that quarantine an instance.
    pub faults_before_quarantine: u32,
    /// First quarantine; each one in a row doubles it.
    pub quarantine_us: u64,
    /// Longest quarantine.
    pub quarantine_max_us: u64,
    /// Log lines a module may write per second per instance.
    pub log_lines_per_s: u32,
}

/// How often the epoch advances (the deadline's granularity).
pub const EPOCH_TICK_US: u64 = 1_000;
/// Longest message a module may log, in bytes (longer ones are cut).
pub const LOG_LINE_LEN_MAX: usize = 512;
/// Wasm stack a call may use.
pub const WASM_STACK_BYTES_MAX: usize = 256 * 1024;
/// Hard ceilings on what config may ask for.
pub const DEADLINE_US_MAX: u64 = 10_000_000;
/// Largest memory limit config may set.
pub const MEMORY_BYTES_MAX: usize = 1 << 30;
/// Largest pool config may set.
pub const INSTANCES_MAX: u32 = 4096;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline_us: 5_000,
            memory_bytes_max: 16 << 20,
            output_bytes_max: 1 << 20,
            frame_bytes_max: 1 << 20,
            module_bytes_max: 8 << 20,
            instances_max: 256,
            faults_before_quarantine: 3,
            quarantine_us: 1_000_000,
            quarantine_max_us: 60_000_000,
            log_lines_per_s: 10,
        }
    }
}

impl Limits {
    /// Checks the limits are usable; the message names the field.
    pub fn check(&self) -> Result<(), String> {
        if self.deadline_us == 0 || self.deadline_us > DEADLINE_US_MAX {
            return Err(format!("deadline_us: 1 to {DEADLINE_US_MAX}"));
        }
        if self.memory_bytes_max < 65_536 || self.memory_bytes_max > MEMORY_BYTES_MAX {
            return Err(format!("memory_bytes_max: 65536 to {MEMORY_BYTES_MAX}"));
        }
        if self.instances_max == 0 || self.instances_max > INSTANCES_MAX {
            return Err(format!("instances_max: 1 to {INSTANCES_MAX}"));
        }
        if self.frame_bytes_max < 4096 || self.frame_bytes_max > sluice_wire::limits::FRAME_LEN_MAX
        {
            return Err(format!(
                "frame_bytes_max: 4096 to {}",
                sluice_wire::limits::FRAME_LEN_MAX
            ));
        }
        if self.faults_before_quarantine == 0 {
            return Err("faults_before_quarantine: at least 1".into());
        }
        if self.quarantine_us == 0 || self.quarantine_max_us < self.quarantine_us {
            return Err("quarantine_us: at least 1 and at most quarantine_max_us".into());
        }
        Ok(())
    }

    /// Epoch ticks a call may run: the deadline rounded up, plus one tick
    /// because the current tick may end at once.
    pub fn deadline_ticks(&self) -> u64 {
        self.deadline_us.div_ceil(EPOCH_TICK_US) + 1
    }
}
