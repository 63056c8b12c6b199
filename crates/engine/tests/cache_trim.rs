//! Dropping cached values races nothing: a value leaves the cache only once
//! its record is in its file, even while the log rotates to new segments
//! under the trimming.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

mod common;

use common::{config, open, set};
use larder_engine::fs::MemFs;
use larder_engine::{Clock, Durability};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[test]
fn every_read_finds_its_value_while_the_cache_is_trimmed_across_rotations() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::None);
    config.segment_bytes_max = 4096;
    config.cache_bytes_max = 1;
    let engine = Arc::new(open(&fs, &config, &clock));
    let stop = Arc::new(AtomicBool::new(false));
    let keys = 64;
    let value = |key: usize, round: usize| format!("{key}:{round}:{}", ".".repeat(60)).into_bytes();
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut round = 0;
                while !stop.load(Ordering::Relaxed) {
                    for key in (writer..keys).step_by(2) {
                        set(&engine, format!("key{key}").as_bytes(), &value(key, round));
                    }
                    round += 1;
                }
            })
        })
        .collect();
    let trimmer = {
        let (engine, stop) = (Arc::clone(&engine), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut passes = 0u64;
            while !stop.load(Ordering::Relaxed) {
                engine.maintain_now();
                passes += 1;
            }
            passes
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut reads = 0u64;
    while Instant::now() < deadline {
        for key in 0..keys {
            match engine.get(format!("key{key}").as_bytes()) {
                Ok(Some(item)) => {
                    assert!(item.value.starts_with(format!("{key}:").as_bytes()));
                    reads += 1;
                }
                Ok(None) => {}
                Err(error) => {
                    stop.store(true, Ordering::Relaxed);
                    panic!("key{key} after {reads} reads: {error}");
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.join().unwrap();
    }
    assert!(trimmer.join().unwrap() > 0);
    assert!(reads > 0);
    let stats = engine.stats();
    assert!(stats.cache_evictions > 0, "nothing was trimmed");
    let rotations = stats.log_bytes_written / u64::from(config.segment_bytes_max);
    assert!(rotations > 10, "about {rotations} rotations");
}

#[test]
fn a_lowered_cache_limit_is_trimmed_to_and_a_raised_one_caches_reads_again() {
    let fs = MemFs::new();
    let clock = Clock::system();
    let mut config = config(Durability::Always);
    // Opened with room for a tenth of the values: reads past it would not
    // be cached, were the limit not raised.
    config.cache_bytes_max = 100_000;
    let engine = open(&fs, &config, &clock);
    engine.set_cache_bytes_max(10_000_000);
    for key in 0..1000 {
        set(&engine, format!("key{key}").as_bytes(), &[b'v'; 1000]);
    }
    let cached = || engine.stats().cached_bytes;
    assert!(cached() >= 1_000_000, "{} bytes cached", cached());
    engine.set_cache_bytes_max(100_000);
    assert_eq!(engine.stats().cache_bytes_max, 100_000);
    // The trimmer spares, once, values read since its last pass.
    for _ in 0..3 {
        engine.maintain_now();
    }
    assert!(cached() <= 100_000, "{} bytes cached", cached());
    // Raised again, values read from the files are cached again.
    engine.set_cache_bytes_max(10_000_000);
    let before = cached();
    for key in 0..1000 {
        assert!(engine
            .get(format!("key{key}").as_bytes())
            .unwrap()
            .is_some());
    }
    assert!(
        cached() >= before + 800_000,
        "{before} then {} bytes cached",
        cached()
    );
}
