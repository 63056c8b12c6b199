//! Tombstones under churn, next to an old segment of cold items.
//!
//! The story of the bug: compaction kept a tombstone while any other
//! segment's smallest seq was below the tombstone's, so one mostly live old
//! segment of cold items kept every later delete on disk for good. Kept
//! tombstones counted as dead bytes, so an output holding only them was a
//! candidate again on every pass: copied, synced and renamed forever, even
//! with no writes. With 4 KB of cold items and 20 rounds of 50 sets and
//! deletes, the files grew from 5.9 KB to 39 KB, and each idle pass ran 11
//! compactions.
//!
//! Here, some churned keys also have an older put in the cold segment: their
//! newest tombstone must stay while that put is on disk, and one is enough.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{compact_into_a_power_cut, config, failure_points, open, set, value};
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Config, Durability, Engine};

const COLD_KEYS: usize = 40;
const CHURN_KEYS: usize = 50;
/// Churned keys whose first put lies in the cold segment.
const PINNED_KEYS: usize = 8;
const ROUNDS: usize = 40;
/// Passes an idle engine gets to settle; each pass can only start new work
/// by removing a segment, and the cold segment is never removed.
const SETTLING_PASSES_MAX: usize = 10;

fn small_segments() -> Config {
    let mut config = config(Durability::None);
    config.segment_bytes_max = 4096;
    config
}

fn cold_key(i: usize) -> Vec<u8> {
    format!("cold{i}").into_bytes()
}

fn churn_key(i: usize) -> Vec<u8> {
    format!("churn{i}").into_bytes()
}

fn delete(engine: &Engine, key: &[u8]) {
    let (_, ticket) = engine.delete(key, None).unwrap();
    engine.commit(ticket).unwrap();
}

/// The bytes a tombstone of a churned key takes: a record header and the key.
fn tombstone_bytes_max() -> u64 {
    28 + churn_key(CHURN_KEYS).len() as u64
}

/// What the files may hold once compaction has caught up: twice the live
/// data, the active segment, and one tombstone per pinned key.
fn disk_bound(engine: &Engine, config: &Config) -> u64 {
    let live = engine.stats().live_bytes;
    2 * live + u64::from(config.segment_bytes_max) + PINNED_KEYS as u64 * tombstone_bytes_max()
}

/// Writes the cold segment (with the first puts of the pinned keys among
/// the cold items), then `rounds` rounds of a set and a delete of every
/// churned key, compacting after each round and checking the files stay
/// within [`disk_bound`].
fn churn(engine: &Engine, config: &Config, rounds: usize) {
    for i in 0..COLD_KEYS {
        set(engine, &cold_key(i), &[b'c'; 60]);
        if i < PINNED_KEYS {
            set(engine, &churn_key(i), &[b'p'; 20]);
        }
    }
    for round in 0..rounds {
        for i in 0..CHURN_KEYS {
            set(engine, &churn_key(i), format!("{round:060}").as_bytes());
            delete(engine, &churn_key(i));
        }
        engine
            .compact_now(config.compaction_dead_ratio_min)
            .unwrap();
        let stats = engine.stats();
        let bound = disk_bound(engine, config);
        assert!(
            stats.disk_bytes <= bound,
            "round {round}: {} bytes on disk for {} live (bound {bound})",
            stats.disk_bytes,
            stats.live_bytes
        );
    }
}

/// Runs compaction passes until one does nothing; returns how many did
/// something. Panics if the engine has not settled after
/// [`SETTLING_PASSES_MAX`] passes.
fn settle(engine: &Engine, dead_ratio_min: f64) -> usize {
    for pass in 0..SETTLING_PASSES_MAX {
        let before = engine.stats();
        let compacted = engine.compact_now(dead_ratio_min).unwrap();
        let after = engine.stats();
        if compacted == 0 {
            assert_eq!(after.compactions, before.compactions);
            assert_eq!(
                after.compaction_bytes_written,
                before.compaction_bytes_written
            );
            return pass;
        }
    }
    let stats = engine.stats();
    panic!(
        "still compacting after {SETTLING_PASSES_MAX} idle passes: {} compactions, {} bytes written, {} on disk",
        stats.compactions, stats.compaction_bytes_written, stats.disk_bytes
    );
}

/// Every cold item is there and no churned key is.
fn check_contents(engine: &Engine, what: &str) {
    for i in 0..COLD_KEYS {
        assert_eq!(value(engine, &cold_key(i)), Some(vec![b'c'; 60]), "{what}");
    }
    for i in 0..CHURN_KEYS {
        assert_eq!(value(engine, &churn_key(i)), None, "{what}: churn{i}");
    }
}

#[test]
fn churn_next_to_a_cold_segment_keeps_the_files_bounded_by_the_live_data() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments();
    let engine = open(&fs, &config, &clock);
    churn(&engine, &config, ROUNDS);
    check_contents(&engine, "after churn");
}

#[test]
fn an_idle_engine_stops_compacting_after_a_few_passes() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments();
    let engine = open(&fs, &config, &clock);
    churn(&engine, &config, ROUNDS);
    settle(&engine, config.compaction_dead_ratio_min);
    // However low the threshold, kept tombstones are not dead bytes.
    settle(&engine, 0.0);
    let idle = engine.stats();
    for _ in 0..5 {
        assert_eq!(engine.compact_now(0.0).unwrap(), 0);
    }
    let stats = engine.stats();
    assert_eq!(stats.compactions, idle.compactions);
    assert_eq!(
        stats.compaction_bytes_written,
        idle.compaction_bytes_written
    );
    assert!(stats.disk_bytes <= disk_bound(&engine, &config));
    check_contents(&engine, "idle");
}

#[test]
fn deleted_keys_stay_deleted_after_their_tombstones_are_compacted_and_reopened() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments();
    let ratio = config.compaction_dead_ratio_min;
    let engine = open(&fs, &config, &clock);
    churn(&engine, &config, ROUNDS);
    // The cold segment stays, with the first puts of the pinned keys.
    settle(&engine, ratio);
    engine.close().unwrap();
    let engine = open(&fs, &config, &clock);
    check_contents(&engine, "reopened");
    // A reopen forgets which tombstones were found needed: they are looked
    // at once more, and the engine settles again.
    settle(&engine, ratio);
    assert!(engine.stats().disk_bytes <= disk_bound(&engine, &config));
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    check_contents(&engine, "after a power cut");
    // With the cold segment compacted too, nothing is left to come back.
    settle(&engine, 0.0);
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    check_contents(&engine, "all compacted, after a power cut");
}

/// A compaction that drops tombstones, cut short at its `n`th operation of
/// `fault`'s kind and then by a power cut, leaves no deleted key to come
/// back. Returns whether the pass failed.
fn tombstone_compaction_cut_short(fault: FaultKind, n: u64) -> bool {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = small_segments();
    let engine = open(&fs, &config, &clock);
    churn(&engine, &config, 3);
    // The last round's records, all dead but the tombstones, in sealed
    // segments with hints.
    for i in 0..CHURN_KEYS {
        set(&engine, &churn_key(i), &[b'x'; 60]);
        delete(&engine, &churn_key(i));
    }
    engine.compact_now(1.1).unwrap();
    // Under `None` a power cut may lose unsynced deletes, whatever
    // compaction does.
    engine.sync().unwrap();
    let (result, engine) = compact_into_a_power_cut(&fs, engine, &config, &clock, fault, n);
    let what = format!("{fault:?} at operation {n}: {result:?}");
    check_contents(&engine, &what);
    settle(&engine, 0.0);
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    check_contents(&engine, &format!("{what}, settled"));
    result.is_err()
}

#[test]
fn a_compaction_dropping_tombstones_cut_short_by_a_power_cut_brings_nothing_back() {
    for fault in [FaultKind::Eio, FaultKind::EioOnSync] {
        let failed = failure_points(|n| tombstone_compaction_cut_short(fault, n));
        assert!(failed >= 1, "{fault:?}: no failure point");
    }
}
