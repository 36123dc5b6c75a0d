//! CPU time and memory of this process.

/// This process's resource usage so far.
fn usage() -> libc::rusage {
    // SAFETY: `getrusage` fills the zeroed struct we own; RUSAGE_SELF is always valid.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    }
}

/// The most memory this process has had resident, in bytes (`getrusage`'s `ru_maxrss`,
/// which Linux gives in KiB).
pub fn process_peak_rss_bytes() -> u64 {
    u64::try_from(usage().ru_maxrss).unwrap_or(0) * 1024
}

/// User plus system CPU seconds this process has used so far.
pub fn process_cpu_s() -> f64 {
    let usage = usage();
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
