//! Scheduling hints for the engine's own threads.

/// Tells the OS scheduler that the calling thread does batch work: when it
/// wakes, it does not preempt a thread that is running, but waits for a
/// free CPU or for the running thread's turn to end.
///
/// The sync thread runs this way. Under `Always` it wakes several times
/// per group commit (to start the group, after the `fdatasync`); as an
/// ordinary thread each of those wake-ups could preempt a request thread
/// that is busy answering clients, and on a machine whose CPUs are all
/// busy the preemptions and context switches cost request threads CPU
/// (measured in BENCHMARKS.md, "The sync thread as a batch thread"). As a batch
/// thread it runs at once when the kernel finds it an idle CPU, as
/// before, and when every CPU is busy, a little later, by which time more
/// committers have joined the next group.
///
/// How much later is up to the kernel: at most about one time slice of
/// the running thread (a few milliseconds), on each wake-up. Any busy
/// thread of normal priority counts, another process's too.
///
/// On Linux this is `SCHED_BATCH` (see `sched(7)`), which any thread may
/// choose for itself; the thread's nice value is kept. Elsewhere it does
/// nothing. Returns whether the hint was taken.
pub(crate) fn run_as_batch() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `pthread_setschedparam` reads `param` only, and
        // `pthread_self` is the calling thread, alive for the call.
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), libc::SCHED_BATCH, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_os = "linux")]
    #[test]
    fn the_thread_runs_as_batch_on_linux() {
        let policy = std::thread::spawn(|| {
            assert!(super::run_as_batch());
            // SAFETY: pid 0 is the calling thread.
            unsafe { libc::sched_getscheduler(0) }
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_BATCH);
    }
}
