//! Helpers shared by the engine's scenario tests.

#![allow(dead_code, clippy::unwrap_used)]

use larder_engine::fs::MemFs;
use larder_engine::{Clock, Config, Durability, Engine, Expiry, StoreMode, StoreOutcome};
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
