//! The log's blocks are reserved ahead of its end (by the sync thread, not
//! by the writes): the active segment grows past its records, a clean close
//! cuts the reserve off, and reserving on real files (where the zeros are
//! written) never overwrites a record.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, keys, open, set, value, wait_until};
use larder_engine::fs::{Fs, MemFs, OsFs};
use larder_engine::{Clock, Config, Durability, Engine};
use std::path::Path;
use std::sync::Arc;

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
fn the_sync_thread_readies_mapped_appends_after_reserving_and_not_under_always() {
    for durability in [Durability::Always, Durability::EverySec, Durability::None] {
        let fs = MemFs::new();
        let engine = open(&fs, &small_segments(durability), &Clock::system());
        set(&engine, b"k", b"v");
        wait_until_reserved(&fs);
        // The close joins the sync thread, which readies the file right
        // after reserving.
        engine.close().unwrap();
        let calls = fs.prepare_writes_calls();
        if durability == Durability::Always {
            assert_eq!(calls, 0, "under always appends are not mapped");
        } else {
            assert!(calls > 0, "{durability:?}: never readied");
        }
    }
}

#[test]
fn the_active_segment_is_reserved_ahead_and_a_close_cuts_the_reserve_off() {
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
fn reserving_on_real_files_never_overwrites_the_log() {
    // Real files: OsFs writes zeros into what it reserves. Values of 1 KiB
    // fill 4 MiB segments fast, so the log often runs past its reserve
    // (right after each rotation it has none) while the sync thread is
    // reserving; every value must read back after a reopen.
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::new(dir.path());
    config.durability = Durability::EverySec;
    config.background_threads = false;
    config.segment_bytes_max = SEGMENT_BYTES;
    let open_os = |config: &Config| {
        Engine::open_with(config.clone(), Arc::new(OsFs), Clock::system()).unwrap()
    };
    let value_of = |i: usize| format!("{i:>1024}").into_bytes();
    let engine = open_os(&config);
    let keys = keys(20_000);
    for (i, key) in keys.iter().enumerate() {
        set(&engine, key, &value_of(i));
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(value(&engine, key), Some(value_of(i)), "before the reopen");
    }
    engine.close().unwrap();
    let engine = open_os(&config);
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(value(&engine, key), Some(value_of(i)), "after the reopen");
    }
    let report = engine.recovery_report();
    assert_eq!(report.truncated_bytes, 0, "{report:?}");
}

/// Whether this process maps any file under `dir` (/proc/self/maps).
fn maps_a_file_under(dir: &Path) -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let dir = dir.to_str().unwrap();
    maps.lines().any(|line| line.contains(dir))
}

#[test]
fn under_always_the_log_is_written_with_pwrite_and_never_mapped() {
    // Under `Always` every fdatasync would make mapped pages read-only
    // again (a TLB flush on every CPU, then a fault per page), so the sync
    // thread writes each group instead; the other modes keep the mapping.
    for durability in [Durability::Always, Durability::EverySec] {
        let dir = tempfile::tempdir().unwrap();
        // Blocks are reserved (and mapped) only where the file system
        // overwrites them in place: ext4, XFS, tmpfs.
        let probe = OsFs.create(&dir.path().join("probe")).unwrap();
        if !probe.allocate(4096).unwrap() {
            eprintln!("skipped: {} cannot reserve blocks", dir.path().display());
            return;
        }
        drop(probe);
        std::fs::remove_file(dir.path().join("probe")).unwrap();
        let mut config = Config::new(dir.path());
        config.durability = durability;
        config.background_threads = false;
        config.segment_bytes_max = SEGMENT_BYTES;
        let engine = Engine::open_with(config.clone(), Arc::new(OsFs), Clock::system()).unwrap();
        let keys = keys(200);
        // Writes until the sync thread has reserved blocks ahead of the log
        // (the segment file grows past the records) and one more lands in
        // them.
        let segment_len = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .map(|entry| entry.unwrap())
                .filter(|entry| entry.file_name().to_string_lossy().ends_with(".seg"))
                .map(|entry| entry.metadata().unwrap().len())
                .max()
                .unwrap_or(0)
        };
        set(&engine, &keys[0], b"first");
        wait_until("blocks reserved ahead of the log", || {
            segment_len() >= 1 << 20
        });
        for key in &keys {
            set(&engine, key, b"value");
        }
        let mapped = maps_a_file_under(dir.path());
        match durability {
            Durability::Always => assert!(!mapped, "the log is mapped under always"),
            _ => assert!(
                mapped,
                "{durability:?}: the log is not mapped; this test sees nothing"
            ),
        }
        engine.close().unwrap();
        let engine = Engine::open_with(config, Arc::new(OsFs), Clock::system()).unwrap();
        for key in &keys {
            assert_eq!(
                value(&engine, key),
                Some(b"value".to_vec()),
                "{durability:?}"
            );
        }
    }
}
