//! The engine's sync thread runs as a batch thread (`SCHED_BATCH` on
//! Linux), so that its wake-ups do not preempt busy request threads.
//!
//! A regression story: the test once read the thread's policy right after
//! a commit returned. Since the thread syncs and acknowledges as an
//! ordinary thread and only then turns back to batch work, that read now
//! and then found it still ordinary, and a CI run failed so.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{threads_named, wait_until};
use larder_engine::{Config, Durability, Engine, Expiry, StoreMode};

#[test]
fn the_sync_thread_runs_as_a_batch_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.durability = Durability::Always;
    let engine = Engine::open(config).unwrap();
    // The sync thread names itself and picks its policy when it starts,
    // which may be after `open` returns. Under `Always` a commit returns
    // only once that thread has synced the write, so by then both are set.
    let (_, ticket) = engine
        .store(StoreMode::Set, b"key", b"value", 0, Expiry::Never)
        .unwrap();
    engine.commit(ticket).unwrap();
    let sync_threads = threads_named("larder-sync");
    assert_eq!(sync_threads.len(), 1, "one engine, one sync thread");
    for &tid in &sync_threads {
        // The commit returns once the sync thread has acknowledged it,
        // which it does as an ordinary thread (`as_ordinary`) before it
        // turns back to batch work and waits for the next group: the test
        // can look in between, so it waits for the thread to be idle.
        // SAFETY: reads the policy of a thread of this process; a thread
        // that has exited gives -1, which never satisfies the wait.
        wait_until(
            "the sync thread to be a batch thread between groups",
            || unsafe { libc::sched_getscheduler(tid) == libc::SCHED_BATCH },
        );
    }
    // Every other thread keeps the default policy: this test's own thread
    // at least, and whichever engine threads exist by now.
    let others: Vec<libc::pid_t> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|task| task.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .filter(|tid| !sync_threads.contains(tid))
        .collect();
    assert!(!others.is_empty());
    for tid in others {
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::sched_getscheduler(tid) },
            libc::SCHED_OTHER,
            "thread {tid}"
        );
    }
    engine.close().unwrap();
}
