//! The CPU time of the calling thread: what a [`Driver`](crate::Driver)'s
//! and a [`Poller`](crate::Poller)'s threads report when they stop, so that
//! a mode's cost is its thread's CPU time, not its wall time.

/// CPU time used by the calling thread so far.
///
/// ```
/// let t = evd_verbs::thread_cpu_time();
/// assert!(evd_verbs::thread_cpu_time() >= t);
/// ```
pub fn thread_cpu_time() -> std::time::Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into a live local.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
