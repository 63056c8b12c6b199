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
/// (measured in benchmarks/HISTORY.md, "The sync thread as a batch thread"). As a batch
/// thread it runs at once when the kernel finds it an idle CPU, as
/// before, and when every CPU is busy, a little later, by which time more
/// committers have joined the next group.
///
/// How much later is up to the kernel: at most about one time slice of
/// the running thread (a few milliseconds), on each wake-up. Any busy
/// thread of normal priority counts, another process's too. Where the
/// wait would only delay committers, not let more of them join, the
/// thread steps out of batch work for it ([`as_ordinary`]).
///
/// On Linux this is `SCHED_BATCH` (see `sched(7)`), which any thread may
/// choose for itself; the thread's nice value is kept. Elsewhere it does
/// nothing. Returns whether the hint was taken.
pub(crate) fn run_as_batch() -> bool {
    let taken = set_batch(true);
    BATCH.with(|batch| batch.set(taken));
    taken
}

/// Runs `work` with the calling thread as an ordinary thread again, if it
/// chose batch work ([`run_as_batch`]), and returns it to batch work
/// after; other threads just run `work`.
///
/// The sync thread syncs this way under `Always`: the group is closed by
/// then, so a late wake-up after the `fdatasync` would only keep its
/// committers waiting (a time slice or more while every CPU is busy; see
/// benchmarks/HISTORY.md, experiment C). An ordinary thread woken from the sync
/// may preempt a busy one, once per group.
pub(crate) fn as_ordinary<T>(work: impl FnOnce() -> T) -> T {
    if !BATCH.with(std::cell::Cell::get) {
        return work();
    }
    set_batch(false);
    let result = work();
    set_batch(true);
    result
}

thread_local! {
    /// Whether this thread chose batch work ([`run_as_batch`]).
    static BATCH: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes the calling thread a batch thread or an ordinary one; returns
/// whether the OS took it.
fn set_batch(batch: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        let policy = if batch {
            libc::SCHED_BATCH
        } else {
            libc::SCHED_OTHER
        };
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `pthread_setschedparam` reads `param` only, and
        // `pthread_self` is the calling thread, alive for the call.
        unsafe { libc::pthread_setschedparam(libc::pthread_self(), policy, &param) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = batch;
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

    /// On a new thread that first chose batch work if `batch`: its policy
    /// inside [`super::as_ordinary`], and after it.
    #[cfg(target_os = "linux")]
    fn policies_in_and_after_as_ordinary(batch: bool) -> (i32, i32) {
        std::thread::spawn(move || {
            if batch {
                assert!(super::run_as_batch());
            }
            // SAFETY: pid 0 is the calling thread.
            let inside = super::as_ordinary(|| unsafe { libc::sched_getscheduler(0) });
            // SAFETY: as above.
            (inside, unsafe { libc::sched_getscheduler(0) })
        })
        .join()
        .unwrap()
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_batch_thread_is_ordinary_for_the_work_it_asks_and_batch_again_after() {
        assert_eq!(
            policies_in_and_after_as_ordinary(true),
            (libc::SCHED_OTHER, libc::SCHED_BATCH)
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_ordinary_thread_stays_ordinary() {
        assert_eq!(
            policies_in_and_after_as_ordinary(false),
            (libc::SCHED_OTHER, libc::SCHED_OTHER)
        );
    }
}
