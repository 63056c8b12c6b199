//! Under `none`, the sync thread syncs the active segment ahead of its
//! rotation, so that the rotation, which syncs it under the log lock while
//! every append waits, finds little left to sync.

#![allow(clippy::unwrap_used)]

mod common;

use common::{config, open, value, wait_until};
use larder_engine::fs::{FaultKind, MemFs};
use larder_engine::{Clock, Config, Durability, Engine, Expiry, StoreMode};

/// Segments of 32 MiB: the first mark is 16 MiB before the end.
const SEGMENT_BYTES: u32 = 32 << 20;
const VALUE_BYTES: usize = 1024;

fn none_config() -> Config {
    let mut config = config(Durability::None);
    config.segment_bytes_max = SEGMENT_BYTES;
    config
}

fn key(i: usize) -> Vec<u8> {
    format!("key-{i:06}").into_bytes()
}

/// Stores `count` items from `first` on, without committing (under `none`
/// a commit only hands the records to the OS, which the append did).
fn store(engine: &Engine, first: usize, count: usize) -> larder_engine::Result<()> {
    for i in first..first + count {
        let value = vec![b'a' + (i % 26) as u8; VALUE_BYTES];
        let _ticket = engine.store(StoreMode::Set, &key(i), &value, 0, Expiry::Never)?;
    }
    Ok(())
}

/// Items of about 1 KiB that take the active segment past its first mark.
const PAST_THE_MARK: usize = 17 * 1024;

#[test]
fn under_none_a_power_cut_keeps_what_came_before_the_mark() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = none_config();
    let engine = open(&fs, &config, &clock);
    let fsyncs = engine.stats().fsyncs;
    store(&engine, 0, PAST_THE_MARK).unwrap();
    // The sync thread does it, without anyone waiting for it.
    wait_until("the sync ahead of the rotation", || {
        engine.stats().fsyncs > fsyncs
    });
    assert_eq!(engine.stats().segments, 1, "no rotation yet");
    fs.power_cut(None);
    drop(engine);

    let engine = open(&fs, &config, &clock);
    // Everything up to the mark was in the segment when it was synced;
    // nothing under `none` promises more, and nothing else synced it.
    let kept = (0..PAST_THE_MARK)
        .take_while(|&i| value(&engine, &key(i)).is_some())
        .count();
    assert!(kept >= 15 * 1024, "{kept} items kept");
    assert_eq!(
        value(&engine, &key(0)).unwrap(),
        vec![b'a'; VALUE_BYTES],
        "the first item is whole"
    );
}

#[test]
fn under_none_a_failed_sync_ahead_of_the_rotation_stops_writes_as_the_rotation_would() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let config = none_config();
    let engine = open(&fs, &config, &clock);
    fs.inject(FaultKind::EioOnSync);
    // Writes go on up to the mark, and stop once the sync thread's sync
    // has failed (while this goes on storing, or soon after).
    let stored = (0..PAST_THE_MARK)
        .take_while(|&i| store(&engine, i, 1).is_ok())
        .count();
    assert!(stored >= 15 * 1024, "refused after {stored} items");
    wait_until("writes refused after the failed sync", || {
        store(&engine, PAST_THE_MARK, 1).is_err()
    });
    assert_eq!(engine.stats().segments, 1, "refused before any rotation");
    let error = store(&engine, PAST_THE_MARK, 1).unwrap_err();
    assert!(
        matches!(error, larder_engine::Error::WritesFailing(_)),
        "{error}"
    );
    // Reads go on; once the disk is back, maintenance heals the log and
    // writes are taken again.
    assert!(value(&engine, &key(0)).is_some());
    fs.clear_faults();
    engine.maintain_now();
    store(&engine, PAST_THE_MARK, 1).unwrap();
    // The failed sync may have lost any page since the segment was made;
    // heal cut the segment back to its last good sync and wrote the records
    // since then again, which under `none` too are kept until a sync, so a
    // power cut now finds a whole directory with every item heal rewrote.
    fs.power_cut(None);
    drop(engine);
    let engine = open(&fs, &config, &clock);
    for i in 0..stored {
        assert!(
            value(&engine, &key(i)).is_some(),
            "item {i} of {stored} lost"
        );
    }
}
