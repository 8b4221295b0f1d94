//! The CPU time of the calling thread: what a [`Driver`](crate::Driver)'s
//! and a [`Poller`](crate::Poller)'s threads report when they stop, so that
//! a mode's cost is its thread's CPU time, not its wall time.

/// CPU time used by the calling thread so far; zero if the clock cannot be
/// read.
pub(crate) fn thread_cpu_time() -> std::time::Duration {
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

#[cfg(test)]
mod tests {
    use super::thread_cpu_time;

    #[test]
    fn thread_cpu_time_grows_with_work() {
        let start = thread_cpu_time();
        let mut x = 0u64;
        for i in 0..10_000_000u64 {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        assert!(thread_cpu_time() > start, "{x}");
    }
}
