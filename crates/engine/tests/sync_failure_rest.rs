//! After a failed sync the sync thread rests until the log heals, in every
//! durability mode: it used to find its interval over and go round again
//! at once under `everysec` and `none`, taking a whole CPU for as long as
//! the disk kept failing. One test in this binary, so that the engine's
//! sync thread is the only one in the process.

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{config, open, set, threads_named, wait_until};
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Durability};
use std::time::Duration;

/// CPU time (user and system, in clock ticks) of this process's thread
/// named `name`. A new thread names itself once it runs, so this waits for
/// it to; panics if there is more than one.
fn thread_ticks(name: &str) -> u64 {
    let mut threads = Vec::new();
    wait_until(&format!("a thread named {name}"), || {
        threads = threads_named(name);
        !threads.is_empty()
    });
    let [tid] = threads[..] else {
        panic!("{} threads named {name}", threads.len());
    };
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // Fields after the command name, which ends with the last ')': utime
    // and stime are fields 14 and 15 of stat(5), 12 and 13 here.
    let (_, fields) = stat.rsplit_once(") ").unwrap();
    fields
        .split(' ')
        .skip(11)
        .take(2)
        .map(|field| field.parse::<u64>().unwrap())
        .sum()
}

#[test]
fn the_sync_thread_rests_after_a_failed_sync() {
    // SAFETY: sysconf has no preconditions.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    for durability in [Durability::EverySec, Durability::None, Durability::Always] {
        let fs = MemFs::new();
        let clock = Clock::system();
        let engine = open(&fs, &config(durability), &clock);
        if durability != Durability::Always {
            set(&engine, b"before", b"the failure");
        }
        fs.inject(FaultKind::EioOnSync);
        let _ = engine.store(
            larder_engine::StoreMode::Set,
            b"key",
            b"value",
            0,
            larder_engine::Expiry::Never,
        );
        assert!(engine.sync().is_err(), "{durability:?}");
        assert!(engine.stats().sync_failure.is_some(), "{durability:?}");
        // Longer than the sync interval, after which the old loop spun.
        let before = thread_ticks("larder-sync");
        std::thread::sleep(Duration::from_millis(2500));
        let used = thread_ticks("larder-sync") - before;
        assert!(
            used * 5 < ticks_per_second,
            "{durability:?}: the sync thread used {used} ticks in 2.5 s"
        );
        drop(engine);
    }
}
