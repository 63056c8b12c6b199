//! Scheduling hints for the engine's own threads.

/// Tells the OS scheduler that the calling thread does batch work: when it
/// wakes, it does not preempt a thread that is running, but waits for a
/// free CPU or for the running thread's turn to end.
///
/// The sync thread runs this way. Under `Always` it wakes several times
/// per group commit (to start the group, after the `fdatasync`); as an
/// ordinary thread each of those wake-ups could preempt a request thread
/// that is busy answering clients, and on a machine whose CPUs are all
/// busy such preemptions cost more CPU than the work they run. As a batch
/// thread it runs as soon as a CPU is idle, as before, and when none is,
/// a little later, by which time more committers have joined the next
/// group.
///
/// On Linux this is `SCHED_BATCH` (see `sched(7)`), which any thread may
/// choose for itself. Elsewhere it does nothing. Returns whether the hint
/// was taken.
pub(crate) fn run_as_batch() -> bool {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `sched_setscheduler` reads `param` only; pid 0 is the
        // calling thread.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) == 0 }
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
