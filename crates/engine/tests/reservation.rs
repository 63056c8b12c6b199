//! The log's blocks are reserved ahead of its end by the sync thread, not by
//! the writes: the active segment grows past its records with no further
//! write, a crash with a reserved tail loses nothing, and a clean close cuts
//! the tail off.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, keys, open, set, value, wait_until};
use larder_engine::fs::MemFs;
use larder_engine::{Clock, Config, Durability};
use std::path::Path;

const SEGMENT_BYTES: u32 = 4 << 20;

fn small_segments(durability: Durability) -> Config {
    let mut config = config(durability);
    config.segment_bytes_max = SEGMENT_BYTES;
    config
}

/// Lengths of the segment files under /data, by name.
fn segment_lengths(fs: &MemFs) -> Vec<(String, usize)> {
    fs.file_names(Path::new("/data"))
        .into_iter()
        .filter(|name| name.ends_with(".seg"))
        .map(|name| {
            let len = fs.read_file(&Path::new("/data").join(&name)).unwrap().len();
            (name, len)
        })
        .collect()
}

/// Waits until the one segment file is as long as a segment may be.
fn wait_until_reserved(fs: &MemFs) {
    wait_until("the segment reserved up to its size limit", || {
        let lengths = segment_lengths(fs);
        assert_eq!(lengths.len(), 1, "{lengths:?}");
        lengths[0].1 == SEGMENT_BYTES as usize
    });
}

#[test]
fn the_sync_thread_reserves_the_segment_and_a_close_cuts_the_reserve_off() {
    for durability in [Durability::Always, Durability::EverySec, Durability::None] {
        let fs = MemFs::new();
        let config = small_segments(durability);
        let engine = open(&fs, &config, &Clock::system());
        set(&engine, b"k", b"v");
        wait_until_reserved(&fs);
        engine.close().unwrap();
        let lengths = segment_lengths(&fs);
        assert!(
            lengths[0].1 < 4096,
            "{durability:?}: the reserved tail is still there after a close: {lengths:?}"
        );
        let engine = open(&fs, &config, &Clock::system());
        assert_eq!(value(&engine, b"k"), Some(b"v".to_vec()), "{durability:?}");
    }
}

#[test]
fn a_crash_with_a_reserved_tail_loses_nothing_acknowledged() {
    let fs = MemFs::new();
    let config = small_segments(Durability::Always);
    let engine = open(&fs, &config, &Clock::system());
    let keys = keys(200);
    for key in &keys {
        set(&engine, key, key);
    }
    wait_until_reserved(&fs);
    fs.crash_process();
    drop(engine);
    fs.power_cut(Some(7));
    let engine = open(&fs, &config, &Clock::system());
    for key in &keys {
        assert_eq!(value(&engine, key).as_ref(), Some(key));
    }
}
