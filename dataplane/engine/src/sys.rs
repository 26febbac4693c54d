//! Thin OS calls the engine needs beyond std.
#![allow(unsafe_code)]

use std::io;

/// Pins the calling thread to one core.
pub fn pin_to_core(core: usize) -> io::Result<()> {
    if core >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "core out of range",
        ));
    }
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write within it for
    // core < CPU_SETSIZE; sched_setaffinity reads it for the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(core, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Free 2 MiB hugepages, from /proc/meminfo.
pub fn hugepages_free() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Cores configured on this host, regardless of this process's affinity
/// mask (a process started under `taskset` still pins workers by number).
pub fn cores_configured() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    if n > 0 { n as usize } else { 1 }
}
