//! Under `Always` the engine's sync thread, a batch thread otherwise (see
//! `sync_thread.rs`), is an ordinary thread while it syncs a group, so that
//! its committers are not kept waiting for a CPU after the sync. Each test
//! here reads the policy the sync thread has at its `sync_data` calls.
//! (A file of its own: `sync_thread.rs` counts the process's sync threads.)

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{config, open};
use larder_engine::fs::MemFs;
use larder_engine::{Clock, Durability, Expiry, StoreMode};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The scheduling policy of the sync thread at each of its `sync_data`
/// calls, once one has been seen after a commit under `durability`.
fn sync_thread_policies_at_its_syncs(durability: Durability) -> Vec<i32> {
    let fs = MemFs::new();
    let policies = Arc::new(Mutex::new(Vec::new()));
    fs.observe_sync_data({
        let policies = Arc::clone(&policies);
        move || {
            if std::thread::current().name() == Some("larder-sync") {
                // SAFETY: pid 0 is the calling thread.
                let policy = unsafe { libc::sched_getscheduler(0) };
                policies.lock().unwrap().push(policy);
            }
        }
    });
    let engine = open(&fs, &config(durability), &Clock::system());
    let (_, ticket) = engine
        .store(StoreMode::Set, b"key", b"value", 0, Expiry::Never)
        .unwrap();
    engine.commit(ticket).unwrap();
    // Under `Always` the commit returned after the sync thread's sync;
    // under `EverySec` that sync comes within a second. The deadline only
    // bounds a broken build's wait.
    let deadline = Instant::now() + Duration::from_secs(30);
    while policies.lock().unwrap().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    engine.close().unwrap();
    let policies = policies.lock().unwrap().clone();
    assert!(
        !policies.is_empty(),
        "the sync thread synced ({durability:?})"
    );
    policies
}

#[test]
fn under_always_the_sync_thread_syncs_as_an_ordinary_thread() {
    let policies = sync_thread_policies_at_its_syncs(Durability::Always);
    assert!(policies.contains(&libc::SCHED_OTHER), "{policies:?}");
}

#[test]
fn under_everysec_the_sync_thread_syncs_as_a_batch_thread() {
    let policies = sync_thread_policies_at_its_syncs(Durability::EverySec);
    assert!(
        policies.iter().all(|&policy| policy == libc::SCHED_BATCH),
        "{policies:?}"
    );
}
