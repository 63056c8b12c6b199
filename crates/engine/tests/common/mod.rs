//! Helpers shared by the engine's scenario tests.

#![allow(dead_code, clippy::unwrap_used)]

use larder_engine::fs::MemFs;
use larder_engine::{Arith, Clock, Config, Durability, Engine, Expiry, StoreMode, StoreOutcome};
use std::sync::Arc;

/// A config on an in-memory directory with background threads off, so a
/// test decides when compaction and maintenance run.
pub fn config(durability: Durability) -> Config {
    let mut config = Config::new("/data");
    config.durability = durability;
    config.background_threads = false;
    config.partitions = 8;
    config
}

/// Opens an engine on `fs`.
pub fn open(fs: &MemFs, config: &Config, clock: &Clock) -> Engine {
    Engine::open_with(config.clone(), Arc::new(fs.clone()), clock.clone()).unwrap()
}

/// Sets and commits; returns the CAS unique.
pub fn set(engine: &Engine, key: &[u8], value: &[u8]) -> u64 {
    let (outcome, ticket) = engine
        .store(StoreMode::Set, key, value, 0, Expiry::Never)
        .unwrap();
    engine.commit(ticket).unwrap();
    match outcome {
        StoreOutcome::Stored { cas } => cas,
        other => panic!("set answered {other:?}"),
    }
}

/// The value under `key`, if any.
pub fn value(engine: &Engine, key: &[u8]) -> Option<Vec<u8>> {
    engine.get(key).unwrap().map(|item| item.value.to_vec())
}

/// What a test compares an item by: value, flags, exptime and CAS unique.
pub type Stored = (Vec<u8>, u32, u32, u64);

/// The live items among `keys`, as a map from key to what is stored.
pub fn contents<'k>(
    engine: &Engine,
    keys: impl IntoIterator<Item = &'k Vec<u8>>,
) -> std::collections::BTreeMap<Vec<u8>, Stored> {
    keys.into_iter()
        .filter_map(|key| {
            let item = engine.get(key).unwrap()?;
            Some((
                key.clone(),
                (item.value.to_vec(), item.flags, item.exptime, item.cas),
            ))
        })
        .collect()
}

/// `count` keys named `k0`, `k1`, ...
pub fn keys(count: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| format!("k{i}").into_bytes()).collect()
}

/// Runs a compaction with `fault` injected at its `n`th chance, cuts the
/// power (tearing the `n`th write) and opens the directory again. Returns
/// how the compaction ended and the reopened engine.
pub fn compact_into_a_power_cut(
    fs: &MemFs,
    engine: Engine,
    config: &Config,
    clock: &Clock,
    fault: larder_engine::fs::FaultKind,
    n: u64,
) -> (larder_engine::Result<usize>, Engine) {
    fs.inject_nth(fault, n);
    let result = engine.compact_now(0.0);
    fs.power_cut(Some(n));
    fs.clear_faults();
    drop(engine);
    (result, open(fs, config, clock))
}

/// How many fault points in a row, from the first, make `fails_at(n)`
/// (a run with a fault injected at the `n`th chance) fail: every one of
/// them is a crash point the run has checked. Stops at the first run that
/// succeeds, and at 40.
pub fn failure_points(mut fails_at: impl FnMut(u64) -> bool) -> u64 {
    (1..40).take_while(|&n| fails_at(n)).count() as u64
}

/// Polls a future once with a waker that does nothing: starts a commit
/// (the record reaches the OS, a sync is requested) without waiting for it.
pub fn poll_once<F: std::future::Future + Unpin>(future: &mut F) -> std::task::Poll<F::Output> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    std::pin::Pin::new(future).poll(&mut context)
}

/// Waits until `condition` holds, for work a background thread does (up to
/// a minute: a synchronisation, not a speed check); panics with `what`.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting: {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Thread ids of this process's threads named `name` (Linux).
#[cfg(target_os = "linux")]
pub fn threads_named(name: &str) -> Vec<libc::pid_t> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let task = task.unwrap();
            let comm = std::fs::read_to_string(task.path().join("comm")).ok()?;
            (comm.trim_end() == name).then(|| task.file_name().to_str()?.parse().ok())?
        })
        .collect()
}

/// `incr` by one: no CAS to compare, no counter created, the expiry kept.
pub fn incr_by_one() -> Arith {
    Arith {
        incr: true,
        delta: 1,
        cas: None,
        initial: None,
        expiry: None,
        read_counter: decimal,
    }
}

/// Reads a counter as decimal digits that end the value or come before
/// white space (the engine pads a shorter number with spaces): the tests'
/// rule; the server passes the protocol's, memcached's `strtoull`.
pub fn decimal(value: &[u8]) -> Option<u64> {
    let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
    let ends_well = value.get(digits).is_none_or(u8::is_ascii_whitespace);
    if digits == 0 || !ends_well {
        return None;
    }
    std::str::from_utf8(value.get(..digits)?).ok()?.parse().ok()
}
